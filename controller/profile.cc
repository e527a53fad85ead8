#include "controller/profile.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "controller/pipeline.h"
#include "controller/step_plan.h"
#include "ir/statistics.h"

namespace tandem::controller {
namespace {

using schedules::TaskKind;

// The median of `values` (nanoseconds), in seconds.
double MedianSeconds(const std::vector<int64_t>& values) {
  return ir::Median(std::vector<double>(values.begin(), values.end())) * 1e-9;
}

int64_t Bytes(const ir::Graph& graph, const std::vector<ir::ValueId>& values) {
  int64_t bytes = 0;
  for (ir::ValueId value : values) bytes += graph.type(value).num_bytes();
  return bytes;
}

// The forward values (of any stage) that the backward of `stage` reads.
std::vector<ir::ValueId> StashOf(const StepPlan& plan, int32_t stage) {
  const ir::Graph& graph = plan.step().microbatch;
  std::vector<ir::ValueId> stash;
  for (ir::ValueId value : plan.Function(TaskKind::kBackward, stage).inputs) {
    const ir::Node& node = graph.node(value);
    if (node.op != ir::OpKind::kInput && node.phase == ir::Phase::kForward) stash.push_back(value);
  }
  return stash;
}

// Per stage, the largest rise of live bytes within one of its tasks, as
// the compiler counts live bytes (ir::LiveBytesBefore).
std::vector<int64_t> WorkingBytes(const ir::ActorProgram& program, int32_t stages) {
  const std::vector<int64_t> live = ir::LiveBytesBefore(program);
  std::vector<int64_t> working(stages, 0);
  int64_t task_start = live[0];
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const ir::Instruction& instruction = program.instructions[i];
    if (i == 0 || !(instruction.task == program.instructions[i - 1].task)) task_start = live[i];
    const int32_t stage = instruction.task.stage;
    if (stage >= 0 && stage < stages) working[stage] = std::max(working[stage], live[i + 1] - task_start);
  }
  return working;
}

}  // namespace

schedules::Schedule ProfileSchedule(int32_t stages, int32_t microbatches) {
  schedules::Schedule schedule;
  schedule.name = "profile";
  schedule.num_actors = 1;
  schedule.num_stages = stages;
  schedule.num_microbatches = microbatches;
  schedule.stage_to_actor.assign(stages, ActorId(0));
  std::vector<schedules::Slot> program;
  auto add = [&](TaskKind kind, int32_t stage, int32_t microbatch) {
    program.push_back(schedules::Slot{{schedules::Task{kind, StageId(stage), Microbatch(microbatch)}}});
  };
  for (int32_t m = 0; m < microbatches; ++m) {
    for (int32_t s = 0; s < stages; ++s) add(TaskKind::kForward, s, m);
  }
  for (int32_t m = 0; m < microbatches; ++m) {
    for (int32_t s = stages - 1; s >= 0; --s) add(TaskKind::kBackwardInput, s, m);
  }
  for (int32_t m = 0; m < microbatches; ++m) {
    for (int32_t s = stages - 1; s >= 0; --s) add(TaskKind::kBackwardWeight, s, m);
  }
  schedule.programs.push_back(std::move(program));
  return schedule;
}

absl::StatusOr<schedules::CostFile> ProfileSegments(
    const ir::TrainStep& step, std::unique_ptr<Launcher> launcher,
    const std::function<absl::StatusOr<std::vector<ir::TensorMap>>(int64_t index)>& batches, const ProfileOptions& options) {
  if (step.forward_only()) return absl::InvalidArgumentError("profiling needs a training step, not a forward-only one");
  if (options.steps < 1) return absl::InvalidArgumentError("profiling needs at least one measured step");
  const int32_t stages = step.num_stages;
  const schedules::Schedule schedule = ProfileSchedule(stages, step.num_microbatches);
  absl::StatusOr<std::unique_ptr<Pipeline>> pipeline =
      Pipeline::Create(step, schedule, ir::SeedSources(step), std::move(launcher));
  if (!pipeline.ok()) return pipeline.status();
  const ir::ActorProgram& program = (*pipeline)->compiled().programs[0];

  // Every run's duration, by (kind letter, stage), over the measured steps.
  std::map<std::pair<char, int32_t>, std::vector<int64_t>> runs;
  for (int64_t index = 0; index <= options.steps; ++index) {
    absl::StatusOr<std::vector<ir::TensorMap>> batch = batches(index);
    if (!batch.ok()) return batch.status();
    absl::StatusOr<StepReport> report = (*pipeline)->Step(*batch);
    if (!report.ok()) return report.status();
    if (index == 0) continue;  // warm-up: first touches of memory, caches
    for (const ir::InstructionTiming& timing : report->timings[0]) {
      if (timing.instruction < 0 || timing.instruction >= static_cast<int32_t>(program.instructions.size())) continue;
      const ir::Instruction& instruction = program.instructions[timing.instruction];
      if (instruction.kind != ir::InstructionKind::kRun) continue;
      runs[{instruction.task.kind, instruction.task.stage}].push_back(timing.duration_ns);
    }
  }

  absl::StatusOr<StepPlan> kept = StepPlan::Build(step, schedule);
  if (!kept.ok()) return kept.status();
  absl::StatusOr<StepPlan> recomputed = StepPlan::Build(step, schedule, std::vector<bool>(stages, true));
  if (!recomputed.ok()) return recomputed.status();
  const ir::Graph& graph = step.microbatch;
  const std::vector<int64_t> working = WorkingBytes(program, stages);

  schedules::CostFile costs{.model = options.model, .device = options.device,
                            .microbatch_size = options.microbatch_size,
                            .segment_edges = step.stage_edges};
  for (int32_t stage = 0; stage < stages; ++stage) {
    schedules::SegmentCost segment;
    segment.name = absl::StrCat("seg", stage);
    segment.forward_s = MedianSeconds(runs[{'F', stage}]);
    segment.backward_input_s = MedianSeconds(runs[{'I', stage}]);
    segment.backward_weight_s = MedianSeconds(runs[{'W', stage}]);
    segment.backward_s = segment.backward_input_s + segment.backward_weight_s;
    segment.recompute_s = segment.forward_s;  // the same forward ops, run again
    // What its forward hands the later segments.
    std::set<ir::ValueId> later;
    for (int32_t next = stage + 1; next < stages; ++next) {
      for (ir::ValueId value : kept->Function(TaskKind::kForward, next).inputs) later.insert(value);
    }
    std::vector<ir::ValueId> handed;
    for (ir::ValueId value : kept->Function(TaskKind::kForward, stage).outputs) {
      if (later.count(value) > 0) handed.push_back(value);
    }
    segment.activation_bytes = Bytes(graph, handed);
    segment.stash_bytes = Bytes(graph, StashOf(*kept, stage));
    segment.remat_stash_bytes = Bytes(graph, StashOf(*recomputed, stage));
    // Its parameters (a parameter several segments read counts in each: each
    // stage holds it), their optimizer slots and gradient accumulators.
    std::set<std::string> parameters;
    for (TaskKind kind : {TaskKind::kForward, TaskKind::kBackward}) {
      for (ir::ValueId value : kept->Function(kind, stage).inputs) {
        const ir::Node& node = graph.node(value);
        if (ir::HasRole(node, ir::InputRole::kParameter)) {
          parameters.insert(node.attributes.GetString("name"));
        }
      }
    }
    for (const ir::StateSpec& spec : step.state) {
      if (spec.role == ir::StateRole::kParameter && parameters.count(spec.name) > 0) {
        segment.parameter_bytes += spec.type.num_bytes();
        segment.optimizer_bytes += spec.type.num_bytes();  // its gradient accumulator
      } else if (spec.role == ir::StateRole::kOptimizerState && parameters.count(spec.parameter) > 0) {
        segment.optimizer_bytes += spec.type.num_bytes();
      }
    }
    segment.working_bytes = working[stage];
    costs.segments.push_back(std::move(segment));
  }
  return costs;
}

}  // namespace tandem::controller
