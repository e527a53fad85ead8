#include "rpc/controller_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "rpc/async_status.h"
#include "rpc/status_convert.h"

namespace tandem::rpc {
namespace {

// Compares without an early exit, so timing does not reveal a prefix.
bool TokensMatch(absl::string_view expected, absl::string_view given) {
  if (expected.empty() || expected.size() != given.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < given.size(); ++i) {
    difference |= static_cast<unsigned char>(given[i] ^ expected[i]);
  }
  return difference == 0;
}

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

ControllerService::ControllerService(std::string token, int32_t num_actors,
                                     RegistrationHandler on_register, LogSink log)
    : token_(std::move(token)),
      num_actors_(num_actors),
      on_register_(std::move(on_register)),
      log_(std::move(log)) {}

kj::Promise<void> ControllerService::register_(RegisterContext context) {
  auto params = context.getParams();
  int32_t actor_id = params.getActorId();
  kj::StringPtr token = params.getToken();
  absl::Status status;
  if (!TokensMatch(token_, absl::string_view(token.cStr(), token.size()))) {
    status = absl::PermissionDeniedError(
        absl::StrCat("registration of actor ", actor_id, " refused: wrong job token"));
  } else if (actor_id < 0 || actor_id >= num_actors_) {
    status = absl::InvalidArgumentError(absl::StrCat("registration refused: actor id ", actor_id,
                                                     " is outside [0, ", num_actors_, ")"));
  } else {
    status = on_register_(actor_id, params.getActor());
  }
  if (!status.ok()) {
    if (log_) log_(status.ToString());
    return ToKjException(status);
  }
  context.getResults().setSession(kj::heap<ActorSessionImpl>(actor_id));
  return kj::READY_NOW;
}

ControlServer::ControlServer(std::unique_ptr<UnixListener> listener,
                             capnp::Capability::Client bootstrap, ConnectionLimits limits,
                             LogSink log)
    : listener_(std::move(listener)),
      bootstrap_(kj::mv(bootstrap)),
      limits_(limits),
      log_(std::move(log)),
      tasks_(*this) {}

ControlServer::~ControlServer() = default;

kj::Promise<void> ControlServer::Run() {
  return listener_->Accept().then([this](kj::Own<kj::AsyncCapabilityStream> stream) {
    Serve(kj::mv(stream));
    return Run();
  });
}

void ControlServer::Serve(kj::Own<kj::AsyncCapabilityStream> stream) {
  auto connection = kj::heap<RpcConnection>(kj::mv(stream), capnp::rpc::twoparty::Side::SERVER,
                                            bootstrap_, limits_);
  ++connections_;
  kj::Promise<void> disconnected = connection->OnDisconnect();
  tasks_.add(disconnected.attach(kj::mv(connection), kj::defer([this]() {
    --connections_;
    if (log_) log_("control connection closed");
  })));
}

void ControlServer::taskFailed(kj::Exception&& exception) {
  if (log_) log_(FromKjException(exception).ToString());
}

kj::Promise<absl::StatusOr<wire::ActorSession::Client>> Register(wire::Controller::Client controller,
                                                                 int32_t actor_id,
                                                                 absl::string_view token,
                                                                 wire::Actor::Client actor) {
  auto request = controller.registerRequest();
  request.setActorId(actor_id);
  request.setToken(capnp::Text::Reader(token.data(), token.size()));
  request.setActor(kj::mv(actor));
  return ToStatusOr(request.send().then(
      [](capnp::Response<wire::Controller::RegisterResults>&& response) {
        return response.getSession();
      }));
}

}  // namespace tandem::rpc
