// Executor: runs one actor's instruction stream (an ir::ActorProgram) on its
// Device (backends/device.h: the reference kernels by default), step after step.
//
// Its buffers hold TensorHandles (tensor_handle.h): host tensors, or device
// tensors when the Device is device-resident (Device::memory()). A resident
// executor uploads the state (LoadState) and the step's inputs (BeginStep,
// through pinned staging without waiting for the device: input_staging.h),
// keeps everything else on the device (sends and receives device tensors
// through Transport::SendDevice/ReceiveDevice, accumulates with
// Device::Accumulate), and downloads only what leaves for the controller:
// emitted results (copied asynchronously into pinned staging as they are
// emitted and collected by FinishStep, the step's one wait for the device:
// emit_staging.h), State() and ReadBuffer. Its all-reduces run on the device
// too, over the data plane (device_all_reduce.h); a host executor's go to
// its Reducer.
//
// It owns the actor's buffer table: state buffers (parameters, optimizer
// slots) persist across steps; input buffers are filled from the step's
// inputs at BeginStep and dropped at FinishStep; temporaries live between
// the instructions that fill and free them, and must all be empty again
// when the step ends. Instructions run strictly in program order; a Receive
// waits (up to its deadline) only when its instruction is reached. A fill
// piece (ir::InstructionKind::kFill) first asks the transport, without
// waiting, for the message the pipeline waits on next: when it is there the
// piece is skipped and the message kept for its receive.
//
// Phases: a new executor needs LoadState; then every step is BeginStep,
// RunRange over consecutive ranges that together cover the program, and
// FinishStep (RunStep does all three; the ranges allow task-by-task
// dispatch over ActorProgram::task_starts). A step that fails leaves state
// buffers possibly half-updated: the executor then needs LoadState again.
// The executor does not Abort the transport when it fails; whoever drives it
// (ThreadCluster, the actor process) decides that.
//
// Ownership: created by Create() and owned by its caller through
// unique_ptr; owns its program and tensors; borrows the Transport for the
// duration of a RunRange call. Not thread-safe: one thread drives one
// executor; different executors may run on different threads at once.
#ifndef TANDEM_ACTOR_EXECUTOR_H_
#define TANDEM_ACTOR_EXECUTOR_H_

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actor/collective.h"
#include "actor/device_all_reduce.h"
#include "actor/emit_staging.h"
#include "actor/input_staging.h"
#include "actor/transport.h"
#include "backends/cpu/cpu_device.h"
#include "backends/device.h"
#include "backends/tensor_handle.h"
#include "ir/actor_program.h"
#include "ir/host_tensor.h"
#include "ir/step_io.h"

namespace tandem::actor {

class Executor {
 public:
  // Verifies `program` (ir::VerifyActorProgram) and builds an executor with
  // empty buffers, whose `run` instructions compute on `device`, running
  // the program as replica `replica` of its pipeline (ir/actor_program.h:
  // the global actor and its peers move by replica * num_actors).
  // InvalidArgument for a replica outside [0, program.num_replicas).
  static absl::StatusOr<std::unique_ptr<Executor>> Create(ir::ActorProgram program,
                                                          std::shared_ptr<backends::Device> device = cpu::CpuDevice(),
                                                          int32_t replica = 0);

  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  ~Executor();

  const ir::ActorProgram& program() const { return program_; }
  const backends::Device& device() const { return *device_; }
  // The global actor this executor runs as, and its replica.
  int32_t actor() const { return ir::GlobalActor(program_, replica_); }
  int32_t replica() const { return replica_; }

  // Empties every buffer and fills each state buffer with state[binding]
  // (other entries are ignored, so the whole model's state may be passed).
  // A missing or mistyped entry is InvalidArgument naming the buffer.
  absl::Status LoadState(const ir::TensorMap& state);

  // The state buffers' current tensors by binding (on a host device they
  // share storage with the executor's; no one writes tensors in place). A
  // resident executor downloads them: the device's errors.
  absl::StatusOr<ir::TensorMap> State() const;
  // Whether the program binds a state tensor called `binding`.
  bool HoldsState(const std::string& binding) const;

  // Starts step `step` (used in messages): fills every input buffer with
  // inputs[{binding, microbatch}]. A missing or mistyped entry is
  // InvalidArgument naming the buffer. FailedPrecondition without state or
  // inside a step.
  absl::Status BeginStep(int64_t step, const ir::StepInputs& inputs);

  // Runs instructions [begin, end). `begin` must be where the last range
  // stopped (0 at first). Each Receive waits at most `receive_timeout`. An
  // error carries the context "actor A, step S, instruction I (F1.3 run F1): "
  // and keeps its code; it ends the step.
  absl::Status RunRange(int32_t begin, int32_t end, Transport& transport, absl::Duration receive_timeout);

  // Ends the step once every instruction ran: checks that every temporary
  // is empty (Internal naming the buffer if not), drops the inputs, and
  // returns what the step emitted and measured (timings from BeginStep, on
  // steady_clock; on a resident device, the device bytes the step's buffers
  // took at most, sampled after each instruction: the allocations of the
  // device memory beyond those it held at BeginStep besides the state and
  // inputs, e.g. the data plane's rings).
  absl::StatusOr<ir::StepOutputs> FinishStep();

  // BeginStep, RunRange over the whole program, the transport's
  // SettleDeviceSends, FinishStep (a driver of ranges settles likewise
  // before the last FinishStep).
  absl::StatusOr<ir::StepOutputs> RunStep(int64_t step, const ir::StepInputs& inputs, Transport& transport,
                                      absl::Duration receive_timeout);

  // Debugging: the current tensor of the buffer called `name` (a buffer's
  // name in the program, e.g. "%26@0" or "loss@3", or a state binding).
  // NotFound for no such buffer; FailedPrecondition for one that holds
  // nothing now (not yet filled, or freed after its last use).
  absl::StatusOr<ir::HostTensor> ReadBuffer(const std::string& name) const;

  // The next instruction RunRange will run in the current step.
  int32_t next_instruction() const { return next_instruction_; }

  // Where a host executor's all-reduces run (data parallelism): borrowed,
  // and must outlive every step that reduces; null (the default) for a
  // program without all-reduces, whose kAllReduceStart would fail with
  // FailedPrecondition. A device-resident executor reduces on the device
  // over the data plane instead and does not use it. The reduced bucket is waited for with the receive
  // timeout as its deadline. kAllReduceStart's timing is the reduction's own
  // span, from when it was issued to when the Reducer finished it, so that
  // traces draw it where it was in flight.
  void UseReducer(Reducer* reducer) { reducer_ = reducer; }

 private:
  enum class Phase { kNeedsState, kIdle, kInStep };

  Executor(ir::ActorProgram program, std::shared_ptr<backends::Device> device, int32_t replica);
  // steady_clock nanoseconds, as ir::StepOutputs::origin_ns.
  static int64_t SteadyNowNs();
  // A peer of the program as the global actor of this replica.
  int32_t Peer(const ir::Instruction& instruction) const {
    return instruction.peer + replica_ * program_.num_actors;
  }

  absl::Status Execute(int32_t index, Transport& transport, absl::Duration receive_timeout);
  // Runs instruction `index`'s function (kRun, kFill).
  absl::Status Run(int32_t index);
  absl::Status Receive(const ir::Instruction& instruction, Transport& transport, absl::Duration receive_timeout);
  absl::Status Accumulate(const ir::Instruction& instruction);
  absl::Status Emit(const ir::Instruction& instruction);
  // Records `tensor` as the step's result instruction.result for
  // instruction.microbatch (kEmit, kFill); Internal when it already is.
  absl::Status Report(const ir::Instruction& instruction, const backends::TensorHandle& tensor);
  absl::Status Fill(int32_t index, Transport& transport);
  absl::Status AllReduceStart(int32_t index, Transport& transport, absl::Duration receive_timeout);
  // AllReduceStart's two ways: on a resident device over the data plane, or
  // a host bucket handed to the Reducer.
  absl::Status StartOnDevice(const ir::Instruction& instruction, Transport& transport);
  absl::Status StartOnReducer(const ir::Instruction& instruction, absl::Duration receive_timeout);
  absl::Status AllReduceWait(const ir::Instruction& instruction, Transport& transport,
                             absl::Duration receive_timeout);
  // The staging bytes of an all-reduce instruction (ir::AllReduceStagingBytes).
  int64_t StagingBytes(const ir::Instruction& instruction) const;

  // The tensor of a buffer that must hold one; Internal if it is empty.
  absl::StatusOr<const backends::TensorHandle*> Read(ir::BufferId id) const;
  // Stores `tensor` (of the buffer's type and where this device keeps
  // buffers, or Internal) into the buffer.
  absl::Status Write(ir::BufferId id, backends::TensorHandle tensor);
  // Sends or receives a message of handles, on the device when resident.
  absl::Status SendHandles(Transport& transport, int32_t peer, uint64_t tag,
                           std::vector<backends::TensorHandle> tensors);
  absl::StatusOr<std::vector<backends::TensorHandle>> ReceiveHandles(Transport& transport, int32_t peer, uint64_t tag,
                                                                     absl::Time deadline);
  // Samples the device memory for the step's device peak (resident only).
  void SampleDevicePeak();
  void Release(ir::BufferId id);
  void ReleaseAll();
  std::string BufferName(ir::BufferId id) const;
  std::string InstructionContext(int32_t index) const;
  absl::Status Fail(absl::Status status);

  ir::ActorProgram program_;
  std::shared_ptr<backends::Device> device_;
  int32_t replica_ = 0;
  // For each function, its input nodes' names in program order: kRun binds
  // instruction.inputs[k] to input_names_[function][k].
  std::vector<std::vector<std::string>> input_names_;
  // For each function, compiled for device_ once when the executor is made
  // (after device_ here: destroyed before it).
  std::vector<std::unique_ptr<backends::Executable>> executables_;

  Phase phase_ = Phase::kNeedsState;
  backends::DeviceMemory* const memory_;  // device_->memory(): null when buffers are host tensors
  std::vector<backends::TensorHandle> buffers_;  // by BufferId; undefined = empty
  int64_t device_baseline_ = 0;       // allocated device bytes not the step's (resident)
  int64_t live_bytes_ = 0;
  int32_t next_instruction_ = 0;
  int64_t step_ = 0;         // the step in progress, or the last one
  // When the step's last instruction so far ended (SteadyNowNs; its origin
  // before any): FinishStep's settling is measured from it.
  int64_t last_instruction_end_ns_ = 0;
  ir::StepOutputs outputs_;  // of the step in progress
  Reducer* reducer_ = nullptr;
  // A resident device's all-reduces (null for host buffers).
  std::unique_ptr<DeviceAllReduce> device_reduce_;
  // A resident device's step inputs, uploaded asynchronously by BeginStep,
  // and its emitted results, copied asynchronously during the step and
  // collected at its end (both null for host buffers).
  std::unique_ptr<InputStaging> inputs_;
  std::unique_ptr<EmitStaging> emits_;
  // The instruction of every executable Run of this step, in order: the
  // device's deferred failures name a run (Device::SettleRuns).
  std::vector<int32_t> run_instructions_;
  absl::Duration step_wait_ = absl::Minutes(1);  // the step's receive timeout, for its end's wait
  // Messages a fill piece found already there, claimed from the transport
  // for the receive that waits on them: (global peer, tag) -> tensors.
  std::map<std::pair<int32_t, uint64_t>, std::vector<backends::TensorHandle>> claimed_;
  // All-reduces started and not yet waited for in this step: tag -> the
  // index in outputs_.timings of their start instruction.
  std::map<uint64_t, size_t> reducing_;
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_EXECUTOR_H_
