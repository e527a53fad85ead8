#include "controller/local_launcher.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <map>
#include <utility>
#include <variant>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "backends/cpu/kernel_threads.h"
#include "ir/state_file.h"
#include "kj/async-io.h"
#include "kj/debug.h"
#include "rpc/capnp_text.h"
#include "rpc/controller_service.h"
#include "rpc/program_codec.h"
#include "rpc/state_codec.h"
#include "rpc/status_convert.h"
#include "rpc/step_codec.h"
#include "rpc/tandem.capnp.h"

namespace tandem::controller {

using rpc::ToString;

namespace {

namespace wire = rpc::wire;

// A runStep or runRange reply as the step's outputs (throws, on the loop
// thread, for a result that does not decode).
template <typename Reply>
ir::StepOutputs DecodeReply(int64_t step, const Reply& reply) {
  absl::StatusOr<ir::StepOutputs> outputs = rpc::DecodeStepOutputs(reply, absl::StrCat("step ", step));
  rpc::ThrowIfError(outputs.status());
  return *std::move(outputs);
}

void WriteStderrLine(absl::string_view line) {
  std::string text = absl::StrCat(line, "\n");
  fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace

LocalLauncher::LocalLauncher(LocalLauncherOptions options) : options_(std::move(options)) {}

LocalLauncher::~LocalLauncher() { (void)Shutdown(); }

RefusalCounts LocalLauncher::Refusals() {
  if (board_ == nullptr) return {};
  if (!broken_.has_value() && !shut_down_ && loop_ != nullptr) {
    // The actors' counts come with their health replies; ask for fresh ones.
    (void)CallAll("counting refused connections", absl::Seconds(5),
                  [&](int32_t actor) { loop_->Track(actor, loop_->Health(actor)); });
  }
  return board_->Refusals();
}

std::string LocalLauncher::Dial(const std::string& address) const {
  return options_.dial_address ? options_.dial_address(address) : address;
}

std::string LocalLauncher::Describe(int32_t actor) const {
  if (actor < 0) return "the srun step";
  const std::vector<int32_t>& stages = facts_.stages[actor];
  const std::vector<int32_t>& group = facts_.groups[actor];
  const auto replica = std::find(group.begin(), group.end(), actor) - group.begin();
  const bool on_node = actor < static_cast<int32_t>(nodes_.size()) && !nodes_[actor].empty();
  return absl::StrCat("actor ", actor, " (", group.empty() ? "" : absl::StrCat("replica ", replica, ", "), "stage",
                      stages.size() == 1 ? " " : "s ", absl::StrJoin(stages, ", "), ")",
                      on_node ? absl::StrCat(" on node ", nodes_[actor]) : "");
}

absl::Status LocalLauncher::Start(const std::vector<ir::ActorProgram>& programs,
                                  const std::vector<ir::StateSources>& states) {
  if (board_ != nullptr) return absl::FailedPreconditionError("the local launcher was started already");
  num_actors_ = static_cast<int32_t>(programs.size());
  if (num_actors_ == 0 || states.size() != programs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("need one state per program and at least one program, got ", programs.size(), " programs and ",
                     states.size(), " states"));
  }
  if (options_.actor_binary.empty() || access(options_.actor_binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("the actor binary '", options_.actor_binary,
                                            "' does not exist or is not executable"));
  }
  if (options_.start == ActorStart::kSrun && (options_.control_plane != rpc::ControlPlaneKind::kTcp ||
                                              options_.data_plane == ir::DataPlaneKind::kShm)) {
    return absl::InvalidArgumentError(
        "actors started by srun may run on other nodes: they need the TCP control plane, and the TCP or the "
        "placed (auto) data plane");
  }
  // Over a Unix control socket the rings travel as descriptors, all of an
  // actor's in one message (over TCP, as paths).
  if (options_.data_plane != ir::DataPlaneKind::kTcp && options_.control_plane == rpc::ControlPlaneKind::kUnix &&
      static_cast<uint32_t>(num_actors_ - 1) > options_.limits.max_fds_per_message) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the shared-memory data plane hands each actor ", num_actors_ - 1, " rings in one control message, above ",
        "the limit of ", options_.limits.max_fds_per_message, " descriptors per message"));
  }
  absl::StatusOr<ProgramFacts> facts = Facts(programs);
  if (!facts.ok()) return facts.status();
  facts_ = *std::move(facts);
  loaded_hashes_.assign(num_actors_, {});
  board_ = std::make_unique<CallBoard>(num_actors_);
  if (absl::Status status = StartActors(); !status.ok()) return Fail(status);
  if (absl::Status status = SetUpDataPlane(); !status.ok()) return status;
  if (absl::Status status = SetUpReplicaGroups(); !status.ok()) return status;

  // Each program once, under its content hash; then each actor's state.
  if (absl::Status loaded = LoadPrograms(programs); !loaded.ok()) return loaded;
  return CallAll("loadState", options_.start_timeout,
                 [&](int32_t actor) { loop_->Track(actor, SendState(actor, states[actor])); });
}

namespace {

// Sends bytes [offset, end) of `tensor` to `actor` as stageState pieces
// under `binding`, each after the last was taken.
kj::Promise<void> StagePieces(rpc::wire::Actor::Client actor, std::string binding, ir::HostTensor tensor,
                              uint64_t offset) {
  auto request = actor.stageStateRequest();
  request.setBinding(binding);
  rpc::ThrowIfError(rpc::EncodeTensorPiece(tensor, offset, ir::kStatePieceBytes, request.initPiece()));
  const uint64_t next = offset + request.getPiece().getData().size();
  return request.send().then([actor, binding = std::move(binding), tensor = std::move(tensor),
                              next](auto&&) mutable -> kj::Promise<void> {
    if (next >= static_cast<uint64_t>(tensor.num_bytes())) return kj::READY_NOW;
    return StagePieces(kj::mv(actor), std::move(binding), std::move(tensor), next);
  });
}

}  // namespace

kj::Promise<void> LocalLauncher::SendState(int32_t actor, const ir::StateSources& sources) {
  rpc::wire::Actor::Client client = loop_->actor(actor);
  kj::Promise<void> staged = kj::READY_NOW;
  for (const auto& [binding, source] : sources) {
    const auto* held = std::get_if<ir::HostTensor>(&source.origin);
    if (held == nullptr) continue;
    staged = staged.then([client, binding = binding, tensor = *held]() mutable {
      return StagePieces(kj::mv(client), std::move(binding), std::move(tensor), 0);
    });
  }
  auto request = client.loadStateRequest();
  rpc::EncodeStateSources(sources, request.initSources(static_cast<unsigned>(sources.size())));
  return staged.then([request = kj::mv(request)]() mutable { return request.send().ignoreResult(); });
}

std::vector<MemoryPool> LocalLauncher::MemoryPools(int32_t num_actors) const {
  const bool on_this_host = options_.start == ActorStart::kFork;
  const bool host_memory = options_.device == "cpu" || absl::StartsWith(options_.device, "fake-cuda");
  if (!on_this_host || !host_memory) return {};
  return Launcher::MemoryPools(num_actors);
}

absl::Status LocalLauncher::StartActors() {
  absl::StatusOr<std::unique_ptr<RunDirectory>> directory = RunDirectory::Create();
  if (!directory.ok()) return directory.status();
  run_directory_ = *std::move(directory);
  const bool over_tcp = options_.control_plane == rpc::ControlPlaneKind::kTcp;
  const std::string listen_on =
      over_tcp ? options_.bind_host : absl::StrCat(run_directory_->path(), "/controller.sock");
  absl::StatusOr<std::string> token = rpc::MakeJobToken();
  if (!token.ok()) return token.status();
  rpc::ControllerIdentity identity;
  if (over_tcp) {
    absl::StatusOr<rpc::ControllerIdentity> made = rpc::MakeControllerIdentity();
    if (!made.ok()) return made.status();
    identity = *std::move(made);
  }
  if (absl::Status status = StartLoop(listen_on, *token, identity); !status.ok()) return status;

  const bool srun = options_.start == ActorStart::kSrun;
  const std::string dial = over_tcp ? Dial(controller_address_) : controller_address_;
  std::vector<ProcessSpec> specs;
  for (int32_t actor = 0; actor < (srun ? 1 : num_actors_); ++actor) {
    specs.push_back(ActorProcess(actor, dial, *token, identity.certificate_pem));
  }
  if (srun) {
    SrunStepOptions step;
    step.num_actors = num_actors_;
    step.actor = std::move(specs[0]);
    step.srun_args = options_.srun_args;
    step.sink = options_.output;
    absl::StatusOr<std::unique_ptr<SrunStep>> started = SrunStep::Start(std::move(step));
    if (!started.ok()) return started.status();
    srun_step_ = started->get();
    processes_ = *std::move(started);
  } else {
    ProcessGroupOptions group_options;
    group_options.sink = options_.output;
    absl::StatusOr<std::unique_ptr<ProcessGroup>> processes = ProcessGroup::Start(std::move(specs), group_options);
    if (!processes.ok()) return processes.status();
    local_processes_ = processes->get();
    processes_ = *std::move(processes);
  }
  return AwaitRegistration();
}

absl::Status LocalLauncher::StartLoop(const std::string& listen_on, const std::string& token,
                                      const rpc::ControllerIdentity& identity) {
  // The loop thread: listens, accepts registrations, runs the heartbeats,
  // and later every actor call, until Shutdown() stops it.
  absl::Notification listening;
  absl::Status listen_status;
  loop_thread_ = std::thread([this, &listen_on, token, &identity, &listening, &listen_status] {
    kj::AsyncIoContext io = kj::setupAsyncIo();
    auto stop = kj::newPromiseAndFulfiller<void>();
    loop_ = std::make_unique<LauncherLoop>(io, *board_, num_actors_, options_.heartbeat_interval);
    loop_->stop = kj::mv(stop.fulfiller);
    absl::StatusOr<std::string> address =
        loop_->Serve(options_.control_plane, listen_on, token, identity, options_.limits, [this](absl::string_view line) {
          if (options_.log) {
            options_.log(line);
          } else {
            WriteStderrLine(absl::StrCat("tandem: ", line));
          }
        });
    listen_status = address.status();
    if (address.ok()) controller_address_ = *address;
    if (!listen_status.ok()) {
      loop_.reset();
      listening.Notify();
      return;
    }
    listening.Notify();
    loop_->RunUntil(kj::mv(stop.promise));
    loop_.reset();  // drops every connection, on this thread
  });
  listening.WaitForNotification();
  if (!listen_status.ok()) loop_thread_.join();
  return listen_status;
}

ProcessSpec LocalLauncher::ActorProcess(int32_t actor, const std::string& dial, const std::string& token,
                                        const std::string& certificate_pem) const {
  const bool srun = options_.start == ActorStart::kSrun;
  // srun starts every task with the same arguments: the largest ring.
  const int64_t ring_bytes = srun ? *std::max_element(facts_.ring_bytes.begin(), facts_.ring_bytes.end()) : facts_.ring_bytes[actor];
  ProcessSpec spec;
  spec.program = options_.actor_binary;
  spec.args = {"--control",
               std::string(rpc::ControlPlaneKindName(options_.control_plane)),
               "--controller",
               dial,
               "--actors",
               absl::StrCat(num_actors_),
               "--transport",
               std::string(ir::DataPlaneKindName(options_.data_plane)),
               "--receive-timeout-ms",
               absl::StrCat(absl::ToInt64Milliseconds(options_.receive_timeout)),
               "--controller-timeout-ms",
               absl::StrCat(absl::ToInt64Milliseconds(options_.controller_timeout)),
               "--shm-ring-mib",
               absl::StrCat((ring_bytes + (int64_t{1} << 20) - 1) >> 20),
               "--device",
               options_.device,
               "--threads",
               absl::StrCat(options_.actor_threads > 0 ? options_.actor_threads
                            : srun                      ? 0
                                                        : cpu::SharedCoreThreads(num_actors_))};
  // Its identity: given here, or taken from Slurm by each task.
  if (srun) {
    spec.args.push_back("--slurm");
  } else {
    spec.args.insert(spec.args.end(), {"--actor", absl::StrCat(actor)});
  }
  if (options_.data_plane != ir::DataPlaneKind::kShm) {
    // Tasks on other nodes listen on their own address, unless the whole
    // allocation is this host's loopback.
    const bool loopback = absl::StartsWith(options_.bind_host, "127.") || options_.bind_host == "localhost";
    spec.args.insert(spec.args.end(), {"--bind", srun && !loopback ? "node" : options_.bind_host});
  }
  // One BLAS thread per actor (the actor pins it too): OpenBLAS then
  // starts no pool of threads competing for the host's cores.
  spec.environment = {{"TANDEM_JOB_TOKEN", token}, {"OPENBLAS_NUM_THREADS", "1"}};
  if (!certificate_pem.empty()) spec.environment.emplace_back("TANDEM_CONTROLLER_CERT", certificate_pem);
  return spec;
}

absl::Status LocalLauncher::AwaitRegistration() {
  CallBoard& board = *board_;
  absl::Status registered = Await(
      "registration", options_.start_timeout,
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(board.mu) {
        return std::all_of(board.registered.begin(), board.registered.end(), [](bool r) { return r; });
      },
      [&](int32_t actor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(board.mu) { return !board.registered[actor]; });
  if (!registered.ok()) return registered;
  {
    absl::MutexLock lock(&board.mu);
    nodes_ = board.nodes;
  }
  if (srun_step_ != nullptr) {
    for (int32_t actor = 0; actor < num_actors_; ++actor) srun_step_->SetNode(actor, nodes_[actor]);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ir::StepOutputs>> LocalLauncher::RunStep(int64_t step,
                                                                    const std::vector<ir::StepInputs>& inputs,
                                                                    Dispatch dispatch) {
  if (board_ == nullptr) return absl::FailedPreconditionError("the local launcher has not been started");
  if (static_cast<int32_t>(inputs.size()) != num_actors_) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step, ": inputs for ", inputs.size(), " actors, the job has ", num_actors_));
  }
  const std::string what = absl::StrCat("step ", step);
  absl::Status status;
  if (dispatch == Dispatch::kFused) {
    status = CallAll(what, options_.step_timeout, [&](int32_t actor) {
      auto request = loop_->actor(actor).runStepRequest();
      request.setStepId(static_cast<uint64_t>(step));
      request.setProgramHash(loop_->hashes[actor]);
      rpc::EncodeStepInputs(inputs[actor], request.initInputs(static_cast<unsigned>(inputs[actor].size())));
      ++loop_->calls[actor];
      loop_->Track(actor, request.send().then([this, step, actor](auto&& reply) {
        loop_->results[actor] = DecodeReply(step, reply);
      }));
    });
  } else {
    // One runRange per task, in program order, every actor at once.
    status = CallAll(what, options_.step_timeout, [&](int32_t actor) {
      // Runs ranges [index, end) of `bounds`, one call after the other.
      struct Chain {
        std::vector<int32_t> bounds;
        std::function<kj::Promise<void>(size_t)> next;
      };
      auto chain = std::make_shared<Chain>();
      chain->bounds = facts_.bounds[actor];
      // The first call is sent now, while `inputs` lives; only it carries them.
      const ir::StepInputs* first_inputs = &inputs[actor];
      chain->next = [this, chain, actor, step, first_inputs](size_t index) -> kj::Promise<void> {
        const InstructionRange range{chain->bounds[index], chain->bounds[index + 1]};
        return SendRunRange(actor, step, range, index == 0 ? first_inputs : nullptr)
            .then([this, chain, actor, index](ir::StepOutputs result) -> kj::Promise<void> {
              if (index + 2 < chain->bounds.size()) return chain->next(index + 1);
              loop_->results[actor] = std::move(result);
              chain->next = nullptr;  // breaks the cycle chain -> next -> chain
              return kj::READY_NOW;
            });
      };
      loop_->Track(actor, chain->next(0));
    });
  }
  if (!status.ok()) return status;
  std::vector<ir::StepOutputs> results;
  loop_->executor.executeSync([&] {
    for (int32_t actor = 0; actor < num_actors_; ++actor) {
      results.push_back(std::move(loop_->results[actor]));
      results.back().calls = std::exchange(loop_->calls[actor], 0);
    }
    loop_->results.assign(num_actors_, {});
  });
  return results;
}

kj::Promise<ir::StepOutputs> LocalLauncher::SendRunRange(int32_t actor, int64_t step, InstructionRange range,
                                                         const ir::StepInputs* inputs) {
  auto request = loop_->actor(actor).runRangeRequest();
  request.setStepId(static_cast<uint64_t>(step));
  request.setProgramHash(loop_->hashes[actor]);
  request.setBegin(range.begin);
  request.setEnd(range.end);
  if (range.begin == 0 && inputs != nullptr) {
    rpc::EncodeStepInputs(*inputs, request.initInputs(static_cast<unsigned>(inputs->size())));
  }
  ++loop_->calls[actor];
  return request.send().then([step](auto&& reply) { return DecodeReply(step, reply); });
}

absl::StatusOr<std::map<ActorId, ir::StepOutputs>> LocalLauncher::RunRanges(
    int64_t step, const std::map<ActorId, InstructionRange>& ranges, const std::vector<ir::StepInputs>& inputs) {
  if (board_ == nullptr) return absl::FailedPreconditionError("the local launcher has not been started");
  if (static_cast<int32_t>(inputs.size()) != num_actors_) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step, ": inputs for ", inputs.size(), " actors, the job has ", num_actors_));
  }
  std::vector<int32_t> actors;
  for (const auto& [actor, range] : ranges) {
    if (actor.value < 0 || actor.value >= num_actors_) {
      return absl::InvalidArgumentError(absl::StrCat("no actor ", actor.value));
    }
    actors.push_back(actor.value);
  }
  // Filled on the loop thread by the replies, read here after CallSome.
  auto replies = std::make_shared<std::map<int32_t, ir::StepOutputs>>();
  absl::Status status = CallSome(absl::StrCat("step ", step), options_.step_timeout, actors, [&](int32_t actor) {
    loop_->Track(actor, SendRunRange(actor, step, ranges.at(ActorId(actor)), &inputs[actor])
                            .then([replies, actor](ir::StepOutputs result) { (*replies)[actor] = std::move(result); }));
  });
  if (!status.ok()) return status;
  std::map<ActorId, ir::StepOutputs> results;
  loop_->executor.executeSync([&] {
    for (auto& [actor, result] : *replies) {
      result.calls = std::exchange(loop_->calls[actor], 0);
      results.emplace(ActorId(actor), std::move(result));
    }
  });
  return results;
}

std::string LocalLauncher::DescribeActor(ActorId actor) const {
  const pid_t pid = processes_ != nullptr ? processes_->pid(actor) : -1;
  return pid > 0 ? absl::StrCat("pid ", pid) : "not running";
}

absl::StatusOr<ir::HostTensor> LocalLauncher::ReadBuffer(ActorId actor_id, const std::string& name) {
  if (board_ == nullptr) return absl::FailedPreconditionError("the local launcher has not been started");
  const int32_t actor = actor_id.value;
  if (actor < 0 || actor >= num_actors_) {
    return absl::InvalidArgumentError(absl::StrCat("no actor ", actor, " (the job has ", num_actors_, ")"));
  }
  // Piece by piece, each a call of its own: no control message carries
  // more than a piece, whatever the tensor's size. A refused read (no such
  // buffer, or an empty one) is the answer, not a failure of the job: it is
  // not recorded as one.
  auto assembler = std::make_shared<rpc::TensorAssembler>(absl::StrCat("actor ", actor, ": buffer ", name));
  auto refused = std::make_shared<absl::Status>();
  do {
    const uint64_t offset = assembler->received();
    absl::Status status = CallSome(absl::StrCat("reading ", name), options_.step_timeout, {actor}, [&](int32_t) {
      auto request = loop_->actor(actor).readBufferRequest();
      request.setName(name);
      request.setOffset(offset);
      request.setMaxBytes(ir::kStatePieceBytes);
      loop_->Track(actor, request.send().then(
                              [assembler, refused](auto&& reply) { *refused = assembler->Add(reply.getPiece()); },
                              [refused](kj::Exception&& exception) { *refused = rpc::FromKjException(exception); }));
    });
    if (!status.ok()) return status;
    absl::Status answer;
    loop_->executor.executeSync([&] { answer = *refused; });
    if (!answer.ok()) return answer;
    if (assembler->received() == offset && !assembler->complete()) {
      return absl::InternalError(absl::StrCat("actor ", actor, ": reading ", name, " made no progress at byte ",
                                              offset));
    }
  } while (!assembler->complete());
  return assembler->Take();
}

absl::StatusOr<std::vector<ir::TensorMap>> LocalLauncher::ReadState() {
  if (board_ == nullptr) return absl::FailedPreconditionError("the local launcher has not been started");
  std::vector<ir::TensorMap> states(num_actors_);
  for (int32_t actor = 0; actor < num_actors_; ++actor) {
    for (const std::string& name : facts_.state_bindings[actor]) {
      absl::StatusOr<ir::HostTensor> tensor = ReadBuffer(ActorId(actor), name);
      if (!tensor.ok()) return tensor.status();
      states[actor][name] = *std::move(tensor);
    }
  }
  return states;
}

absl::Status LocalLauncher::SnapshotState(const std::vector<std::string>& paths) {
  if (board_ == nullptr) return absl::FailedPreconditionError("the local launcher has not been started");
  if (static_cast<int32_t>(paths.size()) != num_actors_) {
    return absl::InvalidArgumentError(absl::StrCat(paths.size(), " state file paths for ", num_actors_, " actors"));
  }
  return CallAll("taking the state for a checkpoint", options_.step_timeout, [&](int32_t actor) {
    auto request = loop_->actor(actor).snapshotStateRequest();
    request.setPath(paths[actor]);
    loop_->Track(actor, request.send().ignoreResult());
  });
}

absl::StatusOr<std::optional<std::vector<SavedStateFile>>> LocalLauncher::AwaitState(
    const std::vector<std::string>& paths, bool wait) {
  if (board_ == nullptr) return absl::FailedPreconditionError("the local launcher has not been started");
  if (static_cast<int32_t>(paths.size()) != num_actors_) {
    return absl::InvalidArgumentError(absl::StrCat(paths.size(), " state file paths for ", num_actors_, " actors"));
  }
  // Written on the loop thread by the replies, read here after CallAll.
  struct Replies {
    std::vector<SavedStateFile> files;
    std::vector<bool> done;
  };
  auto replies = std::make_shared<Replies>();
  replies->files.resize(paths.size());
  replies->done.assign(paths.size(), false);
  absl::Status status = CallAll("writing a checkpoint", options_.step_timeout, [&](int32_t actor) {
    auto request = loop_->actor(actor).awaitStateRequest();
    request.setPath(paths[actor]);
    request.setWait(wait);
    loop_->Track(actor, request.send().then([replies, actor, path = paths[actor]](auto&& response) {
      replies->done[actor] = response.getDone();
      replies->files[actor] = {path, response.getBytes(), ToString(response.getChecksum())};
    }));
  });
  if (!status.ok()) return status;
  Replies result;
  loop_->executor.executeSync([&] { result = *replies; });
  for (bool done : result.done) {
    if (!done) return std::optional<std::vector<SavedStateFile>>();
  }
  return std::optional<std::vector<SavedStateFile>>(std::move(result.files));
}

absl::Status LocalLauncher::Shutdown() {
  if (shut_down_) return absl::OkStatus();
  shut_down_ = true;
  absl::Status status;
  if (board_ != nullptr) {
    absl::MutexLock lock(&board_->mu);
    board_->shutting_down = true;
  }
  if (loop_ != nullptr && processes_ != nullptr && !broken_.has_value()) {
    // Ask politely and give the actors a moment to exit by themselves; the
    // process group's shutdown below makes sure.
    loop_->executor.executeSync([this] {
      for (int32_t actor = 0; actor < num_actors_; ++actor) {
        if (!loop_->has_actor(actor)) continue;
        loop_->tasks.add(loop_->actor(actor).shutdownRequest().send().ignoreResult());
      }
    });
    const absl::Time deadline = absl::Now() + absl::Seconds(2);
    for (int32_t exited = 0; exited < num_actors_;) {
      absl::StatusOr<ExitInfo> exit = processes_->WaitAny(std::max(deadline - absl::Now(), absl::ZeroDuration()));
      if (!exit.ok()) break;
      ++exited;
    }
  }
  if (processes_ != nullptr) status = processes_->Shutdown(absl::Seconds(1));
  if (loop_thread_.joinable()) {
    if (loop_ != nullptr) loop_->executor.executeSync([this] { loop_->stop->fulfill(); });
    loop_thread_.join();
  }
  run_directory_.reset();
  return status;
}

}  // namespace tandem::controller
