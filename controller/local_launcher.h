// LocalLauncher: the default launcher. Runs one `tandem-actor` process per
// actor on this host and drives them over the control plane (rpc/), one
// Cap'n Proto connection per actor: on a Unix socket in a private run
// directory, or (LocalLauncherOptions::control_plane) on TCP, listening on
// `bind_host` at a port the OS picks, as a launcher across hosts does.
//
// Start():
//  1. makes the run directory (0700; controller/run_directory.h, which also
//     removes those of controllers that were killed), a random per-job
//     token and the controller's socket, then fork/execs the actors
//     (ProcessGroup: their output prefixed "[actor N]", no orphans on any
//     exit path), telling them where to dial in argv. The token reaches
//     them in the environment, never in argv, and never crosses a socket.
//     Over TCP the controller also makes a TLS identity (rpc/control_tls.h)
//     and serves the control plane with it; its certificate reaches the
//     actors in the environment too (TANDEM_CONTROLLER_CERT), and they trust
//     that certificate alone;
//  2. waits for every actor to register: each answers a fresh challenge
//     with an HMAC over the token (rpc/auth.h). A wrong answer, a replayed
//     or unknown challenge, or a duplicate id is refused, logged
//     (rate-limited) and counted (Refusals()); the job goes on;
//  3. sets up the data plane: openDataPlane on every actor, then
//     connectDataPlane with each actor's peers (shared-memory rings travel
//     as file descriptors on the Unix control socket; TCP addresses as
//     text, and TCP connections between actors answer the same kind of
//     challenge: actor/tcp_transport.h);
//  4. with data-parallel replicas, sets up each actor's replica group the
//     same way: openReplicaGroup, then connectReplicaGroup with the offers
//     of the other members (the controller is the collective library's
//     rendezvous);
//  5. ships each program once under its content hash (loadProgram), then
//     where each actor's state comes from (loadState: seeds and checkpoint
//     files, which the actor generates or reads itself), after the tensors
//     held here, if any, in pieces of at most 4 MiB (stageState).
// RunStep(): one runStep RPC per actor per step (Dispatch::kFused), or one
// runRange RPC per task (kPerTask, for measurement). RunRanges(): one
// runRange per listed actor (the debugger's task-by-task stepping).
// ReadBuffer(): readBuffer piece by piece; ReadState(): that per state
// buffer. SnapshotState()/AwaitState(): per actor (the actors write the files; no
// state crosses the control plane).
//
// Failure handling. Every wait is bounded, and while it waits the launcher
// watches the processes and their heartbeats (a health call to every actor
// each heartbeat_interval):
//  - an actor process that dies -> Unavailable naming the actor, its stages,
//    the step (or setup phase) and how it died, within moments;
//  - an actor that stops answering for unresponsive_after (SIGSTOPped, or
//    hung) -> DeadlineExceeded naming it; silence while the controller
//    itself did not run (stopped, starved) is not counted, and an error
//    that follows such a pause says so;
//  - an actor's failed call -> its status, with the actor, stages and step;
//  - a wait longer than its timeout -> DeadlineExceeded naming the actors
//    that did not finish.
// After a failure the launcher is broken: every later call returns the
// first failure. Shutdown() (and the destructor) asks the actors to exit,
// then terminates and reaps the processes and removes the run directory.
//
// Threading. The launcher owns one event-loop thread, which owns every
// Cap'n Proto object (the socket, the connections, the actors' capabilities)
// and runs the heartbeats. The calling thread posts work to it and waits on
// a mutex-guarded board, watching for failures. Start() must be called from
// a thread that outlives the launcher (the actors die with that thread; see
// ProcessGroup). Not thread-safe: one controller thread makes the calls.
#ifndef TANDEM_CONTROLLER_LOCAL_LAUNCHER_H_
#define TANDEM_CONTROLLER_LOCAL_LAUNCHER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "controller/launcher.h"
#include "controller/launcher_loop.h"
#include "controller/process_group.h"
#include "controller/run_directory.h"
#include "controller/srun_step.h"
#include "ir/data_plane_kind.h"
#include "rpc/connection.h"

namespace tandem::controller {

// How the actor processes start.
enum class ActorStart : uint8_t {
  kFork,  // forked here, one child per actor (ProcessGroup)
  // The tasks of one srun step across the caller's Slurm allocation
  // (SrunStep): `tandem train --launcher slurm`. Needs the TCP control and
  // data planes; each actor reports its node when it registers, and errors
  // name it.
  kSrun,
};

struct LocalLauncherOptions {
  // The actor executable (tandem-actor); with kSrun, a path valid on every
  // node.
  std::string actor_binary;
  ActorStart start = ActorStart::kFork;
  // kSrun: more srun options (srun_step.h).
  std::vector<std::string> srun_args;
  // How actors reach the controller: a Unix socket in the run directory, or
  // TCP. TCP needs the TCP data plane (shared-memory rings travel as file
  // descriptors, which only a Unix socket carries).
  rpc::ControlPlaneKind control_plane = rpc::ControlPlaneKind::kUnix;
  ir::DataPlaneKind data_plane = ir::DataPlaneKind::kShm;
  // Where the TCP control socket and the actors' TCP data planes listen
  // (ports chosen by the OS): loopback on one host, a routable address of
  // the host when actors run on others.
  std::string bind_host = "127.0.0.1";
  // Maps a TCP address that something of the job listens on (the
  // controller's control socket, an actor's data plane) to the address the
  // actors are told to dial; default: the same. For whatever sits between
  // them, such as a forwarded port or a relay (the tests record every byte
  // that crosses the sockets this way).
  std::function<std::string(const std::string& address)> dial_address;
  // The most a shared-memory ring (per ordered pair of actors) may take.
  // Each actor's rings are sized from its program (ShmRingBytes): what it
  // sends one peer in a step, doubled for the slots a ring wraps around.
  int64_t shm_ring_bytes = int64_t{256} << 20;
  // Where the actors compute: tandem-actor's --device (cpu, cuda, cuda:N,
  // with +tf32 or +bf16); the actor checks it and exits at once if it cannot open it.
  std::string device = "cpu";
  // Each actor's kernel threads (tandem-actor --threads). 0: forked actors
  // share this host's cores evenly (cpu::SharedCoreThreads); an srun task
  // takes the CPUs Slurm gave it.
  int actor_threads = 0;
  // Bound on starting: spawning, registering, data plane, programs, state.
  absl::Duration start_timeout = absl::Seconds(60);
  // Bound on one step (or one ReadState).
  absl::Duration step_timeout = absl::Minutes(10);
  // The deadline of every data-plane receive in the actors.
  absl::Duration receive_timeout = absl::Seconds(30);
  absl::Duration heartbeat_interval = absl::Milliseconds(250);
  absl::Duration unresponsive_after = absl::Seconds(3);
  // An actor that has heard nothing from the controller (no call, no
  // heartbeat) for this long exits by itself (the controller was stopped,
  // or its host lost): tandem-actor --controller-timeout-ms.
  absl::Duration controller_timeout = absl::Seconds(60);
  // Where the actors' prefixed output lines go (default: stderr).
  LineSink output;
  // Where the launcher's own notices go (refused registrations, ...;
  // default: stderr), rate-limited.
  std::function<void(absl::string_view)> log;
  rpc::ConnectionLimits limits;
};

class LocalLauncher final : public Launcher {
 public:
  explicit LocalLauncher(LocalLauncherOptions options);
  LocalLauncher(const LocalLauncher&) = delete;
  LocalLauncher& operator=(const LocalLauncher&) = delete;
  // Shutdown(), ignoring its status.
  ~LocalLauncher() override;

  absl::Status Start(const std::vector<ir::ActorProgram>& programs,
                     const std::vector<ir::StateSources>& states) override;
  absl::Status UsePrograms(const std::vector<ir::ActorProgram>& programs) override;
  // This host's memory for actors forked here on a host-resident device
  // (cpu, fake-cuda); none for actors srun places or that compute on a GPU
  // (checked by each actor as it allocates).
  std::vector<MemoryPool> MemoryPools(int32_t num_actors) const override;
  absl::StatusOr<std::vector<ir::StepOutputs>> RunStep(int64_t step, const std::vector<ir::StepInputs>& inputs,
                                                       Dispatch dispatch) override;
  absl::StatusOr<std::map<ActorId, ir::StepOutputs>> RunRanges(int64_t step,
                                                               const std::map<ActorId, InstructionRange>& ranges,
                                                               const std::vector<ir::StepInputs>& inputs) override;
  absl::StatusOr<ir::HostTensor> ReadBuffer(ActorId actor, const std::string& name) override;
  std::string DescribeActor(ActorId actor) const override;
  // "ipc" between device-resident actors on one device, "nccl" between
  // device-resident actors on different devices (GPUs, or fake-cuda/N's
  // emulated ones), else "shm" or "tcp" as the data plane places them.
  std::string DescribeDataPlane() const override;
  absl::StatusOr<std::vector<ir::TensorMap>> ReadState() override;
  // Each actor process writes its own file (snapshotState, awaitState).
  absl::Status SnapshotState(const std::vector<std::string>& paths) override;
  absl::StatusOr<std::optional<std::vector<SavedStateFile>>> AwaitState(const std::vector<std::string>& paths,
                                                                        bool wait) override;
  // The registrations this launcher refused, and the data-plane connections
  // its actors refused (each is asked, within a few seconds, unless the
  // launcher failed or shut down).
  RefusalCounts Refusals() override;

  // Asks every actor to exit, waits briefly, then terminates and reaps the
  // processes, stops the event loop and removes the run directory.
  // Idempotent.
  absl::Status Shutdown() override;

  // For tests and benchmarks (valid after Start()).
  // Where the controller listens for actors: its socket's path, or
  // host:port.
  const std::string& controller_address() const { return controller_address_; }
  // The actor processes (pids, signals); null with ActorStart::kSrun.
  ProcessGroup* processes() const { return local_processes_; }

 private:

  // Runs `issue(actor)` on the loop thread for every actor, then waits until
  // each call has completed, watching for failures. `what` names the work
  // in errors ("step 5", "loadProgram").
  absl::Status CallAll(absl::string_view what, absl::Duration timeout,
                       std::function<void(int32_t actor)> issue);
  // The same for `actors` only.
  absl::Status CallSome(absl::string_view what, absl::Duration timeout, const std::vector<int32_t>& actors,
                        std::function<void(int32_t actor)> issue);
  // Waits for `ready()` (checked under the board's mutex) with the same
  // watch; `pending(actor)` says which actors the wait depends on.
  absl::Status Await(absl::string_view what, absl::Duration timeout, const std::function<bool()>& ready,
                     const std::function<bool(int32_t actor)>& pending);
  // Marks the launcher broken with `status` (the first one wins) and
  // cancels the calls still outstanding.
  // Never called with the board's mutex held: it waits on the loop thread,
  // which takes that mutex.
  absl::Status Fail(absl::Status status);
  // `status`, saying how long the controller itself did not run during the
  // last wait, if it was paused (controller_pause_).
  absl::Status NotePause(absl::Status status) const;
  // On the loop thread: sends runRange [range) of step `step` to `actor`,
  // with `inputs` when the range begins its program, counting it as a step
  // RPC; the promise of its decoded reply.
  kj::Promise<ir::StepOutputs> SendRunRange(int32_t actor, int64_t step, InstructionRange range,
                                            const ir::StepInputs* inputs);
  // "actor 2 (stage 2)" / "actor 0 (stages 0, 4)".
  std::string Describe(int32_t actor) const;
  // What actors dial to reach `address` (options_.dial_address).
  std::string Dial(const std::string& address) const;
  // Starts the loop thread and the actors, and waits for every actor to
  // register.
  absl::Status StartActors();
  // The loop thread, listening on `listen_on` (with `identity`'s TLS over
  // TCP) for actors proving `token`.
  absl::Status StartLoop(const std::string& listen_on, const std::string& token,
                         const rpc::ControllerIdentity& identity);
  // How actor `actor` (every task, under srun) is started.
  ProcessSpec ActorProcess(int32_t actor, const std::string& dial, const std::string& token,
                           const std::string& certificate_pem) const;
  absl::Status AwaitRegistration();
  // On the loop thread: stages the tensors `sources` hold on `actor`, one
  // piece after another, then sends loadState.
  kj::Promise<void> SendState(int32_t actor, const ir::StateSources& sources);
  absl::Status SetUpDataPlane();
  // Per actor, whether each of `actors` answers a health call within
  // `timeout` (the others true).
  std::vector<bool> Answering(const std::vector<int32_t>& actors, absl::Duration timeout);
  // Whether `actor` reaches `peer` through shared memory (else TCP).
  bool SharedMemoryBetween(int32_t actor, int32_t peer) const;
  // Whether device tensors between the two go by CUDA IPC: both are
  // device-resident on one device.
  bool SharesDevice(int32_t actor, int32_t peer) const;
  // Data parallelism: openReplicaGroup on every actor that all-reduces,
  // then connectReplicaGroup with its group's offers.
  absl::Status SetUpReplicaGroups();

  const LocalLauncherOptions options_;
  int32_t num_actors_ = 0;
  // What the launcher keeps of the programs the actors run, by actor.
  struct ProgramFacts {
    std::vector<std::vector<int32_t>> stages;
    std::vector<std::vector<int32_t>> groups;          // its replica group, or empty
    std::vector<std::vector<int32_t>> bounds;          // per-task dispatch ranges
    std::vector<std::vector<std::string>> state_bindings;
    std::vector<int64_t> ring_bytes;                   // its outbound shared-memory rings (sized at the start)
  };
  absl::StatusOr<ProgramFacts> Facts(const std::vector<ir::ActorProgram>& programs) const;
  // Sends each actor its program unless it has it, and runs it from the
  // next step on.
  absl::Status LoadPrograms(const std::vector<ir::ActorProgram>& programs);
  ProgramFacts facts_;
  std::vector<std::set<uint64_t>> loaded_hashes_;  // by actor: the programs it has cached
  std::unique_ptr<RunDirectory> run_directory_;  // removed by Shutdown()
  std::string controller_address_;
  std::unique_ptr<ActorProcesses> processes_;
  ProcessGroup* local_processes_ = nullptr;  // processes_, with ActorStart::kFork
  SrunStep* srun_step_ = nullptr;            // processes_, with ActorStart::kSrun
  std::vector<std::string> nodes_;           // by actor: its node, once every actor registered (kSrun)
  std::unique_ptr<CallBoard> board_;
  std::unique_ptr<LauncherLoop> loop_;  // created and destroyed on loop_thread_
  std::thread loop_thread_;
  std::optional<absl::Status> broken_;
  // The longest pause of the controller itself (SIGSTOP, starvation) that
  // the last Await saw; zero if none.
  absl::Duration controller_pause_;
  bool shut_down_ = false;
};

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_LOCAL_LAUNCHER_H_
