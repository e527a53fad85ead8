// StepTrace: the measured timeline of pipelined steps, from the
// per-instruction timings every actor reports, merged into one Chrome /
// Perfetto trace in the same convention as the simulator's drawing
// (schedules/drawing.h): process = actor, tracks compute / send / recv,
// times in microseconds, so that plan and measurement open side by side.
//
// Per step and actor: each run instruction is a compute slice named by its
// task ("F1.3", "U"), each send a slice on the send track, each receive a
// slice on the recv track spanning the wait; on the step track, the time
// the actor took its inputs in before its first instruction ("inputs") and
// settled the step after its last ("settle"); every transfer is a flow from
// the end of its send to the end of its receive (matched by sender,
// receiver and tag within the step). Actors' clocks are aligned through
// their monotonic clocks (one host). Not thread-safe; owns its events.
#ifndef TANDEM_CONTROLLER_STEP_TRACE_H_
#define TANDEM_CONTROLLER_STEP_TRACE_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "controller/compiler.h"
#include "controller/pipeline.h"
#include "schedules/simulator.h"
#include "schedules/trace_events.h"

namespace tandem::controller {

class StepTrace {
 public:
  explicit StepTrace(const CompiledStep& compiled);

  // Adds one step's timings. The report must come from the pipeline that
  // runs `compiled`.
  void AddStep(const StepReport& report);

  int64_t steps() const { return steps_; }
  // Per actor, over the steps added: the fraction of wall time not spent in
  // run instructions, the wall time of a step being from its first
  // instruction on any actor to its last.
  std::vector<double> MeasuredBubble() const;
  // The mean over the steps added of a step's span, from its first
  // instruction on any actor to its last, in microseconds: what the schedule
  // took, without the step's dispatch, its inputs' arrival and its end.
  double MeanSpanUs() const { return steps_ > 0 ? wall_us_ / static_cast<double>(steps_) : 0.0; }

  // A cost model calibrated on the steps added, in microseconds: the mean
  // measured time of each (task kind, stage), counting every instruction of
  // the task but receives (waiting is the bubble, not the task's cost), and
  // the link's latency (schedules::LinkModel::latency; alpha and beta stay
  // 0, the sends' own time being in their tasks'): the mean time from a
  // send's end to the end of its receive, over the receives that were
  // already waiting when the send ended (0 when none was).
  schedules::CostModel CalibratedCosts() const;
  // Mean time per step of each actor's update (U), which the simulator does
  // not model, in microseconds.
  std::vector<double> UpdateUs() const;

  std::string ToJson() const { return builder_.ToJson(); }
  const schedules::TraceBuilder& builder() const { return builder_; }

 private:
  // The step track's slices of `report` (inputs, settle).
  void AddStepEnds(const StepReport& report);

  const CompiledStep& compiled_;
  schedules::TraceBuilder builder_;
  int64_t origin_ns_ = -1;  // the first step's first instruction, or its inputs before it
  int64_t steps_ = 0;
  std::vector<double> busy_us_;    // by actor
  std::vector<double> update_us_;  // by actor
  double wall_us_ = 0;
  double latency_us_ = 0;  // over the transfers that show it (AddStep)
  int64_t latencies_ = 0;
  // (kind letter, stage) -> total time and task count.
  std::map<std::pair<char, int32_t>, std::pair<double, int64_t>> task_us_;
};

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_STEP_TRACE_H_
