// ActorService's state calls (actor_service.h): staging held tensors,
// loading state from its sources, reading buffers piece by piece and saving
// the state to a file. actor_service.cc holds the rest of the service.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "actor/actor_service.h"
#include "ir/limits.h"
#include "ir/state_file.h"
#include "ir/state_source.h"
#include "rpc/capnp_text.h"
#include "rpc/state_codec.h"
#include "rpc/status_convert.h"

namespace tandem::actor {

using rpc::ToString;

namespace {

namespace wire = rpc::wire;

}  // namespace

kj::Promise<void> ActorService::stageState(StageStateContext context) {
  rpc::ThrowIfError(CheckOpen());
  wire::Actor::StageStateParams::Reader params = context.getParams();
  const std::string binding = ToString(params.getBinding());
  auto [it, inserted] = staged_.try_emplace(binding, absl::StrCat(Name(), ": staged state '", binding, "'"));
  rpc::ThrowIfError(it->second.Add(params.getPiece()));
  return kj::READY_NOW;
}

kj::Promise<void> ActorService::loadState(LoadStateContext context) {
  rpc::ThrowIfError(CheckOpen());
  rpc::ThrowIfError(CheckDeviceFits());
  // Whatever happens, the staged tensors are for this call alone.
  std::map<std::string, rpc::TensorAssembler> staged = std::exchange(staged_, {});
  absl::StatusOr<ir::StateSources> sources = rpc::DecodeStateSources(context.getParams().getSources(), "state");
  rpc::ThrowIfError(sources.status());
  for (auto& [binding, source] : *sources) {
    auto* held = std::get_if<ir::HostTensor>(&source.origin);
    if (held == nullptr) continue;
    auto it = staged.find(binding);
    if (it == staged.end()) {
      rpc::ThrowIfError(absl::FailedPreconditionError(
          absl::StrCat(Name(), ": state '", binding, "' was to be staged, but no piece of it arrived")));
    }
    absl::StatusOr<ir::HostTensor> tensor = it->second.Take();
    rpc::ThrowIfError(tensor.status());
    *held = *std::move(tensor);
  }
  return OnCompute([this, sources = *std::move(sources)]() mutable -> absl::Status {
           // Generated and read here, on the compute thread: state never
           // crosses the control plane whole.
           ir::TensorMap state;
           for (const auto& [binding, source] : sources) {
             absl::StatusOr<ir::HostTensor> tensor = ir::MaterializeState(binding, source);
             if (!tensor.ok()) {
               return absl::Status(tensor.status().code(), absl::StrCat(Name(), ": ", tensor.status().message()));
             }
             state[binding] = *std::move(tensor);
           }
           read_cache_ = {};
           absl::Status status = executor_ != nullptr ? executor_->LoadState(state) : absl::OkStatus();
           have_state_ = status.ok();
           if (!status.ok()) return status;
           KeepBesideExecutor(std::move(state));
           range_step_ = -1;
           absl::MutexLock lock(&mu_);
           health_ = Health::kIdle;
           last_error_.clear();
           return status;
         })
      .then([this] { needs_state_.clear(); });
}

kj::Promise<void> ActorService::readBuffer(ReadBufferContext context) {
  rpc::ThrowIfError(CheckOpen());
  wire::Actor::ReadBufferParams::Reader params = context.getParams();
  std::string name = ToString(params.getName());
  const uint64_t offset = params.getOffset();
  const uint64_t max_bytes = params.getMaxBytes();
  auto slot = std::make_shared<ir::HostTensor>();
  return OnCompute([this, name, offset, max_bytes, slot]() -> absl::Status {
           // A reader takes a tensor piece by piece from offset 0: the first
           // piece fetches it (a device-resident one is downloaded once), the
           // last lets it go.
           if (offset == 0 || read_cache_.first != name) {
             read_cache_ = {};
             absl::StatusOr<ir::HostTensor> tensor = CurrentBuffer(name);
             if (!tensor.ok()) return tensor.status();
             read_cache_ = {name, *std::move(tensor)};
           }
           *slot = read_cache_.second;
           if (offset + std::min<uint64_t>(max_bytes, ir::kStatePieceBytes) >= static_cast<uint64_t>(slot->num_bytes())) {
             read_cache_ = {};
           }
           return absl::OkStatus();
         })
      .then([context, slot, offset, max_bytes]() mutable {
        rpc::ThrowIfError(rpc::EncodeTensorPiece(*slot, offset, max_bytes, context.getResults().initPiece()));
      });
}

absl::Status ActorService::CheckDeviceFits() const {
  const std::optional<int64_t> free = options_.device->FreeBytes();
  if (!free.has_value()) return absl::OkStatus();
  int64_t needed = 0;
  for (const auto& [hash, program] : programs_) needed = std::max(needed, program->static_peak_bytes);
  if (needed <= *free) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      Name(), " does not fit its device: its program needs ", ir::FormatBytes(needed),
      " at its static peak (state included), and ", options_.device->name(), " has ", ir::FormatBytes(*free),
      " free. To fit, use more actors (each holds less of the model), fewer microbatches in flight, --remat stage, "
      "or let `tandem plan --memory-cap ", *free, "` choose a plan"));
}

absl::StatusOr<ir::HostTensor> ActorService::CurrentBuffer(const std::string& name) {
  if (executor_ != nullptr) return executor_->ReadBuffer(name);
  auto found = loaded_state_.find(name);
  if (found == loaded_state_.end() || !found->second.defined()) {
    return absl::NotFoundError(absl::StrCat(Name(), ": no state buffer bound to \"", name, "\""));
  }
  return found->second;
}

kj::Promise<void> ActorService::snapshotState(SnapshotStateContext context) {
  rpc::ThrowIfError(CheckOpen());
  std::string path = ToString(context.getParams().getPath());
  return OnCompute([this, path]() mutable -> absl::Status {
    absl::StatusOr<ir::TensorMap> state = executor_ != nullptr ? executor_->State() : loaded_state_;
    if (!state.ok()) return state.status();
    state_writer_.Write(std::move(path), *std::move(state));
    return absl::OkStatus();
  });
}

kj::Promise<void> ActorService::awaitState(AwaitStateContext context) {
  rpc::ThrowIfError(CheckOpen());
  const std::string path = ToString(context.getParams().getPath());
  auto reply = [context](const StateWriter::Outcome& outcome) mutable {
    rpc::ThrowIfError(outcome.status());
    context.getResults().setDone(true);
    context.getResults().setBytes(outcome->bytes);
    context.getResults().setChecksum(outcome->checksum.c_str());
  };
  if (!context.getParams().getWait()) {
    std::optional<StateWriter::Outcome> outcome = state_writer_.Poll(path);
    if (!outcome.has_value()) {
      context.getResults().setDone(false);
      return kj::READY_NOW;
    }
    reply(*outcome);
    return kj::READY_NOW;
  }
  // Fulfilled from the writer's thread (or here, when the write has ended);
  // the outcome is filled before (a non-trivial promise value trips GCC's
  // -Wmaybe-uninitialized).
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  struct Waiting {
    kj::Own<kj::CrossThreadPromiseFulfiller<void>> fulfiller;
    std::optional<StateWriter::Outcome> outcome;
  };
  auto waiting = std::make_shared<Waiting>();
  waiting->fulfiller = kj::mv(paf.fulfiller);
  state_writer_.WhenWritten(path, [waiting](const StateWriter::Outcome& outcome) {
    waiting->outcome = outcome;
    waiting->fulfiller->fulfill();
  });
  return paf.promise.then([waiting, reply]() mutable { reply(*waiting->outcome); });
}

}  // namespace tandem::actor
