#include "controller/actor_lowering.h"

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "ir/all_reduce.h"
#include "ir/limits.h"

namespace tandem::controller {
namespace {

using ir::BufferId;
using ir::Instruction;
using ir::InstructionKind;

// Builds one actor's program: owns the buffer table and the instructions
// while they are emitted.
class Lowering {
 public:
  Lowering(const StepPlan& plan, int32_t actor) : plan_(plan), step_(plan.step()), actor_(actor) {
    program_.actor = actor;
    program_.num_actors = plan.schedule().num_actors;
    program_.num_replicas = step_.num_replicas;
    for (const ir::Accumulator& acc : step_.accumulators) {
      const StepPlan::AccumulatorInfo& info = plan_.Accumulator(acc.name);
      if (info.actor != actor_) continue;
      ++own_accumulators_;
      if (step_.num_replicas > 1) ++unfinished_[info.stage];
    }
    for (int32_t r = 0; step_.num_replicas > 1 && r < step_.num_replicas; ++r) {
      group_.push_back(ir::GlobalActor(program_, r));
    }
  }

  absl::StatusOr<ir::ActorProgram> Run() {
    for (int32_t task : plan_.actor_tasks(actor_)) {
      if (absl::Status status = LowerTask(task); !status.ok()) return status;
      // Stop as soon as the program passes its bound, rather than finish a
      // program no one may run (Compile words the error).
      if (program_.instructions.size() > static_cast<size_t>(ir::kMaxProgramInstructions) ||
          program_.buffers.size() > static_cast<size_t>(ir::kMaxProgramBuffers)) {
        return std::move(program_);
      }
    }
    if (absl::Status status = step_.asynchronous() ? CheckUpdates() : LowerUpdate(); !status.ok()) return status;
    AssignLifetimes(program_);
    return std::move(program_);
  }

 private:
  struct AccumulatorState {
    BufferId buffer = -1;  // the sum of the current group (of the step, unless it is asynchronous)
    int32_t next_microbatch = 0;
    std::map<int32_t, BufferId> held;  // gradients waiting for their turn
  };

  BufferId AddBuffer(std::string name, ir::TensorType type, ir::BufferKind kind, std::string binding = "",
                     int32_t microbatch = -1) {
    program_.buffers.push_back({std::move(name), std::move(type), kind, std::move(binding), microbatch});
    return static_cast<BufferId>(program_.buffers.size() - 1);
  }

  BufferId StateBuffer(const std::string& name) {
    auto it = state_buffers_.find(name);
    if (it != state_buffers_.end()) return it->second;
    const ir::StateSpec* spec = plan_.State(name);
    BufferId id = AddBuffer(name, spec->type, ir::BufferKind::kState, name);
    state_buffers_[name] = id;
    return id;
  }

  BufferId InputBuffer(const std::string& name, int32_t microbatch, const ir::TensorType& type) {
    auto key = std::make_pair(name, microbatch);
    auto it = input_buffers_.find(key);
    if (it != input_buffers_.end()) return it->second;
    std::string label = microbatch < 0 ? name : absl::StrCat(name, "@", microbatch);
    BufferId id = AddBuffer(label, type, ir::BufferKind::kInput, name, microbatch);
    input_buffers_[key] = id;
    return id;
  }

  std::string ValueName(ir::ValueId value, int32_t microbatch) const {
    const std::string& output = plan_.OutputName(value);
    return absl::StrCat(output.empty() ? absl::StrCat("%", value) : output, "@", microbatch);
  }

  BufferId ValueBuffer(ir::ValueId value, int32_t microbatch) {
    BufferId id = AddBuffer(ValueName(value, microbatch), step_.microbatch.type(value), ir::BufferKind::kTemporary);
    value_buffers_[{value, microbatch}] = id;
    return id;
  }

  int32_t FunctionIndex(const ExtractedFunction& function) {
    auto it = function_index_.find(function.function.name);
    if (it != function_index_.end()) return it->second;
    program_.functions.push_back(function.function);
    int32_t index = static_cast<int32_t>(program_.functions.size() - 1);
    function_index_[function.function.name] = index;
    return index;
  }

  void Emit(Instruction instruction) { program_.instructions.push_back(std::move(instruction)); }

  absl::Status LowerTask(int32_t task_index) {
    const PlannedTask& task = plan_.tasks()[task_index];
    const ir::TaskLabel label = task.Label();
    const int32_t m = task.microbatch;
    program_.task_starts.push_back(static_cast<int32_t>(program_.instructions.size()));

    for (int32_t message_index : plan_.receives_before(task_index)) {
      const PlannedMessage& message = plan_.messages()[message_index];
      Instruction receive{.kind = InstructionKind::kReceive, .task = label};
      receive.peer = plan_.tasks()[message.producer].actor;
      receive.tag = message.tag;
      for (ir::ValueId value : message.values) receive.buffers.push_back(ValueBuffer(value, m));
      Emit(std::move(receive));
    }

    const ExtractedFunction& function = plan_.Function(task.kind, task.stage);
    if (function.empty()) return absl::OkStatus();
    Instruction run{.kind = InstructionKind::kRun, .task = label};
    run.function = FunctionIndex(function);
    for (ir::ValueId value : function.inputs) {
      const ir::Node& node = step_.microbatch.node(value);
      if (node.op == ir::OpKind::kInput) {
        const std::string& name = node.attributes.GetString("name");
        if (ir::HasRole(node, ir::InputRole::kCache)) {  // this microbatch's copy, kept on this actor
          run.inputs.push_back(StateBuffer(ir::CacheStateName(name, m)));
          continue;
        }
        if (!ir::HasRole(node, ir::InputRole::kParameter)) {
          run.inputs.push_back(InputBuffer(name, m, node.type));
          continue;
        }
        absl::StatusOr<BufferId> weights = WeightVersion(name, task);
        if (!weights.ok()) return weights.status();
        run.inputs.push_back(*weights);
        continue;
      }
      auto it = value_buffers_.find({value, m});
      if (it == value_buffers_.end()) {
        return absl::InternalError(absl::StrCat("actor ", actor_, ": task ", task.Describe(), " reads %", value,
                                                " for microbatch ", m, ", which is not on the actor"));
      }
      run.inputs.push_back(it->second);
    }
    for (ir::ValueId value : function.outputs) {
      const std::string& output = plan_.OutputName(value);
      if (!output.empty() && plan_.IsCache(output)) {  // written in place of the microbatch's copy
        const BufferId cache = StateBuffer(ir::CacheStateName(output, m));
        value_buffers_[{value, m}] = cache;
        run.outputs.push_back(cache);
        continue;
      }
      run.outputs.push_back(ValueBuffer(value, m));
    }
    Emit(run);

    for (int32_t message_index : plan_.sends_after(task_index)) {
      const PlannedMessage& message = plan_.messages()[message_index];
      Instruction send{.kind = InstructionKind::kSend, .task = label};
      send.peer = message.to_actor;
      send.tag = message.tag;
      for (ir::ValueId value : message.values) send.buffers.push_back(value_buffers_.at({value, m}));
      Emit(std::move(send));
    }
    for (size_t i = 0; i < function.outputs.size(); ++i) {
      const std::string& output = plan_.OutputName(function.outputs[i]);
      if (output.empty() || plan_.IsCache(output)) continue;
      if (output == "loss" || output == "output") {
        Instruction emit{.kind = InstructionKind::kEmit, .task = label};
        emit.buffers = {run.outputs[i]};
        emit.result = output;
        emit.microbatch = m;
        Emit(std::move(emit));
      } else {
        Accumulate(output, m, run.outputs[i], label);
      }
    }
    return absl::OkStatus();
  }

  // The state buffer holding the weights `parameter` has for `task`: in an
  // asynchronous step, the version of its group's stage delay, which the
  // actor's updates so far have shifted into stash<k> (ir/train_step.h).
  absl::StatusOr<BufferId> WeightVersion(const std::string& parameter, const PlannedTask& task) {
    if (!step_.asynchronous()) return StateBuffer(parameter);
    const int32_t delay = step_.VersionDelay(task.stage);
    const int32_t group = task.microbatch / step_.group_size();
    const int32_t k = updates_done_ - group + delay;
    if (k < 0 || k > delay) {
      return absl::InvalidArgumentError(absl::StrCat(
          task.Describe(), " needs stage ", task.stage, "'s weights after the step's first ", group - delay,
          " update(s) (microbatch ", task.microbatch, " is in update group ", group, ", version delay ", delay,
          "), but its actor has made ", k < 0 ? "only " : "", updates_done_, " by then: ",
          k < 0 ? "run the backwards that complete those groups before it, or update less often (2bw: a larger "
                  "--update-every)"
                : absl::StrCat("it keeps only ", delay, " older version(s)")));
    }
    return StateBuffer(ir::StashName(parameter, k));
  }

  // Adds a microbatch's gradient to its accumulator in microbatch order,
  // holding it if earlier microbatches have not been added yet. In an
  // asynchronous step each group has its own sum, and the update of a group
  // follows the last of the actor's sums of it.
  void Accumulate(const std::string& gradient, int32_t microbatch, BufferId buffer, const ir::TaskLabel& label) {
    AccumulatorState& acc = accumulators_[gradient];
    acc.held[microbatch] = buffer;
    const int32_t group_size = step_.group_size();
    for (auto it = acc.held.find(acc.next_microbatch); it != acc.held.end(); it = acc.held.find(acc.next_microbatch)) {
      const int32_t group = acc.next_microbatch / group_size;
      if (acc.buffer < 0) {
        const std::string& name = plan_.AccumulatorOf(gradient);
        acc.buffer = AddBuffer(step_.asynchronous() ? absl::StrCat(name, "#", group) : name,
                               program_.buffers[buffer].type, ir::BufferKind::kTemporary);
      }
      Emit(Instruction{.kind = InstructionKind::kAccumulate, .task = label, .buffers = {acc.buffer, it->second}});
      acc.held.erase(it);
      ++acc.next_microbatch;
      if (!step_.asynchronous()) {
        if (acc.next_microbatch == step_.num_microbatches) FinishAccumulator(gradient, label);
      } else if (acc.next_microbatch % group_size == 0) {
        std::map<std::string, BufferId>& sums = group_sums_[group];
        sums[plan_.AccumulatorOf(gradient)] = acc.buffer;
        acc.buffer = -1;
        if (static_cast<int32_t>(sums.size()) == own_accumulators_) {
          EmitUpdate(ir::TaskLabel{'U', -1, group}, group, sums);
          group_sums_.erase(group);
        }
      }
    }
  }

  // After an asynchronous step's tasks: every update ran, in group order.
  absl::Status CheckUpdates() const {
    if (step_.forward_only() || own_accumulators_ == 0 || updates_done_ == step_.updates_per_step()) {
      return absl::OkStatus();
    }
    return absl::InternalError(absl::StrCat("actor ", actor_, " made ", updates_done_, " of the step's ",
                                            step_.updates_per_step(), " updates"));
  }

  // With replicas: once every accumulator of a stage is final, starts the
  // all-reduce of the stage's accumulators (in the step's order), tagged by
  // the stage, so that it overlaps with the rest of the step.
  void FinishAccumulator(const std::string& gradient, const ir::TaskLabel& label) {
    auto unfinished = unfinished_.find(plan_.Accumulator(plan_.AccumulatorOf(gradient)).stage);
    if (unfinished == unfinished_.end() || --unfinished->second > 0) return;
    const int32_t stage = unfinished->first;
    Instruction start{.kind = InstructionKind::kAllReduceStart, .task = label};
    start.tag = static_cast<uint64_t>(stage);
    start.group = group_;
    for (const ir::Accumulator& acc : step_.accumulators) {
      if (plan_.Accumulator(acc.name).stage == stage) start.buffers.push_back(accumulators_.at(acc.source).buffer);
    }
    started_.push_back(start);
    Emit(std::move(start));
  }

  // After the loop: send finished accumulators to the other holders of their
  // parameter, receive theirs, and run the update of the held parameters.
  absl::Status LowerUpdate() {
    if (step_.forward_only()) return absl::OkStatus();
    const ir::TaskLabel label{'U', -1, -1};
    program_.task_starts.push_back(static_cast<int32_t>(program_.instructions.size()));
    for (const Instruction& start : started_) {
      Instruction wait = start;
      wait.kind = InstructionKind::kAllReduceWait;
      wait.task = label;
      Emit(std::move(wait));
    }
    std::map<std::string, BufferId> accumulator_buffers;
    const std::vector<ir::Accumulator>& accumulators = step_.accumulators;
    for (size_t i = 0; i < accumulators.size(); ++i) {
      const ir::Accumulator& acc = accumulators[i];
      auto state = accumulators_.find(acc.source);
      if (state == accumulators_.end()) continue;
      if (state->second.next_microbatch != step_.num_microbatches) {
        return absl::InternalError(absl::StrCat("actor ", actor_, ": accumulator ", acc.name, " has ",
                                                state->second.next_microbatch, " of ", step_.num_microbatches,
                                                " microbatches"));
      }
      accumulator_buffers[acc.name] = state->second.buffer;
      for (int32_t holder : plan_.Holders(plan_.Accumulator(acc.name).parameter)) {
        if (holder == actor_) continue;
        Emit(Instruction{.kind = InstructionKind::kSend, .task = label, .buffers = {state->second.buffer},
                         .peer = holder, .tag = plan_.first_update_tag() + i});
      }
    }
    const UpdateFunction& update = Update();
    if (update.function.function.name.empty()) return absl::OkStatus();
    for (ir::ValueId value : update.function.inputs) {
      const ir::Node& node = step_.update.node(value);
      if (!ir::HasRole(node, ir::InputRole::kAccumulator)) continue;
      const std::string& name = node.attributes.GetString("name");
      if (accumulator_buffers.count(name)) continue;
      const StepPlan::AccumulatorInfo& info = plan_.Accumulator(name);
      BufferId buffer = AddBuffer(name, node.type, ir::BufferKind::kTemporary);
      Emit(Instruction{.kind = InstructionKind::kReceive, .task = label, .buffers = {buffer}, .peer = info.actor,
                       .tag = plan_.first_update_tag() + static_cast<uint64_t>(info.index)});
      accumulator_buffers[name] = buffer;
    }
    if (step_.computes_gradient_norm()) NormPartials(label, accumulator_buffers);
    EmitUpdate(label, -1, accumulator_buffers);
    return absl::OkStatus();
  }

  // The stages' gradient norms (ir/train_step.h `norm`): runs the norm
  // graph's part for this actor's stages on the final accumulators and
  // emits each partial (result NormPartialName(stage), microbatch -1) for
  // the controller. When the update reads them (clipping, skipping
  // non-finite updates), sends each partial to every other actor that
  // updates, and receives theirs into `buffers`; every updating actor then
  // sums all the stages' partials, in stage order, inside its update.
  void NormPartials(const ir::TaskLabel& label, std::map<std::string, BufferId>& buffers) {
    const bool exchange = step_.update_reads_gradient_norm();
    const ir::Graph& norm = step_.norm;
    const std::set<int32_t> updating = plan_.UpdatingActors();
    auto owner = [&](const ir::GraphOutput& output) {
      return plan_.schedule().ActorOf(StageId(norm.node(output.value).stage)).value;
    };
    // This actor's partials first: sends never block, so no actor waits on
    // another that is itself waiting.
    std::vector<ir::ValueId> exports;
    for (const ir::GraphOutput& output : norm.outputs()) {
      if (owner(output) == actor_) exports.push_back(output.value);
    }
    if (!exports.empty()) {
      const ExtractedFunction function = ExtractNeeded(norm, "norm", exports);
      Instruction run{.kind = InstructionKind::kRun, .task = label};
      run.function = FunctionIndex(function);
      for (ir::ValueId value : function.inputs) {
        run.inputs.push_back(buffers.at(norm.node(value).attributes.GetString("name")));
      }
      for (const ir::GraphOutput& output : norm.outputs()) {
        if (owner(output) != actor_) continue;
        BufferId buffer = AddBuffer(output.name, norm.node(output.value).type, ir::BufferKind::kTemporary);
        run.outputs.push_back(buffer);
        buffers[output.name] = buffer;
      }
      Emit(std::move(run));
      for (const ir::GraphOutput& output : norm.outputs()) {
        if (owner(output) != actor_) continue;
        Emit(Instruction{.kind = InstructionKind::kEmit, .task = label, .buffers = {buffers.at(output.name)},
                         .result = output.name});
        if (!exchange) continue;
        for (int32_t peer : updating) {
          if (peer == actor_) continue;
          Emit(Instruction{.kind = InstructionKind::kSend, .task = label, .buffers = {buffers.at(output.name)},
                           .peer = peer, .tag = plan_.norm_tag(norm.node(output.value).stage)});
        }
      }
    }
    if (!exchange || !updating.count(actor_)) return;
    for (const ir::GraphOutput& output : norm.outputs()) {
      if (owner(output) == actor_) continue;
      BufferId buffer = AddBuffer(output.name, norm.node(output.value).type, ir::BufferKind::kTemporary);
      Emit(Instruction{.kind = InstructionKind::kReceive, .task = label, .buffers = {buffer}, .peer = owner(output),
                       .tag = plan_.norm_tag(norm.node(output.value).stage)});
      buffers[output.name] = buffer;
    }
  }

  // The update outputs this actor computes (its parameters, their slots and
  // stashed versions) and the function computing them; an unnamed function
  // when the actor updates nothing. Extracted once per program.
  struct UpdateFunction {
    ExtractedFunction function;
    std::vector<std::string> export_names;
  };
  const UpdateFunction& Update() {
    if (update_.has_value()) return *update_;
    update_.emplace();
    std::vector<ir::ValueId> exports;
    for (const ir::GraphOutput& output : step_.update.outputs()) {
      const ir::StateSpec* spec = plan_.State(output.name);
      const std::string& parameter = spec->parameter.empty() ? spec->name : spec->parameter;
      if (!plan_.Holders(parameter).count(actor_)) continue;
      exports.push_back(output.value);
      update_->export_names.push_back(output.name);
    }
    if (exports.empty()) return *update_;
    update_->function = ExtractNeeded(step_.update, "update", exports);
    return *update_;
  }

  // Runs the update of `group` (-1: the step's one update) on the
  // accumulators in `accumulator_buffers`, into the state buffers.
  void EmitUpdate(const ir::TaskLabel& label, int32_t group, const std::map<std::string, BufferId>& accumulator_buffers) {
    const UpdateFunction& update = Update();
    ++updates_done_;
    if (update.function.function.name.empty()) return;
    Instruction run{.kind = InstructionKind::kRun, .task = label};
    run.function = FunctionIndex(update.function);
    for (ir::ValueId value : update.function.inputs) {
      const ir::Node& node = step_.update.node(value);
      const std::string& name = node.attributes.GetString("name");
      if (ir::HasRole(node, ir::InputRole::kParameter) || ir::HasRole(node, ir::InputRole::kOptimizerState)) {
        run.inputs.push_back(StateBuffer(name));
      } else if (ir::HasRole(node, ir::InputRole::kAccumulator) || ir::HasRole(node, ir::InputRole::kGradientNorm)) {
        run.inputs.push_back(accumulator_buffers.at(name));
      } else {
        run.inputs.push_back(InputBuffer(name, group, node.type));
      }
    }
    for (const std::string& name : update.export_names) run.outputs.push_back(StateBuffer(name));
    Emit(std::move(run));
  }

  // The function of the ops of `graph` that `exports` need (its inputs and
  // constants are the function's own).
  static ExtractedFunction ExtractNeeded(const ir::Graph& graph, const std::string& name,
                                         const std::vector<ir::ValueId>& exports) {
    std::vector<bool> member(graph.size(), false);
    for (ir::ValueId value : exports) member[value] = true;
    for (ir::ValueId id = graph.size() - 1; id >= 0; --id) {
      if (!member[id]) continue;
      for (ir::ValueId operand : graph.node(id).operands) member[operand] = true;
    }
    for (ir::ValueId id = 0; id < graph.size(); ++id) {
      const ir::OpKind op = graph.node(id).op;
      if (op == ir::OpKind::kInput || op == ir::OpKind::kConstant) member[id] = false;
    }
    return ExtractFunction(graph, name, member, exports);
  }

  const StepPlan& plan_;
  const ir::TrainStep& step_;
  const int32_t actor_;
  std::vector<int32_t> group_;             // with replicas: this position's actors, in replica order
  std::map<int32_t, int32_t> unfinished_;  // stage -> its accumulators not final yet (with replicas)
  std::vector<Instruction> started_;       // all-reduce starts, in program order
  ir::ActorProgram program_;
  std::map<std::string, BufferId> state_buffers_;
  std::map<std::pair<std::string, int32_t>, BufferId> input_buffers_;
  std::map<std::pair<ir::ValueId, int32_t>, BufferId> value_buffers_;
  std::map<std::string, int32_t> function_index_;
  std::map<std::string, AccumulatorState> accumulators_;  // by gradient output name
  int32_t own_accumulators_ = 0;                          // summed on this actor
  // Asynchronous steps: the finished sums of each group not yet updated on.
  std::map<int32_t, std::map<std::string, BufferId>> group_sums_;
  int32_t updates_done_ = 0;
  std::optional<UpdateFunction> update_;
};


}  // namespace

absl::StatusOr<ir::ActorProgram> LowerActor(const StepPlan& plan, int32_t actor) {
  return Lowering(plan, actor).Run();
}

void AssignLifetimes(ir::ActorProgram& program) {
  const std::vector<ir::Buffer>& buffers = program.buffers;
  const int32_t count = static_cast<int32_t>(program.instructions.size());
  // Last instruction that touches each buffer; -1 when none.
  std::vector<int32_t> last_use(buffers.size(), -1);
  for (int32_t i = 0; i < count; ++i) {
    const Instruction& instruction = program.instructions[i];
    for (BufferId id : instruction.inputs) last_use[id] = i;
    for (BufferId id : instruction.outputs) last_use[id] = i;
    for (BufferId id : instruction.buffers) last_use[id] = i;
  }
  std::vector<std::vector<BufferId>> free_after(count);
  for (BufferId id = 0; id < static_cast<BufferId>(buffers.size()); ++id) {
    if (buffers[id].kind == ir::BufferKind::kState || last_use[id] < 0) continue;
    const Instruction& last = program.instructions[last_use[id]];
    // kAccumulate releases its source itself.
    if (last.kind == InstructionKind::kAccumulate && last.buffers[1] == id) continue;
    free_after[last_use[id]].push_back(id);
  }
  std::vector<Instruction> lowered;
  std::vector<int32_t> new_index(count + 1, 0);
  for (int32_t i = 0; i < count; ++i) {
    new_index[i] = static_cast<int32_t>(lowered.size());
    lowered.push_back(program.instructions[i]);
    if (!free_after[i].empty()) {
      lowered.push_back(Instruction{.kind = InstructionKind::kFree, .task = program.instructions[i].task,
                                    .buffers = free_after[i]});
    }
  }
  new_index[count] = static_cast<int32_t>(lowered.size());
  for (int32_t& start : program.task_starts) start = new_index[start];
  program.instructions = std::move(lowered);

  // The static peak, by the rule of ir/actor_program.h.
  program.static_peak_bytes = ir::StaticPeakBytes(program);
}

}  // namespace tandem::controller
