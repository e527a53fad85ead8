#include "schedules/planner.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "schedules/generators.h"
#include "schedules/graph_partition.h"
#include "schedules/limits.h"
#include "schedules/simulator.h"
#include "schedules/task_memory.h"

namespace tandem::schedules {
namespace {

int32_t VirtualStagesOf(const std::string& schedule) {
  const ScheduleTraits* traits = FindSchedule(schedule);
  return traits == nullptr ? 1 : traits->virtual_stages;
}

InFlight InFlightOf(const std::string& schedule) {
  const ScheduleTraits* traits = FindSchedule(schedule);
  return traits == nullptr ? InFlight::kOneFOneB : traits->in_flight;
}

int64_t Scale(int64_t bytes, double factor) { return static_cast<int64_t>(std::ceil(bytes * factor)); }

// The segments at microbatches `factor` times the measured size: times and
// per-microbatch bytes scale, parameters and optimizer state do not.
CostFile ScaledCosts(const CostFile& costs, double factor) {
  CostFile scaled = costs;
  for (SegmentCost& s : scaled.segments) {
    for (double* seconds : {&s.forward_s, &s.backward_s, &s.backward_input_s, &s.backward_weight_s, &s.recompute_s}) {
      *seconds *= factor;
    }
    for (int64_t* bytes : {&s.activation_bytes, &s.stash_bytes, &s.remat_stash_bytes, &s.working_bytes}) {
      *bytes = Scale(*bytes, factor);
    }
  }
  return scaled;
}

// A stage's totals over its segments.
struct StageTotals {
  double forward = 0.0, backward = 0.0, input = 0.0, weight = 0.0;
  int64_t state = 0, stash = 0, kept = 0, working = 0, parameters = 0;
};

StageTotals Totals(const CostFile& costs, const PlanStage& stage) {
  StageTotals t;
  for (int32_t i = stage.first_segment; i < stage.end_segment; ++i) {
    const SegmentCost& s = costs.segments[i];
    t.forward += s.forward_s;
    t.backward += s.backward_s;
    t.input += s.backward_input_s;
    t.weight += s.backward_weight_s;
    t.state += s.parameter_bytes + s.optimizer_bytes;
    t.parameters += s.parameter_bytes;
    t.stash += s.stash_bytes;
    t.working = std::max(t.working, s.working_bytes);
  }
  t.kept = stage.remat ? costs.segments[stage.first_segment].remat_stash_bytes : t.stash;
  return t;
}

// The simulator's cost model of a candidate's stages.
CostModel CandidateCostModel(const CostFile& scaled, const Candidate& candidate, const PlannerOptions& options) {
  CostModel model;
  model.link = options.link;
  model.data_parallel = options.data_parallel;
  double largest_activation = 0.0;
  const double overhead = options.task_overhead_s;
  for (int32_t s = 0; s < static_cast<int32_t>(candidate.plan.stages.size()); ++s) {
    const PlanStage& stage = candidate.plan.stages[s];
    const StageTotals t = Totals(scaled, stage);
    model.stage_cost[{TaskKind::kForward, s}] = t.forward + overhead;
    model.stage_cost[{TaskKind::kBackward, s}] = t.backward + overhead;
    model.stage_cost[{TaskKind::kBackwardInput, s}] = t.input + overhead;
    model.stage_cost[{TaskKind::kBackwardWeight, s}] = t.weight + overhead;
    if (stage.remat) model.remat_stages.insert(s);
    model.stage_gradient_bytes_override[s] = static_cast<double>(t.parameters);
    if (s + 1 < static_cast<int32_t>(candidate.plan.stages.size())) {
      largest_activation =
          std::max(largest_activation, static_cast<double>(scaled.segments[stage.end_segment - 1].activation_bytes));
    }
  }
  model.activation_bytes = largest_activation;
  model.gradient_bytes = largest_activation;
  return model;
}

// The costs measured at the microbatch size nearest `size` (by ratio).
const CostFile& NearestSize(const std::vector<CostFile>& measured, int64_t size) {
  const CostFile* nearest = &measured.front();
  auto distance = [size](const CostFile& c) { return std::abs(std::log(static_cast<double>(size) / c.microbatch_size)); };
  for (const CostFile& c : measured) {
    if (distance(c) < distance(*nearest)) nearest = &c;
  }
  return *nearest;
}

std::vector<int32_t> Divisors(int64_t n, int32_t bound) {
  std::vector<int32_t> divisors;
  for (int64_t d = 1; d <= std::min<int64_t>(n, bound); ++d) {
    if (n % d == 0) divisors.push_back(static_cast<int32_t>(d));
  }
  return divisors;
}

// Fitting candidates first, fastest first; the rest by how far over the cap.
void Rank(std::vector<Candidate>& candidates, int64_t cap) {
  std::stable_sort(candidates.begin(), candidates.end(), [cap](const Candidate& a, const Candidate& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits) return a.plan.predicted_step_s < b.plan.predicted_step_s;
    return a.LargestPeak() - cap < b.LargestPeak() - cap;
  });
}

// `stages` (their segments and remat) run as `schedule` with microbatches
// of `size`, on the costs scaled to that size.
absl::StatusOr<Candidate> Evaluate(const CostFile& scaled, const PlannerOptions& options, const std::string& name,
                                   const Schedule& schedule, int32_t microbatches, int64_t size,
                                   const std::vector<PlanStage>& stages) {
  const PartitionOptions cut{.stages = schedule.num_stages,
                             .microbatches = microbatches,
                             .link = options.link};
  Candidate candidate;
  Plan& plan = candidate.plan;
  plan.model = scaled.model;
  plan.device = scaled.device;
  plan.actors = options.actors;
  plan.data_parallel = options.data_parallel;
  plan.schedule = name;
  plan.virtual_stages = schedule.num_stages / schedule.num_actors;
  plan.microbatches = microbatches;
  plan.microbatch_size = size;
  plan.segments = static_cast<int32_t>(scaled.segments.size());
  plan.memory_cap = options.memory_cap;
  plan.stage_edges = schedule.stage_edges;
  for (int32_t s = 0; s < schedule.num_stages; ++s) {
    const PlanStage& stage = stages[s];
    plan.stages.push_back(EvaluateStage(scaled, cut, s, stage.first_segment, stage.end_segment, stage.remat));
    plan.stages.back().actor = schedule.ActorOf(StageId(s)).value;
  }
  absl::StatusOr<SimulationResult> simulated = Simulate(schedule, CandidateCostModel(scaled, candidate, options));
  if (!simulated.ok()) return simulated.status();
  plan.predicted_step_s = simulated->makespan;
  plan.predicted_bubble = simulated->bubble;
  plan.predicted_peak_bytes = CostModelPeaks(scaled, candidate, schedule, options.input_grad_frees);
  plan.memory_source = MemorySource::kCostModel;
  candidate.fits = options.memory_cap <= 0 || candidate.LargestPeak() <= options.memory_cap;
  return candidate;
}

// `stages` as cut, and, when `also_all_remat` (the cut did not account for
// the cap) and rematerialising may help fit it, with every stage
// rematerialising, evaluated and added to `search`.
absl::Status AddCandidates(const CostFile& scaled, const PlannerOptions& options, const std::string& name,
                           const Schedule& schedule, int32_t microbatches, int64_t size,
                           const std::vector<PlanStage>& stages, bool also_all_remat, PlanSearch& search) {
  std::vector<std::vector<PlanStage>> variants = {stages};
  if (also_all_remat && options.allow_remat && options.memory_cap > 0) {
    variants.push_back(stages);
    for (PlanStage& stage : variants.back()) stage.remat = true;
  }
  for (const std::vector<PlanStage>& variant : variants) {
    absl::StatusOr<Candidate> candidate = Evaluate(scaled, options, name, schedule, microbatches, size, variant);
    if (!candidate.ok()) return candidate.status();
    search.candidates.push_back(*std::move(candidate));
  }
  return absl::OkStatus();
}

// graph-1f1b or graph-gpipe with `microbatches` microbatches over the
// segment DAG, one stage per actor: a candidate for every split of the
// actors among the DAG's series-parallel runs. What cannot be planned this
// way (fewer actors than branches, say) is only `skipped`.
absl::Status AddGraphCandidates(const std::vector<CostFile>& measured, const PlannerOptions& options,
                                const std::string& name, int32_t microbatches, PlanSearch& search) {
  const int64_t size = options.global_batch / microbatches;
  const CostFile& nearest = NearestSize(measured, size);
  const CostFile scaled = ScaledCosts(nearest, static_cast<double>(size) / nearest.microbatch_size);
  const PartitionOptions cut{.stages = options.actors,
                             .microbatches = microbatches,
                             .in_flight = InFlightOf(name),
                             .memory_cap = options.memory_cap,
                             .allow_remat = options.allow_remat,
                             .link = options.link};
  absl::StatusOr<GraphPartitions> partitions = PartitionSegmentGraph(scaled, cut);
  if (!partitions.ok()) {
    search.skipped.push_back(absl::StrCat(name, " M=", microbatches, ": ", partitions.status().message()));
    return absl::OkStatus();
  }
  if (partitions->truncated) {
    search.skipped.push_back(absl::StrCat(name, " M=", microbatches, ": only the first ", kMaxGraphAllocations,
                                          " splits of the actors among the segment graph's runs were tried"));
  }
  for (const GraphPartition& partition : partitions->partitions) {
    absl::StatusOr<Schedule> schedule =
        Generate(name, {.actors = options.actors,
                        .microbatches = microbatches,
                        .stage_edges = ir::StageGraph(options.actors, partition.stage_edges).StoredEdges()});
    if (!schedule.ok()) {
      search.skipped.push_back(absl::StrCat(name, " M=", microbatches, " ", absl::StrJoin(partition.run_stages, "/"),
                                            " stages per run: ", schedule.status().message()));
      continue;
    }
    if (absl::Status s = AddCandidates(scaled, options, name, *schedule, microbatches, size, partition.stages,
                                       partition.over_cap, search);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> PlannerSchedules() {
  std::vector<std::string> names;
  for (const ScheduleTraits& traits : BuiltInSchedules()) {
    if (traits.planned) names.emplace_back(traits.name);
  }
  return names;
}

std::vector<int64_t> PlannerMicrobatchSizes(const PlannerOptions& options) {
  std::vector<int64_t> sizes;
  if (options.global_batch < 1) return sizes;
  for (int32_t microbatches : Divisors(options.global_batch, options.max_microbatches)) {
    sizes.push_back(options.global_batch / microbatches);
  }
  return sizes;
}

int64_t Candidate::LargestPeak() const {
  const std::vector<int64_t>& peaks = plan.predicted_peak_bytes;
  return peaks.empty() ? 0 : *std::max_element(peaks.begin(), peaks.end());
}

int32_t Candidate::TightestActor() const {
  const std::vector<int64_t>& peaks = plan.predicted_peak_bytes;
  return static_cast<int32_t>(std::max_element(peaks.begin(), peaks.end()) - peaks.begin());
}

std::string Candidate::Describe(const CostFile& costs) const {
  std::vector<std::string> parts;
  for (const PlanStage& stage : plan.stages) {
    const std::string& first = costs.segments[stage.first_segment].name;
    const std::string& last = costs.segments[stage.end_segment - 1].name;
    parts.push_back(absl::StrCat(first, stage.end_segment - stage.first_segment > 1 ? absl::StrCat("..", last) : "",
                                 stage.remat ? " (remat)" : ""));
  }
  return absl::StrCat("[", absl::StrJoin(parts, " | "), "]",
                      plan.stage_edges.empty() ? "" : absl::StrCat(" graph ", ir::FormatStageEdges(plan.stage_edges)));
}

std::vector<int64_t> CostModelPeaks(const CostFile& costs, const Candidate& candidate, const Schedule& schedule,
                                    double input_grad_frees) {
  std::vector<StageTotals> totals;
  std::vector<StageMemory> memory;
  for (const PlanStage& stage : candidate.plan.stages) {
    const StageTotals& t = totals.emplace_back(Totals(costs, stage));
    memory.push_back({.stash = static_cast<double>(t.stash),
                      .kept = static_cast<double>(t.kept),
                      .working = static_cast<double>(t.working)});
  }
  std::vector<int64_t> peaks(schedule.num_actors, 0);
  for (int32_t actor = 0; actor < schedule.num_actors; ++actor) {
    int64_t resident = 0;
    for (int32_t s = 0; s < schedule.num_stages; ++s) {
      if (schedule.ActorOf(StageId(s)).value == actor) resident += totals[s].state;
    }
    MemorySweep sweep(static_cast<double>(resident));
    for (const Slot& slot : schedule.programs[actor]) {
      for (const Task& task : slot.tasks) {
        const TaskMemory m = MemoryOf(task.kind, memory[task.stage.value], input_grad_frees);
        sweep.Start(m);
        sweep.End(m);
      }
    }
    peaks[actor] = std::llround(sweep.peak());
  }
  return peaks;
}

absl::StatusOr<PlanSearch> SearchPlans(const CostFile& costs, const PlannerOptions& options,
                                       const CompiledPeaks& compiled) {
  return SearchPlans(std::vector<CostFile>{costs}, options, compiled);
}

absl::StatusOr<PlanSearch> SearchPlans(const std::vector<CostFile>& measured, const PlannerOptions& options,
                                       const CompiledPeaks& compiled) {
  if (measured.empty()) return absl::InvalidArgumentError("the planner needs a cost file");
  const CostFile& costs = measured.front();
  const int32_t n = static_cast<int32_t>(costs.segments.size());
  if (n < 1) return absl::InvalidArgumentError("the cost file has no segments");
  for (const CostFile& other : measured) {
    if (other.segments.size() != costs.segments.size() || other.microbatch_size < 1) {
      return absl::InvalidArgumentError(absl::StrCat("cost files measured at microbatch sizes ", costs.microbatch_size,
                                                     " and ", other.microbatch_size, " hold ", costs.segments.size(),
                                                     " and ", other.segments.size(),
                                                     " segments: they must measure the same segments"));
    }
  }
  if (options.actors < 1 || options.actors > kMaxActors) {
    return absl::InvalidArgumentError(absl::StrCat("actors ", options.actors, " is outside [1, ", kMaxActors, "]"));
  }
  if (options.data_parallel < 1 || options.data_parallel > kMaxDataParallel) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-parallel ", options.data_parallel, " is outside [1, ", kMaxDataParallel, "]"));
  }
  if (options.global_batch < 1 || options.global_batch > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat("global batch ", options.global_batch, " is outside [1, 2^40]"));
  }
  if (options.max_microbatches < 1 || options.max_microbatches > kMaxMicrobatches) {
    return absl::InvalidArgumentError(
        absl::StrCat("max microbatches ", options.max_microbatches, " is outside [1, ", kMaxMicrobatches, "]"));
  }
  if (options.memory_cap < 0) return absl::InvalidArgumentError("the memory cap must not be negative");
  if (!(options.task_overhead_s >= 0.0 && options.task_overhead_s < 86400.0) ||
      !(options.input_grad_frees >= 0.0 && options.input_grad_frees <= 1.0)) {
    return absl::InvalidArgumentError("task overhead must be in [0, 1 day) and input_grad_frees in [0, 1]");
  }
  const std::vector<std::string> known = PlannerSchedules();
  for (const std::string& name : options.schedules) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the planner does not search schedule '", name, "' (it knows ", absl::StrJoin(known, ", "), ")"));
    }
  }
  if (options.actors > n) {
    return absl::InvalidArgumentError(absl::StrCat(n, " segments cannot fill ", options.actors,
                                                   " actors (each stage needs a segment): profile with "
                                                   "--cut-every-layer, or use fewer actors"));
  }

  PlanSearch search;
  for (const std::string& name : options.schedules) {
    if (TakesStageGraph(name)) {
      if (costs.segment_edges.empty()) {
        search.skipped.push_back(absl::StrCat(name, ": the segments form a chain (the cost file has no segment "
                                              "graph), which the chain schedules cover"));
        continue;
      }
      for (int32_t microbatches : Divisors(options.global_batch, options.max_microbatches)) {
        if (absl::Status s = AddGraphCandidates(measured, options, name, microbatches, search); !s.ok()) return s;
      }
      continue;
    }
    const int32_t virtual_stages = VirtualStagesOf(name);
    const int32_t stages = virtual_stages * options.actors;
    if (stages > n) {
      search.skipped.push_back(absl::StrCat(name, ": ", stages, " stages need ", stages, " segments; there are ", n));
      continue;
    }
    for (int32_t microbatches : Divisors(options.global_batch, options.max_microbatches)) {
      absl::StatusOr<Schedule> schedule = Generate(
          name, {.actors = options.actors, .microbatches = microbatches, .virtual_stages = virtual_stages});
      if (!schedule.ok()) {
        search.skipped.push_back(absl::StrCat(name, " M=", microbatches, ": ", schedule.status().message()));
        continue;
      }
      const int64_t size = options.global_batch / microbatches;
      const CostFile& nearest = NearestSize(measured, size);
      const CostFile scaled = ScaledCosts(nearest, static_cast<double>(size) / nearest.microbatch_size);
      PartitionOptions cut{.stages = stages,
                           .microbatches = microbatches,
                           .in_flight = InFlightOf(name),
                           .memory_cap = virtual_stages == 1 ? options.memory_cap : 0,
                           .allow_remat = options.allow_remat,
                           .link = options.link};
      absl::StatusOr<Partition> partition = PartitionSegments(scaled, cut);
      bool over_cap = false;
      if (!partition.ok() && partition.status().code() == absl::StatusCode::kResourceExhausted) {
        // Nothing fits this way: keep the fastest cut, so that the report can
        // say how close it comes.
        over_cap = true;
        cut.memory_cap = 0;
        partition = PartitionSegments(scaled, cut);
      }
      if (!partition.ok()) return partition.status();
      // For virtual placements (cut without the cap: an actor's two stages
      // share it) also every stage rematerialising.
      if (absl::Status s = AddCandidates(scaled, options, name, *schedule, microbatches, size, partition->stages,
                                         virtual_stages > 1 || over_cap, search);
          !s.ok()) {
        return s;
      }
    }
  }
  if (search.candidates.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no schedule could be planned: ", absl::StrJoin(search.skipped, "; ")));
  }
  // The exact peaks of the fastest candidates, in order, until three fit or
  // the limit is reached: every candidate faster than the chosen one has
  // then been compiled.
  std::stable_sort(search.candidates.begin(), search.candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     return a.plan.predicted_step_s < b.plan.predicted_step_s;
                   });
  if (compiled) {
    search.exact = true;
    int32_t fitting = 0;
    for (Candidate& candidate : search.candidates) {
      if (search.compiled >= options.compiled_limit || fitting >= 3) break;
      absl::StatusOr<Schedule> schedule = PlanSchedule(candidate.plan);
      if (!schedule.ok()) return schedule.status();
      absl::StatusOr<std::vector<int64_t>> peaks = compiled(candidate, *schedule);
      if (!peaks.ok()) return peaks.status();
      ++search.compiled;
      candidate.plan.predicted_peak_bytes = *std::move(peaks);
      candidate.plan.memory_source = MemorySource::kCompiledProgram;
      candidate.fits = options.memory_cap <= 0 || candidate.LargestPeak() <= options.memory_cap;
      if (candidate.fits) ++fitting;
    }
  }
  Rank(search.candidates, options.memory_cap);
  return search;
}

absl::StatusOr<Candidate> EvaluateCandidate(const std::vector<CostFile>& measured, const PlannerOptions& options,
                                            const std::string& schedule, int32_t microbatches,
                                            const std::vector<PlanStage>& stages,
                                            const std::vector<ir::StageEdge>& stage_edges) {
  if (measured.empty() || microbatches < 1 || options.global_batch % microbatches != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(microbatches, " microbatches do not divide the global batch of ", options.global_batch));
  }
  const int32_t virtual_stages = VirtualStagesOf(schedule);
  absl::StatusOr<Schedule> generated = Generate(
      schedule, {.actors = options.actors, .microbatches = microbatches, .virtual_stages = virtual_stages,
                 .stage_edges = stage_edges});
  if (!generated.ok()) return generated.status();
  const int32_t n = static_cast<int32_t>(measured.front().segments.size());
  int32_t covered = 0;
  for (const PlanStage& stage : stages) {
    if (stage.first_segment != covered || stage.end_segment <= covered || stage.end_segment > n) {
      return absl::InvalidArgumentError("the stages must hold contiguous segments, in order, at least one each");
    }
    covered = stage.end_segment;
  }
  if (static_cast<int32_t>(stages.size()) != generated->num_stages || covered != n) {
    return absl::InvalidArgumentError(absl::StrCat(schedule, " needs ", generated->num_stages,
                                                   " stages covering the ", n, " segments"));
  }
  const int64_t size = options.global_batch / microbatches;
  const CostFile& nearest = NearestSize(measured, size);
  return Evaluate(ScaledCosts(nearest, static_cast<double>(size) / nearest.microbatch_size), options, schedule,
                  *generated, microbatches, size, stages);
}

absl::StatusOr<Candidate> ChosenCandidate(const PlanSearch& search, const CostFile& costs,
                                          const PlannerOptions& options) {
  for (const Candidate& candidate : search.candidates) {
    const bool exact = candidate.plan.memory_source == MemorySource::kCompiledProgram;
    if (candidate.fits && (!search.exact || exact)) return candidate;
  }
  // The closest: the least excess over the cap among those checked exactly
  // (or all, by the cost model).
  const Candidate* closest = nullptr;
  for (const Candidate& candidate : search.candidates) {
    if (search.exact && candidate.plan.memory_source != MemorySource::kCompiledProgram) continue;
    if (closest == nullptr || candidate.LargestPeak() < closest->LargestPeak()) closest = &candidate;
  }
  if (closest == nullptr) return absl::InternalError("no candidate was checked");
  const int32_t actor = closest->TightestActor();
  const int64_t peak = closest->LargestPeak();
  return absl::ResourceExhaustedError(absl::StrCat(
      "no plan fits the memory cap of ", options.memory_cap, " bytes per actor (", search.candidates.size(),
      " candidates", search.exact ? absl::StrCat(", the ", search.compiled, " fastest compiled") : "",
      "): the closest, ", closest->plan.schedule, " with M=", closest->plan.microbatches, " ", closest->Describe(costs),
      ", needs ", peak, " bytes on actor ", actor, " (", MemorySourceName(closest->plan.memory_source), "), ",
      peak - options.memory_cap,
      " over; it fits with a cap of ", peak, " bytes", options.allow_remat ? "" : ", or with rematerialisation",
      ", or on more actors"));
}

}  // namespace tandem::schedules
