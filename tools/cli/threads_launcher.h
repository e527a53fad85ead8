// The `threads` launcher: every actor is a thread of this process running
// its own executor, connected by in-memory channels. It stays in the product
// as a debugging mode; it wires the controller's Launcher interface to the
// actor's ThreadCluster, which is why it lives in tools/ (the controller and
// the actor never include each other).
#ifndef TANDEM_TOOLS_CLI_THREADS_LAUNCHER_H_
#define TANDEM_TOOLS_CLI_THREADS_LAUNCHER_H_

#include <memory>

#include "absl/time/time.h"
#include "actor/thread_cluster.h"
#include "controller/launcher.h"

namespace tandem::cli {

// Not thread-safe: driven by one controller thread; each RunStep starts one
// thread per actor and joins them all before returning.
class ThreadsLauncher : public controller::Launcher {
 public:
  // Every receive waits at most `receive_timeout`: a hang becomes an error.
  explicit ThreadsLauncher(absl::Duration receive_timeout = absl::Seconds(30))
      : receive_timeout_(receive_timeout) {}

  absl::Status Start(const std::vector<ir::ActorProgram>& programs,
                     const std::vector<ir::TensorMap>& states) override;
  absl::StatusOr<std::vector<controller::ActorStepResult>> RunStep(int64_t step,
                                                                   const std::vector<controller::ActorInputs>& inputs,
                                                                   controller::Dispatch dispatch) override;
  absl::StatusOr<std::vector<ir::TensorMap>> ReadState() override;

 private:
  absl::Duration receive_timeout_;
  std::unique_ptr<actor::ThreadCluster> cluster_;
};

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_THREADS_LAUNCHER_H_
