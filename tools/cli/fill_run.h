// `tandem train --fill SPEC`: a fill job (controller/fill.h) in the bubbles
// of the trained pipeline, measured against the same pipeline without it.
//
// The run keeps a second session, the baseline: the same model, schedule
// and state, without fill. Every step runs on both with the same batch; the
// losses must agree bit for bit (the fill never touches the main job). The
// first kCalibrationSteps steps run without fill on both, and calibrate
// the simulator on the baseline's measured timings; then the pieces are
// packed into the predicted bubbles (controller::PlanFill) and the main
// session starts the fill job (Session::StartFill). From then on each step
// reports the pieces done, and the summary the main job's step time with and
// without fill side by side, and the utilisation (compute / wall) of both;
// for a training job, each actor's updates and its loss at their start and
// end. With --verify the fill job's reference (controller::RunFillPiece)
// replays every actor's pieces in the order they ran: each output must
// equal it, and a training job's state on each actor at the end too.
// Not thread-safe.
#ifndef TANDEM_TOOLS_CLI_FILL_RUN_H_
#define TANDEM_TOOLS_CLI_FILL_RUN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/fill.h"
#include "controller/session.h"
#include "controller/step_trace.h"
#include "examples/fill_job.h"
#include "schedules/schedule.h"

namespace tandem::cli {

class FillRun {
 public:
  static constexpr int64_t kCalibrationSteps = 2;

  // `main` is the trained session (it gains the fill job), `baseline` its
  // twin without fill.
  FillRun(examples::ExampleFillJob job, Session* main, std::unique_ptr<Session> baseline, bool verify);

  // After the main session ran step `step` (the run's `index`-th, from 1)
  // on `batch` in `seconds`: runs the baseline on it, compares, and starts
  // the fill job after calibration. Returns the step line's note (e.g.
  // "  fill 12/12"). Internal when the losses differ.
  absl::StatusOr<std::string> AfterStep(int64_t index, const std::vector<ir::TensorMap>& batch,
                                        const std::vector<float>& losses, double seconds,
                                        const controller::StepReport& report);
  // True once the main session runs the fill job: its compiled step changed.
  bool started() const { return started_; }

  // The summary lines; with --verify, checks a training job's final state
  // first (Internal when it differs from the reference's).
  absl::Status Report(std::ostream& out);

 private:
  absl::Status Start();
  absl::Status Verify(const controller::StepReport& report);

  examples::ExampleFillJob example_;
  std::shared_ptr<const controller::FillJob> job_;
  Session* main_;
  std::unique_ptr<Session> baseline_;
  bool verify_;
  bool started_ = false;
  std::optional<controller::StepTrace> calibration_;
  controller::FillPlan plan_;
  double piece_us_ = 0.0;
  std::vector<int32_t> actor_of_slot_;              // by fill slot
  std::vector<ir::TensorMap> reference_state_;      // by actor, with --verify
  std::vector<std::vector<float>> losses_;          // by actor: a training job's, in order
  // Filled steps, side by side.
  std::vector<double> main_seconds_, baseline_seconds_;
  double main_busy_s_ = 0.0, main_fill_s_ = 0.0, baseline_busy_s_ = 0.0;
  int64_t pieces_done_ = 0, pieces_skipped_ = 0, verified_ = 0;
};

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_FILL_RUN_H_
