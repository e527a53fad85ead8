// The controller's side of registration: the bootstrap capability that
// actors call to join the job, and the server that accepts their
// connections on a control socket (Unix or TCP: rpc/connection.h).
//
// Registration is a challenge-response over the job's token (rpc/auth.h):
// the actor asks for a challenge, then registers with its answer. The token
// itself never crosses the control socket, whichever kind it is.
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
#include "absl/time/time.h"
#include "kj/async.h"
#include "kj/timer.h"
#include "rpc/auth.h"
#include "rpc/connection.h"
#include "rpc/tandem.capnp.h"

namespace tandem::rpc {

// Called for each registration whose proof holds, with the actor's
// capability; a non-OK status refuses it (e.g. AlreadyExists for a
// duplicate id).
// `node` is the host the actor says it runs on (empty on one host).
using RegistrationHandler =
    std::function<absl::Status(int32_t actor_id, absl::string_view node, wire::Actor::Client actor)>;

// The longest node name a registration may carry (a host name's limit).
inline constexpr size_t kMaxNodeNameBytes = 255;
// Receives one line per dropped connection or failed control task.
using LogSink = std::function<void(absl::string_view line)>;

// Why a registration was refused.
enum class RegistrationRefusal : uint8_t {
  kWrongProof,         // an answer not made with the job's token
  kReplayedChallenge,  // a challenge answered before
  kStaleChallenge,     // a challenge expired, never issued here, or forgotten
  kMalformed,          // a challenge or an answer of the wrong size
  kRejected,           // an actor id outside the job, or one registered already
};
// "wrong proof", "replayed challenge", ...
absl::string_view RegistrationRefusalName(RegistrationRefusal refusal);
// Receives every refused registration: why, and a line saying so.
using RefusalSink = std::function<void(RegistrationRefusal refusal, absl::string_view line)>;

// The Controller bootstrap capability. `challenge` issues a nonce from its
// ChallengeBook; `register` redeems it (once), checks the proof against the
// token (in constant time) and the actor id range, then hands the actor to
// `on_register`. Refusals fail the register call with PermissionDenied /
// InvalidArgument (or the handler's status) and go to `on_refusal`. A
// refused client disturbs nothing: other connections and sessions keep
// working. Shared by every control connection of the job.
//
// Cross-process calls: Controller.challenge and Controller.register,
// completed by this object on the controller's event-loop thread before
// they return; if the actor disconnects, its Actor capability's calls fail
// with Unavailable.
class ControllerService final : public wire::Controller::Server {
 public:
  ControllerService(std::string token, int32_t num_actors, RegistrationHandler on_register, RefusalSink on_refusal,
                    ChallengeBook::Options challenges = {});

  // What a connection's Controller capability does (ControlServer gives
  // each connection its own, as `owner`): challenges issued to `owner`
  // count against its bound alone (rpc/auth.h), and go when it does.
  kj::Promise<void> Challenge(uint64_t owner, ChallengeContext context);
  kj::Promise<void> Register(RegisterContext context);
  void ForgetOwner(uint64_t owner) { challenges_.Forget(owner); }

 protected:
  // Served directly (in-process, tests): one owner, 0.
  kj::Promise<void> challenge(ChallengeContext context) override { return Challenge(0, kj::mv(context)); }
  kj::Promise<void> register_(RegisterContext context) override { return Register(kj::mv(context)); }

 private:
  // Refuses: logs, counts and fails the call with `status`.
  kj::Promise<void> Refuse(RegistrationRefusal refusal, const absl::Status& status);

  std::string token_;
  int32_t num_actors_;
  RegistrationHandler on_register_;
  RefusalSink on_refusal_;
  ChallengeBook challenges_;
};

// Serves `bootstrap` (normally a ControllerService) to every connection
// accepted on `listener`; each connection lives until its peer disconnects
// or this object is destroyed (which drops them all). Owned by the
// controller's main; not thread-safe.
// How long a control connection may stay without registering an actor.
inline constexpr absl::Duration kRegistrationTimeout = absl::Seconds(10);

class ControlServer final : private kj::TaskSet::ErrorHandler {
 public:
  // Each connection's bootstrap is its own Controller capability over
  // `service` (ControllerService::Challenge with the connection as owner).
  // A connection that has not registered an actor within
  // `registration_timeout` of being secured is closed (and logged), so
  // idle strangers cannot hold connections open on a Unix socket any more
  // than on TCP, where TLS's handshake timeout already bounds them.
  ControlServer(std::unique_ptr<ControlListener> listener, kj::Own<ControllerService> service,
                ConnectionLimits limits, LogSink log, kj::Timer& timer,
                absl::Duration registration_timeout = kRegistrationTimeout);
  ~ControlServer();

  // Accepts connections until destroyed. The promise never resolves on its
  // own; drop it (or this object) to stop.
  kj::Promise<void> Run();

  int connections() const { return connections_; }
  const ControlListener& listener() const { return *listener_; }

 private:
  void Serve(ControlStream stream);
  void taskFailed(kj::Exception&& exception) override;

  std::unique_ptr<ControlListener> listener_;
  kj::Own<ControllerService> service_;  // outlives the connections (tasks_)
  ConnectionLimits limits_;
  LogSink log_;
  kj::Timer& timer_;
  absl::Duration registration_timeout_;
  int connections_ = 0;
  uint64_t next_owner_ = 1;
  // One task per connection: it owns the connection and completes when the
  // peer disconnects, which destroys the connection.
  kj::TaskSet tasks_;
};

// The actor's side: asks `controller` for a challenge, sending a nonce of
// its own that the controller must answer with `token` first (else
// PermissionDenied, and nothing is handed over), answers the challenge
// with `token` (which stays in this process) and registers `actor`,
// running on `node` (Slurm's node name; empty on one host). Resolves (on
// the caller's event-loop thread) with the session, PermissionDenied for a
// wrong token on either side, or Unavailable if the controller's
// connection drops.
kj::Promise<absl::StatusOr<wire::ActorSession::Client>> Register(wire::Controller::Client controller,
                                                                 int32_t actor_id,
                                                                 absl::string_view token,
                                                                 wire::Actor::Client actor,
                                                                 absl::string_view node = "");

// The two halves of Register, for tests that play a misbehaving actor: a
// challenge for actor `actor_id` from a controller that proves `token` (the
// challenge as it came: its size is not checked here), and a registration
// with any nonce and proof.
kj::Promise<absl::StatusOr<std::string>> RequestChallenge(wire::Controller::Client controller, int32_t actor_id,
                                                          absl::string_view token);
kj::Promise<absl::StatusOr<wire::ActorSession::Client>> SendRegistration(wire::Controller::Client controller,
                                                                         int32_t actor_id, Bytes nonce, Bytes proof,
                                                                         wire::Actor::Client actor);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_CONTROLLER_SERVICE_H_
