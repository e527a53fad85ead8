// ActorProgram: everything one actor runs in one training step, lowered by
// the controller's compiler and executed by the actor.
//
// It is plain data built from the closed op set (nothing in it is code), so
// it can be printed, hashed, cached and shipped. The controller produces it
// and the actor consumes it; they share this definition and nothing else.
//
// An actor has a table of buffers, each holding one tensor or nothing. The
// instruction stream reads and writes buffers by index:
//  - state buffers hold parameters and optimizer slots; they persist across
//    steps and start from the step's initializers;
//  - input buffers are filled by the caller at the start of each step (the
//    microbatches' data, the step number);
//  - every other buffer is written by an instruction during the step.
// Value type; not synchronized.
#ifndef TANDEM_IR_ACTOR_PROGRAM_H_
#define TANDEM_IR_ACTOR_PROGRAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace tandem::ir {

using BufferId = int32_t;

// A graph the actor runs: one stage's part of the step for one task kind
// (F, B, I or W), or the actor's share of the optimizer update. The graph's
// input nodes are bound, in program order (Graph::Inputs()), to an
// instruction's `inputs`; its outputs, in order, to the instruction's
// `outputs`.
struct Function {
  std::string name;  // e.g. "F2", "B1", "I0", "W3", "update"
  Graph graph;
  friend bool operator==(const Function&, const Function&) = default;
};

enum class InstructionKind : uint8_t {
  // Runs functions[function] on `inputs` and writes its outputs to `outputs`
  // (an output buffer's previous tensor, e.g. a state buffer's, is replaced).
  kRun,
  // Hands the tensors of `buffers` to actor `peer` under `tag`. Never blocks:
  // the runtime buffers sends. The buffers stay valid on this actor.
  kSend,
  // Waits (with a deadline) for the message `tag` from actor `peer` and
  // stores its tensors into `buffers`, in order.
  kReceive,
  // buffers[0] = buffers[0] + buffers[1] in f32 (cpu::AccumulateGradient), or
  // buffers[1] itself when buffers[0] is empty; buffers[1] is then released.
  // Gradients are accumulated in microbatch order this way.
  kAccumulate,
  // Releases `buffers`.
  kFree,
  // Reports buffers[0] as the step's result `result` for `microbatch` (e.g.
  // the loss); the buffer stays valid.
  kEmit,
  // Starts the ordered all-reduce `tag` of `buffers` (f32, reduced as one
  // bucket: their elements concatenated in order) among the actors of
  // `group`, the global actors that run this program, in replica order
  // (actor + r * num_actors for r = 0..num_replicas-1); see
  // ir/all_reduce.h. Returns at once: the reduction runs in
  // the background while later instructions run. Until the matching
  // kAllReduceWait no instruction may touch `buffers`. Holds
  // AllReduceStagingBytes of staging memory until then.
  kAllReduceStart,
  // Waits (with a deadline) for the all-reduce `tag` that this actor
  // started, on the same `buffers` and `group`; each buffer then holds the
  // sum of the group's buffers, added in replica order in f32.
  kAllReduceWait,
  // A piece of a fill job (controller/fill.h) in a bubble of this actor's
  // pipeline. Unless the message `tag` from actor `peer` has already arrived
  // (the receive the pipeline waits on next; `peer` -1: no such receive),
  // runs functions[function] on `inputs` into `outputs`, reports outputs[0]
  // as the result `result` of fill slot `microbatch`, and releases its
  // temporary outputs; an output that is a state buffer (a training piece's
  // new weights) keeps its new value. When that message is there, the
  // pipeline's own work takes precedence and the piece is skipped: nothing
  // runs or is reported. Either way it then releases `buffers`, the piece's
  // own inputs. Its temporary outputs count as live bytes while the piece
  // runs (ir::StaticPeakBytes).
  kFill,
};

const char* InstructionKindName(InstructionKind kind);

// The schedule task an instruction belongs to, for messages and timings:
// kind letter 'F', 'B', 'I', 'W', or 'U' for the update; stage -1 for the
// update, whose microbatch is -1, or the update's group in an asynchronous
// step that updates several times ("update.2").
struct TaskLabel {
  // 'X' for a fill piece, whose microbatch is its fill slot.
  char kind = 'U';
  int32_t stage = -1;
  int32_t microbatch = -1;
  std::string ToString() const;  // "F1.3", "update", "fill.2"
  friend bool operator==(const TaskLabel&, const TaskLabel&) = default;
};

struct Instruction {
  InstructionKind kind = InstructionKind::kRun;
  TaskLabel task;
  int32_t function = -1;            // kRun
  std::vector<BufferId> inputs;     // kRun
  std::vector<BufferId> outputs;    // kRun
  std::vector<BufferId> buffers;    // kSend, kReceive, kAccumulate, kFree, kEmit, kFill
  int32_t peer = -1;                // kSend, kReceive, kFill (-1: none)
  uint64_t tag = 0;                 // kSend, kReceive: unique per (sender, receiver) in a step; kFill
  std::string result;               // kEmit, kFill
  int32_t microbatch = -1;          // kEmit, kFill (the fill slot)
  std::vector<int32_t> group;       // kAllReduceStart, kAllReduceWait: actors in replica order
  friend bool operator==(const Instruction&, const Instruction&) = default;
};

enum class BufferKind : uint8_t { kState, kInput, kTemporary };

struct Buffer {
  std::string name;  // "loss@3", "h0.attn.qkv.w", "%41@2", "acc.wte.s0", ...
  TensorType type;
  BufferKind kind = BufferKind::kTemporary;
  // kState: the state tensor's name; kInput: the step input's name (a data
  // input of the microbatch graph, or "step").
  std::string binding;
  // kInput: which microbatch's data; for "step", -1, or which of an
  // asynchronous step's updates it numbers.
  int32_t microbatch = -1;
  friend bool operator==(const Buffer&, const Buffer&) = default;
};

// "state", "input", "temporary".
const char* BufferKindName(BufferKind kind);

// Data parallelism: `actor`, `num_actors` and every `peer` number the
// actors of ONE replica of the pipeline. The same program, compiled once,
// runs on each of the `num_replicas` replicas: on replica r it is global
// actor actor + r * num_actors, and its peers move by r * num_actors alike.
// All-reduce `group`s list global actors: this position in replica order.
struct ActorProgram {
  int32_t actor = 0;
  int32_t num_actors = 1;
  int32_t num_replicas = 1;
  std::vector<Function> functions;
  std::vector<Buffer> buffers;
  std::vector<Instruction> instructions;
  // Where each schedule task's instructions start: a driver that dispatches
  // task by task (for measurement) sends [task_starts[i], task_starts[i+1]).
  std::vector<int32_t> task_starts;
  // Live bytes: the sum of the sizes of the buffers that hold a tensor, plus
  // the staging of the all-reduces in flight. State and input buffers hold
  // one from the start; kRun, kReceive and kAccumulate fill buffers, kFree
  // and kAccumulate empty them; kAllReduceStart adds its staging bytes
  // (AllReduceStagingBytes) and kAllReduceWait removes them; kFill holds its
  // temporary outputs while it runs, then empties its buffers. This is the
  // maximum of live bytes at the start, after every instruction and while
  // every kFill runs (StaticPeakBytes), computed by the compiler from the
  // types; an executor measuring its real buffers the same way finds
  // exactly this when no fill piece is skipped, and less when one is.
  int64_t static_peak_bytes = 0;
  friend bool operator==(const ActorProgram&, const ActorProgram&) = default;
};

// The live bytes of `program` (static_peak_bytes's rule) before each of its
// instructions, and after the last: instructions.size() + 1 values, whose
// maximum is the static peak. The program's buffer ids must be in range
// (VerifyActorProgram).
std::vector<int64_t> LiveBytesBefore(const ActorProgram& program);

// The static peak of `program`'s stream by the rule of static_peak_bytes:
// the most of LiveBytesBefore, and of the live bytes while each kFill runs
// (before it, plus its temporary outputs). The program's buffer ids must be
// in range.
int64_t StaticPeakBytes(const ActorProgram& program);

// The most bytes `program` sends to any one peer in a step, each message
// counted as the data plane frames it (a 64-byte header, 96 bytes per
// tensor, every part padded to 64 bytes): what a ring from this actor must
// hold when its peer keeps every message of the step at once. The program's
// buffer ids must be in range.
int64_t MostBytesToOnePeer(const ActorProgram& program);

// A buffer's name for dumps and messages ("#7" when it has none); the index
// when out of range, so that printing never fails on a program the verifier
// would reject.
std::string BufferLabel(const ActorProgram& program, BufferId id);

// Readable dump: buffers, functions (by name and size) and one line per
// instruction, e.g. "  12  F1.3  run F1 (%4@3, w1) -> (%9@3)".
std::string PrintActorProgram(const ActorProgram& program, bool with_functions = false);

// The instruction ranges of per-task dispatch: [bounds[i], bounds[i + 1]),
// one per schedule task (instructions before the first task, if any, join
// the first range); bounds[0] == 0, bounds.back() == instructions.size(),
// and there is at least one range (an empty one for an empty program).
std::vector<int32_t> DispatchBounds(const ActorProgram& program);

// The replica group this program all-reduces over (the `group` of its
// all-reduces; the verifier allows one per program), or empty.
std::vector<int32_t> ReplicaGroupOf(const ActorProgram& program);

// The global actor that runs `program` as replica `replica`.
inline int32_t GlobalActor(const ActorProgram& program, int32_t replica) {
  return program.actor + replica * program.num_actors;
}

// The replica as which global actor `actor` runs `program`, of a job of
// `job_actors` actors (0: not checked, for an actor that does not know the
// job's size). InvalidArgument, "is for actor 1 of 2 on 1 replicas, expected
// actor 0 of 2", when `actor` is no replica of the program's position or
// the job is not num_actors * num_replicas actors.
absl::StatusOr<int32_t> ReplicaOf(const ActorProgram& program, int32_t actor, int32_t job_actors = 0);

// A content hash of everything in the program (functions included), stable
// across runs and machines: what an actor caches a program under.
uint64_t HashActorProgram(const ActorProgram& program);

// InvalidArgument when a program of `instructions` instructions and
// `buffers` buffers would pass kMaxProgramInstructions or kMaxProgramBuffers
// (ir/limits.h): what a decoder checks before it allocates either.
absl::Status CheckProgramSize(uint64_t instructions, uint64_t buffers);

// Checks the program's size (CheckProgramSize), indices (functions, buffers, peers, groups), arities of kRun
// against the function's inputs and outputs, that the types of bound buffers
// match the function's inputs and outputs, and that every all-reduce is
// started once, waited for once, and left alone in between.
absl::Status VerifyActorProgram(const ActorProgram& program);

}  // namespace tandem::ir

#endif  // TANDEM_IR_ACTOR_PROGRAM_H_
