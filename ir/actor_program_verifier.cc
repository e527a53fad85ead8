// VerifyActorProgram (ir/actor_program.h): walks the instruction stream once,
// keeping which buffers hold a tensor by the rule of ActorProgram, so that it
// catches what would fail at run time (an index out of range, a read of an
// empty buffer, a type that does not match a function's signature, a tag used
// twice) and recomputes the static peak the compiler claims.
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/actor_program.h"
#include "ir/all_reduce.h"
#include "ir/limits.h"

namespace tandem::ir {
namespace {

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

// One pass over one program. Phases, in order: CheckHeader, then
// CheckInstruction for every instruction, then CheckEnd.
class ProgramVerifier {
 public:
  explicit ProgramVerifier(const ActorProgram& program)
      : program_(program), num_buffers_(static_cast<BufferId>(program.buffers.size())), full_(program.buffers.size()) {}

  // The actor's id, its functions, and the bindings of state and input
  // buffers, which hold their tensors from the start.
  absl::Status CheckHeader() {
    if (program_.num_actors < 1 || program_.actor < 0 || program_.actor >= program_.num_actors) {
      return absl::InvalidArgumentError(
          absl::StrCat("actor ", program_.actor, " is not in [0, ", program_.num_actors, ")"));
    }
    if (program_.num_replicas < 1 || program_.num_replicas > kMaxReplicas ||
        int64_t{program_.num_actors} * program_.num_replicas > int64_t{1} << 30) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", program_.actor, ": ", program_.num_replicas,
                                                     " replicas of ", program_.num_actors, " actors is out of range"));
    }
    if (absl::Status status = CheckProgramSize(program_.instructions.size(), program_.buffers.size());
        !status.ok()) {
      return status;
    }
    for (size_t f = 0; f < program_.functions.size(); ++f) {
      if (absl::Status status = VerifyFunction(static_cast<int32_t>(f), program_.functions[f]); !status.ok()) {
        return status;
      }
    }
    for (BufferId b = 0; b < num_buffers_; ++b) {
      const Buffer& buffer = program_.buffers[b];
      if (buffer.kind == BufferKind::kTemporary) continue;
      if (buffer.binding.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("actor ", program_.actor, ", buffer ", b, " (", buffer.name,
                                                       "): a ", BufferKindName(buffer.kind),
                                                       " buffer needs a binding"));
      }
      Fill(b);
    }
    peak_ = live_;
    return absl::OkStatus();
  }

  absl::Status CheckInstruction(int32_t index) {
    index_ = index;
    const Instruction& in = program_.instructions[index];
    for (const auto& [ids, field] : {std::pair{&in.inputs, "inputs"}, {&in.outputs, "outputs"},
                                     {&in.buffers, "buffers"}}) {
      for (BufferId id : *ids) {
        if (id < 0 || id >= num_buffers_) {
          return Error(absl::StrCat(field, " names buffer ", id, ", outside [0, ", num_buffers_, ")"));
        }
      }
    }
    if (in.kind != InstructionKind::kRun && in.kind != InstructionKind::kFill &&
        (!in.inputs.empty() || !in.outputs.empty())) {
      return Error("only run and fill have inputs and outputs");
    }
    const bool is_reduction = in.kind == InstructionKind::kAllReduceStart || in.kind == InstructionKind::kAllReduceWait;
    if (!is_reduction && !in.group.empty()) return Error("only all-reduces have a group");
    // Buffers of an all-reduce in flight belong to the reduction until its wait.
    const std::vector<BufferId>* touched[] = {&in.inputs, &in.outputs, &in.buffers};
    for (const std::vector<BufferId>* ids : touched) {
      for (BufferId id : *ids) {
        auto owner = in_flight_.find(id);
        // A wait's own checks say which reduction it should have named.
        if (owner != in_flight_.end() && in.kind != InstructionKind::kAllReduceWait) {
          return Error(absl::StrCat("touches buffer ", id, " (", BufferLabel(program_, id), ") while all-reduce tag ",
                                    owner->second, " owns it"));
        }
      }
    }
    absl::Status status;
    switch (in.kind) {
      case InstructionKind::kRun:
        status = Run(in);
        break;
      case InstructionKind::kSend:
      case InstructionKind::kReceive:
        status = Transfer(in);
        break;
      case InstructionKind::kAccumulate:
        status = Accumulate(in);
        break;
      case InstructionKind::kFree:
        status = Free(in);
        break;
      case InstructionKind::kEmit:
        status = Emit(in);
        break;
      case InstructionKind::kAllReduceStart:
        status = AllReduceStart(in);
        break;
      case InstructionKind::kAllReduceWait:
        status = AllReduceWait(in);
        break;
      case InstructionKind::kFill:
        status = FillPiece(in);
        break;
      default:
        status = Error(absl::StrCat("unknown instruction kind ", static_cast<int>(in.kind)));
    }
    peak_ = std::max(peak_, live_);
    return status;
  }

  // No temporary outlives the step, task starts are sorted, and the peak is
  // the one the compiler claimed.
  absl::Status CheckEnd() const {
    for (BufferId b = 0; b < num_buffers_; ++b) {
      if (program_.buffers[b].kind == BufferKind::kTemporary && full_[b]) {
        return absl::InvalidArgumentError(absl::StrCat("actor ", program_.actor, ": temporary buffer ", b, " (",
                                                       program_.buffers[b].name, ") is still held at the step's end"));
      }
    }
    if (!reductions_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", program_.actor, ": all-reduce tag ",
                                                     reductions_.begin()->first, " is never waited for"));
    }
    const auto num_instructions = static_cast<int32_t>(program_.instructions.size());
    for (size_t t = 0; t < program_.task_starts.size(); ++t) {
      const int32_t start = program_.task_starts[t];
      if (start < 0 || start > num_instructions || (t > 0 && start < program_.task_starts[t - 1])) {
        return absl::InvalidArgumentError(absl::StrCat("actor ", program_.actor, ": task_starts[", t, "] = ", start,
                                                       " is not sorted within [0, ", num_instructions, "]"));
      }
    }
    if (peak_ != program_.static_peak_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", program_.actor, ": static_peak_bytes is ",
                                                     program_.static_peak_bytes, " but the stream peaks at ", peak_,
                                                     " live bytes"));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Run(const Instruction& in) {
    if (!in.buffers.empty()) return Error("run takes inputs and outputs, not buffers");
    return CheckCall(in);
  }

  // A run's checks, then: a result and a slot to report it under; a guard
  // that is a receive from another actor (or none); outputs that are
  // temporaries, empty until the piece runs and again after it; and buffers
  // to release that are the piece's own inputs, each once, none of them
  // state. The outputs count while the piece runs.
  absl::Status FillPiece(const Instruction& in) {
    if (in.result.empty()) return Error("has no result name");
    if (in.microbatch < 0) return Error(absl::StrCat("fill slot ", in.microbatch, " is negative"));
    if (in.peer < -1 || in.peer >= program_.num_actors || in.peer == program_.actor) {
      return Error(absl::StrCat("waits on peer ", in.peer, ", which is neither -1 nor another actor in [0, ",
                                program_.num_actors, ")"));
    }
    if (in.outputs.empty()) return Error("a fill piece reports its first output, and has none");
    // Its result and other outputs are temporaries; a training piece also
    // writes state.
    for (size_t k = 0; k < in.outputs.size(); ++k) {
      const BufferId id = in.outputs[k];
      const bool state = program_.buffers[id].kind == BufferKind::kState;
      if ((state && k == 0) || (!state && (program_.buffers[id].kind != BufferKind::kTemporary || full_[id]))) {
        return Error(absl::StrCat("output buffer ", id, " (", BufferLabel(program_, id), ") is not an empty temporary",
                                  k == 0 ? "" : " or state"));
      }
    }
    std::set<BufferId> released;
    for (BufferId id : in.buffers) {
      if (program_.buffers[id].kind == BufferKind::kState ||
          std::find(in.inputs.begin(), in.inputs.end(), id) == in.inputs.end() || !released.insert(id).second) {
        return Error(absl::StrCat("releases buffer ", id, " (", BufferLabel(program_, id),
                                  "), which is not one of its own non-state inputs, once"));
      }
    }
    if (absl::Status status = CheckCall(in); !status.ok()) return status;
    peak_ = std::max(peak_, live_);
    for (BufferId id : in.outputs) {
      if (program_.buffers[id].kind != BufferKind::kState) Empty(id);
    }
    for (BufferId id : in.buffers) Empty(id);
    return absl::OkStatus();
  }

  // A call of functions[in.function] on in.inputs into in.outputs: the
  // function exists, the arities and types match, the inputs hold tensors
  // and no output is written twice. Fills the outputs.
  absl::Status CheckCall(const Instruction& in) {
    if (in.function < 0 || in.function >= static_cast<int32_t>(program_.functions.size())) {
      return Error(absl::StrCat("function ", in.function, " is outside [0, ", program_.functions.size(), ")"));
    }
    const Function& function = program_.functions[in.function];
    const std::vector<ValueId> graph_inputs = function.graph.Inputs();
    const std::vector<GraphOutput>& graph_outputs = function.graph.outputs();
    if (in.inputs.size() != graph_inputs.size()) {
      return Error(absl::StrCat(function.name, " takes ", graph_inputs.size(), " inputs, got ", in.inputs.size()));
    }
    if (in.outputs.size() != graph_outputs.size()) {
      return Error(absl::StrCat(function.name, " has ", graph_outputs.size(), " outputs, got ", in.outputs.size()));
    }
    for (size_t k = 0; k < graph_inputs.size(); ++k) {
      const TensorType& want = function.graph.type(graph_inputs[k]);
      const Buffer& buffer = program_.buffers[in.inputs[k]];
      if (buffer.type != want) {
        return Error(absl::StrCat("input ", k, " of ", function.name, " is ", TypeToString(want), " but buffer ",
                                  in.inputs[k], " (", buffer.name, ") is ", TypeToString(buffer.type)));
      }
      if (absl::Status s = CheckFull(in.inputs[k]); !s.ok()) return s;
    }
    std::set<BufferId> written;
    for (size_t k = 0; k < graph_outputs.size(); ++k) {
      const TensorType& want = function.graph.type(graph_outputs[k].value);
      const Buffer& buffer = program_.buffers[in.outputs[k]];
      if (buffer.type != want) {
        return Error(absl::StrCat("output ", k, " (", graph_outputs[k].name, ") of ", function.name, " is ",
                                  TypeToString(want), " but buffer ", in.outputs[k], " (", buffer.name, ") is ",
                                  TypeToString(buffer.type)));
      }
      if (!written.insert(in.outputs[k]).second) {
        return Error(absl::StrCat("writes buffer ", in.outputs[k], " (", buffer.name, ") twice"));
      }
    }
    for (BufferId id : in.outputs) Fill(id);
    return absl::OkStatus();
  }

  absl::Status Transfer(const Instruction& in) {
    if (in.peer < 0 || in.peer >= program_.num_actors) {
      return Error(absl::StrCat("peer ", in.peer, " is outside [0, ", program_.num_actors, ")"));
    }
    if (in.peer == program_.actor) return Error(absl::StrCat("peer ", in.peer, " is this actor itself"));
    if (in.buffers.empty()) return Error("no buffers to transfer");
    const bool is_send = in.kind == InstructionKind::kSend;
    std::set<std::pair<int32_t, uint64_t>>& tags = is_send ? send_tags_ : receive_tags_;
    if (!tags.insert({in.peer, in.tag}).second) {
      return Error(absl::StrCat("tag ", in.tag, " is used twice ", is_send ? "to" : "from", " actor ", in.peer));
    }
    for (BufferId id : in.buffers) {
      if (!is_send) {
        Fill(id);
      } else if (absl::Status s = CheckFull(id); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  absl::Status Accumulate(const Instruction& in) {
    if (in.buffers.size() != 2) return Error(absl::StrCat("takes 2 buffers, got ", in.buffers.size()));
    const Buffer& acc = program_.buffers[in.buffers[0]];
    const Buffer& grad = program_.buffers[in.buffers[1]];
    if (in.buffers[0] == in.buffers[1]) return Error("accumulates a buffer into itself");
    if (acc.type != grad.type) {
      return Error(absl::StrCat("accumulator ", acc.name, " is ", TypeToString(acc.type), " but ", grad.name, " is ",
                                TypeToString(grad.type)));
    }
    if (acc.type.dtype != DType::kF32) return Error(absl::StrCat("accumulator ", acc.name, " is not f32"));
    if (absl::Status s = CheckFull(in.buffers[1]); !s.ok()) return s;
    Empty(in.buffers[1]);
    Fill(in.buffers[0]);
    return absl::OkStatus();
  }

  absl::Status Free(const Instruction& in) {
    if (in.buffers.empty()) return Error("frees no buffers");
    for (BufferId id : in.buffers) {
      if (absl::Status s = CheckFull(id); !s.ok()) return s;
      Empty(id);
    }
    return absl::OkStatus();
  }

  absl::Status Emit(const Instruction& in) {
    if (in.buffers.size() != 1) return Error(absl::StrCat("takes 1 buffer, got ", in.buffers.size()));
    if (in.result.empty()) return Error("has no result name");
    if (in.microbatch < -1) return Error(absl::StrCat("microbatch ", in.microbatch, " is negative"));
    return CheckFull(in.buffers[0]);
  }

  // The group of this program's replicas: actor + r * num_actors for every
  // replica r, in replica order (so at least two); f32 buffers that hold a
  // tensor, each listed once.
  absl::Status CheckReduction(const Instruction& in, int64_t& elements) const {
    if (in.group.size() < 2) return Error(absl::StrCat("a group of ", in.group.size(), " actors reduces nothing"));
    if (static_cast<int64_t>(in.group.size()) != program_.num_replicas) {
      return Error(absl::StrCat("the group has ", in.group.size(), " actors but the program runs on ",
                                program_.num_replicas, " replicas"));
    }
    for (size_t r = 0; r < in.group.size(); ++r) {
      const int32_t expected = GlobalActor(program_, static_cast<int32_t>(r));
      if (in.group[r] != expected) {
        return Error(absl::StrCat("group member ", r, " is actor ", in.group[r], "; replica ", r, " of actor ",
                                  program_.actor, " is actor ", expected));
      }
    }
    if (in.buffers.empty()) return Error("reduces no buffers");
    std::set<BufferId> seen;
    elements = 0;
    for (BufferId id : in.buffers) {
      const Buffer& buffer = program_.buffers[id];
      if (!seen.insert(id).second) return Error(absl::StrCat("reduces buffer ", id, " (", buffer.name, ") twice"));
      if (buffer.type.dtype != DType::kF32) return Error(absl::StrCat("reduces ", buffer.name, ", which is not f32"));
      if (absl::Status s = CheckFull(id); !s.ok()) return s;
      elements += buffer.type.num_elements();
    }
    return absl::OkStatus();
  }

  absl::Status AllReduceStart(const Instruction& in) {
    int64_t elements = 0;
    if (absl::Status s = CheckReduction(in, elements); !s.ok()) return s;
    if (!started_tags_.insert(in.tag).second) return Error(absl::StrCat("all-reduce tag ", in.tag, " starts twice"));
    if (group_ == nullptr) group_ = &in.group;
    if (*group_ != in.group) return Error("an actor all-reduces within one replica group, this one names another");
    const int64_t staging = AllReduceStagingBytes(elements, static_cast<int32_t>(in.group.size()));
    reductions_[in.tag] = {&in, staging};
    for (BufferId id : in.buffers) in_flight_[id] = in.tag;
    live_ += staging;
    return absl::OkStatus();
  }

  absl::Status AllReduceWait(const Instruction& in) {
    auto it = reductions_.find(in.tag);
    if (it == reductions_.end()) {
      return Error(absl::StrCat("waits for all-reduce tag ", in.tag, ", which is not running"));
    }
    const Instruction& start = *it->second.start;
    if (in.buffers != start.buffers || in.group != start.group) {
      return Error(absl::StrCat("waits for all-reduce tag ", in.tag,
                                " with other buffers or another group than it started with"));
    }
    for (BufferId id : in.buffers) in_flight_.erase(id);
    live_ -= it->second.staging_bytes;
    reductions_.erase(it);
    return absl::OkStatus();
  }

  absl::Status CheckFull(BufferId id) const {
    if (full_[id]) return absl::OkStatus();
    return Error(absl::StrCat("reads buffer ", id, " (", BufferLabel(program_, id), ") while it is empty"));
  }
  void Fill(BufferId id) {
    if (!full_[id]) live_ += program_.buffers[id].type.num_bytes();
    full_[id] = true;
  }
  void Empty(BufferId id) {
    if (full_[id]) live_ -= program_.buffers[id].type.num_bytes();
    full_[id] = false;
  }

  // "actor A, instruction I (F1.3 run): what".
  absl::Status Error(const std::string& what) const {
    const Instruction& instruction = program_.instructions[index_];
    return absl::InvalidArgumentError(absl::StrCat("actor ", program_.actor, ", instruction ", index_, " (",
                                                   instruction.task.ToString(), " ",
                                                   InstructionKindName(instruction.kind), "): ", what));
  }

  const ActorProgram& program_;
  const BufferId num_buffers_;
  std::vector<bool> full_;  // by buffer: holds a tensor now
  int64_t live_ = 0;
  int64_t peak_ = 0;
  int32_t index_ = 0;  // the instruction being checked
  std::set<std::pair<int32_t, uint64_t>> send_tags_;     // (peer, tag)
  std::set<std::pair<int32_t, uint64_t>> receive_tags_;  // (peer, tag)
  struct Reduction {
    const Instruction* start = nullptr;
    int64_t staging_bytes = 0;
  };
  std::map<uint64_t, Reduction> reductions_;  // in flight, by tag
  std::set<uint64_t> started_tags_;
  const std::vector<int32_t>* group_ = nullptr;  // of the first all-reduce
  std::map<BufferId, uint64_t> in_flight_;    // buffer -> the tag of the reduction that owns it
};

}  // namespace

absl::Status CheckProgramSize(uint64_t instructions, uint64_t buffers) {
  if (instructions > static_cast<uint64_t>(kMaxProgramInstructions)) {
    return absl::InvalidArgumentError(absl::StrCat("a program of ", instructions, " instructions is more than the ",
                                                   kMaxProgramInstructions, " one actor program may have"));
  }
  if (buffers > static_cast<uint64_t>(kMaxProgramBuffers)) {
    return absl::InvalidArgumentError(absl::StrCat("a program of ", buffers, " buffers is more than the ",
                                                   kMaxProgramBuffers, " one actor program may have"));
  }
  return absl::OkStatus();
}

absl::Status VerifyActorProgram(const ActorProgram& program) {
  ProgramVerifier verifier(program);
  if (absl::Status status = verifier.CheckHeader(); !status.ok()) return status;
  for (int32_t i = 0; i < static_cast<int32_t>(program.instructions.size()); ++i) {
    if (absl::Status status = verifier.CheckInstruction(i); !status.ok()) return status;
  }
  return verifier.CheckEnd();
}

}  // namespace tandem::ir
