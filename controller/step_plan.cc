#include "controller/step_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tandem::controller {
namespace {

using schedules::TaskKind;

constexpr TaskKind kKinds[] = {TaskKind::kForward, TaskKind::kBackward, TaskKind::kBackwardInput,
                               TaskKind::kBackwardWeight};

// Whether a node of `phase` belongs to the function of task kind `kind`.
bool RunsIn(ir::Phase phase, TaskKind kind) {
  switch (kind) {
    case TaskKind::kForward: return phase == ir::Phase::kForward;
    case TaskKind::kBackward: return phase == ir::Phase::kBackwardInput || phase == ir::Phase::kBackwardWeight;
    case TaskKind::kBackwardInput: return phase == ir::Phase::kBackwardInput;
    case TaskKind::kBackwardWeight: return phase == ir::Phase::kBackwardWeight;
  }
  return false;
}

bool IsSource(const ir::Node& node) {
  return node.op == ir::OpKind::kInput || node.op == ir::OpKind::kConstant;
}

// "%12 = embedding at examples/gpt.cc:40 (stage 0)".
std::string DescribeStageValue(const ir::Graph& graph, ir::ValueId value) {
  return absl::StrCat(ir::DescribeValue(graph, value), " (stage ", graph.node(value).stage, ")");
}

}  // namespace

ir::TaskLabel PlannedTask::Label() const {
  return ir::TaskLabel{schedules::TaskKindLetter(kind), stage, microbatch};
}

std::string PlannedTask::Describe() const {
  return absl::StrCat(Label().ToString(), " (actor ", actor, ", slot ", slot, ")");
}

absl::StatusOr<StepPlan> StepPlan::Build(const ir::TrainStep& step, const schedules::Schedule& schedule,
                                         const std::vector<bool>& remat) {
  if (!remat.empty() && static_cast<int32_t>(remat.size()) != step.num_stages) {
    return absl::InvalidArgumentError(absl::StrCat("rematerialisation is given for ", remat.size(),
                                                   " stages, but model '", step.name, "' has ", step.num_stages));
  }
  StepPlan plan;
  plan.step_ = &step;
  plan.schedule_ = &schedule;
  if (!step.forward_only()) plan.remat_ = remat;
  if (absl::Status status = plan.BuildFunctions(); !status.ok()) return status;
  if (absl::Status status = plan.PlanTasks(); !status.ok()) return status;
  if (absl::Status status = plan.PlanValues(); !status.ok()) return status;
  plan.PlanAccumulators();
  return plan;
}

absl::Status StepPlan::BuildFunctions() {
  const ir::Graph& graph = step_->microbatch;
  const int32_t n = graph.size();
  output_names_.assign(n, "");
  for (const ir::GraphOutput& output : graph.outputs()) output_names_[output.value] = output.name;
  std::vector<std::vector<ir::ValueId>> consumers(n);
  for (ir::ValueId id = 0; id < n; ++id) {
    for (ir::ValueId operand : graph.node(id).operands) consumers[operand].push_back(id);
  }
  auto backward_of = [&](ir::ValueId id, int32_t stage) {
    const ir::Node& node = graph.node(id);
    return node.stage == stage && (node.phase == ir::Phase::kBackwardInput || node.phase == ir::Phase::kBackwardWeight);
  };
  for (int32_t stage = 0; stage < step_->num_stages; ++stage) {
    // A rematerialised stage's recomputed values: the forward values of the
    // stage that its backward reads, and what they are computed from within
    // the stage.
    std::vector<bool> recomputed(n, false);
    if (Remat(stage)) {
      std::vector<ir::ValueId> stack;
      for (ir::ValueId id = 0; id < n; ++id) {
        if (backward_of(id, stage)) stack.insert(stack.end(), graph.node(id).operands.begin(), graph.node(id).operands.end());
      }
      while (!stack.empty()) {
        const ir::ValueId id = stack.back();
        stack.pop_back();
        const ir::Node& node = graph.node(id);
        if (recomputed[id] || IsSource(node) || node.stage != stage || node.phase != ir::Phase::kForward) continue;
        recomputed[id] = true;
        stack.insert(stack.end(), node.operands.begin(), node.operands.end());
      }
    }
    for (TaskKind kind : kKinds) {
      const bool recomputes = kind == TaskKind::kBackward || kind == TaskKind::kBackwardInput;
      std::vector<bool> member(n, false);
      for (ir::ValueId id = 0; id < n; ++id) {
        const ir::Node& node = graph.node(id);
        member[id] = (!IsSource(node) && node.stage == stage && RunsIn(node.phase, kind)) ||
                     (recomputes && recomputed[id]);
      }
      // Export what someone outside the function reads, and graph outputs.
      // Under remat, the forward keeps nothing for its own backward, and the
      // backward hands on recomputed values only to W.
      std::vector<ir::ValueId> exports;
      for (ir::ValueId id = 0; id < n; ++id) {
        if (!member[id]) continue;
        const bool again = recomputes && recomputed[id];
        bool exported = !again && !output_names_[id].empty();
        for (ir::ValueId consumer : consumers[id]) {
          if (member[consumer]) continue;
          if (again) {
            exported = exported || backward_of(consumer, stage);
          } else {
            exported = exported || !(kind == TaskKind::kForward && recomputed[id] && backward_of(consumer, stage));
          }
        }
        if (exported) exports.push_back(id);
      }
      std::string name = absl::StrCat(std::string(1, schedules::TaskKindLetter(kind)), stage);
      functions_.emplace(std::make_pair(static_cast<int>(kind), stage),
                         ExtractFunction(graph, name, member, exports));
    }
  }
  return absl::OkStatus();
}

absl::Status StepPlan::PlanTasks() {
  const schedules::Schedule& s = *schedule_;
  actor_tasks_.assign(s.num_actors, {});
  for (int32_t actor = 0; actor < s.num_actors; ++actor) {
    int32_t position = 0;
    for (int32_t slot = 0; slot < static_cast<int32_t>(s.programs[actor].size()); ++slot) {
      for (const schedules::Task& task : s.programs[actor][slot].tasks) {
        PlannedTask planned{task.kind, task.stage.value, task.microbatch.value, actor, slot, position++};
        int32_t index = static_cast<int32_t>(tasks_.size());
        task_index_[{static_cast<int>(task.kind), planned.stage, planned.microbatch}] = index;
        tasks_.push_back(planned);
        actor_tasks_[actor].push_back(index);
      }
    }
  }
  sends_after_.assign(tasks_.size(), {});
  receives_before_.assign(tasks_.size(), {});
  return absl::OkStatus();
}

int32_t StepPlan::FindTask(TaskKind kind, int32_t stage, int32_t microbatch) const {
  auto it = task_index_.find({static_cast<int>(kind), stage, microbatch});
  return it == task_index_.end() ? -1 : it->second;
}

int32_t StepPlan::Producer(ir::ValueId value, const PlannedTask& consumer) const {
  const ir::Node& node = step_->microbatch.node(value);
  const int32_t microbatch = consumer.microbatch;
  // W of a rematerialised stage reads what its I recomputed (B and I
  // recompute it themselves).
  if (node.phase == ir::Phase::kForward && Remat(node.stage) && consumer.stage == node.stage &&
      consumer.kind == TaskKind::kBackwardWeight) {
    return FindTask(TaskKind::kBackwardInput, node.stage, microbatch);
  }
  if (node.phase == ir::Phase::kForward) return FindTask(TaskKind::kForward, node.stage, microbatch);
  int32_t whole = FindTask(TaskKind::kBackward, node.stage, microbatch);
  if (whole >= 0) return whole;
  TaskKind half = node.phase == ir::Phase::kBackwardInput ? TaskKind::kBackwardInput : TaskKind::kBackwardWeight;
  return FindTask(half, node.stage, microbatch);
}

absl::Status StepPlan::PlanValues() {
  const ir::Graph& graph = step_->microbatch;
  std::map<std::pair<int32_t, int32_t>, int32_t> message_of;  // (producer, to actor)
  for (int32_t index = 0; index < static_cast<int32_t>(tasks_.size()); ++index) {
    const PlannedTask& task = tasks_[index];
    const ExtractedFunction& function = Function(task.kind, task.stage);
    for (ir::ValueId value : function.inputs) {
      const ir::Node& node = graph.node(value);
      if (node.op == ir::OpKind::kInput) {
        if (ir::HasRole(node, ir::InputRole::kParameter)) {
          holders_[node.attributes.GetString("name")].insert(task.actor);
        }
        continue;
      }
      int32_t producer = Producer(value, task);
      if (producer < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "task ", task.Describe(), " needs ", DescribeStageValue(graph, value), " for microbatch ", task.microbatch,
            ", but the schedule runs no task of stage ", node.stage, " that computes it"));
      }
      const PlannedTask& source = tasks_[producer];
      if (source.actor == task.actor) {
        if (source.position >= task.position) {
          return absl::InvalidArgumentError(absl::StrCat(
              "actor ", task.actor, ": task ", task.Describe(), " needs ", DescribeStageValue(graph, value),
              " from task ", source.Describe(), ", which the actor runs ",
              source.position == task.position ? "in the same slot" : "later", ": the order violates the dataflow"));
        }
        continue;
      }
      auto [it, inserted] = message_of.try_emplace({producer, task.actor}, static_cast<int32_t>(messages_.size()));
      if (inserted) {
        messages_.push_back(PlannedMessage{producer, task.actor, index, {}, static_cast<uint64_t>(producer)});
      }
      PlannedMessage& message = messages_[it->second];
      if (tasks_[index].position < tasks_[message.first_consumer].position) message.first_consumer = index;
      if (std::find(message.values.begin(), message.values.end(), value) == message.values.end()) {
        message.values.push_back(value);
      }
    }
  }
  for (int32_t m = 0; m < static_cast<int32_t>(messages_.size()); ++m) {
    PlannedMessage& message = messages_[m];
    std::sort(message.values.begin(), message.values.end());
    sends_after_[message.producer].push_back(m);
    receives_before_[message.first_consumer].push_back(m);
  }
  for (std::vector<int32_t>& sends : sends_after_) {
    std::sort(sends.begin(), sends.end(),
              [&](int32_t a, int32_t b) { return messages_[a].to_actor < messages_[b].to_actor; });
  }
  return absl::OkStatus();
}

const ir::StateSpec* StepPlan::State(const std::string& name) const {
  auto it = state_.find(name);
  return it == state_.end() ? nullptr : it->second;
}

bool StepPlan::IsCache(const std::string& output) const { return cache_outputs_.contains(output); }

void StepPlan::PlanAccumulators() {
  for (const ir::StateSpec& spec : step_->state) state_.emplace(spec.name, &spec);
  for (const ir::GraphOutput& output : step_->microbatch.outputs()) {
    const ir::StateSpec* spec = State(ir::CacheStateName(output.name, 0));
    if (spec != nullptr && spec->role == ir::StateRole::kCache) cache_outputs_.insert(output.name);
  }
  std::map<std::string, ir::ValueId> outputs;
  for (const ir::GraphOutput& output : step_->microbatch.outputs()) outputs.emplace(output.name, output.value);
  const ir::Graph& update = step_->update;
  // Which parameter's new value reads each accumulator: one backward walk
  // from every parameter output of the update graph.
  std::map<std::string, std::string> parameter_of;
  for (const ir::GraphOutput& output : update.outputs()) {
    const ir::StateSpec* spec = State(output.name);
    if (spec == nullptr || spec->role != ir::StateRole::kParameter) continue;
    std::vector<bool> seen(update.size(), false);
    std::vector<ir::ValueId> stack = {output.value};
    while (!stack.empty()) {
      ir::ValueId id = stack.back();
      stack.pop_back();
      if (seen[id]) continue;
      seen[id] = true;
      const ir::Node& node = update.node(id);
      if (ir::HasRole(node, ir::InputRole::kAccumulator)) {
        parameter_of[node.attributes.GetString("name")] = output.name;
      }
      for (ir::ValueId operand : node.operands) stack.push_back(operand);
    }
  }
  for (size_t i = 0; i < step_->accumulators.size(); ++i) {
    const ir::Accumulator& acc = step_->accumulators[i];
    accumulator_of_[acc.source] = acc.name;
    int32_t stage = step_->microbatch.node(outputs.at(acc.source)).stage;
    accumulators_[acc.name] = AccumulatorInfo{static_cast<int32_t>(i), parameter_of[acc.name],
                                              schedule_->ActorOf(StageId(stage)).value, stage};
  }
}

const ExtractedFunction& StepPlan::Function(TaskKind kind, int32_t stage) const {
  return functions_.at({static_cast<int>(kind), stage});
}

const std::string& StepPlan::OutputName(ir::ValueId value) const { return output_names_[value]; }

std::set<int32_t> StepPlan::UpdatingActors() const {
  std::set<int32_t> actors;
  for (const auto& [parameter, holders] : holders_) actors.insert(holders.begin(), holders.end());
  return actors;
}

std::set<int32_t> StepPlan::Holders(const std::string& parameter) const {
  auto it = holders_.find(parameter);
  return it == holders_.end() ? std::set<int32_t>() : it->second;
}

}  // namespace tandem::controller
