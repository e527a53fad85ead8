#include "rpc/controller_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "rpc/async_status.h"
#include "rpc/status_convert.h"

namespace tandem::rpc {
namespace {

using SessionOr = absl::StatusOr<wire::ActorSession::Client>;

Bytes AsBytes(capnp::Data::Reader data) { return Bytes(data.begin(), data.size()); }

class ActorSessionImpl final : public wire::ActorSession::Server {
 public:
  explicit ActorSessionImpl(int32_t actor_id) : actor_id_(actor_id) {}

 protected:
  kj::Promise<void> actorId(ActorIdContext context) override {
    context.getResults().setActorId(actor_id_);
    return kj::READY_NOW;
  }

 private:
  int32_t actor_id_;
};

}  // namespace

absl::string_view RegistrationRefusalName(RegistrationRefusal refusal) {
  switch (refusal) {
    case RegistrationRefusal::kWrongProof:
      return "wrong proof";
    case RegistrationRefusal::kReplayedChallenge:
      return "replayed challenge";
    case RegistrationRefusal::kStaleChallenge:
      return "stale or unknown challenge";
    case RegistrationRefusal::kMalformed:
      return "malformed";
    case RegistrationRefusal::kRejected:
      return "bad or duplicate actor id";
  }
  return "?";
}

ControllerService::ControllerService(std::string token, int32_t num_actors, RegistrationHandler on_register,
                                     RefusalSink on_refusal, ChallengeBook::Options challenges)
    : token_(std::move(token)),
      num_actors_(num_actors),
      on_register_(std::move(on_register)),
      on_refusal_(std::move(on_refusal)),
      challenges_(challenges) {}

kj::Promise<void> ControllerService::Challenge(uint64_t owner, ChallengeContext context) {
  auto params = context.getParams();
  // The controller's own proof first: a malformed request gets no nonce.
  absl::StatusOr<Proof> proof = ProveController(token_, AsBytes(params.getNonce()), params.getActorId());
  if (!proof.ok()) {
    return ToKjException(absl::InvalidArgumentError(
        absl::StrCat("a challenge needs the actor's own nonce: ", proof.status().message())));
  }
  absl::StatusOr<Nonce> nonce = challenges_.Issue(owner);
  ThrowIfError(nonce.status());
  auto results = context.getResults();
  results.setNonce(capnp::Data::Reader(nonce->data(), nonce->size()));
  results.setProof(capnp::Data::Reader(proof->data(), proof->size()));
  return kj::READY_NOW;
}

kj::Promise<void> ControllerService::Refuse(RegistrationRefusal refusal, const absl::Status& status) {
  if (on_refusal_) on_refusal_(refusal, status.ToString());
  return ToKjException(status);
}

kj::Promise<void> ControllerService::Register(RegisterContext context) {
  auto params = context.getParams();
  const int32_t actor_id = params.getActorId();
  const Bytes nonce = AsBytes(params.getNonce());
  const Bytes proof = AsBytes(params.getProof());
  const std::string refused = absl::StrCat("registration of actor ", actor_id, " refused: ");
  if (nonce.size() != kNonceBytes || proof.size() != kProofBytes) {
    return Refuse(RegistrationRefusal::kMalformed,
                  absl::InvalidArgumentError(absl::StrCat(refused, "a challenge of ", nonce.size(),
                                                          " bytes and an answer of ", proof.size(), " bytes (want ",
                                                          kNonceBytes, " and ", kProofBytes, ")")));
  }
  // Used up whatever follows: each challenge is tried once.
  const ChallengeBook::Verdict verdict = challenges_.Redeem(nonce);
  if (verdict == ChallengeBook::Verdict::kReplayed) {
    return Refuse(RegistrationRefusal::kReplayedChallenge,
                  absl::PermissionDeniedError(absl::StrCat(refused, "it answers ", VerdictName(verdict))));
  }
  if (verdict != ChallengeBook::Verdict::kFresh) {
    return Refuse(RegistrationRefusal::kStaleChallenge,
                  absl::PermissionDeniedError(absl::StrCat(refused, "it answers ", VerdictName(verdict))));
  }
  if (absl::Status proven = CheckRegistration(token_, nonce, actor_id, proof); !proven.ok()) {
    return Refuse(RegistrationRefusal::kWrongProof,
                  absl::PermissionDeniedError(absl::StrCat(
                      refused, "wrong proof (its answer to the challenge was not made with the job's token)")));
  }
  const kj::StringPtr node = params.getNode();
  if (node.size() > kMaxNodeNameBytes) {
    return Refuse(RegistrationRefusal::kMalformed,
                  absl::InvalidArgumentError(absl::StrCat(refused, "a node name of ", node.size(), " bytes (at most ",
                                                          kMaxNodeNameBytes, ")")));
  }
  if (actor_id < 0 || actor_id >= num_actors_) {
    return Refuse(RegistrationRefusal::kRejected,
                  absl::InvalidArgumentError(
                      absl::StrCat(refused, "actor id ", actor_id, " is outside [0, ", num_actors_, ")")));
  }
  if (absl::Status status = on_register_(actor_id, absl::string_view(node.cStr(), node.size()), params.getActor()); !status.ok()) {
    return Refuse(RegistrationRefusal::kRejected, absl::Status(status.code(), absl::StrCat(refused, status.message())));
  }
  context.getResults().setSession(kj::heap<ActorSessionImpl>(actor_id));
  return kj::READY_NOW;
}

namespace {

// One connection's Controller capability: the job's ControllerService, with
// the connection as the owner of the challenges it asks for. Destroyed with
// the connection, which forgets them.
class ConnectionController final : public wire::Controller::Server {
 public:
  // `registered` is set once an actor registered over this connection.
  ConnectionController(ControllerService& service, uint64_t owner, std::shared_ptr<bool> registered)
      : service_(service), owner_(owner), registered_(std::move(registered)) {}
  ~ConnectionController() { service_.ForgetOwner(owner_); }

 protected:
  kj::Promise<void> challenge(ChallengeContext context) override { return service_.Challenge(owner_, kj::mv(context)); }
  kj::Promise<void> register_(RegisterContext context) override {
    return service_.Register(kj::mv(context)).then([registered = registered_]() { *registered = true; });
  }

 private:
  ControllerService& service_;
  const uint64_t owner_;
  std::shared_ptr<bool> registered_;
};

}  // namespace

ControlServer::ControlServer(std::unique_ptr<ControlListener> listener, kj::Own<ControllerService> service,
                             ConnectionLimits limits, LogSink log, kj::Timer& timer,
                             absl::Duration registration_timeout)
    : listener_(std::move(listener)),
      service_(kj::mv(service)),
      limits_(limits),
      log_(std::move(log)),
      timer_(timer),
      registration_timeout_(registration_timeout),
      tasks_(*this) {}

ControlServer::~ControlServer() = default;

kj::Promise<void> ControlServer::Run() {
  return listener_->Accept().then([this](ControlStream stream) {
    Serve(kj::mv(stream));
    return Run();
  });
}

void ControlServer::Serve(ControlStream stream) {
  // Secured on its own: a failed or abandoned handshake (a stranger) ends
  // in taskFailed, and other connections never wait for it.
  tasks_.add(listener_->Secure(kj::mv(stream)).then([this](ControlStream secured) {
    auto registered = std::make_shared<bool>(false);
    capnp::Capability::Client bootstrap = kj::heap<ConnectionController>(*service_, next_owner_++, registered);
    auto connection =
        kj::heap<RpcConnection>(kj::mv(secured), capnp::rpc::twoparty::Side::SERVER, kj::mv(bootstrap), limits_);
    ++connections_;
    // Ends the connection (dropping it closes the stream) unless an actor
    // registered over it in time.
    kj::Promise<void> unregistered =
        timer_.afterDelay(absl::ToInt64Milliseconds(registration_timeout_) * kj::MILLISECONDS)
            .then([this, registered]() -> kj::Promise<void> {
              if (*registered) return kj::NEVER_DONE;
              if (log_) {
                log_(absl::StrCat("control connection closed: no actor registered over it within ",
                                  absl::FormatDuration(registration_timeout_)));
              }
              return kj::READY_NOW;
            });
    kj::Promise<void> disconnected = connection->OnDisconnect().exclusiveJoin(kj::mv(unregistered));
    return disconnected.attach(kj::mv(connection), kj::defer([this]() {
      --connections_;
      if (log_) log_("control connection closed");
    }));
  }));
}

void ControlServer::taskFailed(kj::Exception&& exception) {
  if (log_) log_(FromKjException(exception).ToString());
}

namespace {

// The controller's challenge for actor `actor_id`, once the controller has
// proven the token (`token`) by answering a nonce of this actor's own.
kj::Promise<std::string> Challenge(wire::Controller::Client& controller, int32_t actor_id, std::string token) {
  absl::StatusOr<Nonce> ours = MakeNonce();
  if (!ours.ok()) {
    return ToKjException(absl::UnavailableError(absl::StrCat("cannot challenge the controller: ", ours.status().message())));
  }
  auto request = controller.challengeRequest();
  request.setActorId(actor_id);
  request.setNonce(capnp::Data::Reader(ours->data(), ours->size()));
  return request.send().then([actor_id, token = std::move(token), ours = *ours](
                                 capnp::Response<wire::Controller::ChallengeResults>&& response) -> kj::Promise<std::string> {
    const capnp::Data::Reader proof = response.getProof();
    if (absl::Status proven = CheckController(token, Bytes(ours.data(), ours.size()), actor_id,
                                              Bytes(proof.begin(), proof.size()));
        !proven.ok()) {
      return ToKjException(absl::PermissionDeniedError(absl::StrCat(
          "the controller did not prove it holds the job's token (", proven.message(),
          "): it is not this job's controller, so this actor does not register with it")));
    }
    const capnp::Data::Reader nonce = response.getNonce();
    return std::string(reinterpret_cast<const char*>(nonce.begin()), nonce.size());
  });
}

kj::Promise<wire::ActorSession::Client> Registration(wire::Controller::Client& controller, int32_t actor_id,
                                                     Bytes nonce, Bytes proof, wire::Actor::Client actor,
                                                     absl::string_view node = "") {
  auto request = controller.registerRequest();
  request.setActorId(actor_id);
  request.setNode(capnp::Text::Reader(node.data(), node.size()));
  request.setNonce(capnp::Data::Reader(nonce.data(), nonce.size()));
  request.setProof(capnp::Data::Reader(proof.data(), proof.size()));
  request.setActor(kj::mv(actor));
  return request.send().then(
      [](capnp::Response<wire::Controller::RegisterResults>&& response) { return response.getSession(); });
}

}  // namespace

kj::Promise<absl::StatusOr<std::string>> RequestChallenge(wire::Controller::Client controller, int32_t actor_id,
                                                          absl::string_view token) {
  return ToStatusOr(Challenge(controller, actor_id, std::string(token)));
}

kj::Promise<SessionOr> SendRegistration(wire::Controller::Client controller, int32_t actor_id, Bytes nonce,
                                        Bytes proof, wire::Actor::Client actor) {
  return ToStatusOr(Registration(controller, actor_id, nonce, proof, kj::mv(actor)));
}

kj::Promise<SessionOr> Register(wire::Controller::Client controller, int32_t actor_id, absl::string_view token,
                                wire::Actor::Client actor, absl::string_view node) {
  kj::Promise<wire::ActorSession::Client> registered = Challenge(controller, actor_id, std::string(token)).then(
      [controller, actor_id, token = std::string(token), actor = kj::mv(actor),
       node = std::string(node)](std::string nonce) mutable -> kj::Promise<wire::ActorSession::Client> {
        absl::StatusOr<Proof> proof = ProveRegistration(token, AsBytes(nonce), actor_id);
        if (!proof.ok()) {
          return ToKjException(absl::UnavailableError(
              absl::StrCat("cannot answer the controller's challenge: ", proof.status().message())));
        }
        return Registration(controller, actor_id, AsBytes(nonce), *proof, kj::mv(actor), node);
      });
  return ToStatusOr(kj::mv(registered));
}

}  // namespace tandem::rpc
