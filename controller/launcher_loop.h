// The local launcher's two halves of talking to actors across threads
// (controller/local_launcher.h drives them):
//  - CallBoard: what the event-loop thread reports to the controller thread
//    (registrations, heartbeats, the calls of the current batch), under one
//    mutex; the controller thread waits on it.
//  - LauncherLoop: the event-loop thread's objects. It serves the control
//    socket (Unix or TCP; registration by challenge-response over the job's
//    token, rpc/controller_service.h), keeps every registered actor's
//    capability, sends heartbeats, and tracks actor calls onto the board. Everything in it is created, used and destroyed on that thread;
//    other threads reach it through `executor`.
#ifndef TANDEM_CONTROLLER_LAUNCHER_LOOP_H_
#define TANDEM_CONTROLLER_LAUNCHER_LOOP_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "controller/launcher.h"
#include "kj/async-io.h"
#include "rpc/connection.h"
#include "rpc/control_tls.h"
#include "rpc/controller_service.h"
#include "rpc/rate_limited_log.h"
#include "rpc/tandem.capnp.h"

namespace tandem::controller {

// How late a heartbeat tick (or a look of the waiting thread) must come to
// count as a pause of the controller itself rather than a busy moment:
// four periods, and at least a second.
inline absl::Duration ControllerPauseAfter(absl::Duration heartbeat_interval) {
  return std::max(absl::Seconds(1), 4 * heartbeat_interval);
}

struct CallBoard {
  explicit CallBoard(int32_t num_actors);

  // Loop thread: `actor`'s call of the current batch ended with `status`.
  void Done(int32_t actor, absl::Status status) ABSL_LOCKS_EXCLUDED(mu);
  // Loop thread: a registration was refused.
  void Refused(rpc::RegistrationRefusal refusal) ABSL_LOCKS_EXCLUDED(mu);
  // Every refusal: the controller's, and the last count each actor reported.
  RefusalCounts Refusals() ABSL_LOCKS_EXCLUDED(mu);

  absl::Mutex mu;
  absl::CondVar changed;
  std::vector<bool> registered ABSL_GUARDED_BY(mu);
  // The node each actor said it runs on at registration (empty on one host).
  std::vector<std::string> nodes ABSL_GUARDED_BY(mu);
  std::vector<absl::Time> last_heard ABSL_GUARDED_BY(mu);  // the last reply of each actor
  // The current batch of calls: per actor, its status once it completed.
  std::vector<std::optional<absl::Status>> done ABSL_GUARDED_BY(mu);
  RefusalCounts refused ABSL_GUARDED_BY(mu);  // registrations (data_plane unused)
  // Strangers refused by each actor's data plane, as it last reported.
  std::vector<int64_t> data_plane_refused ABSL_GUARDED_BY(mu);
  bool shutting_down ABSL_GUARDED_BY(mu) = false;
  // The loop's heartbeat ticks: when it last ticked, and the last time a
  // tick came far later than its period (the controller did not run: a
  // SIGSTOP, a starved machine), when it resumed and after how long.
  // Silence of the actors over such a pause is not theirs.
  absl::Time last_tick ABSL_GUARDED_BY(mu);
  absl::Time loop_resumed ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  absl::Duration loop_pause ABSL_GUARDED_BY(mu);
};

class LauncherLoop final : private kj::TaskSet::ErrorHandler {
 public:
  // Must be constructed on the thread that runs `io`'s event loop.
  LauncherLoop(kj::AsyncIoContext& io, CallBoard& board, int32_t num_actors, absl::Duration heartbeat_interval);

  // Listens on `listen_on` (a Unix socket's path, or the host of a TCP
  // socket on a port the OS picks, serving TLS with `identity`, by `kind`)
  // and accepts registrations that prove `token` (refusals are counted on
  // the board and go to `log`,
  // as do control connections that fail or close while the job runs,
  // rate-limited: a few lines, then a count every 10 s); starts the
  // heartbeats. Returns the address actors dial (the path, or host:port).
  absl::StatusOr<std::string> Serve(rpc::ControlPlaneKind kind, const std::string& listen_on,
                                    const std::string& token, const rpc::ControllerIdentity& identity,
                                    const rpc::ConnectionLimits& limits, std::function<void(absl::string_view)> log);
  // Serves until `stop_promise` resolves (see `stop`).
  void RunUntil(kj::Promise<void> stop_promise);

  // Adds one actor call: `call` completes it; its status goes to the board.
  void Track(int32_t actor, kj::Promise<void> call);
  // Fails every tracked call still in flight.
  void CancelCalls(absl::string_view reason);
  // A health call to `actor`; its reply refreshes the board (last heard,
  // the actor's data-plane refusals).
  kj::Promise<void> Health(int32_t actor);

  bool has_actor(int32_t actor) const { return actors_[actor].get() != nullptr; }
  rpc::wire::Actor::Client& actor(int32_t actor) { return *actors_[actor]; }

  kj::AsyncIoContext& io;
  const kj::Executor& executor;
  kj::TaskSet tasks;
  kj::Own<kj::PromiseFulfiller<void>> stop;  // fulfil to leave RunUntil
  // What the calls bring back, by actor; read after the batch completed.
  std::vector<std::string> tcp_addresses;
  std::vector<std::map<int32_t, rpc::wire::SharedRegion::Client>> regions;  // peer -> ring to it
  std::vector<std::map<int32_t, std::string>> region_paths;  // the same, as paths (a TCP control plane)
  std::vector<std::vector<std::string>> replica_offers;  // per group member, what it needs to reach this actor
  std::vector<uint64_t> hashes;
  std::vector<ir::StepOutputs> results;
  // runStep and runRange calls sent to each actor since its results were
  // last collected.
  std::vector<int32_t> calls;

 private:
  // Records a registration; AlreadyExists for an actor registered before.
  absl::Status Register(int32_t actor, absl::string_view node, rpc::wire::Actor::Client client);
  // A health call to every registered actor without one outstanding, each
  // interval; replies refresh the board's last_heard.
  kj::Promise<void> Heartbeat();
  void taskFailed(kj::Exception&& exception) override;

  CallBoard& board_;
  kj::Canceler canceler_;  // the actor calls in flight
  // Before server_: its connections log into it while they are destroyed.
  std::unique_ptr<rpc::RateLimitedLog> notices_;
  std::unique_ptr<rpc::ControlServer> server_;
  std::vector<kj::Own<rpc::wire::Actor::Client>> actors_;  // null until registered
  std::vector<bool> health_outstanding_;
  kj::Duration heartbeat_interval_;
};

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_LAUNCHER_LOOP_H_
