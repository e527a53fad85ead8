#include "rpc/program_codec.h"

#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "rpc/capnp_text.h"
#include "rpc/status_convert.h"

namespace tandem::rpc {
namespace {

absl::string_view View(capnp::Text::Reader text) { return absl::string_view(text.cStr(), text.size()); }

wire::DType ToWire(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF32: return wire::DType::F32;
    case ir::DType::kI32: return wire::DType::I32;
    case ir::DType::kBF16: return wire::DType::BF16;
    case ir::DType::kF16: return wire::DType::F16;
  }
  return wire::DType::F32;
}

absl::StatusOr<ir::DType> FromWire(wire::DType dtype, absl::string_view what) {
  switch (dtype) {
    case wire::DType::F32: return ir::DType::kF32;
    case wire::DType::I32: return ir::DType::kI32;
    case wire::DType::BF16: return ir::DType::kBF16;
    case wire::DType::F16: return ir::DType::kF16;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": unknown dtype ", static_cast<int>(dtype)));
}

wire::BufferKind ToWire(ir::BufferKind kind) {
  switch (kind) {
    case ir::BufferKind::kState: return wire::BufferKind::STATE;
    case ir::BufferKind::kInput: return wire::BufferKind::INPUT;
    case ir::BufferKind::kTemporary: return wire::BufferKind::TEMPORARY;
  }
  return wire::BufferKind::TEMPORARY;
}

absl::StatusOr<ir::BufferKind> FromWire(wire::BufferKind kind, absl::string_view what) {
  switch (kind) {
    case wire::BufferKind::STATE: return ir::BufferKind::kState;
    case wire::BufferKind::INPUT: return ir::BufferKind::kInput;
    case wire::BufferKind::TEMPORARY: return ir::BufferKind::kTemporary;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": unknown buffer kind ", static_cast<int>(kind)));
}

wire::InstructionKind ToWire(ir::InstructionKind kind) {
  switch (kind) {
    case ir::InstructionKind::kRun: return wire::InstructionKind::RUN;
    case ir::InstructionKind::kSend: return wire::InstructionKind::SEND;
    case ir::InstructionKind::kReceive: return wire::InstructionKind::RECEIVE;
    case ir::InstructionKind::kAccumulate: return wire::InstructionKind::ACCUMULATE;
    case ir::InstructionKind::kFree: return wire::InstructionKind::FREE;
    case ir::InstructionKind::kEmit: return wire::InstructionKind::EMIT;
    case ir::InstructionKind::kAllReduceStart: return wire::InstructionKind::ALL_REDUCE_START;
    case ir::InstructionKind::kAllReduceWait: return wire::InstructionKind::ALL_REDUCE_WAIT;
    case ir::InstructionKind::kFill: return wire::InstructionKind::FILL;
  }
  return wire::InstructionKind::RUN;
}

absl::StatusOr<ir::InstructionKind> FromWire(wire::InstructionKind kind, absl::string_view what) {
  switch (kind) {
    case wire::InstructionKind::RUN: return ir::InstructionKind::kRun;
    case wire::InstructionKind::SEND: return ir::InstructionKind::kSend;
    case wire::InstructionKind::RECEIVE: return ir::InstructionKind::kReceive;
    case wire::InstructionKind::ACCUMULATE: return ir::InstructionKind::kAccumulate;
    case wire::InstructionKind::FREE: return ir::InstructionKind::kFree;
    case wire::InstructionKind::EMIT: return ir::InstructionKind::kEmit;
    case wire::InstructionKind::ALL_REDUCE_START: return ir::InstructionKind::kAllReduceStart;
    case wire::InstructionKind::ALL_REDUCE_WAIT: return ir::InstructionKind::kAllReduceWait;
    case wire::InstructionKind::FILL: return ir::InstructionKind::kFill;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": unknown instruction kind ", static_cast<int>(kind)));
}

template <typename T>
void EncodeInts(const std::vector<T>& values, typename capnp::List<T>::Builder builder) {
  for (size_t i = 0; i < values.size(); ++i) builder.set(i, values[i]);
}

template <typename T>
std::vector<T> DecodeInts(typename capnp::List<T>::Reader reader) {
  std::vector<T> values;
  values.reserve(reader.size());
  for (T value : reader) values.push_back(value);
  return values;
}

std::string InstructionName(size_t index) { return absl::StrCat("instruction ", index); }

}  // namespace

void EncodeTensorType(const ir::TensorType& type, wire::TensorType::Builder builder) {
  builder.setDtype(ToWire(type.dtype));
  EncodeInts<int64_t>(type.shape, builder.initShape(type.shape.size()));
}

namespace {

absl::StatusOr<ir::TensorType> ReadTensorType(wire::TensorType::Reader reader, absl::string_view what) {
  absl::StatusOr<ir::DType> dtype = FromWire(reader.getDtype(), what);
  if (!dtype.ok()) return dtype.status();
  ir::TensorType type{*dtype, DecodeInts<int64_t>(reader.getShape())};
  // Guard the element count against overflow before anyone multiplies.
  int64_t elements = 1;
  for (int64_t extent : type.shape) {
    if (extent < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": negative extent in shape ", ir::ShapeToString(type.shape)));
    }
    if (extent != 0 && elements > std::numeric_limits<int32_t>::max() / extent) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": shape ", ir::ShapeToString(type.shape), " is too large"));
    }
    elements *= extent;
  }
  return type;
}

}  // namespace

absl::StatusOr<ir::TensorType> DecodeTensorType(wire::TensorType::Reader reader,
                                                absl::string_view what) {
  return CatchMalformedMessage(what, [&] { return ReadTensorType(reader, what); });
}

void EncodeTensor(const ir::HostTensor& tensor, wire::Tensor::Builder builder) {
  EncodeTensorType(tensor.type(), builder.initType());
  auto bytes = reinterpret_cast<const capnp::byte*>(tensor.data());
  builder.setData(capnp::Data::Reader(bytes, static_cast<size_t>(tensor.num_bytes())));
}

namespace {

absl::StatusOr<ir::HostTensor> ReadTensor(wire::Tensor::Reader reader, absl::string_view what) {
  absl::StatusOr<ir::TensorType> type = ReadTensorType(reader.getType(), what);
  if (!type.ok()) return type.status();
  capnp::Data::Reader data = reader.getData();
  if (type->num_bytes() > kMaxControlTensorBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s: %s is %d bytes, above the control plane's %d (use the data plane)", what,
        ir::TypeToString(*type), type->num_bytes(), kMaxControlTensorBytes));
  }
  if (static_cast<int64_t>(data.size()) != type->num_bytes()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s: %s needs %d bytes but %d arrived", what, ir::TypeToString(*type),
        type->num_bytes(), data.size()));
  }
  absl::StatusOr<ir::HostTensor> tensor = ir::HostTensor::Allocate(*type);
  if (!tensor.ok()) {
    return absl::Status(tensor.status().code(), absl::StrCat("tensor ", what, ": ", tensor.status().message()));
  }
  if (data.size() > 0) std::memcpy(tensor->data(), data.begin(), data.size());
  return tensor;
}

}  // namespace

absl::StatusOr<ir::HostTensor> DecodeTensor(wire::Tensor::Reader reader, absl::string_view what) {
  return CatchMalformedMessage(absl::StrCat("tensor ", what), [&] { return ReadTensor(reader, what); });
}

void EncodeProgram(const ir::ActorProgram& program, wire::ActorProgram::Builder builder) {
  builder.setActor(program.actor);
  builder.setNumActors(program.num_actors);
  builder.setNumReplicas(program.num_replicas);
  builder.setStaticPeakBytes(program.static_peak_bytes);

  auto functions = builder.initFunctions(program.functions.size());
  for (size_t i = 0; i < program.functions.size(); ++i) {
    const ir::Function& function = program.functions[i];
    functions[i].setName(AsText(function.name));
    functions[i].setGraphText(AsText(ir::PrintGraph(function.graph)));
  }

  auto buffers = builder.initBuffers(program.buffers.size());
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    const ir::Buffer& buffer = program.buffers[i];
    auto out = buffers[i];
    out.setName(AsText(buffer.name));
    EncodeTensorType(buffer.type, out.initType());
    out.setKind(ToWire(buffer.kind));
    out.setBinding(AsText(buffer.binding));
    out.setMicrobatch(buffer.microbatch);
  }

  auto instructions = builder.initInstructions(program.instructions.size());
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const ir::Instruction& instruction = program.instructions[i];
    auto out = instructions[i];
    out.setKind(ToWire(instruction.kind));
    auto task = out.initTask();
    task.setKind(static_cast<uint8_t>(instruction.task.kind));
    task.setStage(instruction.task.stage);
    task.setMicrobatch(instruction.task.microbatch);
    out.setFunction(instruction.function);
    EncodeInts<int32_t>(instruction.inputs, out.initInputs(instruction.inputs.size()));
    EncodeInts<int32_t>(instruction.outputs, out.initOutputs(instruction.outputs.size()));
    EncodeInts<int32_t>(instruction.buffers, out.initBuffers(instruction.buffers.size()));
    out.setPeer(instruction.peer);
    out.setTag(instruction.tag);
    out.setResult(AsText(instruction.result));
    out.setMicrobatch(instruction.microbatch);
    EncodeInts<int32_t>(instruction.group, out.initGroup(instruction.group.size()));
  }

  EncodeInts<int32_t>(program.task_starts, builder.initTaskStarts(program.task_starts.size()));
}

namespace {

absl::StatusOr<ir::ActorProgram> ReadProgram(wire::ActorProgram::Reader reader) {
  ir::ActorProgram program;
  program.actor = reader.getActor();
  program.num_actors = reader.getNumActors();
  program.num_replicas = reader.getNumReplicas();
  program.static_peak_bytes = reader.getStaticPeakBytes();
  if (absl::Status status = ir::CheckProgramSize(reader.getInstructions().size(), reader.getBuffers().size());
      !status.ok()) {
    return status;
  }

  for (auto function : reader.getFunctions()) {
    std::string name(View(function.getName()));
    absl::StatusOr<ir::Graph> graph = ir::ParseGraph(View(function.getGraphText()), name);
    if (!graph.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("function ", name, ": ", graph.status().message()));
    }
    program.functions.push_back(ir::Function{std::move(name), *std::move(graph)});
  }

  for (auto buffer : reader.getBuffers()) {
    ir::Buffer out;
    out.name = std::string(View(buffer.getName()));
    std::string what = absl::StrCat("buffer ", out.name);
    absl::StatusOr<ir::TensorType> type = ReadTensorType(buffer.getType(), what);
    if (!type.ok()) return type.status();
    out.type = *std::move(type);
    absl::StatusOr<ir::BufferKind> kind = FromWire(buffer.getKind(), what);
    if (!kind.ok()) return kind.status();
    out.kind = *kind;
    out.binding = std::string(View(buffer.getBinding()));
    out.microbatch = buffer.getMicrobatch();
    program.buffers.push_back(std::move(out));
  }

  size_t index = 0;
  for (auto instruction : reader.getInstructions()) {
    ir::Instruction out;
    absl::StatusOr<ir::InstructionKind> kind = FromWire(instruction.getKind(), InstructionName(index));
    if (!kind.ok()) return kind.status();
    out.kind = *kind;
    auto task = instruction.getTask();
    out.task.kind = static_cast<char>(task.getKind());
    out.task.stage = task.getStage();
    out.task.microbatch = task.getMicrobatch();
    out.function = instruction.getFunction();
    out.inputs = DecodeInts<int32_t>(instruction.getInputs());
    out.outputs = DecodeInts<int32_t>(instruction.getOutputs());
    out.buffers = DecodeInts<int32_t>(instruction.getBuffers());
    out.peer = instruction.getPeer();
    out.tag = instruction.getTag();
    out.result = std::string(View(instruction.getResult()));
    out.microbatch = instruction.getMicrobatch();
    out.group = DecodeInts<int32_t>(instruction.getGroup());
    program.instructions.push_back(std::move(out));
    ++index;
  }

  program.task_starts = DecodeInts<int32_t>(reader.getTaskStarts());

  absl::Status verified = ir::VerifyActorProgram(program);
  if (!verified.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", program.actor,
                                                   ": received program does not verify: ",
                                                   verified.message()));
  }
  return program;
}

}  // namespace

absl::StatusOr<ir::ActorProgram> DecodeProgram(wire::ActorProgram::Reader reader) {
  return CatchMalformedMessage("program", [&] { return ReadProgram(reader); });
}

absl::StatusOr<ir::ActorProgram> DecodeProgram(wire::ActorProgram::Reader reader,
                                               uint64_t expected_hash) {
  absl::StatusOr<ir::ActorProgram> program = DecodeProgram(reader);
  if (!program.ok()) return program.status();
  uint64_t hash = ir::HashActorProgram(*program);
  if (hash != expected_hash) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "actor %d: program hashes to %016x but was sent under %016x", program->actor, hash,
        expected_hash));
  }
  return program;
}

}  // namespace tandem::rpc
