// ActorService: the actor's side of the control plane. It implements the
// Cap'n Proto `Actor` interface (rpc/tandem.capnp) on top of an Executor,
// so that the controller drives one actor process with one runStep call per
// step.
//
// What it holds:
//  - a program cache keyed by content hash (loadProgram decodes, verifies
//    and checks the hash; loading a hash already cached is a no-op);
//  - the Executor of the program the last step ran (runStep under another
//    cached hash builds a new Executor that takes over the current state);
//  - the state last given to loadState (the initial state, a checkpoint, or
//    recovery after a failed step).
// The data plane is injected: either a bare Transport this actor sends and
// receives on (an InMemoryNetwork endpoint in tests, needing no setup), or
// a DataPlane (shared memory or TCP in the actor process) that the
// controller sets up with openDataPlane and connectDataPlane before the
// first step. The service never Resets a transport; an owner that needs
// per-step resets (the in-memory network) does them between steps.
//
// Threading contract. Two threads:
//  - the event-loop thread (the one that constructs the service): every
//    Cap'n Proto object, every handler, the program cache and the loop-side
//    flags below. Handlers never block: they decode the request, post a job
//    to the compute thread and return a promise.
//  - the compute thread, started by the constructor and owned by the
//    service: runs the posted jobs strictly in order (so a loadState sent
//    after a step applies after it). It owns the Executor and never touches
//    KJ or Cap'n Proto objects except the cross-thread fulfiller of its job
//    (kj::newPromiseAndCrossThreadFulfiller), whose fulfill() completes the
//    call's promise back on the event-loop thread, where results are
//    encoded.
// Health (idle/running/failed and the last error) is kept under a mutex
// written by the compute thread and read by health(), which therefore
// answers at once even while a step blocks in a Receive.
//
// Cross-process calls (all completed on the event-loop thread):
//  - loadProgram: completed before the handler returns (decoding is on the
//    loop thread; it reads the request). InvalidArgument for a program that
//    does not decode, verify or hash to `hash`, or that is not for this
//    transport's actor.
//  - stageState: completed before the handler returns: one piece of a
//    tensor for the next loadState, assembled on the loop thread.
//  - loadState: completed when the compute thread has made or read each
//    source's tensor (generated from its seed, read from its state file,
//    or taken from what stageState assembled) and applied them to the
//    current Executor (or stored them for the first one). Clears a failure.
//  - runStep / runRange: completed when the compute thread has run the
//    step (or range); one runStep computes the whole step. Refused with
//    FailedPrecondition: under a hash never loaded, before loadState, after a
//    failed or abandoned step until the next loadState, while another step
//    call is pending, and after shutdown. A failed step returns the
//    Executor's status (its code and its "actor A, step S, instruction I"
//    text), aborts this actor's Transport so that its peers stop waiting,
//    and sets health to failed (an InMemoryNetwork then needs its owner's
//    Reset before the next step). runRange: the range that begins at 0
//    carries the step's inputs; only the range that ends the program
//    returns results and timings (all of the step's).
//  - readBuffer: a piece of a buffer's current tensor (the first piece
//    fetches it, the last releases it), by state binding or by the
//    program's buffer name ("%26@0"), read on the compute thread after any
//    job posted before it (between steps, or between runRange calls of a
//    step: the debugger's inspect). NotFound for no such buffer,
//    FailedPrecondition for one that holds nothing now.
//  - snapshotState: takes the state readBuffer reads, on the compute
//    thread after any job posted before it, and hands it to the actor's
//    StateWriter (actor/state_writer.h), which writes the file behind the
//    steps; awaitState answers from the writer's outcome (waiting on the
//    writer's thread when asked to, never on the loop's).
//  - openDataPlane: completed before the handler returns, with the
//    DataPlane's offer (a SharedRegion capability per ring, carrying its
//    descriptor). FailedPrecondition without a DataPlane or when called twice.
//  - connectDataPlane: reads the rings' descriptors on the loop thread,
//    then completes when the compute thread has connected (bounded by the
//    call's timeout). Steps are refused until it succeeded, when the
//    service has a DataPlane.
//  - openReplicaGroup: completed before the handler returns (it listens
//    for the group's TCP connections; a GPU actor also describes its GPU),
//    with the group's offers (actor/replica_group.h). connectReplicaGroup:
//    completes when the compute thread has connected every member over the
//    library the offers choose (NCCL across distinct GPUs, else TCP),
//    bounded by the call's timeout; later programs' all-reduces then run on
//    it. A failed step also aborts the group's all-reduces.
//  - health: answered at once, with how many strangers the data plane and
//    the replica group have refused so far.
//  - shutdown: replies, then refuses further calls, tells the compute
//    thread to stop after its current job (aborting the Transport if a step
//    is running; calls still queued fail), and fulfils the owner's `on_shutdown` fulfiller on a later
//    turn of the event loop, so main() can leave its loop (it should let the
//    loop run briefly so that the reply is written).
// On disconnect: Cap'n Proto cancels the pending call's promise. A step
// already running finishes on the compute thread (its Receives are bounded
// by the receive timeout) and its result is dropped; the service then
// refuses runStep/runRange until loadState, since the controller never saw
// that step. When the last reference goes (the connection and every client
// dropped), the destructor aborts the Transport if a step is still running
// and joins the compute thread.
//
// Ownership: created with kj::heap and owned by the capability clients that
// point to it (Cap'n Proto's refcount); borrows the Transport, which must
// outlive it. Not thread-safe: use it only from its event-loop thread.
#ifndef TANDEM_ACTOR_ACTOR_SERVICE_H_
#define TANDEM_ACTOR_ACTOR_SERVICE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actor/collective.h"
#include "actor/data_plane.h"
#include "actor/executor.h"
#include "actor/state_writer.h"
#include "actor/replica_group.h"
#include "actor/transport.h"
#include "backends/cpu/cpu_device.h"
#include "backends/cpu/kernel_threads.h"
#include "backends/device.h"
#include "ir/actor_program.h"
#include "kj/async.h"
#include "kj/function.h"
#include "rpc/state_codec.h"
#include "rpc/tandem.capnp.h"

namespace tandem::actor {

struct ActorServiceOptions {
  // The deadline of every Receive of a step.
  absl::Duration receive_timeout = absl::Seconds(30);
  // Where the programs' functions compute.
  std::shared_ptr<backends::Device> device = cpu::CpuDevice();
  // Threads the kernels of a host device use
  // (backends/cpu/kernel_threads.h): the compute thread runs every job inside
  // an arena of this many; 0: every core of the host. The bits do not depend
  // on it.
  int threads = 1;
  // The interface the replica group's collective library binds to.
  std::string collective_host = "127.0.0.1";
  // The job's token, which the replica group's connections prove
  // (actor/tcp_collective.h).
  std::string token;
  // openDataPlane hands out shared-memory rings as paths (RegionPath,
  // actor/data_plane.h) instead of descriptors: the control connection is
  // TCP, which carries none. Peers on this host open them.
  bool regions_by_path = false;
};

class ActorService final : public rpc::wire::Actor::Server, private kj::TaskSet::ErrorHandler {
 public:
  // Must be called on the event-loop thread that will serve the calls.
  // `on_shutdown` (may be null) is fulfilled after shutdown() has replied.
  ActorService(Transport& transport, ActorServiceOptions options,
               kj::Own<kj::PromiseFulfiller<void>> on_shutdown);
  // As above, on `data_plane`'s transport, set up through the control plane.
  ActorService(DataPlane& data_plane, ActorServiceOptions options,
               kj::Own<kj::PromiseFulfiller<void>> on_shutdown);
  ActorService(const ActorService&) = delete;
  ActorService& operator=(const ActorService&) = delete;
  // Aborts the Transport if a step is still running, then joins the compute
  // thread (bounded by the step's receive timeout).
  ~ActorService();

  // Loop thread: when the last call from the controller arrived, health
  // calls (its heartbeats) included; construction counts as one.
  absl::Time last_call() const { return last_call_; }

  // Every call passes here first, to be counted as a sign of the
  // controller's life.
  DispatchCallResult dispatchCall(uint64_t interface_id, uint16_t method_id,
                                  capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer> context) override;

 protected:
  kj::Promise<void> loadProgram(LoadProgramContext context) override;
  kj::Promise<void> loadState(LoadStateContext context) override;
  kj::Promise<void> stageState(StageStateContext context) override;
  kj::Promise<void> runStep(RunStepContext context) override;
  kj::Promise<void> runRange(RunRangeContext context) override;
  kj::Promise<void> readBuffer(ReadBufferContext context) override;
  kj::Promise<void> snapshotState(SnapshotStateContext context) override;
  kj::Promise<void> awaitState(AwaitStateContext context) override;
  kj::Promise<void> health(HealthContext context) override;
  kj::Promise<void> shutdown(ShutdownContext context) override;
  kj::Promise<void> openDataPlane(OpenDataPlaneContext context) override;
  kj::Promise<void> connectDataPlane(ConnectDataPlaneContext context) override;
  kj::Promise<void> openReplicaGroup(OpenReplicaGroupContext context) override;
  kj::Promise<void> connectReplicaGroup(ConnectReplicaGroupContext context) override;

 private:
  using Job = kj::Function<void()>;
  enum class Health { kIdle, kRunning, kFailed };

  // What a step or range job hands back to the event-loop thread.
  struct StepReply {
    ir::StepOutputs outputs;
    bool finished = false;      // FinishStep ran (the last range of a step)
  };

  // Loop thread: queues `work` for the compute thread. The promise resolves
  // on the loop thread when it returns OK, or rejects with its error as
  // rpc::ToKjException (or with KJ's "fulfiller destroyed" if the service
  // stops before the job runs). Jobs hand values back through a
  // shared_ptr slot they fill before returning (a non-trivial promise value
  // trips GCC's -Wmaybe-uninitialized inside KJ's cross-thread fulfiller).
  kj::Promise<void> OnCompute(kj::Function<absl::Status()> work);
  void Post(Job job) ABSL_LOCKS_EXCLUDED(mu_);
  void ComputeLoop();
  void taskFailed(kj::Exception&& exception) override;

  // Loop thread: OK unless shutting down, a step call is pending, or the
  // state must be reloaded; then the program cached under `hash` or
  // FailedPrecondition.
  absl::StatusOr<std::shared_ptr<const ir::ActorProgram>> ProgramForStep(uint64_t step, uint64_t hash);
  // Loop thread: marks a step call pending until `done` completes or is
  // cancelled; a cancelled or failed one requires loadState.
  kj::Promise<void> TrackStep(uint64_t step, kj::Promise<void> done);

  // Loop thread: ResourceExhausted, naming the bytes, when the device says
  // how much it has free (a GPU) and a cached program's static peak needs
  // more: checked before the state is loaded.
  absl::Status CheckDeviceFits() const;
  // Compute thread: the current tensor of buffer `name` (readBuffer).
  absl::StatusOr<ir::HostTensor> CurrentBuffer(const std::string& name);
  // The whole state now: the executor's, and what loaded_state_ keeps
  // beside it (what the next program takes over).
  absl::StatusOr<ir::TensorMap> CurrentState() const;
  // Hands `state` to the executor's side: loaded_state_ keeps what it does not hold.
  void KeepBesideExecutor(ir::TensorMap state);
  // Compute thread: makes `program` (cached under `hash`) the current one.
  absl::Status UseProgram(uint64_t hash, const std::shared_ptr<const ir::ActorProgram>& program);
  // Compute thread: health around one step or range. BeginRunning is false
  // once the service stops (the job then does nothing); EndRunning aborts
  // the Transport when `status` is an error.
  bool BeginRunning() ABSL_LOCKS_EXCLUDED(mu_);
  void EndRunning(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  // Loop thread: FailedPrecondition after shutdown.
  absl::Status CheckOpen() const;

  std::string Name() const;  // "actor A"

  ActorService(Transport& transport, DataPlane* data_plane, ActorServiceOptions options,
               kj::Own<kj::PromiseFulfiller<void>> on_shutdown);

  Transport& transport_;
  DataPlane* const data_plane_;  // null: the transport needs no setup
  const ActorServiceOptions options_;
  kj::Own<kj::PromiseFulfiller<void>> on_shutdown_;
  kj::TaskSet tasks_;

  // Event-loop thread only.
  absl::flat_hash_map<uint64_t, std::shared_ptr<const ir::ActorProgram>> programs_;
  // Opened by openReplicaGroup, handed to the compute thread by
  // connectReplicaGroup.
  std::unique_ptr<ReplicaGroupOpening> opened_group_;
  enum class GroupSetup { kNone, kOpened, kConnecting, kConnected } group_setup_ = GroupSetup::kNone;
  bool step_pending_ = false;   // a runStep/runRange call awaits its reply
  bool shutting_down_ = false;
  enum class DataPlaneSetup { kNone, kOpened, kConnecting, kConnected } data_plane_setup_ = DataPlaneSetup::kNone;
  std::string needs_state_;     // non-empty: why runStep needs loadState first
  // Tensors stageState is assembling for the next loadState, by binding.
  std::map<std::string, rpc::TensorAssembler> staged_;

  // Compute thread only (after construction). The reducer is declared
  // before the executor, which borrows it.
  std::unique_ptr<Reducer> reducer_;
  cpu::KernelThreads kernel_threads_;
  StateWriter state_writer_;  // the checkpoint files, written behind the steps
  std::unique_ptr<Executor> executor_;
  uint64_t executor_hash_ = 0;
  // The state the running program does not hold (all of it before the
  // first program runs): what a later program may need. The tensors the
  // executor holds are never kept here too, or the state loaded first would
  // stay alive beside the state it became (twice the state's memory).
  ir::TensorMap loaded_state_;
  // The tensor readBuffer is handing out piece by piece, by name.
  std::pair<std::string, ir::HostTensor> read_cache_;
  bool have_state_ = false;
  int64_t range_step_ = -1;  // the step a runRange sequence is in, or -1
  absl::Time last_call_ = absl::Now();  // loop thread only

  mutable absl::Mutex mu_;
  absl::CondVar work_available_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  Health health_ ABSL_GUARDED_BY(mu_) = Health::kIdle;
  std::string last_error_ ABSL_GUARDED_BY(mu_);

  std::thread compute_thread_;  // last: starts after everything above exists
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_ACTOR_SERVICE_H_
