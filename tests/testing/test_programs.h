// Small hand-built ActorPrograms for the tests of the actor, the devices and
// the control plane: function graphs traced with a Tracer, and terse
// constructors for buffers and instructions.
#ifndef TANDEM_TESTS_TESTING_TEST_PROGRAMS_H_
#define TANDEM_TESTS_TESTING_TEST_PROGRAMS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ir/actor_program.h"
#include "ir/host_tensor.h"
#include "ir/tensor.h"
#include "ir/tracer.h"

namespace tandem::actor::testing {

inline ir::TensorType F32(ir::Shape shape) { return {ir::DType::kF32, std::move(shape)}; }
inline ir::TensorType I32(ir::Shape shape) { return {ir::DType::kI32, std::move(shape)}; }

// Traces `body` (which declares inputs with t.Input and returns the named
// outputs) into a Function called `name`.
ir::Function TraceFunction(const std::string& name,
                           const std::function<std::vector<std::pair<std::string, Tensor>>(Tracer&)>& body);

ir::Buffer StateBuffer(const std::string& binding, ir::TensorType type);
ir::Buffer InputBuffer(const std::string& name, const std::string& binding, int32_t microbatch, ir::TensorType type);
ir::Buffer TemporaryBuffer(const std::string& name, ir::TensorType type);

ir::Instruction RunInstruction(ir::TaskLabel task, int32_t function, std::vector<ir::BufferId> inputs,
                               std::vector<ir::BufferId> outputs);
ir::Instruction SendInstruction(ir::TaskLabel task, int32_t peer, uint64_t tag, std::vector<ir::BufferId> buffers);
ir::Instruction ReceiveInstruction(ir::TaskLabel task, int32_t peer, uint64_t tag, std::vector<ir::BufferId> buffers);
ir::Instruction AccumulateInstruction(ir::TaskLabel task, ir::BufferId accumulator, ir::BufferId gradient);
ir::Instruction FreeInstruction(ir::TaskLabel task, std::vector<ir::BufferId> buffers);
ir::Instruction EmitInstruction(ir::TaskLabel task, const std::string& result, int32_t microbatch, ir::BufferId buffer);

// The peak live bytes of `program` by the rule of actor_program.h, computed
// independently of the verifier (tests fill static_peak_bytes with it).
int64_t PeakLiveBytes(const ir::ActorProgram& program);
// Sets program.static_peak_bytes = PeakLiveBytes(program) and returns it.
ir::ActorProgram& WithPeak(ir::ActorProgram& program);

// Deterministic f32 values of `type`: start, start + step, ...
ir::HostTensor Iota(const ir::TensorType& type, float start, float step);

// A two-stage forward for two actors: actor 0 runs F0 (h = relu(x @ w0)) for
// each microbatch and sends h; actor 1 receives it (in the reverse
// microbatch order, to show that tags, not arrival, match messages), runs F1
// (loss = mean(h @ w1)) and emits "loss".
struct TwoStageForward {
  ir::ActorProgram actor0;
  ir::ActorProgram actor1;
};
TwoStageForward MakeTwoStageForward(int32_t num_microbatches);

// A fill piece (ir::InstructionKind::kFill) between two actors: actor 0
// sends its input "h" (f32[3], microbatch 0) to actor 1 under tag 7; actor 1
// first runs the piece "fill" (y = x * 2 on its input "fill/x" of fill slot
// 0, reported as "fill"[0]), guarded by that message unless `guarded` is
// false, then receives it and emits it as "h"[0]. Static peaks by
// ir::StaticPeakBytes: actor 1's counts the piece's output.
struct FillPair {
  ir::ActorProgram sender;
  ir::ActorProgram filler;
};
FillPair MakeFillPair(bool guarded = true);

// One actor looking up ids i32[3] ("ids", microbatch 0) in a zero table f32[5, 2]
// ("table"): an id outside [0, 5) makes the kernel fail.
ir::ActorProgram MakeEmbeddingLookup();

}  // namespace tandem::actor::testing

#endif  // TANDEM_TESTS_TESTING_TEST_PROGRAMS_H_
