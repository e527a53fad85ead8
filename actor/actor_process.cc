#include "actor/actor_process.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actor/actor_service.h"
#include "actor/nccl/nccl_library.h"
#include "backends/cpu/kernels.h"
#include "backends/fake/fake_cuda_device.h"
#include "backends/open_device.h"
#include "ir/device_spec.h"
#include "ir/fault_point.h"
#include "ir/host_tensor.h"
#include "kj/async-io.h"
#include "kj/debug.h"
#include "rpc/async_status.h"
#include "rpc/connection.h"
#include "rpc/controller_service.h"

namespace tandem::actor {
namespace {

namespace wire = rpc::wire;

void Log(int32_t actor, absl::string_view text) {
  const std::string line = absl::StrCat("actor ", actor, ": ", text, "\n");
  fwrite(line.data(), 1, line.size(), stderr);
  fflush(stderr);
}

// Ends the process with `code` unless Disarm() is called within `grace`:
// the bound on unwinding after the controller is gone (a kernel that is
// still computing finishes its op before the compute thread can stop).
class ExitWatchdog {
 public:
  ExitWatchdog(absl::Duration grace, int code)
      : thread_([this, grace, code] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(grace), [this] { return disarmed_; })) {
            std::fflush(stderr);
            std::_Exit(code);
          }
        }) {}
  ~ExitWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      disarmed_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread thread_;
};

enum class Ending { kShutdown, kDisconnected, kControllerSilent };

// Resolves once `service` has had no call from the controller for
// `timeout` (heartbeats come every fraction of a second while it runs).
kj::Promise<void> ControllerFallsSilent(kj::Timer& timer, const ActorService& service, absl::Duration timeout) {
  const absl::Duration look = std::clamp(timeout / 4, absl::Milliseconds(50), absl::Seconds(1));
  return timer.afterDelay(absl::ToInt64Milliseconds(look) * kj::MILLISECONDS).then([&timer, &service, timeout]() {
    if (absl::Now() - service.last_call() >= timeout) return kj::Promise<void>(kj::READY_NOW);
    return ControllerFallsSilent(timer, service, timeout);
  });
}

}  // namespace

int RunActorProcess(const ActorProcessOptions& options) {
  const int32_t actor = options.actor;
  if (options.num_actors <= 0 || actor < 0 || actor >= options.num_actors) {
    Log(actor, absl::StrCat("actor id ", actor, " is outside [0, ", options.num_actors, ")"));
    return kActorExitSetupFailed;
  }
  if (options.token.empty()) {
    Log(actor, "no job token given (the launcher sets TANDEM_JOB_TOKEN)");
    return kActorExitSetupFailed;
  }
  // One BLAS thread: the bits of matmul depend on OpenBLAS's thread count,
  // and the reference runs with one; the actors of a host share its cores.
  cpu::SetBlasThreads(1);
  // An actor computes the same step again and again: its tensors' storage
  // is reused instead of faulting in fresh pages every step.
  ir::SetStorageCacheBytes(ir::kComputeStorageCacheBytes);
  backends::OpenDeviceOptions device_options;
  device_options.wait_timeout = options.receive_timeout;
  device_options.fault = ir::FaultSetting();
  device_options.local_rank = options.local_rank;
  absl::StatusOr<std::shared_ptr<backends::Device>> device =
      backends::OpenDevice(options.device, actor, device_options);
  if (!device.ok()) {
    Log(actor, absl::StrCat("cannot open its device: ", device.status().ToString()));
    return kActorExitSetupFailed;
  }
  absl::StatusOr<fake::FakeCudaFaults> faults = fake::ParseFakeCudaFaults(device_options.fault, actor);
  absl::StatusOr<std::unique_ptr<nccl::NcclLibrary>> nccl = nccl::NcclLibraryFor(**device);
  if (!nccl.ok()) {
    Log(actor, absl::StrCat("cannot open NCCL for its device: ", nccl.status().ToString()));
    return kActorExitSetupFailed;
  }
  DataPlaneOptions data_plane_options = options.data_plane_options;
  data_plane_options.token = options.token;
  data_plane_options.device_memory = (*device)->memory();
  data_plane_options.nccl = nccl->get();
  if (options.device.kind == ir::DeviceSpec::Kind::kFakeCuda && faults.ok()) {
    data_plane_options.die_at_device_send = faults->die_at_send;
  }
  data_plane_options.log = [](absl::string_view line) {  // lines that name the actor already
    const std::string text = absl::StrCat(line, "\n");
    fwrite(text.data(), 1, text.size(), stderr);
    fflush(stderr);
  };
  absl::StatusOr<std::unique_ptr<DataPlane>> data_plane =
      CreateDataPlane(options.data_plane, actor, options.num_actors, data_plane_options);
  if (!data_plane.ok()) {
    Log(actor, absl::StrCat("cannot create the ", ir::DataPlaneKindName(options.data_plane),
                            " data plane: ", data_plane.status().ToString()));
    return kActorExitSetupFailed;
  }

  Ending ending = Ending::kShutdown;
  std::optional<ExitWatchdog> watchdog;  // outlives the scope it guards
  {
    kj::AsyncIoContext io = kj::setupAsyncIo();
    absl::StatusOr<rpc::ControlStream> stream =
        rpc::ToStatusOr(
            rpc::DialController(io, options.control_plane, options.controller_address, options.register_timeout,
                                options.controller_certificate))
            .wait(io.waitScope);
    if (!stream.ok()) {
      // PermissionDenied: what answered is not the job's controller (TLS).
      const bool refused = stream.status().code() == absl::StatusCode::kPermissionDenied;
      Log(actor, absl::StrCat(refused ? "refused the controller: " : "cannot reach the controller: ",
                              stream.status().ToString()));
      return refused ? kActorExitRefused : kActorExitSetupFailed;
    }
    rpc::RpcConnection connection(*std::move(stream), capnp::rpc::twoparty::Side::CLIENT, nullptr,
                                  rpc::ConnectionLimits{});
    auto shutdown = kj::newPromiseAndFulfiller<void>();
    ActorServiceOptions service_options;
    service_options.receive_timeout = options.receive_timeout;
    service_options.device = *device;
    service_options.threads = options.threads;
    // Replica groups and the data plane listen on the same interface.
    service_options.collective_host = options.data_plane_options.tcp_bind_host;
    service_options.token = options.token;
    service_options.regions_by_path = options.control_plane == rpc::ControlPlaneKind::kTcp;
    kj::Own<ActorService> own_service = kj::heap<ActorService>(**data_plane, service_options, kj::mv(shutdown.fulfiller));
    const ActorService& served = *own_service;  // kept alive by `service` until this scope ends
    wire::Actor::Client service = kj::mv(own_service);

    kj::Timer& timer = io.provider->getTimer();
    absl::StatusOr<wire::ActorSession::Client> session =
        rpc::Register(connection.Bootstrap<wire::Controller>(), actor, options.token, service, options.node)
            .exclusiveJoin(timer.afterDelay(absl::ToInt64Milliseconds(options.register_timeout) * kj::MILLISECONDS)
                               .then([]() -> absl::StatusOr<wire::ActorSession::Client> {
                                 return absl::DeadlineExceededError("the controller did not answer registration");
                               }))
            .wait(io.waitScope);
    if (!session.ok()) {
      Log(actor, absl::StrCat("registration failed: ", session.status().ToString()));
      return session.status().code() == absl::StatusCode::kPermissionDenied ||
                     session.status().code() == absl::StatusCode::kInvalidArgument
                 ? kActorExitRefused
                 : kActorExitSetupFailed;
    }

    ending = shutdown.promise.then([] { return Ending::kShutdown; })
                 .exclusiveJoin(connection.OnDisconnect().then([] { return Ending::kDisconnected; }))
                 .exclusiveJoin(ControllerFallsSilent(timer, served, options.controller_timeout).then([] {
                   return Ending::kControllerSilent;
                 }))
                 .wait(io.waitScope);
    if (ending == Ending::kShutdown) {
      // Let the loop write the shutdown reply before the connection goes.
      timer.afterDelay(50 * kj::MILLISECONDS).wait(io.waitScope);
    } else {
      const std::string why =
          ending == Ending::kDisconnected
              ? "the controller's connection dropped"
              : absl::StrCat("the controller has sent nothing, not even a heartbeat, for ",
                             absl::FormatDuration(options.controller_timeout),
                             " (it was stopped, e.g. by SIGSTOP, or its host is lost)");
      Log(actor, absl::StrCat(why, "; exiting"));
      (*data_plane)->transport().Abort(absl::UnavailableError(absl::StrCat("actor ", actor, ": ", why)));
    }
    watchdog.emplace(options.exit_grace,
                     ending == Ending::kShutdown ? kActorExitOk : kActorExitControllerLost);
    // Leaving this scope drops the session, the service (joining its compute
    // thread) and the connection, on the loop thread that owns them.
  }
  return ending == Ending::kShutdown ? kActorExitOk : kActorExitControllerLost;
}

}  // namespace tandem::actor
