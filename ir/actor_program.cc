#include "ir/actor_program.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/all_reduce.h"
#include "ir/hash.h"
#include "ir/printer.h"

namespace tandem::ir {
namespace {

std::string BufferList(const ActorProgram& program, const std::vector<BufferId>& ids) {
  std::vector<std::string> labels;
  labels.reserve(ids.size());
  for (BufferId id : ids) labels.push_back(BufferLabel(program, id));
  return absl::StrCat("(", absl::StrJoin(labels, ", "), ")");
}

std::string FunctionLabel(const ActorProgram& program, int32_t function) {
  if (function < 0 || function >= static_cast<int32_t>(program.functions.size())) {
    return absl::StrCat("<bad function ", function, ">");
  }
  return program.functions[function].name;
}

std::string InstructionText(const ActorProgram& program, const Instruction& instruction) {
  const std::vector<BufferId>& buffers = instruction.buffers;
  switch (instruction.kind) {
    case InstructionKind::kRun:
      return absl::StrCat("run ", FunctionLabel(program, instruction.function), " ",
                          BufferList(program, instruction.inputs), " -> ", BufferList(program, instruction.outputs));
    case InstructionKind::kSend:
      return absl::StrCat("send -> actor ", instruction.peer, " tag ", instruction.tag, " ",
                          BufferList(program, buffers));
    case InstructionKind::kReceive:
      return absl::StrCat("recv <- actor ", instruction.peer, " tag ", instruction.tag, " ",
                          BufferList(program, buffers));
    case InstructionKind::kAccumulate:
      if (buffers.size() != 2) return absl::StrCat("acc ", BufferList(program, buffers));
      return absl::StrCat("acc ", BufferLabel(program, buffers[0]), " += ", BufferLabel(program, buffers[1]));
    case InstructionKind::kFree:
      return absl::StrCat("free ", BufferList(program, buffers));
    case InstructionKind::kEmit:
      if (buffers.size() != 1) return absl::StrCat("emit ", instruction.result, " ", BufferList(program, buffers));
      return absl::StrCat("emit ", instruction.result, "[", instruction.microbatch, "] = ",
                          BufferLabel(program, buffers[0]));
    case InstructionKind::kAllReduceStart:
    case InstructionKind::kAllReduceWait:
      return absl::StrCat(InstructionKindName(instruction.kind), " tag ", instruction.tag, " group (",
                          absl::StrJoin(instruction.group, ", "), ") ", BufferList(program, buffers));
    case InstructionKind::kFill:
      return absl::StrCat("fill ", FunctionLabel(program, instruction.function), " ",
                          BufferList(program, instruction.inputs), " -> ", instruction.result, "[",
                          instruction.microbatch, "] ", BufferList(program, instruction.outputs),
                          instruction.peer < 0 ? ""
                                               : absl::StrCat(" unless actor ", instruction.peer, " tag ",
                                                              instruction.tag, " arrived"),
                          ", then free ", BufferList(program, buffers));
  }
  return "?";
}

// ---- Canonical serialization for hashing: every field, strings length-prefixed.

// A content hash (ir/hash.h) of a canonical serialization, fed as it is
// produced: integers in decimal and strings length-prefixed, each ending in
// ';'.
class Canonical {
 public:
  void Int(int64_t value) { Decimal(absl::StrCat(value)); }
  void Unsigned(uint64_t value) { Decimal(absl::StrCat(value)); }
  void String(absl::string_view value) {
    Decimal(absl::StrCat(value.size()), ':');
    Bytes(value);
    Bytes(";");
  }
  void Ids(const std::vector<BufferId>& ids) {
    Int(static_cast<int64_t>(ids.size()));
    for (BufferId id : ids) Int(id);
  }
  // A graph, field by field (doubles by their bits), without printing it.
  void Graph(const ir::Graph& graph) {
    String(graph.name());
    Int(graph.size());
    for (const Node& node : graph.nodes()) {
      Int(static_cast<int64_t>(node.op));
      Ids(node.operands);
      Int(static_cast<int64_t>(node.attributes.values().size()));
      for (const auto& [name, value] : node.attributes.values()) {
        String(name);
        Int(static_cast<int64_t>(value.index()));
        if (const int64_t* i = std::get_if<int64_t>(&value)) Int(*i);
        if (const double* d = std::get_if<double>(&value)) Unsigned(absl::bit_cast<uint64_t>(*d));
        if (const std::string* s = std::get_if<std::string>(&value)) String(*s);
        if (const std::vector<int64_t>* v = std::get_if<std::vector<int64_t>>(&value)) {
          Int(static_cast<int64_t>(v->size()));
          for (int64_t x : *v) Int(x);
        }
      }
      Int(static_cast<int64_t>(node.type.dtype));
      Int(static_cast<int64_t>(node.type.shape.size()));
      for (int64_t extent : node.type.shape) Int(extent);
      Int(node.stage);
      Int(static_cast<int64_t>(node.phase));
      String(node.location.file);
      Int(node.location.line);
    }
    Int(static_cast<int64_t>(graph.outputs().size()));
    for (const GraphOutput& output : graph.outputs()) {
      String(output.name);
      Int(output.value);
    }
  }
  uint64_t hash() const { return hasher_.Digest(); }

 private:
  void Decimal(const std::string& digits, char end = ';') {
    Bytes(digits);
    Bytes(absl::string_view(&end, 1));
  }
  void Bytes(absl::string_view bytes) { hasher_.Add(bytes); }
  ContentHasher hasher_;
};

}  // namespace

const char* BufferKindName(BufferKind kind) {
  switch (kind) {
    case BufferKind::kState:
      return "state";
    case BufferKind::kInput:
      return "input";
    case BufferKind::kTemporary:
      return "temporary";
  }
  return "?";
}

std::vector<int64_t> LiveBytesBefore(const ActorProgram& program) {
  std::vector<bool> live(program.buffers.size(), false);
  int64_t bytes = 0;
  auto fill = [&](BufferId id) {
    if (!live[id]) bytes += program.buffers[id].type.num_bytes();
    live[id] = true;
  };
  auto empty = [&](BufferId id) {
    if (live[id]) bytes -= program.buffers[id].type.num_bytes();
    live[id] = false;
  };
  auto staging = [&](const Instruction& instruction) {
    int64_t elements = 0;
    for (BufferId id : instruction.buffers) elements += program.buffers[id].type.num_elements();
    return AllReduceStagingBytes(elements, static_cast<int32_t>(instruction.group.size()));
  };
  for (BufferId id = 0; id < static_cast<BufferId>(program.buffers.size()); ++id) {
    if (program.buffers[id].kind != BufferKind::kTemporary) fill(id);
  }
  std::vector<int64_t> before;
  before.reserve(program.instructions.size() + 1);
  for (const Instruction& instruction : program.instructions) {
    before.push_back(bytes);
    switch (instruction.kind) {
      case InstructionKind::kRun:
        for (BufferId id : instruction.outputs) fill(id);
        break;
      case InstructionKind::kReceive:
        for (BufferId id : instruction.buffers) fill(id);
        break;
      case InstructionKind::kAccumulate:
        empty(instruction.buffers[1]);
        fill(instruction.buffers[0]);
        break;
      case InstructionKind::kFree:
        for (BufferId id : instruction.buffers) empty(id);
        break;
      case InstructionKind::kAllReduceStart:
        bytes += staging(instruction);
        break;
      case InstructionKind::kAllReduceWait:
        bytes -= staging(instruction);
        break;
      case InstructionKind::kFill:
        for (BufferId id : instruction.buffers) empty(id);
        break;
      case InstructionKind::kSend:
      case InstructionKind::kEmit:
        break;
    }
  }
  before.push_back(bytes);
  return before;
}

int64_t MostBytesToOnePeer(const ActorProgram& program) {
  constexpr int64_t kAlignment = 64;
  const auto aligned = [](int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; };
  std::map<int32_t, int64_t> to_peer;
  for (const Instruction& instruction : program.instructions) {
    if (instruction.kind != InstructionKind::kSend) continue;
    int64_t frame = aligned(64 + 96 * static_cast<int64_t>(instruction.buffers.size()));
    for (BufferId id : instruction.buffers) frame += aligned(program.buffers[id].type.num_bytes());
    to_peer[instruction.peer] += frame;
  }
  int64_t most = 0;
  for (const auto& [peer, bytes] : to_peer) most = std::max(most, bytes);
  return most;
}

int64_t StaticPeakBytes(const ActorProgram& program) {
  const std::vector<int64_t> before = LiveBytesBefore(program);
  int64_t peak = *std::max_element(before.begin(), before.end());
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& instruction = program.instructions[i];
    if (instruction.kind != InstructionKind::kFill) continue;
    int64_t running = before[i];
    for (BufferId id : instruction.outputs) {
      if (program.buffers[id].kind != BufferKind::kState) running += program.buffers[id].type.num_bytes();
    }
    peak = std::max(peak, running);
  }
  return peak;
}

std::string BufferLabel(const ActorProgram& program, BufferId id) {
  if (id < 0 || id >= static_cast<BufferId>(program.buffers.size())) return absl::StrCat("<bad buffer ", id, ">");
  const std::string& name = program.buffers[id].name;
  return name.empty() ? absl::StrCat("#", id) : name;
}

const char* InstructionKindName(InstructionKind kind) {
  switch (kind) {
    case InstructionKind::kRun:
      return "run";
    case InstructionKind::kSend:
      return "send";
    case InstructionKind::kReceive:
      return "recv";
    case InstructionKind::kAccumulate:
      return "acc";
    case InstructionKind::kFree:
      return "free";
    case InstructionKind::kEmit:
      return "emit";
    case InstructionKind::kAllReduceStart:
      return "allreduce.start";
    case InstructionKind::kAllReduceWait:
      return "allreduce.wait";
    case InstructionKind::kFill:
      return "fill";
  }
  return "?";
}

std::string TaskLabel::ToString() const {
  if (kind == 'U' && stage < 0) return microbatch < 0 ? "update" : absl::StrCat("update.", microbatch);
  if (kind == 'X') return absl::StrCat("fill.", microbatch);
  std::string label(1, kind);
  absl::StrAppend(&label, stage);
  if (microbatch >= 0) absl::StrAppend(&label, ".", microbatch);
  return label;
}

std::string PrintActorProgram(const ActorProgram& program, bool with_functions) {
  std::string out = absl::StrCat("actor ", program.actor, " of ", program.num_actors,
                                 program.num_replicas == 1
                                     ? ""
                                     : absl::StrCat(" (on each of ", program.num_replicas, " replicas)"),
                                 ": ",
                                 program.functions.size(), " functions, ", program.buffers.size(), " buffers, ",
                                 program.instructions.size(), " instructions, static peak ",
                                 program.static_peak_bytes, " bytes\n");
  absl::StrAppend(&out, "functions:\n");
  for (size_t f = 0; f < program.functions.size(); ++f) {
    const Function& function = program.functions[f];
    absl::StrAppend(&out, "  ", f, "  ", function.name, "  ", function.graph.Inputs().size(), " inputs, ",
                    function.graph.outputs().size(), " outputs, ", function.graph.size(), " nodes\n");
  }
  absl::StrAppend(&out, "buffers:\n");
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const Buffer& buffer = program.buffers[b];
    absl::StrAppend(&out, "  ", b, "  ", BufferLabel(program, static_cast<BufferId>(b)), " : ",
                    TypeToString(buffer.type), " ", BufferKindName(buffer.kind));
    if (!buffer.binding.empty()) absl::StrAppend(&out, " \"", buffer.binding, "\"");
    if (buffer.kind == BufferKind::kInput && buffer.microbatch >= 0) {
      absl::StrAppend(&out, " microbatch ", buffer.microbatch);
    }
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "task starts: ", absl::StrJoin(program.task_starts, " "), "\n");
  absl::StrAppend(&out, "instructions:\n");
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& instruction = program.instructions[i];
    absl::StrAppend(&out, "  ", i, "  ", instruction.task.ToString(), "  ", InstructionText(program, instruction),
                    "\n");
  }
  if (with_functions) {
    for (const Function& function : program.functions) {
      absl::StrAppend(&out, "function ", function.name, ":\n", PrintGraph(function.graph));
    }
  }
  return out;
}

std::vector<int32_t> DispatchBounds(const ActorProgram& program) {
  std::vector<int32_t> bounds = {0};
  for (int32_t start : program.task_starts) {
    if (start > bounds.back()) bounds.push_back(start);
  }
  const auto end = static_cast<int32_t>(program.instructions.size());
  if (end > bounds.back() || bounds.size() == 1) bounds.push_back(end);
  return bounds;
}

absl::StatusOr<int32_t> ReplicaOf(const ActorProgram& program, int32_t actor, int32_t job_actors) {
  const int64_t offset = int64_t{actor} - program.actor;
  const bool fits = program.num_actors >= 1 && offset >= 0 && offset % program.num_actors == 0 &&
                    offset / program.num_actors < program.num_replicas &&
                    (job_actors == 0 || int64_t{program.num_actors} * program.num_replicas == job_actors);
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat("is for actor ", program.actor, " of ", program.num_actors, " on ",
                                                   program.num_replicas, " replicas, expected actor ", actor,
                                                   job_actors == 0 ? "" : absl::StrCat(" of ", job_actors)));
  }
  return static_cast<int32_t>(offset / program.num_actors);
}

std::vector<int32_t> ReplicaGroupOf(const ActorProgram& program) {
  for (const Instruction& instruction : program.instructions) {
    if (instruction.kind == InstructionKind::kAllReduceStart) return instruction.group;
  }
  return {};
}

uint64_t HashActorProgram(const ActorProgram& program) {
  Canonical c;
  c.String("tandem.actor_program.v1");
  c.Int(program.actor);
  c.Int(program.num_actors);
  if (program.num_replicas != 1) c.Int(program.num_replicas);  // older programs hash as they did
  c.Int(program.static_peak_bytes);
  c.Int(static_cast<int64_t>(program.functions.size()));
  for (const Function& function : program.functions) {
    c.String(function.name);
    c.Graph(function.graph);
  }
  c.Int(static_cast<int64_t>(program.buffers.size()));
  for (const Buffer& buffer : program.buffers) {
    c.String(buffer.name);
    c.String(TypeToString(buffer.type));
    c.Int(static_cast<int64_t>(buffer.kind));
    c.String(buffer.binding);
    c.Int(buffer.microbatch);
  }
  c.Int(static_cast<int64_t>(program.instructions.size()));
  for (const Instruction& instruction : program.instructions) {
    c.Int(static_cast<int64_t>(instruction.kind));
    c.Int(instruction.task.kind);
    c.Int(instruction.task.stage);
    c.Int(instruction.task.microbatch);
    c.Int(instruction.function);
    c.Ids(instruction.inputs);
    c.Ids(instruction.outputs);
    c.Ids(instruction.buffers);
    c.Int(instruction.peer);
    c.Unsigned(instruction.tag);
    c.String(instruction.result);
    c.Int(instruction.microbatch);
    // Only all-reduces have a group: other programs hash as they always did.
    if (!instruction.group.empty()) c.Ids(instruction.group);
  }
  c.Ids(program.task_starts);
  return c.hash();
}

}  // namespace tandem::ir
