#include "tests/testing/test_programs.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tandem::actor::testing {

ir::Function TraceFunction(const std::string& name,
                           const std::function<std::vector<std::pair<std::string, Tensor>>(Tracer&)>& body) {
  Tracer tracer;
  for (auto& [output, tensor] : body(tracer)) tracer.graph().AddOutput(output, tensor.id());
  if (!tracer.status().ok()) std::abort();
  return ir::Function{name, tracer.graph()};
}

ir::Buffer StateBuffer(const std::string& binding, ir::TensorType type) {
  return ir::Buffer{binding, std::move(type), ir::BufferKind::kState, binding, -1};
}
ir::Buffer InputBuffer(const std::string& name, const std::string& binding, int32_t microbatch, ir::TensorType type) {
  return ir::Buffer{name, std::move(type), ir::BufferKind::kInput, binding, microbatch};
}
ir::Buffer TemporaryBuffer(const std::string& name, ir::TensorType type) {
  return ir::Buffer{name, std::move(type), ir::BufferKind::kTemporary, "", -1};
}

ir::Instruction RunInstruction(ir::TaskLabel task, int32_t function, std::vector<ir::BufferId> inputs,
                               std::vector<ir::BufferId> outputs) {
  ir::Instruction instruction;
  instruction.kind = ir::InstructionKind::kRun;
  instruction.task = task;
  instruction.function = function;
  instruction.inputs = std::move(inputs);
  instruction.outputs = std::move(outputs);
  return instruction;
}

namespace {
ir::Instruction WithBuffers(ir::InstructionKind kind, ir::TaskLabel task, std::vector<ir::BufferId> buffers) {
  ir::Instruction instruction;
  instruction.kind = kind;
  instruction.task = task;
  instruction.buffers = std::move(buffers);
  return instruction;
}
}  // namespace

ir::Instruction SendInstruction(ir::TaskLabel task, int32_t peer, uint64_t tag, std::vector<ir::BufferId> buffers) {
  ir::Instruction instruction = WithBuffers(ir::InstructionKind::kSend, task, std::move(buffers));
  instruction.peer = peer;
  instruction.tag = tag;
  return instruction;
}
ir::Instruction ReceiveInstruction(ir::TaskLabel task, int32_t peer, uint64_t tag, std::vector<ir::BufferId> buffers) {
  ir::Instruction instruction = WithBuffers(ir::InstructionKind::kReceive, task, std::move(buffers));
  instruction.peer = peer;
  instruction.tag = tag;
  return instruction;
}
ir::Instruction AccumulateInstruction(ir::TaskLabel task, ir::BufferId accumulator, ir::BufferId gradient) {
  return WithBuffers(ir::InstructionKind::kAccumulate, task, {accumulator, gradient});
}
ir::Instruction FreeInstruction(ir::TaskLabel task, std::vector<ir::BufferId> buffers) {
  return WithBuffers(ir::InstructionKind::kFree, task, std::move(buffers));
}
ir::Instruction EmitInstruction(ir::TaskLabel task, const std::string& result, int32_t microbatch,
                                ir::BufferId buffer) {
  ir::Instruction instruction = WithBuffers(ir::InstructionKind::kEmit, task, {buffer});
  instruction.result = result;
  instruction.microbatch = microbatch;
  return instruction;
}

int64_t PeakLiveBytes(const ir::ActorProgram& program) {
  const std::vector<int64_t> live = ir::LiveBytesBefore(program);
  return *std::max_element(live.begin(), live.end());
}

ir::ActorProgram& WithPeak(ir::ActorProgram& program) {
  program.static_peak_bytes = PeakLiveBytes(program);
  return program;
}

ir::HostTensor Iota(const ir::TensorType& type, float start, float step) {
  ir::HostTensor tensor(type);
  float* data = tensor.f32();
  for (int64_t i = 0; i < tensor.num_elements(); ++i) data[i] = start + step * static_cast<float>(i);
  return tensor;
}

FillPair MakeFillPair(bool guarded) {
  FillPair pair;
  ir::ActorProgram& sender = pair.sender;
  sender.actor = 0;
  sender.num_actors = 2;
  sender.buffers.push_back(InputBuffer("h@0", "h", 0, F32({3})));
  sender.task_starts.push_back(0);
  sender.instructions.push_back(SendInstruction({'F', 0, 0}, 1, 7, {0}));
  sender.static_peak_bytes = ir::StaticPeakBytes(sender);

  ir::ActorProgram& filler = pair.filler;
  filler.actor = 1;
  filler.num_actors = 2;
  filler.functions.push_back(TraceFunction("fill", [](Tracer& t) -> std::vector<std::pair<std::string, Tensor>> {
    Tensor x = t.Input("x", F32({3}));
    return {{"y", x * 2.0}};
  }));
  filler.buffers.push_back(InputBuffer("fill/x@0", "fill/x", 0, F32({3})));
  filler.buffers.push_back(TemporaryBuffer("fill.y@0", F32({3})));
  filler.buffers.push_back(TemporaryBuffer("h@0", F32({3})));
  ir::Instruction fill{.kind = ir::InstructionKind::kFill,
                       .task = {'X', -1, 0},
                       .function = 0,
                       .inputs = {0},
                       .outputs = {1},
                       .buffers = {0},
                       .result = "fill",
                       .microbatch = 0};
  if (guarded) {
    fill.peer = 0;
    fill.tag = 7;
  }
  filler.task_starts.push_back(0);
  filler.instructions.push_back(fill);
  filler.instructions.push_back(ReceiveInstruction({'F', 1, 0}, 0, 7, {2}));
  filler.instructions.push_back(EmitInstruction({'F', 1, 0}, "h", 0, 2));
  filler.instructions.push_back(FreeInstruction({'F', 1, 0}, {2}));
  filler.static_peak_bytes = ir::StaticPeakBytes(filler);
  return pair;
}

TwoStageForward MakeTwoStageForward(int32_t num_microbatches) {
  TwoStageForward result;
  ir::ActorProgram& a0 = result.actor0;
  a0.actor = 0;
  a0.num_actors = 2;
  a0.functions.push_back(TraceFunction("F0", [](Tracer& t) -> std::vector<std::pair<std::string, Tensor>> {
    Tensor x = t.Input("x", F32({2, 3}));
    Tensor w = t.Parameter("w0", {3, 4}, init::Zeros());
    return {{"h", relu(matmul(x, w))}};
  }));
  a0.buffers.push_back(StateBuffer("w0", F32({3, 4})));
  for (int32_t m = 0; m < num_microbatches; ++m) {
    a0.buffers.push_back(InputBuffer(absl::StrCat("x@", m), "x", m, F32({2, 3})));
    a0.buffers.push_back(TemporaryBuffer(absl::StrCat("h@", m), F32({2, 4})));
  }
  for (int32_t m = 0; m < num_microbatches; ++m) {
    const ir::TaskLabel task{'F', 0, m};
    const ir::BufferId x = 1 + 2 * m, h = 2 + 2 * m;
    a0.task_starts.push_back(static_cast<int32_t>(a0.instructions.size()));
    a0.instructions.push_back(RunInstruction(task, 0, {x, 0}, {h}));
    a0.instructions.push_back(SendInstruction(task, 1, 100 + m, {h}));
    a0.instructions.push_back(FreeInstruction(task, {h}));
  }
  WithPeak(a0);

  ir::ActorProgram& a1 = result.actor1;
  a1.actor = 1;
  a1.num_actors = 2;
  a1.functions.push_back(TraceFunction("F1", [](Tracer& t) -> std::vector<std::pair<std::string, Tensor>> {
    Tensor h = t.Input("h", F32({2, 4}));
    Tensor w = t.Parameter("w1", {4, 1}, init::Zeros());
    return {{"loss", mean(matmul(h, w))}};
  }));
  a1.buffers.push_back(StateBuffer("w1", F32({4, 1})));
  for (int32_t m = 0; m < num_microbatches; ++m) {
    a1.buffers.push_back(TemporaryBuffer(absl::StrCat("h@", m), F32({2, 4})));
    a1.buffers.push_back(TemporaryBuffer(absl::StrCat("loss@", m), F32({})));
  }
  for (int32_t m = num_microbatches - 1; m >= 0; --m) {
    const ir::TaskLabel task{'F', 1, m};
    const ir::BufferId h = 1 + 2 * m, loss = 2 + 2 * m;
    a1.task_starts.push_back(static_cast<int32_t>(a1.instructions.size()));
    a1.instructions.push_back(ReceiveInstruction(task, 0, 100 + m, {h}));
    a1.instructions.push_back(RunInstruction(task, 0, {h, 0}, {loss}));
    a1.instructions.push_back(FreeInstruction(task, {h}));
    a1.instructions.push_back(EmitInstruction(task, "loss", m, loss));
    a1.instructions.push_back(FreeInstruction(task, {loss}));
  }
  WithPeak(a1);
  return result;
}

ir::ActorProgram MakeEmbeddingLookup() {
  ir::ActorProgram program;
  program.functions.push_back(TraceFunction("F0", [](Tracer& t) -> std::vector<std::pair<std::string, Tensor>> {
    Tensor table = t.Parameter("table", {5, 2}, init::Zeros());
    Tensor ids = t.Input("ids", I32({3}));
    return {{"e", embedding(table, ids)}};
  }));
  program.buffers = {StateBuffer("table", F32({5, 2})), InputBuffer("ids@0", "ids", 0, I32({3})),
                     TemporaryBuffer("e@0", F32({3, 2}))};
  program.instructions = {RunInstruction({'F', 0, 0}, 0, {0, 1}, {2}), FreeInstruction({'F', 0, 0}, {2})};
  WithPeak(program);
  return program;
}

}  // namespace tandem::actor::testing
