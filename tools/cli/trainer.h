// What `tandem train` trains with: a pipeline (a Session over actors) or the
// single-process reference interpreter, behind one small interface so that
// the step loop does not care which. Not thread-safe: one thread drives a
// trainer.
#ifndef TANDEM_TOOLS_CLI_TRAINER_H_
#define TANDEM_TOOLS_CLI_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/cpu/interpreter.h"
#include "backends/cpu/kernel_threads.h"
#include "backends/device.h"
#include "controller/session.h"
#include "controller/step_trace.h"
#include "examples/example_job.h"
#include "ir/device_spec.h"
#include "ir/state_source.h"
#include "ir/train_step.h"
#include "schedules/schedule.h"

namespace tandem::cli {

class Trainer {
 public:
  virtual ~Trainer() = default;
  // Runs training step `step` (numbered from 1) on `batch`: each
  // microbatch's loss, and each stage's sum of squared gradients when the
  // step computes them.
  virtual absl::StatusOr<cpu::StepResult> Step(const std::vector<ir::TensorMap>& batch, int64_t step) = 0;
  // Every parameter and optimizer slot.
  virtual absl::StatusOr<ir::TensorMap> State() = 0;
  // Where it computes, for people: the reference's device ("cpu").
  virtual std::string description() const = 0;
  // A pipeline's compiled step and its last step's report (peaks, compute
  // time, RPCs); nullptr for the reference.
  virtual const controller::CompiledStep* compiled() const { return nullptr; }
  virtual const controller::StepReport* last_report() const { return nullptr; }
  // Saves a checkpoint under `root` (controller/checkpoint.h); its
  // directory. Unimplemented for the reference.
  virtual absl::StatusOr<std::string> SaveCheckpoint(const std::string& root);
  // The same behind the steps (Session::BeginCheckpoint, FinishCheckpoint).
  virtual absl::Status BeginCheckpoint(const std::string& root);
  virtual absl::StatusOr<std::string> FinishCheckpoint(bool wait);
  // Peers refused for not proving they belong to the job; none for the
  // reference.
  virtual controller::RefusalCounts Refusals() { return {}; }
  // The restarts after lost actors so far (SessionOptions::max_restarts);
  // none for the reference.
  virtual std::vector<SessionRestart> Restarts() const { return {}; }
  // The loss of each microbatch of `job`'s validation batches 0 .. count -
  // 1 under the model as it is now: the reference evaluates its state; a
  // pipeline runs `forward` (job.forward_step()) through a pipeline of its
  // own (Session::Evaluate, its scratch files under `scratch`), so that the
  // controller never holds the model.
  virtual absl::StatusOr<std::vector<float>> Validate(const examples::ExampleJob& job, const ir::TrainStep* forward,
                                                      int64_t count, const std::string& scratch) = 0;
};

// The single-process reference: on the CPU's reference kernels, or on one
// GPU (the reference a pipelined --device cuda run is compared with).
class ReferenceTrainer : public Trainer {
 public:
  // ResourceExhausted when what the reference interpreter holds at least
  // (the whole state, and two sums of the gradients: its replica's and the
  // step's) is more than this host's available memory: checked before any
  // of it is allocated, as the launchers check their actors' static peaks.
  // A GPU's memory is checked by the device as it allocates.
  static absl::Status CheckFits(const ir::TrainStep& step, const ir::DeviceSpec& device);
  // Opens `device` (as actor 0 would) and starts from `state`; the CPU
  // kernels run on `threads` threads (0: every core).
  static absl::StatusOr<std::unique_ptr<Trainer>> Open(const ir::TrainStep& step, const ir::StateSources& state,
                                                       const ir::DeviceSpec& device, int threads = 0);
  ReferenceTrainer(const ir::TrainStep& step, ir::TensorMap state, std::shared_ptr<backends::Device> device,
                   int threads)
      : step_(step), state_(std::move(state)), device_(std::move(device)), threads_(threads) {}

  absl::StatusOr<cpu::StepResult> Step(const std::vector<ir::TensorMap>& batch, int64_t step) override;
  absl::StatusOr<ir::TensorMap> State() override { return state_; }
  std::string description() const override { return device_->name(); }
  absl::StatusOr<std::vector<float>> Validate(const examples::ExampleJob& job, const ir::TrainStep* forward,
                                              int64_t count, const std::string& scratch) override;

 private:
  const ir::TrainStep& step_;
  ir::TensorMap state_;
  std::shared_ptr<backends::Device> device_;
  cpu::KernelThreads threads_;
};

// A pipeline: one Session over its actors.
class PipelineTrainer : public Trainer {
 public:
  explicit PipelineTrainer(std::unique_ptr<Session> session) : session_(std::move(session)) {}

  absl::StatusOr<cpu::StepResult> Step(const std::vector<ir::TensorMap>& batch, int64_t step) override;
  absl::StatusOr<ir::TensorMap> State() override { return session_->State(); }
  std::string description() const override { return session_->launcher_description(); }
  const controller::CompiledStep* compiled() const override { return &session_->compiled(); }
  const controller::StepReport* last_report() const override { return &last_; }
  absl::StatusOr<std::string> SaveCheckpoint(const std::string& root) override {
    return session_->SaveCheckpoint(root);
  }
  absl::Status BeginCheckpoint(const std::string& root) override { return session_->BeginCheckpoint(root); }
  absl::StatusOr<std::string> FinishCheckpoint(bool wait) override { return session_->FinishCheckpoint(wait); }
  controller::RefusalCounts Refusals() override { return session_->Refusals(); }
  std::vector<SessionRestart> Restarts() const override { return session_->restarts(); }
  absl::StatusOr<std::vector<float>> Validate(const examples::ExampleJob& job, const ir::TrainStep* forward,
                                              int64_t count, const std::string& scratch) override;

 private:
  std::unique_ptr<Session> session_;
  controller::StepReport last_;
};

// Writes the measured trace to `path` and prints, per actor, the measured
// bubble next to the simulator's for costs calibrated on the same steps.
absl::Status WriteTrace(const controller::StepTrace& trace, const schedules::Schedule& schedule,
                        const std::string& path, std::ostream& out);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_TRAINER_H_
