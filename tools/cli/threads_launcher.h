// The `threads` launcher: every actor is a thread of this process running
// its own executor, connected by in-memory channels. It stays in the product
// as a debugging mode; it wires the controller's Launcher interface to the
// actor's ThreadCluster, which is why it lives in tools/ (the controller and
// the actor never include each other).
#ifndef TANDEM_TOOLS_CLI_THREADS_LAUNCHER_H_
#define TANDEM_TOOLS_CLI_THREADS_LAUNCHER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "actor/thread_cluster.h"
#include "controller/launcher.h"
#include "ir/device_spec.h"

namespace tandem::cli {

// Not thread-safe: driven by one controller thread; each RunStep starts one
// thread per actor and joins them all before returning.
class ThreadsLauncher : public controller::Launcher {
 public:
  // Every receive waits at most `receive_timeout`: a hang becomes an error.
  // Actor a computes on backends::OpenDevice(device, a).
  explicit ThreadsLauncher(absl::Duration receive_timeout = absl::Seconds(30), ir::DeviceSpec device = {})
      : receive_timeout_(receive_timeout), device_(device) {}

  absl::Status Start(const std::vector<ir::ActorProgram>& programs, const std::vector<ir::StateSources>& states) override;
  // A new cluster of the programs, on the state the running one has now.
  absl::Status UsePrograms(const std::vector<ir::ActorProgram>& programs) override;
  absl::StatusOr<std::vector<ir::StepOutputs>> RunStep(int64_t step,
                                                                   const std::vector<ir::StepInputs>& inputs,
                                                                   controller::Dispatch dispatch) override;
  // The listed actors' ranges, one thread each, joined before returning.
  absl::StatusOr<std::map<ActorId, ir::StepOutputs>> RunRanges(
      int64_t step, const std::map<ActorId, controller::InstructionRange>& ranges,
      const std::vector<ir::StepInputs>& inputs) override;
  absl::StatusOr<ir::HostTensor> ReadBuffer(ActorId actor, const std::string& name) override;
  std::string DescribeActor(ActorId) const override { return "thread"; }
  absl::StatusOr<std::vector<ir::TensorMap>> ReadState() override;

 private:
  absl::Duration receive_timeout_;
  ir::DeviceSpec device_;
  int64_t ranges_step_ = 0;  // the step RunRanges is in (its network is reset when a new one begins)
  std::unique_ptr<actor::ThreadCluster> cluster_;
};

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_THREADS_LAUNCHER_H_
