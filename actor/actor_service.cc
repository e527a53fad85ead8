#include "actor/actor_service.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/errno_status.h"
#include "ir/fault_point.h"
#include "ir/limits.h"
#include "kj/vector.h"
#include "rpc/capnp_text.h"
#include "rpc/program_codec.h"
#include "rpc/status_convert.h"
#include "rpc/step_codec.h"

namespace tandem::actor {

using rpc::ToString;

namespace {

namespace wire = rpc::wire;

// Opens a peer's ring from its path (RegionPath, actor/data_plane.h), which must be
// /proc/PID/fd/FD: InvalidArgument for anything else, Unavailable with the
// OS's reason when it cannot be opened (the peer is on another host, or
// gone).
absl::StatusOr<int> OpenRegionPath(const std::string& path) {
  int pid = 0;
  int fd = 0;
  char rest = 0;
  if (path.size() > 64 || std::sscanf(path.c_str(), "/proc/%d/fd/%d%c", &pid, &fd, &rest) != 2 || pid <= 0 ||
      fd < 0 || path != RegionPath(pid, fd)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path.substr(0, 64), "' is not a ring's path (/proc/PID/fd/FD)"));
  }
  const int opened = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (opened < 0) return ir::ErrnoStatus(absl::StatusCode::kUnavailable, absl::StrCat("cannot open ", path));
  return opened;
}

std::string HashString(uint64_t hash) { return absl::StrFormat("%016x", hash); }

}  // namespace

// The SharedRegion capability of one outbound ring: Cap'n Proto attaches its
// descriptor (owned by the DataPlane) to every message that carries it.
class RegionServer final : public wire::SharedRegion::Server {
 public:
  explicit RegionServer(int fd) : fd_(fd) {}
  kj::Maybe<int> getFd() override { return fd_; }

 private:
  int fd_;
};

ActorService::ActorService(Transport& transport, ActorServiceOptions options,
                           kj::Own<kj::PromiseFulfiller<void>> on_shutdown)
    : ActorService(transport, nullptr, options, kj::mv(on_shutdown)) {}

ActorService::ActorService(DataPlane& data_plane, ActorServiceOptions options,
                           kj::Own<kj::PromiseFulfiller<void>> on_shutdown)
    : ActorService(data_plane.transport(), &data_plane, options, kj::mv(on_shutdown)) {}

ActorService::ActorService(Transport& transport, DataPlane* data_plane, ActorServiceOptions options,
                           kj::Own<kj::PromiseFulfiller<void>> on_shutdown)
    : transport_(transport),
      data_plane_(data_plane),
      options_(options),
      on_shutdown_(kj::mv(on_shutdown)),
      tasks_(*this),
      needs_state_("no state loaded yet"),
      kernel_threads_(options.threads),
      state_writer_(absl::StrCat("actor ", transport.actor())),
      compute_thread_([this] { ComputeLoop(); }) {}

ActorService::~ActorService() {
  bool running = false;
  std::deque<Job> dropped;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    running = health_ == Health::kRunning;
    dropped.swap(jobs_);
    work_available_.SignalAll();
  }
  if (running) transport_.Abort(absl::AbortedError(absl::StrCat(Name(), " stopped during a step")));
  compute_thread_.join();
  // `dropped` goes now, on the loop thread: its calls' promises reject.
}

std::string ActorService::Name() const { return absl::StrCat("actor ", transport_.actor()); }

kj::Promise<void> ActorService::OnCompute(kj::Function<absl::Status()> work) {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  Post([work = kj::mv(work), fulfiller = kj::mv(paf.fulfiller)]() mutable {
    absl::Status status = work();
    if (status.ok()) {
      fulfiller->fulfill();
    } else {
      fulfiller->reject(rpc::ToKjException(status));
    }
  });
  return kj::mv(paf.promise);
}

void ActorService::Post(Job job) {
  absl::MutexLock lock(&mu_);
  jobs_.push_back(kj::mv(job));
  work_available_.Signal();
}

void ActorService::ComputeLoop() {
  while (true) {
    std::optional<Job> job;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && jobs_.empty()) work_available_.Wait(&mu_);
      if (stop_) return;
      job.emplace(kj::mv(jobs_.front()));
      jobs_.pop_front();
    }
    kernel_threads_.Run([&job] { (*job)(); });
  }
}

void ActorService::taskFailed(kj::Exception&& exception) {
  // Only the shutdown notification runs as a task; it cannot fail.
  (void)exception;
}

bool ActorService::BeginRunning() {
  absl::MutexLock lock(&mu_);
  if (stop_) return false;
  health_ = Health::kRunning;
  return true;
}

void ActorService::EndRunning(const absl::Status& status) {
  if (!status.ok()) {
    // Peers waiting on this actor stop now instead of at their deadlines.
    transport_.Abort(absl::AbortedError(absl::StrCat(Name(), " failed: ", status.message())));
    if (reducer_ != nullptr) reducer_->Abort(absl::AbortedError(absl::StrCat(Name(), " failed: ", status.message())));
  }
  absl::MutexLock lock(&mu_);
  health_ = status.ok() ? Health::kIdle : Health::kFailed;
  if (!status.ok()) last_error_ = status.ToString();
}

absl::Status ActorService::CheckOpen() const {
  if (shutting_down_) return absl::FailedPreconditionError(absl::StrCat(Name(), " is shutting down"));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ir::ActorProgram>> ActorService::ProgramForStep(uint64_t step,
                                                                                     uint64_t hash) {
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  if (data_plane_ != nullptr && data_plane_setup_ != DataPlaneSetup::kConnected) {
    return absl::FailedPreconditionError(absl::StrCat(
        Name(), ": step ", step, " refused: the data plane is not connected (call connectDataPlane first)"));
  }
  if (step_pending_) {
    return absl::FailedPreconditionError(
        absl::StrCat(Name(), ": step ", step, " refused: another step call is still running"));
  }
  auto found = programs_.find(hash);
  if (found == programs_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(Name(), ": step ", step, ": no program loaded under hash ",
                                                      HashString(hash), " (call loadProgram first)"));
  }
  if (!needs_state_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Name(), ": step ", step, " refused until loadState: ", needs_state_));
  }
  return found->second;
}

kj::Promise<void> ActorService::TrackStep(uint64_t step, kj::Promise<void> done) {
  step_pending_ = true;
  auto answered = std::make_shared<bool>(false);
  return done
      .then([answered]() { *answered = true; },
          [this, step, answered](kj::Exception&& exception) {
            *answered = true;
            needs_state_ =
                absl::StrCat("step ", step, " failed: ", rpc::FromKjException(exception).message());
            kj::throwFatalException(kj::mv(exception));
          })
      .attach(kj::defer([this, step, answered] {
        step_pending_ = false;
        if (!*answered && needs_state_.empty()) {
          needs_state_ = absl::StrCat("step ", step, " was abandoned before its result was delivered");
        }
      }));
}

absl::Status ActorService::UseProgram(uint64_t hash, const std::shared_ptr<const ir::ActorProgram>& program) {
  if (executor_ != nullptr && executor_hash_ == hash) return absl::OkStatus();
  if (!have_state_) return absl::FailedPreconditionError(absl::StrCat(Name(), ": no state loaded"));
  // The new program takes over the current state: what was loaded, updated
  // by the steps the previous program ran.
  absl::StatusOr<ir::TensorMap> state = CurrentState();
  if (!state.ok()) return state.status();
  absl::StatusOr<int32_t> replica = ir::ReplicaOf(*program, transport_.actor());
  if (!replica.ok()) return replica.status();
  absl::StatusOr<std::unique_ptr<Executor>> executor = Executor::Create(*program, options_.device, *replica);
  if (!executor.ok()) return executor.status();
  if (absl::Status status = (*executor)->LoadState(*state); !status.ok()) return status;
  (*executor)->UseReducer(reducer_.get());
  executor_ = *std::move(executor);
  executor_hash_ = hash;
  KeepBesideExecutor(*std::move(state));
  return absl::OkStatus();
}

absl::StatusOr<ir::TensorMap> ActorService::CurrentState() const {
  ir::TensorMap state = loaded_state_;
  if (executor_ != nullptr) {
    absl::StatusOr<ir::TensorMap> current = executor_->State();
    if (!current.ok()) return current.status();
    for (auto& [name, tensor] : *current) {
      if (tensor.defined()) state[name] = std::move(tensor);
    }
  }
  return state;
}

void ActorService::KeepBesideExecutor(ir::TensorMap state) {
  if (executor_ != nullptr) {
    std::erase_if(state, [this](const auto& entry) { return executor_->HoldsState(entry.first); });
  }
  loaded_state_ = std::move(state);
}

kj::Promise<void> ActorService::loadProgram(LoadProgramContext context) {
  rpc::ThrowIfError(CheckOpen());
  wire::Actor::LoadProgramParams::Reader params = context.getParams();
  const uint64_t hash = params.getHash();
  if (programs_.contains(hash)) return kj::READY_NOW;
  absl::StatusOr<ir::ActorProgram> program = rpc::DecodeProgram(params.getProgram(), hash);
  rpc::ThrowIfError(program.status());
  if (absl::StatusOr<int32_t> replica = ir::ReplicaOf(*program, transport_.actor()); !replica.ok()) {
    rpc::ThrowIfError(absl::InvalidArgumentError(
        absl::StrCat(Name(), ": program ", HashString(hash), " ", replica.status().message())));
  }
  programs_.emplace(hash, std::make_shared<const ir::ActorProgram>(*std::move(program)));
  return kj::READY_NOW;
}

kj::Promise<void> ActorService::runStep(RunStepContext context) {
  // A call the controller drops (or loses with its connection) is cancelled
  // here; TrackStep then requires loadState. The compute job runs on.
  context.allowCancellation();
  wire::Actor::RunStepParams::Reader params = context.getParams();
  const uint64_t step = params.getStepId();
  const uint64_t hash = params.getProgramHash();
  absl::StatusOr<std::shared_ptr<const ir::ActorProgram>> program = ProgramForStep(step, hash);
  rpc::ThrowIfError(program.status());
  absl::StatusOr<ir::StepInputs> inputs = rpc::DecodeStepInputs(params.getInputs(), "input");
  rpc::ThrowIfError(inputs.status());

  // The compute thread fills `reply` before it fulfils the promise (a
  // non-trivial promise value trips GCC's -Wmaybe-uninitialized).
  auto reply = std::make_shared<StepReply>();
  kj::Promise<void> done = OnCompute(
      [this, step, hash, reply, program = *std::move(program), inputs = *std::move(inputs)]() mutable {
        if (!BeginRunning()) return absl::AbortedError(absl::StrCat(Name(), " is shutting down"));
        ir::FaultOnceAtStep(transport_.actor(), static_cast<int64_t>(step));  // TANDEM_FAULT, tests only
        absl::Status status = UseProgram(hash, program);
        if (status.ok()) {
          absl::StatusOr<ir::StepOutputs> outputs =
              executor_->RunStep(static_cast<int64_t>(step), inputs, transport_, options_.receive_timeout);
          status = outputs.status();
          if (outputs.ok()) reply->outputs = *std::move(outputs);
        }
        EndRunning(status);
        reply->finished = status.ok();
        return status;
      });
  return TrackStep(step, kj::mv(done)).then([context, reply]() mutable {
    rpc::EncodeStepOutputs(reply->outputs, context.getResults());
  });
}

kj::Promise<void> ActorService::runRange(RunRangeContext context) {
  context.allowCancellation();  // as in runStep
  wire::Actor::RunRangeParams::Reader params = context.getParams();
  const uint64_t step = params.getStepId();
  const uint64_t hash = params.getProgramHash();
  const int32_t begin = params.getBegin();
  const int32_t end = params.getEnd();
  absl::StatusOr<std::shared_ptr<const ir::ActorProgram>> program = ProgramForStep(step, hash);
  rpc::ThrowIfError(program.status());
  const auto size = static_cast<int32_t>((*program)->instructions.size());
  if (begin < 0 || begin > end || end > size) {
    rpc::ThrowIfError(absl::InvalidArgumentError(absl::StrCat(Name(), ": step ", step, ": range [", begin, ", ",
                                                              end, ") is not within [0, ", size, ")")));
  }
  absl::StatusOr<ir::StepInputs> inputs = rpc::DecodeStepInputs(params.getInputs(), "input");
  rpc::ThrowIfError(inputs.status());

  auto reply = std::make_shared<StepReply>();
  kj::Promise<void> done = OnCompute(
      [this, step, hash, begin, end, size, reply, program = *std::move(program),
       inputs = *std::move(inputs)]() mutable {
        if (!BeginRunning()) return absl::AbortedError(absl::StrCat(Name(), " is shutting down"));
        absl::Status status;
        if (begin == 0) {
          status = UseProgram(hash, program);
          if (status.ok()) status = executor_->BeginStep(static_cast<int64_t>(step), inputs);
          if (status.ok()) range_step_ = static_cast<int64_t>(step);
        } else if (executor_ == nullptr || executor_hash_ != hash || range_step_ != static_cast<int64_t>(step)) {
          status = absl::FailedPreconditionError(absl::StrCat(
              Name(), ": step ", step, ": range [", begin, ", ", end, ") does not continue a step of program ",
              HashString(hash), " (the first range of a step begins at 0)"));
        }
        if (status.ok()) status = executor_->RunRange(begin, end, transport_, options_.receive_timeout);
        if (status.ok() && end == size) {
          // As Executor::RunStep: nothing of this step stays held into the next.
          status = transport_.SettleDeviceSends(absl::Now() + options_.receive_timeout);
        }
        if (status.ok() && end == size) {
          absl::StatusOr<ir::StepOutputs> outputs = executor_->FinishStep();
          status = outputs.status();
          if (outputs.ok()) reply->outputs = *std::move(outputs);
          reply->finished = status.ok();
        }
        if (!status.ok() || reply->finished) range_step_ = -1;
        EndRunning(status);
        return status;
      });
  return TrackStep(step, kj::mv(done)).then([context, reply]() mutable {
    if (reply->finished) rpc::EncodeStepOutputs(reply->outputs, context.getResults());
  });
}

ActorService::DispatchCallResult ActorService::dispatchCall(
    uint64_t interface_id, uint16_t method_id, capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer> context) {
  last_call_ = absl::Now();
  return rpc::wire::Actor::Server::dispatchCall(interface_id, method_id, context);
}

kj::Promise<void> ActorService::health(HealthContext context) {
  wire::Actor::HealthResults::Builder results = context.getResults();
  absl::MutexLock lock(&mu_);
  switch (health_) {
    case Health::kIdle:
      results.setState(wire::HealthState::IDLE);
      break;
    case Health::kRunning:
      results.setState(wire::HealthState::RUNNING);
      break;
    case Health::kFailed:
      results.setState(wire::HealthState::FAILED);
      break;
  }
  results.setMessage(last_error_);
  int64_t refused = data_plane_ != nullptr ? data_plane_->refused_connections() : 0;
  // reducer_ is set on the compute thread before kConnected is, here.
  if (group_setup_ == GroupSetup::kConnected) refused += reducer_->group().refused_connections();
  results.setRefusedConnections(static_cast<uint64_t>(std::max<int64_t>(refused, 0)));
  return kj::READY_NOW;
}

kj::Promise<void> ActorService::openReplicaGroup(OpenReplicaGroupContext context) {
  rpc::ThrowIfError(CheckOpen());
  if (group_setup_ != GroupSetup::kNone) {
    rpc::ThrowIfError(absl::FailedPreconditionError(absl::StrCat(Name(), ": the replica group was opened already")));
  }
  capnp::List<int32_t>::Reader members = context.getParams().getGroup();
  if (members.size() < 2 || members.size() > static_cast<uint32_t>(ir::kMaxReplicas)) {
    rpc::ThrowIfError(absl::InvalidArgumentError(absl::StrCat(Name(), ": a replica group of ", members.size(),
                                                              " actors; it has 2 to ", ir::kMaxReplicas)));
  }
  std::vector<int32_t> group;
  for (int32_t actor : members) group.push_back(actor);
  const auto me = std::find(group.begin(), group.end(), transport_.actor());
  if (me == group.end()) {
    rpc::ThrowIfError(absl::InvalidArgumentError(
        absl::StrCat(Name(), ": asked to join ", DescribeGroup(group), ", which does not include it")));
  }
  const auto rank = static_cast<int32_t>(me - group.begin());
  // (A device-resident actor joins too, and reduces on its device over the
  // data plane instead: actor/device_all_reduce.h.)
  absl::StatusOr<std::unique_ptr<ReplicaGroupOpening>> opened = ReplicaGroupOpening::Open(
      {.actors = group, .rank = rank, .host = options_.collective_host, .token = options_.token});
  rpc::ThrowIfError(opened.status());
  opened_group_ = *std::move(opened);
  group_setup_ = GroupSetup::kOpened;
  const std::vector<std::string> offer = opened_group_->Offer();
  auto offers = context.getResults().initOffers(static_cast<unsigned>(offer.size()));
  for (size_t i = 0; i < offer.size(); ++i) {
    offers.set(static_cast<unsigned>(i), kj::ArrayPtr<const kj::byte>(
                                             reinterpret_cast<const kj::byte*>(offer[i].data()), offer[i].size()));
  }
  return kj::READY_NOW;
}

kj::Promise<void> ActorService::connectReplicaGroup(ConnectReplicaGroupContext context) {
  rpc::ThrowIfError(CheckOpen());
  if (group_setup_ != GroupSetup::kOpened) {
    rpc::ThrowIfError(absl::FailedPreconditionError(
        absl::StrCat(Name(), ": connectReplicaGroup needs one openReplicaGroup before it, and only one")));
  }
  wire::Actor::ConnectReplicaGroupParams::Reader params = context.getParams();
  const absl::Duration timeout = absl::Milliseconds(std::max<int64_t>(params.getTimeoutMillis(), 0));
  if (params.getOffers().size() > static_cast<uint32_t>(ir::kMaxReplicas)) {
    rpc::ThrowIfError(absl::InvalidArgumentError(
        absl::StrCat(Name(), ": ", params.getOffers().size(), " replica group offers; at most ", ir::kMaxReplicas)));
  }
  std::vector<std::string> offers;
  for (capnp::Data::Reader offer : params.getOffers()) {
    if (offer.size() > kMaxReplicaOfferBytes) {
      rpc::ThrowIfError(absl::InvalidArgumentError(absl::StrCat(Name(), ": a replica group offer of ", offer.size(),
                                                                " bytes; at most ", kMaxReplicaOfferBytes)));
    }
    offers.emplace_back(reinterpret_cast<const char*>(offer.begin()), offer.size());
  }
  group_setup_ = GroupSetup::kConnecting;
  auto connect = [this, group = std::move(opened_group_), offers = std::move(offers),
                  timeout]() mutable -> absl::Status {
    absl::StatusOr<std::unique_ptr<CollectiveGroup>> connected = group->Connect(offers, timeout);
    if (!connected.ok()) return connected.status();
    reducer_ = std::make_unique<Reducer>(*std::move(connected));
    if (executor_ != nullptr) executor_->UseReducer(reducer_.get());
    return absl::OkStatus();
  };
  return OnCompute(std::move(connect))
      .then([this]() { group_setup_ = GroupSetup::kConnected; },
            [this](kj::Exception&& exception) {
              group_setup_ = GroupSetup::kNone;
              kj::throwFatalException(kj::mv(exception));
            });
}

kj::Promise<void> ActorService::openDataPlane(OpenDataPlaneContext context) {
  rpc::ThrowIfError(CheckOpen());
  if (data_plane_ == nullptr) {
    rpc::ThrowIfError(absl::FailedPreconditionError(absl::StrCat(Name(), ": this data plane needs no setup")));
  }
  if (data_plane_setup_ != DataPlaneSetup::kNone) {
    rpc::ThrowIfError(absl::FailedPreconditionError(absl::StrCat(Name(), ": the data plane was opened already")));
  }
  data_plane_setup_ = DataPlaneSetup::kOpened;
  const DataPlane::Offer offer = data_plane_->GetOffer();
  wire::Actor::OpenDataPlaneResults::Builder results = context.getResults();
  results.setTcpAddress(offer.tcp_address);
  auto regions = results.initRegions(static_cast<unsigned>(offer.regions.size()));
  for (size_t i = 0; i < offer.regions.size(); ++i) {
    regions[i].setPeer(offer.regions[i].peer);
    if (options_.regions_by_path) {
      regions[i].setPath(RegionPath(getpid(), offer.regions[i].fd));
    } else {
      regions[i].setRegion(kj::heap<RegionServer>(offer.regions[i].fd));
    }
  }
  return kj::READY_NOW;
}

kj::Promise<void> ActorService::connectDataPlane(ConnectDataPlaneContext context) {
  rpc::ThrowIfError(CheckOpen());
  if (data_plane_ == nullptr || data_plane_setup_ != DataPlaneSetup::kOpened) {
    rpc::ThrowIfError(absl::FailedPreconditionError(absl::StrCat(
        Name(), data_plane_ == nullptr ? ": this data plane needs no setup"
                                       : ": connectDataPlane needs one openDataPlane before it, and only one")));
  }
  data_plane_setup_ = DataPlaneSetup::kConnecting;
  wire::Actor::ConnectDataPlaneParams::Reader params = context.getParams();
  const absl::Duration timeout = absl::Milliseconds(std::max<int64_t>(params.getTimeoutMillis(), 0));

  // The rings' descriptors arrive with the message; getFd() hands out the
  // connection's copy, which we duplicate before the message goes.
  auto peers = std::make_shared<std::vector<DataPlane::Peer>>();
  kj::Vector<kj::Promise<void>> descriptors;
  for (wire::DataPlanePeer::Reader entry : params.getPeers()) {
    const size_t index = peers->size();
    peers->push_back({entry.getActor(), ToString(entry.getTcpAddress()), -1, entry.getSharesDevice()});
    if (entry.hasRegionPath()) {
      absl::StatusOr<int> fd = OpenRegionPath(ToString(entry.getRegionPath()));
      if (!fd.ok()) {
        for (DataPlane::Peer& peer : *peers) {
          if (peer.region_fd >= 0) close(peer.region_fd);
        }
        data_plane_setup_ = DataPlaneSetup::kOpened;
        rpc::ThrowIfError(absl::Status(fd.status().code(), absl::StrCat(Name(), ": the shared-memory ring of actor ",
                                                                        entry.getActor(), ": ", fd.status().message())));
      }
      (*peers)[index].region_fd = *fd;
      continue;
    }
    if (!entry.hasRegion()) continue;
    descriptors.add(entry.getRegion().getFd().then([this, peers, index](kj::Maybe<int> fd) {
      KJ_IF_MAYBE (received, fd) {
        (*peers)[index].region_fd = fcntl(*received, F_DUPFD_CLOEXEC, 0);
      }
      if ((*peers)[index].region_fd < 0) {
        rpc::ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
            Name(), ": the shared-memory ring of actor ", (*peers)[index].actor,
            " arrived without its file descriptor (is the control connection a Unix socket?)")));
      }
    }));
  }
  return kj::joinPromises(descriptors.releaseAsArray())
      .then([this, peers, timeout]() {
        return OnCompute([this, peers, timeout]() { return data_plane_->Connect(std::move(*peers), timeout); });
      })
      .then([this]() { data_plane_setup_ = DataPlaneSetup::kConnected; },
            [this, peers](kj::Exception&& exception) {
              for (DataPlane::Peer& peer : *peers) {
                if (peer.region_fd >= 0) close(peer.region_fd);
                peer.region_fd = -1;
              }
              data_plane_setup_ = DataPlaneSetup::kOpened;
              kj::throwFatalException(kj::mv(exception));
            });
}

kj::Promise<void> ActorService::shutdown(ShutdownContext context) {
  (void)context;
  if (shutting_down_) return kj::READY_NOW;
  shutting_down_ = true;
  bool running = false;
  std::deque<Job> dropped;  // their calls fail when these go, on this thread
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    running = health_ == Health::kRunning;
    dropped.swap(jobs_);
    work_available_.SignalAll();
  }
  if (running) transport_.Abort(absl::AbortedError(absl::StrCat(Name(), " is shutting down")));
  // The reply is sent when this handler's promise resolves; the owner hears
  // of the shutdown on a later turn of the loop.
  tasks_.add(kj::evalLater([this] {
    if (on_shutdown_.get() != nullptr) on_shutdown_->fulfill();
  }));
  return kj::READY_NOW;
}

}  // namespace tandem::actor
