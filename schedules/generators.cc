#include "schedules/generators.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "schedules/limits.h"
#include "schedules/placement.h"

namespace tandem::schedules {
namespace {

Task MakeTask(TaskKind kind, int32_t stage, int32_t microbatch) {
  return Task{kind, StageId(stage), Microbatch(microbatch)};
}
Task F(int32_t stage, int32_t mb) { return MakeTask(TaskKind::kForward, stage, mb); }
Task B(int32_t stage, int32_t mb) { return MakeTask(TaskKind::kBackward, stage, mb); }
Task I(int32_t stage, int32_t mb) { return MakeTask(TaskKind::kBackwardInput, stage, mb); }
Task W(int32_t stage, int32_t mb) { return MakeTask(TaskKind::kBackwardWeight, stage, mb); }

void Append(std::vector<Slot>& program, Task task) { program.push_back(Slot{{task}}); }

// Common checks; `v` is the resolved number of stages per actor.
absl::Status CheckSizes(absl::string_view name, const GeneratorOptions& options, int32_t v) {
  if (options.actors < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " needs at least 1 actor: got actors=", options.actors));
  }
  if (options.microbatches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " needs at least 1 microbatch: got microbatches=", options.microbatches));
  }
  if (v < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " needs at least 1 stage per actor: got virtual=", v));
  }
  if (v > kMaxVirtualStages) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": virtual ", v, " is more than the ",
                                                   kMaxVirtualStages, " stages per actor a schedule may have"));
  }
  const int64_t stages = int64_t{options.actors} * v;
  if (absl::Status s = CheckScheduleSizes(options.actors, stages, options.microbatches); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", s.message()));
  }
  // At most three tasks (F, I, W) per stage and microbatch.
  if (absl::Status s = CheckTaskCount(3 * stages * options.microbatches,
                                      absl::StrCat(name, " with actors=", options.actors, " virtual=", v,
                                                   " microbatches=", options.microbatches));
      !s.ok()) {
    return s;
  }
  return absl::OkStatus();
}

// For generators with a fixed number of stages per actor: `required`.
absl::StatusOr<int32_t> FixedVirtual(absl::string_view name, const GeneratorOptions& options,
                                     int32_t required) {
  if (options.virtual_stages != 0 && options.virtual_stages != required) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " places exactly ", required, " stage", required == 1 ? "" : "s",
                     " per actor: got virtual=", options.virtual_stages));
  }
  return required;
}

Schedule MakeSchedule(absl::string_view name, int32_t actors, int32_t stages,
                      int32_t microbatches, std::vector<ActorId> placement) {
  Schedule schedule;
  schedule.name = std::string(name);
  schedule.num_actors = actors;
  schedule.num_stages = stages;
  schedule.num_microbatches = microbatches;
  schedule.stage_to_actor = std::move(placement);
  schedule.programs.resize(actors);
  return schedule;
}

}  // namespace

// GPipe: Huang et al., "GPipe: Efficient Training of Giant Neural Networks
// using Pipeline Parallelism", NeurIPS 2019. Backwards run in microbatch
// order, as in PyTorch's ScheduleGPipe, so gradients accumulate in order.
absl::StatusOr<Schedule> GenerateGPipe(const GeneratorOptions& options) {
  absl::StatusOr<int32_t> v = FixedVirtual("gpipe", options, 1);
  if (!v.ok()) return v.status();
  if (absl::Status s = CheckSizes("gpipe", options, *v); !s.ok()) return s;
  const int32_t p = options.actors, m = options.microbatches;
  Schedule schedule = MakeSchedule("gpipe", p, p, m, LoopPlacement(p, p));
  for (int32_t r = 0; r < p; ++r) {
    for (int32_t mb = 0; mb < m; ++mb) Append(schedule.programs[r], F(r, mb));
    for (int32_t mb = 0; mb < m; ++mb) Append(schedule.programs[r], B(r, mb));
  }
  return schedule;
}

// 1F1B, PipeDream-Flush: Narayanan et al., "Memory-Efficient
// Pipeline-Parallel DNN Training", ICML 2021. Actor r runs min(P-1-r, M)
// warm-up forwards, then alternates one forward and one backward, then
// drains the remaining backwards; at most min(P-r, M) microbatches are live.
//
// PipeDream (Narayanan et al., SOSP 2019) and PipeDream-2BW (ICML 2021) run
// the same order within a step; what differs is when the weights are
// updated and which version each task computes on, which the traced step
// says (ir/train_step.h; FORMAT.md, "Asynchronous pipelines").
static absl::StatusOr<Schedule> OneFOneBNamed(const GeneratorOptions& options, const char* name) {
  absl::StatusOr<int32_t> v = FixedVirtual(name, options, 1);
  if (!v.ok()) return v.status();
  if (absl::Status s = CheckSizes(name, options, *v); !s.ok()) return s;
  const int32_t p = options.actors, m = options.microbatches;
  Schedule schedule = MakeSchedule(name, p, p, m, LoopPlacement(p, p));
  for (int32_t r = 0; r < p; ++r) {
    std::vector<Slot>& program = schedule.programs[r];
    const int32_t warmup = std::min(p - 1 - r, m);
    for (int32_t mb = 0; mb < warmup; ++mb) Append(program, F(r, mb));
    for (int32_t i = 0; i < m - warmup; ++i) {
      Append(program, F(r, warmup + i));
      Append(program, B(r, i));
    }
    for (int32_t mb = m - warmup; mb < m; ++mb) Append(program, B(r, mb));
  }
  return schedule;
}

absl::StatusOr<Schedule> GenerateOneFOneB(const GeneratorOptions& options) { return OneFOneBNamed(options, "1f1b"); }

// Interleaved 1F1B: Narayanan et al., "Efficient Large-Scale Language Model
// Training on GPU Clusters Using Megatron-LM", SC 2021, in the order of
// Megatron-LM's forward_backward_pipelining_with_interleaving: microbatches
// go through the actor's V stages in groups of P; warm-up is
// 2(P-1-r) + (V-1)P forwards (all of them when M == P); then one forward and
// one backward alternate; backwards visit the local stages in reverse.
absl::StatusOr<Schedule> GenerateInterleaved(const GeneratorOptions& options) {
  const int32_t v = options.virtual_stages == 0 ? 2 : options.virtual_stages;
  if (absl::Status s = CheckSizes("interleaved 1F1B", options, v); !s.ok()) return s;
  const int32_t p = options.actors, m = options.microbatches;
  if (m % p != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "interleaved 1F1B needs microbatches to be a multiple of actors (Megatron's order "
        "sends microbatches through each actor's stages in groups of P): got M=",
        m, ", P=", p));
  }
  Schedule schedule = MakeSchedule("interleaved", p, p * v, m, LoopPlacement(p, p * v));
  const int32_t total = m * v;
  for (int32_t r = 0; r < p; ++r) {
    // k-th forward (or backward) of actor r: its local stage and microbatch.
    auto stage_of = [&](int32_t k, bool forward) {
      const int32_t chunk = (k % (p * v)) / p;
      return (forward ? chunk : v - 1 - chunk) * p + r;
    };
    auto microbatch_of = [&](int32_t k) { return (k / (p * v)) * p + k % p; };
    auto forward = [&](int32_t k) { return F(stage_of(k, true), microbatch_of(k)); };
    auto backward = [&](int32_t k) { return B(stage_of(k, false), microbatch_of(k)); };
    const int32_t warmup = m == p ? total : std::min(2 * (p - 1 - r) + (v - 1) * p, total);
    std::vector<Slot>& program = schedule.programs[r];
    for (int32_t k = 0; k < warmup; ++k) Append(program, forward(k));
    for (int32_t i = 0; i < total - warmup; ++i) {
      Append(program, forward(warmup + i));
      Append(program, backward(i));
    }
    for (int32_t k = total - warmup; k < total; ++k) Append(program, backward(k));
  }
  return schedule;
}

// Looped BFS: Lamy-Poirier, "Breadth-First Pipeline Parallelism", MLSys
// 2023 (PyTorch's ScheduleLoopedBFS). Each actor runs all microbatches
// through its first local stage, then its second, ...; backwards visit the
// local stages in reverse, microbatches in order.
absl::StatusOr<Schedule> GenerateLoopedBfs(const GeneratorOptions& options) {
  const int32_t v = options.virtual_stages == 0 ? 2 : options.virtual_stages;
  if (absl::Status s = CheckSizes("looped BFS", options, v); !s.ok()) return s;
  const int32_t p = options.actors, m = options.microbatches;
  Schedule schedule = MakeSchedule("looped-bfs", p, p * v, m, LoopPlacement(p, p * v));
  for (int32_t r = 0; r < p; ++r) {
    std::vector<Slot>& program = schedule.programs[r];
    for (int32_t c = 0; c < v; ++c) {
      for (int32_t mb = 0; mb < m; ++mb) Append(program, F(c * p + r, mb));
    }
    for (int32_t c = v - 1; c >= 0; --c) {
      for (int32_t mb = 0; mb < m; ++mb) Append(program, B(c * p + r, mb));
    }
  }
  return schedule;
}

// ZB-H1: Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024
// (arXiv 2023), Section 3.1. 1F1B's warm-up and F/I alternation, with actor
// r postponing its weight-gradient passes by r microbatches so that the
// deferred W's fill the drain; live microbatches stay at most P per actor,
// 1F1B's peak. With F = I = W the bubble is (P-1)(F+I-W) per actor.
absl::StatusOr<Schedule> GenerateZeroBubbleH1(const GeneratorOptions& options) {
  absl::StatusOr<int32_t> v = FixedVirtual("zb-h1", options, 1);
  if (!v.ok()) return v.status();
  if (absl::Status s = CheckSizes("zb-h1", options, *v); !s.ok()) return s;
  const int32_t p = options.actors, m = options.microbatches;
  Schedule schedule = MakeSchedule("zb-h1", p, p, m, LoopPlacement(p, p));
  for (int32_t r = 0; r < p; ++r) {
    std::vector<Slot>& program = schedule.programs[r];
    const int32_t warmup = std::min(p - 1 - r, m);
    int32_t next_weight = 0;
    auto weight_after_input = [&](int32_t input_mb) {
      if (input_mb - r >= 0) Append(program, W(r, next_weight++));
    };
    for (int32_t mb = 0; mb < warmup; ++mb) Append(program, F(r, mb));
    for (int32_t i = 0; i < m - warmup; ++i) {
      Append(program, F(r, warmup + i));
      Append(program, I(r, i));
      weight_after_input(i);
    }
    for (int32_t mb = m - warmup; mb < m; ++mb) {
      Append(program, I(r, mb));
      weight_after_input(mb);
    }
    while (next_weight < m) Append(program, W(r, next_weight++));
  }
  return schedule;
}

// ZB-V: Qi et al., "Pipeline Parallelism with Controllable Memory",
// NeurIPS 2024 (also the ZB-V schedule of "Zero Bubble Pipeline
// Parallelism"); the order follows PyTorch's ScheduleZBVZeroBubble. Actor r
// holds stage r (chunk 0) and stage 2P-1-r (chunk 1). Warm-up: 2(P-r)-1
// chunk-0 forwards, r alternating chunk-1/chunk-0 forwards, P-r chunk-1
// F,I,W triples; steady: F0 I0 W0 F1 I1 W1; drain: r I0 I1 pairs, P-r I0 W0
// pairs, then the remaining W's of chunk 1 and chunk 0.
absl::StatusOr<Schedule> GenerateZeroBubbleV(const GeneratorOptions& options) {
  absl::StatusOr<int32_t> v = FixedVirtual("zb-v", options, 2);
  if (!v.ok()) return v.status();
  if (absl::Status s = CheckSizes("zb-v", options, *v); !s.ok()) return s;
  const int32_t p = options.actors, m = options.microbatches;
  if (m < 2 * p - 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zb-v needs at least 2P-1 microbatches (actor 0 warms up with 2P-1 forwards of its "
        "first stage): got M=",
        m, ", P=", p));
  }
  Schedule schedule = MakeSchedule("zb-v", p, 2 * p, m, VPlacement(p, 2 * p));
  for (int32_t r = 0; r < p; ++r) {
    std::vector<Slot>& program = schedule.programs[r];
    const int32_t s0 = r, s1 = 2 * p - 1 - r;
    int32_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    for (int32_t i = 0; i < 2 * (p - r) - 1; ++i) Append(program, F(s0, f0++));
    for (int32_t i = 0; i < r; ++i) {
      Append(program, F(s1, f1++));
      Append(program, F(s0, f0++));
    }
    for (int32_t i = 0; i < p - r; ++i) {
      Append(program, F(s1, f1));
      Append(program, I(s1, b1));
      Append(program, W(s1, b1));
      ++f1;
      ++b1;
    }
    while (f1 < f0 || f0 < m) {
      if (f0 < m) Append(program, F(s0, f0++));
      Append(program, I(s0, b0));
      Append(program, W(s0, b0++));
      Append(program, F(s1, f1++));
      Append(program, I(s1, b1));
      Append(program, W(s1, b1++));
    }
    int32_t w0 = b0, w1 = b1;
    for (int32_t i = 0; i < r; ++i) {
      Append(program, I(s0, b0++));
      Append(program, I(s1, b1++));
    }
    for (int32_t i = 0; i < p - r; ++i) {
      Append(program, I(s0, b0++));
      Append(program, W(s0, w0++));
    }
    while (w1 < b1) Append(program, W(s1, w1++));
    while (w0 < b0) Append(program, W(s0, w0++));
  }
  return schedule;
}

// DualPipeV: the "cut-in-half" DualPipe of DeepSeek-AI, "DeepSeek-V3
// Technical Report", 2024, Section 3.2.1, in the step order of
// deepseek-ai/DualPipe's dualpipev.py (the order PyTorch's test fixture
// dualpipev_4rank_10mb.csv records). Chunk 0 of actor r is stage r, chunk 1
// stage 2P-1-r. Weight passes are queued FIFO behind their I passes.
absl::StatusOr<Schedule> GenerateDualPipeV(const GeneratorOptions& options) {
  absl::StatusOr<int32_t> v = FixedVirtual("dualpipev", options, 2);
  if (!v.ok()) return v.status();
  if (absl::Status s = CheckSizes("dualpipev", options, *v); !s.ok()) return s;
  const int32_t p = options.actors, m = options.microbatches;
  if (m < 2 * p) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dualpipev needs at least 2P microbatches (its steady phase overlaps a forward of one "
        "stage with a backward of the other): got M=",
        m, ", P=", p));
  }
  Schedule schedule = MakeSchedule("dualpipev", p, 2 * p, m, VPlacement(p, 2 * p));
  for (int32_t r = 0; r < p; ++r) {
    std::vector<Slot>& program = schedule.programs[r];
    const int32_t stage[2] = {r, 2 * p - 1 - r};
    int32_t next_forward[2] = {0, 0};
    int32_t next_backward[2] = {0, 0};
    std::deque<Task> pending_weights;
    auto forward = [&](int chunk) { return F(stage[chunk], next_forward[chunk]++); };
    // A full backward, or with `split` its I half with the W half queued.
    auto backward = [&](int chunk, bool split) {
      const int32_t mb = next_backward[chunk]++;
      if (!split) return B(stage[chunk], mb);
      pending_weights.push_back(W(stage[chunk], mb));
      return I(stage[chunk], mb);
    };
    auto weight = [&] {
      Append(program, pending_weights.front());
      pending_weights.pop_front();
    };
    auto overlapped = [&](int forward_chunk) {
      Task f = forward(forward_chunk);
      Task b = backward(1 - forward_chunk, false);
      program.push_back(Slot{{f, b}});
    };
    for (int32_t i = 0; i < 2 * (p - r - 1); ++i) Append(program, forward(0));
    for (int32_t i = 0; i < r + 1; ++i) {
      Append(program, forward(0));
      Append(program, forward(1));
    }
    for (int32_t i = 0; i < p - r - 1; ++i) {
      Append(program, backward(1, true));
      weight();
      Append(program, forward(1));
    }
    for (int32_t i = 0; i < m - 2 * p + r + 1; ++i) {
      if (i == 0 && r == p - 1) {
        Append(program, forward(0));
        Append(program, backward(1, false));
      } else {
        overlapped(0);
      }
      overlapped(1);
    }
    for (int32_t i = 0; i < p - r - 1; ++i) {
      Append(program, backward(1, false));
      overlapped(1);
    }
    bool split = false;
    const int32_t both = r + 1;
    for (int32_t i = 0; i < both; ++i) {
      if (i == both / 2 && r % 2 == 1) split = true;
      Append(program, backward(1, split));
      if (i == both / 2 && r % 2 == 0) split = true;
      Append(program, backward(0, split));
    }
    for (int32_t i = 0; i < p - r - 1; ++i) {
      weight();
      Append(program, backward(0, true));
    }
    while (!pending_weights.empty()) weight();
  }
  return schedule;
}

absl::StatusOr<Schedule> GeneratePipeDream(const GeneratorOptions& options) {
  return OneFOneBNamed(options, "pipedream");
}

absl::StatusOr<Schedule> GenerateTwoBuffer(const GeneratorOptions& options) { return OneFOneBNamed(options, "2bw"); }

const std::vector<ScheduleTraits>& BuiltInSchedules() {
  using enum InFlight;
  using enum WeightUpdateMode;
  static const auto* const traits = new std::vector<ScheduleTraits>{
      // name, generator, virtual stages, in flight, stage graph, updates, planned
      {"gpipe", GenerateGPipe, 1, kAllMicrobatches, false, kFlush, true},
      {"1f1b", GenerateOneFOneB, 1, kOneFOneB, false, kFlush, true},
      {"interleaved", GenerateInterleaved, 2, kOneFOneB, false, kFlush, true},
      {"looped-bfs", GenerateLoopedBfs, 2, kAllMicrobatches, false, kFlush, false},
      {"zb-h1", GenerateZeroBubbleH1, 1, kOneFOneB, false, kFlush, true},
      {"zb-v", GenerateZeroBubbleV, 2, kOneFOneB, false, kFlush, true},
      {"dualpipev", GenerateDualPipeV, 2, kOneFOneB, false, kFlush, false},
      {"graph-gpipe", GenerateGraphGPipe, 1, kAllMicrobatches, true, kFlush, true},
      {"graph-1f1b", GenerateGraphOneFOneB, 1, kOneFOneB, true, kFlush, true},
      {"pipedream", GeneratePipeDream, 1, kOneFOneB, false, kPipeDream, false},
      {"2bw", GenerateTwoBuffer, 1, kOneFOneB, false, kTwoBuffer, false},
  };
  return *traits;
}

const ScheduleTraits* FindSchedule(absl::string_view name) {
  for (const ScheduleTraits& traits : BuiltInSchedules()) {
    if (name == traits.name) return &traits;
  }
  return nullptr;
}

std::vector<std::string> GeneratorNames() {
  std::vector<std::string> names;
  for (const ScheduleTraits& traits : BuiltInSchedules()) names.emplace_back(traits.name);
  return names;
}

WeightUpdateMode WeightUpdateModeOf(absl::string_view name) {
  const ScheduleTraits* traits = FindSchedule(name);
  return traits == nullptr ? WeightUpdateMode::kFlush : traits->weight_updates;
}

bool IsAsynchronous(absl::string_view name) { return WeightUpdateModeOf(name) != WeightUpdateMode::kFlush; }

bool TakesStageGraph(absl::string_view name) {
  const ScheduleTraits* traits = FindSchedule(name);
  return traits != nullptr && traits->takes_stage_graph;
}

absl::StatusOr<Schedule> Generate(absl::string_view name, const GeneratorOptions& options) {
  const ScheduleTraits* traits = FindSchedule(name);
  if (traits == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown schedule '", name, "': known schedules are ",
                                                   absl::StrJoin(GeneratorNames(), ", ")));
  }
  if (!traits->takes_stage_graph && (!options.stage_edges.empty() || !options.stage_actors.empty())) {
    return absl::InvalidArgumentError(absl::StrCat("schedule '", name,
                                                   "' runs a chain of stages: use graph-gpipe or graph-1f1b for a "
                                                   "stage graph or a placement"));
  }
  return traits->generate(options);
}

}  // namespace tandem::schedules
