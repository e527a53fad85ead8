#include "controller/launcher_loop.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rpc/status_convert.h"

namespace tandem::controller {

namespace wire = rpc::wire;

CallBoard::CallBoard(int32_t num_actors) {
  absl::MutexLock lock(&mu);
  registered.assign(num_actors, false);
  nodes.assign(num_actors, "");
  last_heard.assign(num_actors, absl::InfinitePast());
  done.assign(num_actors, std::nullopt);
  data_plane_refused.assign(num_actors, 0);
  last_tick = absl::Now();
}

void CallBoard::Refused(rpc::RegistrationRefusal refusal) {
  absl::MutexLock lock(&mu);
  switch (refusal) {
    case rpc::RegistrationRefusal::kWrongProof:
      ++refused.wrong_proof;
      break;
    case rpc::RegistrationRefusal::kReplayedChallenge:
      ++refused.replayed_challenge;
      break;
    case rpc::RegistrationRefusal::kStaleChallenge:
      ++refused.stale_challenge;
      break;
    case rpc::RegistrationRefusal::kMalformed:
      ++refused.malformed;
      break;
    case rpc::RegistrationRefusal::kRejected:
      ++refused.rejected;
      break;
  }
}

RefusalCounts CallBoard::Refusals() {
  absl::MutexLock lock(&mu);
  RefusalCounts counts = refused;
  counts.data_plane = 0;
  for (int64_t count : data_plane_refused) counts.data_plane += count;
  return counts;
}

void CallBoard::Done(int32_t actor, absl::Status status) {
  absl::MutexLock lock(&mu);
  last_heard[actor] = absl::Now();
  if (!done[actor].has_value()) done[actor] = std::move(status);
  changed.SignalAll();
}

LauncherLoop::LauncherLoop(kj::AsyncIoContext& io, CallBoard& board, int32_t num_actors,
                           absl::Duration heartbeat_interval)
    : io(io),
      executor(kj::getCurrentThreadExecutor()),
      tasks(*this),
      tcp_addresses(num_actors),
      regions(num_actors),
      region_paths(num_actors),
      replica_offers(num_actors),
      hashes(num_actors, 0),
      results(num_actors),
      calls(num_actors, 0),
      board_(board),
      actors_(num_actors),
      health_outstanding_(num_actors, false),
      heartbeat_interval_(absl::ToInt64Milliseconds(heartbeat_interval) * kj::MILLISECONDS) {}

absl::StatusOr<std::string> LauncherLoop::Serve(rpc::ControlPlaneKind kind, const std::string& listen_on,
                                                const std::string& token, const rpc::ControllerIdentity& identity,
                                                const rpc::ConnectionLimits& limits,
                                                std::function<void(absl::string_view)> log) {
  std::unique_ptr<rpc::ControlListener> listener;
  if (kind == rpc::ControlPlaneKind::kUnix) {
    absl::StatusOr<std::unique_ptr<rpc::UnixListener>> unix_listener = rpc::UnixListener::Listen(io, listen_on);
    if (!unix_listener.ok()) return unix_listener.status();
    listener = *std::move(unix_listener);
  } else {
    absl::StatusOr<std::shared_ptr<kj::TlsContext>> tls =
        rpc::ControllerTls(identity, io.provider->getTimer(), rpc::kTlsHandshakeTimeout);
    if (!tls.ok()) return tls.status();
    absl::StatusOr<std::unique_ptr<rpc::TcpListener>> tcp_listener =
        rpc::TcpListener::Listen(io, listen_on, *std::move(tls));
    if (!tcp_listener.ok()) return tcp_listener.status();
    listener = *std::move(tcp_listener);
  }
  std::string address = listener->address();
  auto on_register = [this](int32_t actor, absl::string_view node, wire::Actor::Client client) {
    return Register(actor, node, kj::mv(client));
  };
  // Anyone who can reach the socket can cause these notices.
  notices_ = std::make_unique<rpc::RateLimitedLog>(std::move(log), "control plane");
  auto on_refusal = [this](rpc::RegistrationRefusal refusal, absl::string_view line) {
    board_.Refused(refusal);
    notices_->Log(line);
  };
  auto on_connection_event = [this](absl::string_view line) {
    bool quiet;
    {
      absl::MutexLock lock(&board_.mu);
      quiet = board_.shutting_down;
    }
    if (!quiet) notices_->Log(absl::StrCat("control plane: ", line));
  };
  server_ = std::make_unique<rpc::ControlServer>(
      std::move(listener),
      kj::heap<rpc::ControllerService>(token, static_cast<int32_t>(actors_.size()), on_register, on_refusal), limits,
      on_connection_event, io.provider->getTimer());
  {
    absl::MutexLock lock(&board_.mu);
    board_.last_tick = absl::Now();
  }
  tasks.add(Heartbeat());
  return address;
}

void LauncherLoop::RunUntil(kj::Promise<void> stop_promise) {
  stop_promise.exclusiveJoin(server_->Run()).wait(io.waitScope);
}

absl::Status LauncherLoop::Register(int32_t actor, absl::string_view node, wire::Actor::Client client) {
  if (actors_[actor].get() != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("actor ", actor, " is registered already"));
  }
  actors_[actor] = kj::heap<wire::Actor::Client>(kj::mv(client));
  absl::MutexLock lock(&board_.mu);
  board_.registered[actor] = true;
  board_.nodes[actor] = std::string(node);
  board_.last_heard[actor] = absl::Now();
  board_.changed.SignalAll();
  return absl::OkStatus();
}

void LauncherLoop::Track(int32_t actor, kj::Promise<void> call) {
  tasks.add(canceler_.wrap(kj::mv(call))
                .then([this, actor]() { board_.Done(actor, absl::OkStatus()); },
                      [this, actor](kj::Exception&& exception) {
                        board_.Done(actor, rpc::FromKjException(exception));
                      }));
}

void LauncherLoop::CancelCalls(absl::string_view reason) {
  canceler_.cancel(kj::heapString(reason.data(), reason.size()));
}

kj::Promise<void> LauncherLoop::Heartbeat() {
  return io.provider->getTimer().afterDelay(heartbeat_interval_).then([this]() {
    {
      absl::MutexLock lock(&board_.mu);
      const absl::Time now = absl::Now();
      const absl::Duration since = now - board_.last_tick;
      if (since > ControllerPauseAfter(absl::Milliseconds(heartbeat_interval_ / kj::MILLISECONDS))) {
        board_.loop_resumed = now;
        board_.loop_pause = since;
      }
      board_.last_tick = now;
    }
    if (notices_ != nullptr) notices_->Tick();
    for (int32_t actor = 0; actor < static_cast<int32_t>(actors_.size()); ++actor) {
      if (actors_[actor].get() == nullptr || health_outstanding_[actor]) continue;
      health_outstanding_[actor] = true;
      tasks.add(Health(actor).then([this, actor]() { health_outstanding_[actor] = false; },
                                   [this, actor](kj::Exception&&) { health_outstanding_[actor] = false; }));
    }
    return Heartbeat();
  });
}

kj::Promise<void> LauncherLoop::Health(int32_t actor) {
  return actors_[actor]->healthRequest().send().then([this, actor](auto&& reply) {
    const auto refused = static_cast<int64_t>(std::min<uint64_t>(reply.getRefusedConnections(), INT64_MAX));
    absl::MutexLock lock(&board_.mu);
    board_.last_heard[actor] = absl::Now();
    board_.data_plane_refused[actor] = std::max(board_.data_plane_refused[actor], refused);
  });
}

void LauncherLoop::taskFailed(kj::Exception&& exception) {
  // Track() and Heartbeat() handle their own errors; only cancellation
  // reaches here.
  (void)exception;
}

}  // namespace tandem::controller
