// The controller's side of registration: the bootstrap capability that
// actors call to join the job, and the server that accepts their
// connections on a Unix socket.
//
// Threading: everything here belongs to the controller's event-loop thread;
// callbacks run on it and must not block.
#ifndef TANDEM_RPC_CONTROLLER_SERVICE_H_
#define TANDEM_RPC_CONTROLLER_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kj/async.h"
#include "rpc/connection.h"
#include "rpc/tandem.capnp.h"

namespace tandem::rpc {

// Called for each accepted registration with the actor's capability; a
// non-OK status refuses it (e.g. AlreadyExists for a duplicate id).
using RegistrationHandler = std::function<absl::Status(int32_t actor_id, wire::Actor::Client actor)>;
// Receives one line per refused registration or dropped connection.
using LogSink = std::function<void(absl::string_view line)>;

// The Controller bootstrap capability. Checks the per-job token (in
// constant time) and the actor id range; refusals fail the register call
// with PermissionDenied / InvalidArgument and are logged. A refused client
// disturbs nothing: other connections and sessions keep working.
//
// Cross-process call: Controller.register, completed by this object on the
// controller's event-loop thread before it returns; if the actor
// disconnects, its Actor capability's calls fail with Unavailable.
class ControllerService final : public wire::Controller::Server {
 public:
  ControllerService(std::string token, int32_t num_actors, RegistrationHandler on_register,
                    LogSink log);

 protected:
  kj::Promise<void> register_(RegisterContext context) override;

 private:
  std::string token_;
  int32_t num_actors_;
  RegistrationHandler on_register_;
  LogSink log_;
};

// Serves `bootstrap` (normally a ControllerService) to every connection
// accepted on `listener`; each connection lives until its peer disconnects
// or this object is destroyed (which drops them all). Owned by the
// controller's main; not thread-safe.
class ControlServer final : private kj::TaskSet::ErrorHandler {
 public:
  ControlServer(std::unique_ptr<UnixListener> listener, capnp::Capability::Client bootstrap,
                ConnectionLimits limits, LogSink log);
  ~ControlServer();

  // Accepts connections until destroyed. The promise never resolves on its
  // own; drop it (or this object) to stop.
  kj::Promise<void> Run();

  int connections() const { return connections_; }

 private:
  void Serve(kj::Own<kj::AsyncCapabilityStream> stream);
  void taskFailed(kj::Exception&& exception) override;

  std::unique_ptr<UnixListener> listener_;
  capnp::Capability::Client bootstrap_;
  ConnectionLimits limits_;
  LogSink log_;
  int connections_ = 0;
  // One task per connection: it owns the connection and completes when the
  // peer disconnects, which destroys the connection.
  kj::TaskSet tasks_;
};

// The actor's side: registers `actor` with the controller. Resolves (on the
// caller's event-loop thread) with the session, PermissionDenied for a
// wrong token, or Unavailable if the controller's connection drops.
kj::Promise<absl::StatusOr<wire::ActorSession::Client>> Register(wire::Controller::Client controller,
                                                                 int32_t actor_id,
                                                                 absl::string_view token,
                                                                 wire::Actor::Client actor);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_CONTROLLER_SERVICE_H_
