#include "tools/cli/plan_options.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "controller/compiler.h"
#include "controller/profile.h"
#include "ir/device_spec.h"
#include "ir/read_file.h"
#include "tools/cli/threads_launcher.h"

namespace tandem::cli {

absl::Status CutEveryLayer(examples::ExampleJobOptions& model) {
  if (model.model != "two-tower") model.layers = model.layers.value_or(4);
  const int64_t layers = model.model == "two-tower" ? examples::TwoTowerLayerCount(model) : *model.layers;
  if (layers < 1 || layers > schedules::kMaxSegments) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model has ", layers, " layers; a cost file holds 1 to ", schedules::kMaxSegments));
  }
  model.stages = static_cast<int32_t>(layers);
  model.layer_stages.clear();
  for (int32_t layer = 0; layer < model.stages; ++layer) model.layer_stages.push_back(layer);
  return absl::OkStatus();
}

absl::StatusOr<schedules::Plan> ReadPlan(const std::string& path) {
  absl::StatusOr<std::string> text = ir::ReadFileUpTo(path, schedules::kMaxPlanFileBytes, absl::StrCat("plan ", path));
  if (!text.ok()) return text.status();
  absl::StatusOr<schedules::Plan> plan = schedules::ParsePlanFile(*text);
  if (!plan.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", plan.status().message()));
  return plan;
}

absl::StatusOr<schedules::CostFile> ReadCostFile(const std::string& path) {
  absl::StatusOr<std::string> text = ir::ReadFileUpTo(path, schedules::kMaxCostFileBytes, absl::StrCat("cost file ", path));
  if (!text.ok()) return text.status();
  absl::StatusOr<schedules::CostFile> costs = schedules::ParseCostFile(*text);
  if (!costs.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", costs.status().message()));
  return costs;
}

absl::Status ApplyPlan(const CLI::App& command, const schedules::Plan& plan, examples::ExampleJobOptions& model,
                       ScheduleOptions& schedule) {
  std::vector<std::string> conflicting;
  for (const char* option : {"--schedule", "--stages", "--microbatches", "--batch", "--virtual", "--remat"}) {
    if (command.count(option) > 0) conflicting.push_back(option);
  }
  if (command.count("--actors") > 0 && schedule.actors != plan.actors) conflicting.push_back("--actors");
  if (command.count("--data-parallel") > 0 && model.replicas != plan.data_parallel) {
    conflicting.push_back("--data-parallel");
  }
  if (!conflicting.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan sets the schedule, actors, stages, microbatches, their size and rematerialisation; drop ",
        absl::StrJoin(conflicting, ", ")));
  }
  return ApplyPlan(plan, model, schedule);
}

absl::Status ApplyPlan(const schedules::Plan& plan, examples::ExampleJobOptions& model, ScheduleOptions& schedule) {
  const std::vector<int32_t> segment_stages = plan.SegmentStages();
  if (model.model == "two-tower") {
    // Its layers are the segments one for one: the towers' and the head's.
    const int64_t layers = examples::TwoTowerLayerCount(model);
    if (layers != plan.segments) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the plan cuts the model into ", plan.segments, " segments; this two-tower has ", layers,
          " layers (towers and head): give the --towers and --layers it was planned with"));
    }
    model.layer_stages = segment_stages;
  } else {
    const int64_t layers = model.layers.value_or(plan.segments);
    if (layers < plan.segments) {
      return absl::InvalidArgumentError(absl::StrCat("the plan cuts the model into ", plan.segments,
                                                     " segments; --layers ", layers, " has fewer layers"));
    }
    model.layers = layers;
    model.layer_stages.clear();
    for (int64_t layer = 0; layer < layers; ++layer) {
      model.layer_stages.push_back(segment_stages[layer * plan.segments / layers]);
    }
  }
  model.stages = static_cast<int32_t>(plan.stages.size());
  model.microbatches = plan.microbatches;
  model.batch = plan.microbatch_size;
  model.replicas = plan.data_parallel;
  schedule.schedule = plan.schedule;
  schedule.actors = plan.actors;
  schedule.virtual_stages = plan.virtual_stages;
  schedule.remat_stages = plan.RematByStage();
  return absl::OkStatus();
}

// Every layer of the model one segment, measured on one actor at each
// microbatch size in `sizes` (two microbatches a step).
absl::StatusOr<std::vector<schedules::CostFile>> ProfileModelSegments(examples::ExampleJobOptions model,
                                                              const std::vector<int64_t>& sizes, int64_t steps,
                                                              std::ostream& out) {
  if (absl::Status s = CutEveryLayer(model); !s.ok()) return s;
  model.replicas = 1;
  model.microbatches = 2;
  std::vector<schedules::CostFile> measured;
  for (int64_t size : sizes) {
    model.batch = size;
    absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(model);
    if (!job.ok()) return job.status();
    if (measured.empty()) out << "profiling " << job->description << ", every layer a segment, at microbatch sizes "
                              << absl::StrJoin(sizes, ", ") << "\n";
    absl::StatusOr<schedules::CostFile> costs =
        controller::ProfileSegments(job->step, std::make_unique<ThreadsLauncher>(absl::Seconds(120), ir::DeviceSpec{}),
                                    [&](int64_t index) { return job->train_batch(static_cast<uint64_t>(index)); },
                                    {.steps = static_cast<int32_t>(steps),
                                     .model = job->description,
                                     .device = "cpu",
                                     .microbatch_size = job->microbatch_size});
    if (!costs.ok()) return costs.status();
    measured.push_back(*std::move(costs));
  }
  return measured;
}

// The exact peaks of a candidate: the example model traced as the candidate
// cuts it, compiled for its schedule.
schedules::CompiledPeaks CompiledPeaksOf(const examples::ExampleJobOptions& model, const schedules::CostFile& costs,
                                         const schedules::PlannerOptions& planner) {
  return [model, costs, planner](const schedules::Candidate& candidate,
                                 const schedules::Schedule& schedule) -> absl::StatusOr<std::vector<int64_t>> {
    examples::ExampleJobOptions traced = model;
    ScheduleOptions ignored;
    if (absl::Status s = ApplyPlan(candidate.plan, traced, ignored); !s.ok()) return s;
    absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(traced);
    if (!job.ok()) return job.status();
    std::vector<bool> remat;
    for (const schedules::PlanStage& stage : candidate.plan.stages) remat.push_back(stage.remat);
    absl::StatusOr<controller::CompiledStep> compiled = controller::Compile(job->step, schedule, {.remat = remat});
    if (!compiled.ok()) return compiled.status();
    std::vector<int64_t> peaks;
    for (const ir::ActorProgram& program : compiled->programs) peaks.push_back(program.static_peak_bytes);
    return peaks;
  };
}

}  // namespace tandem::cli
