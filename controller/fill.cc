#include "controller/fill.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backends/cpu/interpreter.h"
#include "ir/hash.h"
#include "ir/statistics.h"

namespace tandem::controller {
namespace {

using ir::BufferId;
using ir::Instruction;
using ir::InstructionKind;

// The task index (into ActorProgram::task_starts) where slot `slot` of
// `actor`'s schedule program begins: a group counts each of its tasks.
int32_t TaskIndexOf(const schedules::Schedule& schedule, int32_t actor, int32_t slot) {
  int32_t tasks = 0;
  for (int32_t s = 0; s < slot; ++s) tasks += static_cast<int32_t>(schedule.programs[actor][s].tasks.size());
  return tasks;
}

// Where the pieces before `slot` go in `program`: the first instruction of
// the slot's first task, or the end for the slot after the last.
struct Position {
  int32_t instruction = 0;
  int32_t end = 0;              // of the slot's first task
  const Instruction* guard = nullptr;  // the first receive in [instruction, end)
};

absl::StatusOr<Position> PositionOf(const schedules::Schedule& schedule, const ir::ActorProgram& program,
                                    int32_t actor, int32_t slot) {
  const auto slots = static_cast<int32_t>(schedule.programs[actor].size());
  const auto size = static_cast<int32_t>(program.instructions.size());
  if (slot == slots) return Position{size, size, nullptr};
  const int32_t task = TaskIndexOf(schedule, actor, slot);
  if (task >= static_cast<int32_t>(program.task_starts.size())) {
    return absl::InternalError(absl::StrCat("actor ", actor, " has ", program.task_starts.size(),
                                            " tasks in its program, slot ", slot, " begins task ", task));
  }
  Position position;
  position.instruction = program.task_starts[task];
  position.end = task + 1 < static_cast<int32_t>(program.task_starts.size()) ? program.task_starts[task + 1] : size;
  const schedules::Task& first = schedule.programs[actor][slot].tasks.front();
  if (position.instruction < size) {
    const ir::TaskLabel& label = program.instructions[position.instruction].task;
    if (label.kind != schedules::TaskKindLetter(first.kind) || label.stage != first.stage.value ||
        label.microbatch != first.microbatch.value) {
      return absl::InternalError(absl::StrCat("actor ", actor, ": slot ", slot, " is ", schedules::TaskName(first),
                                              " but its instructions begin with ", label.ToString()));
    }
  }
  for (int32_t i = position.instruction; i < position.end; ++i) {
    if (program.instructions[i].kind == InstructionKind::kReceive) {
      position.guard = &program.instructions[i];
      break;
    }
  }
  return position;
}

bool IsState(const FillJob& job, const std::string& name) { return job.state.count(name) > 0; }

std::string InputName(const ir::Graph& graph, ir::ValueId id) { return graph.node(id).attributes.GetString("name"); }

}  // namespace

bool FillJob::trains() const {
  for (const ir::GraphOutput& output : piece.outputs()) {
    if (IsState(*this, output.name)) return true;
  }
  return false;
}

absl::Status CheckFillJob(const FillJob& job) {
  const ir::Graph& graph = job.piece;
  const auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("fill job ", job.name, ": ", what));
  };
  if (graph.outputs().empty()) return fail("its piece has no output");
  if (IsState(job, graph.outputs().front().name)) {
    return fail(absl::StrCat("its piece's first output, its result, is state '", graph.outputs().front().name, "'"));
  }
  const auto check_type = [&](const std::string& name, const ir::TensorType& type) -> absl::Status {
    const ir::HostTensor& tensor = job.state.at(name);
    if (!tensor.defined() || tensor.type() != type) {
      return fail(absl::StrCat("state '", name, "' is ",
                               tensor.defined() ? ir::TypeToString(tensor.type()) : std::string("empty"),
                               " but its piece uses ", ir::TypeToString(type)));
    }
    return absl::OkStatus();
  };
  for (ir::ValueId id : graph.Inputs()) {
    const std::string name = InputName(graph, id);
    if (!IsState(job, name)) {
      const ir::Node& node = graph.node(id);
      for (ir::InputRole role : {ir::InputRole::kParameter, ir::InputRole::kOptimizerState, ir::InputRole::kStep}) {
        if (ir::HasRole(node, role)) return fail(absl::StrCat("no state for its ", ir::InputRoleName(role), " '", name, "'"));
      }
      continue;
    }
    if (absl::Status status = check_type(name, graph.type(id)); !status.ok()) return status;
  }
  for (const ir::GraphOutput& output : graph.outputs()) {
    if (!IsState(job, output.name)) continue;
    if (!graph.FindInput(output.name).has_value()) {
      return fail(absl::StrCat("its piece writes state '", output.name, "' but never reads it"));
    }
    if (absl::Status status = check_type(output.name, graph.type(output.value)); !status.ok()) return status;
  }
  if (!job.input) return fail("no input source");
  if (job.items < 0) return fail("negative item count");
  // A slot left without an item runs on zeros: harmless for inference, an
  // update for training.
  if (job.items > 0 && job.trains()) {
    return fail("a training job runs as long as the pipeline does: its items must be 0 (endless)");
  }
  return absl::OkStatus();
}

absl::StatusOr<ir::HostTensor> RunFillPiece(const FillJob& job, ir::TensorMap& state, const ir::TensorMap& inputs) {
  ir::TensorMap all = inputs;
  for (ir::ValueId id : job.piece.Inputs()) {
    const std::string name = InputName(job.piece, id);
    auto it = state.find(name);
    if (it != state.end()) all[name] = it->second;
  }
  absl::StatusOr<ir::TensorMap> outputs = cpu::RunGraph(job.piece, all);
  if (!outputs.ok()) return outputs.status();
  for (const ir::GraphOutput& output : job.piece.outputs()) {
    if (IsState(job, output.name)) state[output.name] = outputs->at(output.name);
  }
  return outputs->at(job.piece.outputs().front().name);
}

int64_t TotalPieces(const std::vector<FillSlot>& slots) {
  int64_t total = 0;
  for (const FillSlot& slot : slots) total += slot.pieces;
  return total;
}

absl::StatusOr<FillPlan> PlanFill(const schedules::Schedule& schedule, const CompiledStep& compiled,
                                  const FillJob& job, const FillCalibration& calibration) {
  if (absl::Status status = CheckFillJob(job); !status.ok()) return status;
  if (compiled.num_replicas != 1) {
    return absl::FailedPreconditionError("fill jobs do not run beside data-parallel replicas yet");
  }
  if (!std::isfinite(calibration.piece_us) || calibration.piece_us <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("a fill piece's time must be above 0, got ", calibration.piece_us));
  }
  if (!calibration.update_us.empty() &&
      calibration.update_us.size() != static_cast<size_t>(schedule.num_actors)) {
    return absl::InvalidArgumentError(absl::StrCat("update times for ", calibration.update_us.size(),
                                                   " actors, the schedule has ", schedule.num_actors));
  }
  absl::StatusOr<schedules::SimulationResult> simulated = schedules::Simulate(schedule, calibration.costs);
  if (!simulated.ok()) return simulated.status();
  absl::StatusOr<std::vector<schedules::BubbleSlot>> bubbles = schedules::FindBubbles(schedule, *simulated);
  if (!bubbles.ok()) return bubbles.status();

  FillPlan plan;
  plan.predicted_step_us = simulated->makespan;
  for (const ir::GraphOutput& output : job.piece.outputs()) {
    if (!IsState(job, output.name)) plan.piece_bytes += job.piece.type(output.value).num_bytes();
  }
  // The packer's memory is the actor's bytes below its static peak there;
  // a bubble with no receive to give way to takes nothing.
  std::vector<std::vector<int64_t>> live_before;
  for (const ir::ActorProgram& program : compiled.programs) live_before.push_back(ir::LiveBytesBefore(program));
  for (schedules::BubbleSlot& bubble : *bubbles) {
    const int32_t actor = bubble.actor.value;
    const ir::ActorProgram& program = compiled.programs[actor];
    absl::StatusOr<Position> position = PositionOf(schedule, program, actor, bubble.before_slot);
    if (!position.ok()) return position.status();
    const std::vector<int64_t>& live = live_before[actor];
    bubble.free = static_cast<double>(program.static_peak_bytes - live[position->instruction]);
    if (bubble.tail(schedule)) {
      const double update = calibration.update_us.empty() ? 0.0 : calibration.update_us[actor];
      bubble.end = std::max(bubble.start, bubble.end - update);
    } else if (position->guard == nullptr) {
      bubble.free = -1;
    }
  }
  const schedules::FillPacking packing{.piece_cost = calibration.piece_us,
                                       .piece_memory = static_cast<double>(plan.piece_bytes),
                                       .share = calibration.share};
  absl::StatusOr<std::vector<int64_t>> pieces = schedules::PackFill(*bubbles, packing);
  if (!pieces.ok()) return pieces.status();
  for (size_t i = 0; i < bubbles->size(); ++i) {
    if ((*pieces)[i] > 0) {
      plan.slots.push_back({(*bubbles)[i].actor.value, (*bubbles)[i].before_slot, (*pieces)[i]});
    }
  }
  plan.bubbles = *std::move(bubbles);
  plan.pieces = *std::move(pieces);
  return plan;
}

absl::Status AddFill(const schedules::Schedule& schedule, const FillJob& job, const std::vector<FillSlot>& slots,
                     CompiledStep& compiled) {
  if (absl::Status status = CheckFillJob(job); !status.ok()) return status;
  if (compiled.num_replicas != 1) {
    return absl::FailedPreconditionError("fill jobs do not run beside data-parallel replicas yet");
  }
  if (schedule.num_actors != static_cast<int32_t>(compiled.programs.size())) {
    return absl::InvalidArgumentError(absl::StrCat("the schedule has ", schedule.num_actors,
                                                   " actors, the compiled step ", compiled.programs.size()));
  }
  const ir::Graph& graph = job.piece;
  const std::vector<ir::ValueId> graph_inputs = graph.Inputs();
  // Per actor: insertion point -> the pieces there, in slot order.
  std::vector<std::map<int32_t, std::vector<Instruction>>> inserts(compiled.programs.size());
  std::vector<int32_t> function_of(compiled.programs.size(), -1);
  std::vector<std::map<std::string, BufferId>> state_of(compiled.programs.size());
  int32_t fill_slot = 0;
  for (const FillSlot& slot : slots) {
    if (slot.actor < 0 || slot.actor >= schedule.num_actors || slot.before_slot < 0 ||
        slot.before_slot > static_cast<int32_t>(schedule.programs[slot.actor].size()) || slot.pieces < 0 ||
        slot.pieces > schedules::kMaxFillPieces - fill_slot) {
      return absl::InvalidArgumentError(absl::StrCat("fill slot of ", slot.pieces, " pieces before slot ",
                                                     slot.before_slot, " of actor ", slot.actor,
                                                     " is out of range"));
    }
    ir::ActorProgram& program = compiled.programs[slot.actor];
    absl::StatusOr<Position> position = PositionOf(schedule, program, slot.actor, slot.before_slot);
    if (!position.ok()) return position.status();
    const bool tail = slot.before_slot == static_cast<int32_t>(schedule.programs[slot.actor].size());
    if (!tail && position->guard == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fill slot before ", schedules::SlotName(schedule.programs[slot.actor][slot.before_slot]), " on actor ",
          slot.actor, ": that task receives nothing, so nothing would take precedence over the fill"));
    }
    if (function_of[slot.actor] < 0) {
      function_of[slot.actor] = static_cast<int32_t>(program.functions.size());
      program.functions.push_back(ir::Function{absl::StrCat(kFillResult, ".", job.name), graph});
      for (ir::ValueId id : graph_inputs) {
        const std::string name = InputName(graph, id);
        if (!IsState(job, name)) continue;
        state_of[slot.actor][name] = static_cast<BufferId>(program.buffers.size());
        program.buffers.push_back(ir::Buffer{.name = absl::StrCat(kFillPrefix, name),
                                             .type = graph.type(id),
                                             .kind = ir::BufferKind::kState,
                                             .binding = absl::StrCat(kFillPrefix, name)});
      }
    }
    for (int64_t piece = 0; piece < slot.pieces; ++piece, ++fill_slot) {
      Instruction fill{.kind = InstructionKind::kFill, .task = ir::TaskLabel{'X', -1, fill_slot}};
      fill.function = function_of[slot.actor];
      for (ir::ValueId id : graph_inputs) {
        const std::string name = InputName(graph, id);
        if (IsState(job, name)) {
          fill.inputs.push_back(state_of[slot.actor][name]);
          continue;
        }
        const auto buffer = static_cast<BufferId>(program.buffers.size());
        program.buffers.push_back(ir::Buffer{.name = absl::StrCat(kFillPrefix, name, "@", fill_slot),
                                             .type = graph.type(id),
                                             .kind = ir::BufferKind::kInput,
                                             .binding = absl::StrCat(kFillPrefix, name),
                                             .microbatch = fill_slot});
        fill.inputs.push_back(buffer);
        fill.buffers.push_back(buffer);
      }
      for (const ir::GraphOutput& output : graph.outputs()) {
        if (IsState(job, output.name)) {
          fill.outputs.push_back(state_of[slot.actor][output.name]);
          continue;
        }
        fill.outputs.push_back(static_cast<BufferId>(program.buffers.size()));
        program.buffers.push_back(ir::Buffer{.name = absl::StrCat(kFillResult, ".", output.name, "@", fill_slot),
                                             .type = graph.type(output.value)});
      }
      fill.result = kFillResult;
      fill.microbatch = fill_slot;
      if (position->guard != nullptr) {
        fill.peer = position->guard->peer;
        fill.tag = position->guard->tag;
      }
      inserts[slot.actor][position->instruction].push_back(std::move(fill));
    }
  }
  ir::ContentHasher hash;
  for (size_t actor = 0; actor < compiled.programs.size(); ++actor) {
    ir::ActorProgram& program = compiled.programs[actor];
    if (!inserts[actor].empty()) {
      // Rebuild the stream; a task start at an insertion point keeps
      // pointing at it, so the pieces belong to the task they precede.
      const auto size = static_cast<int32_t>(program.instructions.size());
      std::vector<Instruction> merged;
      std::vector<int32_t> new_index(size + 1, 0);
      int32_t added = 0;
      for (int32_t i = 0; i <= size; ++i) {
        auto it = inserts[actor].find(i);
        new_index[i] = static_cast<int32_t>(merged.size());
        if (it != inserts[actor].end()) {
          added += static_cast<int32_t>(it->second.size());
          for (Instruction& fill : it->second) merged.push_back(std::move(fill));
        }
        if (i < size) merged.push_back(std::move(program.instructions[i]));
      }
      for (int32_t& start : program.task_starts) start = new_index[start];
      program.instructions = std::move(merged);
      program.static_peak_bytes = ir::StaticPeakBytes(program);
      if (absl::Status status = ir::VerifyActorProgram(program); !status.ok()) {
        return absl::InternalError(absl::StrCat("actor ", actor, " with fill: ", status.message()));
      }
      compiled.stats[actor].instructions += added;
    }
    hash.AddUint64(ir::HashActorProgram(program));
  }
  compiled.hash = hash.Digest();
  return absl::OkStatus();
}

absl::StatusOr<double> MeasureFillPiece(const FillJob& job, int32_t runs) {
  if (absl::Status status = CheckFillJob(job); !status.ok()) return status;
  if (runs < 1) return absl::InvalidArgumentError("MeasureFillPiece needs at least one run");
  const ir::TensorMap inputs = job.input(0);
  ir::TensorMap state = job.state;
  std::vector<double> times;
  for (int32_t run = 0; run <= runs; ++run) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<ir::HostTensor> outputs = RunFillPiece(job, state, inputs);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    if (!outputs.ok()) return outputs.status();
    if (run > 0) times.push_back(us);  // run 0 warms up
  }
  return ir::Median(times);
}

std::vector<int64_t> FillQueue::Take(int64_t pieces) {
  std::vector<int64_t> items;
  items.reserve(static_cast<size_t>(std::max<int64_t>(pieces, 0)));
  while (static_cast<int64_t>(items.size()) < pieces) {
    if (!retry_.empty()) {
      items.push_back(retry_.front());
      retry_.pop_front();
    } else if (job_->items == 0 || next_ < job_->items) {
      items.push_back(next_++);
    } else {
      items.push_back(-1);  // nothing left: the slot runs on zeros, its output is dropped
    }
  }
  return items;
}

std::vector<ir::TensorMap> FillQueue::Inputs(const std::vector<int64_t>& items) const {
  std::vector<ir::TensorMap> inputs;
  inputs.reserve(items.size());
  for (int64_t item : items) {
    if (item >= 0) {
      inputs.push_back(job_->input(item));
      continue;
    }
    ir::TensorMap zeros;
    for (ir::ValueId id : job_->piece.Inputs()) {
      const std::string name = InputName(job_->piece, id);
      if (IsState(*job_, name)) continue;
      absl::StatusOr<ir::HostTensor> tensor = ir::HostTensor::Allocate(job_->piece.type(id));
      if (tensor.ok()) zeros[name] = *std::move(tensor);
    }
    inputs.push_back(std::move(zeros));
  }
  return inputs;
}

std::map<int64_t, ir::HostTensor> FillQueue::Finish(const std::vector<int64_t>& items,
                                                    const std::map<int32_t, ir::HostTensor>& outputs) {
  std::map<int64_t, ir::HostTensor> done;
  std::vector<int64_t> missed;
  for (size_t slot = 0; slot < items.size(); ++slot) {
    if (items[slot] < 0) continue;
    auto it = outputs.find(static_cast<int32_t>(slot));
    if (it == outputs.end()) {
      missed.push_back(items[slot]);
      continue;
    }
    done.emplace(items[slot], it->second);
  }
  // Retried in their order, before anything new.
  for (auto it = missed.rbegin(); it != missed.rend(); ++it) retry_.push_front(*it);
  done_ += static_cast<int64_t>(done.size());
  skipped_ += static_cast<int64_t>(missed.size());
  return done;
}

}  // namespace tandem::controller
