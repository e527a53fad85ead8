#include "ir/actor_program.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/printer.h"

namespace tandem::ir {
namespace {

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

// A buffer's name for dumps and messages; the index when out of range (the
// printer must not crash on a program the verifier would reject).
std::string BufferLabel(const ActorProgram& program, BufferId id) {
  if (id < 0 || id >= static_cast<BufferId>(program.buffers.size())) return absl::StrCat("<bad buffer ", id, ">");
  const std::string& name = program.buffers[id].name;
  return name.empty() ? absl::StrCat("#", id) : name;
}

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
  }
  return "?";
}

// ---- Canonical serialization for hashing: every field, strings length-prefixed.

// FNV-1a 64 over a canonical serialization, fed as it is produced: integers
// in decimal and strings length-prefixed, each ending in ';'.
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
  uint64_t hash() const { return hash_; }

 private:
  void Decimal(const std::string& digits, char end = ';') {
    Bytes(digits);
    Bytes(absl::string_view(&end, 1));
  }
  void Bytes(absl::string_view bytes) {
    for (unsigned char c : bytes) {
      hash_ ^= c;
      hash_ *= 1099511628211ull;
    }
  }
  uint64_t hash_ = 14695981039346656037ull;
};

// ---- Verification helpers.

absl::Status InstructionError(int32_t index, const ActorProgram& program, const Instruction& instruction,
                              const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("actor ", program.actor, ", instruction ", index, " (",
                                                 instruction.task.ToString(), " ",
                                                 InstructionKindName(instruction.kind), "): ", what));
}

// Every input node of a function needs a distinct string `name`, every
// output a distinct name: the executor binds by them.
absl::Status VerifyFunction(int32_t index, const Function& function) {
  std::set<std::string> names;
  for (ValueId id : function.graph.Inputs()) {
    const auto& values = function.graph.node(id).attributes.values();
    auto it = values.find("name");
    const std::string* name = it == values.end() ? nullptr : std::get_if<std::string>(&it->second);
    if (name == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("function ", index, " (", function.name, "): input %", id, " has no string 'name'"));
    }
    if (!names.insert(*name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("function ", index, " (", function.name, "): two inputs are named '", *name, "'"));
    }
  }
  names.clear();
  for (const GraphOutput& output : function.graph.outputs()) {
    if (output.value < 0 || output.value >= function.graph.size()) {
      return absl::InvalidArgumentError(absl::StrCat("function ", index, " (", function.name, "): output '",
                                                     output.name, "' names value %", output.value,
                                                     " outside the graph"));
    }
    if (!names.insert(output.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("function ", index, " (", function.name, "): two outputs are named '", output.name, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

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
  }
  return "?";
}

std::string TaskLabel::ToString() const {
  if (kind == 'U' && stage < 0) return "update";
  std::string label(1, kind);
  absl::StrAppend(&label, stage);
  if (microbatch >= 0) absl::StrAppend(&label, ".", microbatch);
  return label;
}

std::string PrintActorProgram(const ActorProgram& program, bool with_functions) {
  std::string out = absl::StrCat("actor ", program.actor, " of ", program.num_actors, ": ",
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

uint64_t HashActorProgram(const ActorProgram& program) {
  Canonical c;
  c.String("tandem.actor_program.v1");
  c.Int(program.actor);
  c.Int(program.num_actors);
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
  }
  c.Ids(program.task_starts);
  return c.hash();
}

absl::Status VerifyActorProgram(const ActorProgram& program) {
  if (program.num_actors < 1 || program.actor < 0 || program.actor >= program.num_actors) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor ", program.actor, " is not in [0, ", program.num_actors, ")"));
  }
  for (size_t f = 0; f < program.functions.size(); ++f) {
    absl::Status status = VerifyFunction(static_cast<int32_t>(f), program.functions[f]);
    if (!status.ok()) return status;
  }
  const auto num_buffers = static_cast<BufferId>(program.buffers.size());
  for (BufferId b = 0; b < num_buffers; ++b) {
    const Buffer& buffer = program.buffers[b];
    if (buffer.kind != BufferKind::kTemporary && buffer.binding.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", program.actor, ", buffer ", b, " (", buffer.name,
                                                     "): a ", BufferKindName(buffer.kind),
                                                     " buffer needs a binding"));
    }
  }

  // Fill state per buffer, simulated by the rule of actor_program.h: reads
  // of empty buffers are rejected and live bytes tracked.
  std::vector<bool> full(program.buffers.size(), false);
  int64_t live = 0;
  for (BufferId b = 0; b < num_buffers; ++b) {
    if (program.buffers[b].kind != BufferKind::kTemporary) {
      full[b] = true;
      live += program.buffers[b].type.num_bytes();
    }
  }
  int64_t peak = live;
  auto fill = [&](BufferId b) {
    if (!full[b]) live += program.buffers[b].type.num_bytes();
    full[b] = true;
  };
  auto empty = [&](BufferId b) {
    if (full[b]) live -= program.buffers[b].type.num_bytes();
    full[b] = false;
  };

  std::set<std::pair<int32_t, uint64_t>> send_tags;
  std::set<std::pair<int32_t, uint64_t>> receive_tags;
  for (int32_t i = 0; i < static_cast<int32_t>(program.instructions.size()); ++i) {
    const Instruction& in = program.instructions[i];
    auto error = [&](const std::string& what) { return InstructionError(i, program, in, what); };
    auto check_ids = [&](const std::vector<BufferId>& ids, const char* field) -> absl::Status {
      for (BufferId id : ids) {
        if (id < 0 || id >= num_buffers) {
          return error(absl::StrCat(field, " names buffer ", id, ", outside [0, ", num_buffers, ")"));
        }
      }
      return absl::OkStatus();
    };
    auto check_full = [&](BufferId id) -> absl::Status {
      if (full[id]) return absl::OkStatus();
      return error(absl::StrCat("reads buffer ", id, " (", BufferLabel(program, id), ") while it is empty"));
    };
    if (absl::Status s = check_ids(in.inputs, "inputs"); !s.ok()) return s;
    if (absl::Status s = check_ids(in.outputs, "outputs"); !s.ok()) return s;
    if (absl::Status s = check_ids(in.buffers, "buffers"); !s.ok()) return s;
    if (in.kind != InstructionKind::kRun && (!in.inputs.empty() || !in.outputs.empty())) {
      return error("only run has inputs and outputs");
    }
    switch (in.kind) {
      case InstructionKind::kRun: {
        if (!in.buffers.empty()) return error("run takes inputs and outputs, not buffers");
        if (in.function < 0 || in.function >= static_cast<int32_t>(program.functions.size())) {
          return error(absl::StrCat("function ", in.function, " is outside [0, ", program.functions.size(), ")"));
        }
        const Function& function = program.functions[in.function];
        const std::vector<ValueId> graph_inputs = function.graph.Inputs();
        const std::vector<GraphOutput>& graph_outputs = function.graph.outputs();
        if (in.inputs.size() != graph_inputs.size()) {
          return error(absl::StrCat(function.name, " takes ", graph_inputs.size(), " inputs, got ",
                                    in.inputs.size()));
        }
        if (in.outputs.size() != graph_outputs.size()) {
          return error(absl::StrCat(function.name, " has ", graph_outputs.size(), " outputs, got ",
                                    in.outputs.size()));
        }
        for (size_t k = 0; k < graph_inputs.size(); ++k) {
          const TensorType& want = function.graph.type(graph_inputs[k]);
          const Buffer& buffer = program.buffers[in.inputs[k]];
          if (buffer.type != want) {
            return error(absl::StrCat("input ", k, " of ", function.name, " is ", TypeToString(want), " but buffer ",
                                      in.inputs[k], " (", buffer.name, ") is ", TypeToString(buffer.type)));
          }
          if (absl::Status s = check_full(in.inputs[k]); !s.ok()) return s;
        }
        std::set<BufferId> written;
        for (size_t k = 0; k < graph_outputs.size(); ++k) {
          const TensorType& want = function.graph.type(graph_outputs[k].value);
          const Buffer& buffer = program.buffers[in.outputs[k]];
          if (buffer.type != want) {
            return error(absl::StrCat("output ", k, " (", graph_outputs[k].name, ") of ", function.name, " is ",
                                      TypeToString(want), " but buffer ", in.outputs[k], " (", buffer.name,
                                      ") is ", TypeToString(buffer.type)));
          }
          if (!written.insert(in.outputs[k]).second) {
            return error(absl::StrCat("writes buffer ", in.outputs[k], " (", buffer.name, ") twice"));
          }
        }
        for (BufferId id : in.outputs) fill(id);
        break;
      }
      case InstructionKind::kSend:
      case InstructionKind::kReceive: {
        if (in.peer < 0 || in.peer >= program.num_actors) {
          return error(absl::StrCat("peer ", in.peer, " is outside [0, ", program.num_actors, ")"));
        }
        if (in.peer == program.actor) return error(absl::StrCat("peer ", in.peer, " is this actor itself"));
        if (in.buffers.empty()) return error("no buffers to transfer");
        const bool is_send = in.kind == InstructionKind::kSend;
        auto& tags = is_send ? send_tags : receive_tags;
        if (!tags.insert({in.peer, in.tag}).second) {
          return error(absl::StrCat("tag ", in.tag, " is used twice ", is_send ? "to" : "from", " actor ", in.peer));
        }
        for (BufferId id : in.buffers) {
          if (is_send) {
            if (absl::Status s = check_full(id); !s.ok()) return s;
          } else {
            fill(id);
          }
        }
        break;
      }
      case InstructionKind::kAccumulate: {
        if (in.buffers.size() != 2) return error(absl::StrCat("takes 2 buffers, got ", in.buffers.size()));
        const Buffer& acc = program.buffers[in.buffers[0]];
        const Buffer& grad = program.buffers[in.buffers[1]];
        if (in.buffers[0] == in.buffers[1]) return error("accumulates a buffer into itself");
        if (acc.type != grad.type) {
          return error(absl::StrCat("accumulator ", acc.name, " is ", TypeToString(acc.type), " but ", grad.name,
                                    " is ", TypeToString(grad.type)));
        }
        if (acc.type.dtype != DType::kF32) return error(absl::StrCat("accumulator ", acc.name, " is not f32"));
        if (absl::Status s = check_full(in.buffers[1]); !s.ok()) return s;
        empty(in.buffers[1]);
        fill(in.buffers[0]);
        break;
      }
      case InstructionKind::kFree:
        if (in.buffers.empty()) return error("frees no buffers");
        for (BufferId id : in.buffers) {
          if (absl::Status s = check_full(id); !s.ok()) return s;
          empty(id);
        }
        break;
      case InstructionKind::kEmit:
        if (in.buffers.size() != 1) return error(absl::StrCat("takes 1 buffer, got ", in.buffers.size()));
        if (in.result.empty()) return error("has no result name");
        if (in.microbatch < -1) return error(absl::StrCat("microbatch ", in.microbatch, " is negative"));
        if (absl::Status s = check_full(in.buffers[0]); !s.ok()) return s;
        break;
      default:
        return error(absl::StrCat("unknown instruction kind ", static_cast<int>(in.kind)));
    }
    peak = std::max(peak, live);
  }
  for (BufferId b = 0; b < num_buffers; ++b) {
    if (program.buffers[b].kind == BufferKind::kTemporary && full[b]) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", program.actor, ": temporary buffer ", b, " (",
                                                     program.buffers[b].name, ") is still held at the step's end"));
    }
  }
  const auto num_instructions = static_cast<int32_t>(program.instructions.size());
  for (size_t t = 0; t < program.task_starts.size(); ++t) {
    const int32_t start = program.task_starts[t];
    if (start < 0 || start > num_instructions || (t > 0 && start < program.task_starts[t - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", program.actor, ": task_starts[", t, "] = ", start,
                                                     " is not sorted within [0, ", num_instructions, "]"));
    }
  }
  if (peak != program.static_peak_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", program.actor, ": static_peak_bytes is ",
                                                   program.static_peak_bytes, " but the stream peaks at ", peak,
                                                   " live bytes"));
  }
  return absl::OkStatus();
}

}  // namespace tandem::ir
