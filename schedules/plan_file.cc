#include "schedules/plan_file.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "schedules/cost_file.h"
#include "schedules/generators.h"
#include "schedules/json_fields.h"
#include "schedules/json_text.h"
#include "schedules/limits.h"
#include "schedules/simulator.h"
#include "schedules/versioned_json.h"

namespace tandem::schedules {
namespace {

using Json = nlohmann::json;

absl::Status Problem(absl::string_view where, absl::string_view what) {
  return FileProblem("plan file", where, what);
}

absl::Status ReadStage(const Json& json, int32_t index, int32_t actors, PlanStage& stage) {
  const JsonFields fields(json, "plan file", absl::StrCat("stage ", index));
  if (!json.is_object()) return fields.Problem("must be an object");
  auto segments = json.find("segments");
  if (segments == json.end() || !segments->is_array() || segments->size() != 2) {
    return fields.Problem("'segments' must be [first, end]");
  }
  const Json pair = {{"first", (*segments)[0]}, {"end", (*segments)[1]}};
  const JsonFields pair_fields(pair, "plan file", absl::StrCat("stage ", index));
  if (absl::Status s = pair_fields.Integer("first", 0, kMaxSegments - 1, stage.first_segment); !s.ok()) return s;
  if (absl::Status s = pair_fields.Integer("end", 1, kMaxSegments, stage.end_segment); !s.ok()) return s;
  if (absl::Status s = fields.OnlyKnownKeys({"segments", "remat", "actor", "seconds", "peak_bytes"}); !s.ok()) {
    return s;
  }
  auto remat = json.find("remat");
  if (remat == json.end() || !remat->is_boolean()) return fields.Problem("'remat' must be true or false");
  stage.remat = remat->get<bool>();
  if (absl::Status s = fields.Integer("actor", 0, actors - 1, stage.actor); !s.ok()) return s;
  // The planner's predictions: optional.
  if (auto seconds = json.find("seconds"); seconds != json.end()) {
    if (!seconds->is_number() || !(seconds->get<double>() >= 0.0) || !std::isfinite(seconds->get<double>())) {
      return fields.Problem("'seconds' must be a finite number of at least 0");
    }
    stage.seconds = seconds->get<double>();
  }
  if (json.contains("peak_bytes")) {
    if (absl::Status s = fields.Integer("peak_bytes", 0, kMaxFieldBytes, stage.peak_bytes); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view MemorySourceName(MemorySource source) {
  return source == MemorySource::kCompiledProgram ? "compiled program" : "cost model";
}

std::vector<int32_t> Plan::SegmentStages() const {
  std::vector<int32_t> stage_of(segments, 0);
  for (int32_t s = 0; s < static_cast<int32_t>(stages.size()); ++s) {
    for (int32_t segment = stages[s].first_segment; segment < stages[s].end_segment; ++segment) {
      stage_of[segment] = s;
    }
  }
  return stage_of;
}

std::vector<bool> Plan::RematByStage() const {
  std::vector<bool> remat;
  for (const PlanStage& stage : stages) remat.push_back(stage.remat);
  return remat;
}

absl::StatusOr<Plan> ParsePlanFile(absl::string_view text) {
  absl::StatusOr<Json> parsed = ParseVersionedJson(
      text, {.what = "plan file",
             .noun = "a Tandem plan",
             .format = "tandem-plan",
             .version = kPlanFileVersion,
             .max_bytes = kMaxPlanFileBytes});
  if (!parsed.ok()) return parsed.status();
  const Json& json = *parsed;
  const JsonFields file(json, "plan file", "the file");
  if (absl::Status s = file.OnlyKnownKeys({"format", "version", "model", "device", "actors", "data_parallel",
                                           "schedule", "virtual_stages", "microbatches", "microbatch_size",
                                           "segments", "memory_cap", "stages", "stage_graph", "predicted"});
      !s.ok()) {
    return s;
  }
  Plan plan;
  for (absl::Status s : {file.String("model", plan.model), file.String("device", plan.device),
                         file.String("schedule", plan.schedule), file.Integer("actors", 1, kMaxActors, plan.actors),
                         file.Integer("data_parallel", 1, kMaxDataParallel, plan.data_parallel),
                         file.Integer("virtual_stages", 1, kMaxVirtualStages, plan.virtual_stages),
                         file.Integer("microbatches", 1, kMaxMicrobatches, plan.microbatches),
                         file.Integer("microbatch_size", 1, kMaxFieldBytes, plan.microbatch_size),
                         file.Integer("segments", 1, kMaxSegments, plan.segments),
                         file.Integer("memory_cap", 0, kMaxFieldBytes, plan.memory_cap)}) {
    if (!s.ok()) return s;
  }
  auto stages = json.find("stages");
  if (stages == json.end() || !stages->is_array()) return Problem("the file", "'stages' must be an array");
  const int64_t expected = int64_t{plan.actors} * plan.virtual_stages;
  if (static_cast<int64_t>(stages->size()) != expected) {
    return Problem("stages", absl::StrCat("has ", stages->size(), " stages; ", plan.actors, " actors with ",
                                          plan.virtual_stages, " stages each need ", expected));
  }
  if (expected > plan.segments) {
    return Problem("stages", absl::StrCat(expected, " stages cannot share ", plan.segments, " segments"));
  }
  int32_t covered = 0;
  for (int32_t s = 0; s < static_cast<int32_t>(stages->size()); ++s) {
    PlanStage stage;
    if (absl::Status status = ReadStage((*stages)[s], s, plan.actors, stage); !status.ok()) return status;
    if (stage.first_segment != covered || stage.end_segment <= stage.first_segment) {
      return Problem(absl::StrCat("stage ", s),
                     absl::StrCat("holds segments [", stage.first_segment, ", ", stage.end_segment,
                                  "); it must start at segment ", covered, " and hold at least one"));
    }
    covered = stage.end_segment;
    plan.stages.push_back(stage);
  }
  if (covered != plan.segments) {
    return Problem("stages", absl::StrCat("cover ", covered, " of the ", plan.segments, " segments"));
  }
  if (auto graph = json.find("stage_graph"); graph != json.end()) {
    if (!graph->is_string()) return Problem("the file", "'stage_graph' must be a string of edges, e.g. \"0->2 1->2\"");
    absl::StatusOr<std::vector<ir::StageEdge>> edges = ir::ParseStoredStageEdges(
        graph->get_ref<const std::string&>(), static_cast<int32_t>(plan.stages.size()), kMaxStageEdges);
    if (!edges.ok()) return Problem("stage_graph", edges.status().message());
    plan.stage_edges = *std::move(edges);
  }
  if (auto predicted = json.find("predicted"); predicted != json.end() && predicted->is_object()) {
    if (absl::Status s = JsonFields(*predicted, "plan file", "predicted").OnlyKnownKeys(
            {"step_s", "bubble", "peak_bytes", "memory"});
        !s.ok()) {
      return s;
    }
    if (auto step = predicted->find("step_s"); step != predicted->end() && step->is_number()) {
      plan.predicted_step_s = step->get<double>();
    }
    if (auto bubble = predicted->find("bubble"); bubble != predicted->end() && bubble->is_number()) {
      plan.predicted_bubble = bubble->get<double>();
    }
    if (auto memory = predicted->find("memory"); memory != predicted->end()) {
      const std::string words = memory->is_string() ? memory->get<std::string>() : "";
      const bool compiled = words == MemorySourceName(MemorySource::kCompiledProgram);
      if (!compiled && words != MemorySourceName(MemorySource::kCostModel)) {
        return Problem("predicted", "'memory' must be \"cost model\" or \"compiled program\"");
      }
      plan.memory_source = compiled ? MemorySource::kCompiledProgram : MemorySource::kCostModel;
    }
    if (auto peaks = predicted->find("peak_bytes"); peaks != predicted->end() && peaks->is_array()) {
      if (static_cast<int64_t>(peaks->size()) != plan.actors) {
        return Problem("predicted", absl::StrCat("'peak_bytes' has ", peaks->size(), " entries for ", plan.actors,
                                                 " actors"));
      }
      for (size_t a = 0; a < peaks->size(); ++a) {
        int64_t bytes = 0;
        const Json entry = {{"peak", (*peaks)[a]}};
        if (absl::Status s = JsonFields(entry, "plan file", "predicted").Integer("peak", 0, kMaxFieldBytes, bytes);
            !s.ok()) {
          return s;
        }
        plan.predicted_peak_bytes.push_back(bytes);
      }
    }
  }
  return plan;
}

std::string FormatPlanFile(const Plan& plan) {
  nlohmann::ordered_json json;
  json["format"] = "tandem-plan";
  json["version"] = kPlanFileVersion;
  json["model"] = plan.model;
  json["device"] = plan.device;
  json["actors"] = plan.actors;
  json["data_parallel"] = plan.data_parallel;
  json["schedule"] = plan.schedule;
  json["virtual_stages"] = plan.virtual_stages;
  json["microbatches"] = plan.microbatches;
  json["microbatch_size"] = plan.microbatch_size;
  json["segments"] = plan.segments;
  json["memory_cap"] = plan.memory_cap;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const PlanStage& stage : plan.stages) {
    nlohmann::ordered_json entry;
    entry["segments"] = {stage.first_segment, stage.end_segment};
    entry["remat"] = stage.remat;
    entry["actor"] = stage.actor;
    entry["seconds"] = JsonNumber(stage.seconds);
    entry["peak_bytes"] = stage.peak_bytes;
    stages.push_back(std::move(entry));
  }
  json["stages"] = std::move(stages);
  if (!plan.stage_edges.empty()) json["stage_graph"] = ir::FormatStageEdges(plan.stage_edges);
  nlohmann::ordered_json predicted;
  predicted["step_s"] = JsonNumber(plan.predicted_step_s);
  predicted["bubble"] = JsonNumber(plan.predicted_bubble);
  // Unknown (a plan written by hand, say): left out, not an empty list the
  // parser would refuse for its actor count.
  if (!plan.predicted_peak_bytes.empty()) predicted["peak_bytes"] = plan.predicted_peak_bytes;
  predicted["memory"] = std::string(MemorySourceName(plan.memory_source));
  json["predicted"] = std::move(predicted);
  return JsonText(json) + "\n";
}

absl::StatusOr<Schedule> PlanSchedule(const Plan& plan) {
  GeneratorOptions options{.actors = plan.actors, .microbatches = plan.microbatches,
                           .virtual_stages = plan.virtual_stages, .stage_edges = plan.stage_edges};
  if (TakesStageGraph(plan.schedule)) {
    for (const PlanStage& stage : plan.stages) options.stage_actors.push_back(stage.actor);
  }
  absl::StatusOr<Schedule> schedule = Generate(plan.schedule, options);
  if (!schedule.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("plan file: schedule: ", schedule.status().message()));
  }
  if (schedule->num_stages != static_cast<int32_t>(plan.stages.size())) {
    return absl::InvalidArgumentError(absl::StrCat("plan file: schedule ", plan.schedule, " has ",
                                                   schedule->num_stages, " stages; the plan has ", plan.stages.size()));
  }
  for (int32_t s = 0; s < schedule->num_stages; ++s) {
    if (schedule->ActorOf(StageId{s}).value != plan.stages[s].actor) {
      return absl::InvalidArgumentError(absl::StrCat("plan file: stage ", s, " is on actor ", plan.stages[s].actor,
                                                     ", but schedule ", plan.schedule, " places it on actor ",
                                                     schedule->ActorOf(StageId{s}).value));
    }
  }
  return schedule;
}

}  // namespace tandem::schedules
