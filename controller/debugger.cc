#include "controller/debugger.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::controller {

void Debugger::Reset(Pipeline* pipeline) {
  pipeline_ = pipeline;
  step_.reset();
  tasks_.clear();
  const CompiledStep& compiled = pipeline_->compiled();
  // Programs number the actors of one replica; actor a runs its position's
  // program as replica Replica(a), whose peers are offset alike.
  auto global = [&](int32_t actor, int32_t peer) {
    return peer + compiled.Replica(actor) * compiled.actors_per_replica;
  };
  // Which task of its sender each (sender, receiver, tag) message leaves.
  std::map<std::tuple<int32_t, int32_t, uint64_t>, int32_t> sent_by;
  for (int32_t actor = 0; actor < compiled.num_actors; ++actor) {
    const ir::ActorProgram& program = compiled.ProgramOf(actor);
    const std::vector<int32_t> bounds = ir::DispatchBounds(program);
    const std::vector<int32_t> group = ir::ReplicaGroupOf(program);
    std::vector<Task> tasks;
    for (size_t index = 0; index + 1 < bounds.size(); ++index) {
      Task task;
      task.range = {bounds[index], bounds[index + 1]};
      // The last instruction's label: the first range also holds whatever
      // comes before the first task.
      if (task.range.end > task.range.begin) task.name = program.instructions[task.range.end - 1].task.ToString();
      for (int32_t i = task.range.begin; i < task.range.end; ++i) {
        const ir::Instruction& instruction = program.instructions[i];
        if (instruction.kind == ir::InstructionKind::kSend) {
          sent_by[{actor, global(actor, instruction.peer), instruction.tag}] = static_cast<int32_t>(index);
        }
        if (instruction.kind == ir::InstructionKind::kAllReduceStart) {
          for (int32_t member : group) {
            if (member != actor) task.gang.push_back(member);
          }
        }
      }
      std::sort(task.gang.begin(), task.gang.end());
      task.gang.erase(std::unique(task.gang.begin(), task.gang.end()), task.gang.end());
      tasks.push_back(std::move(task));
    }
    tasks_.push_back(std::move(tasks));
  }
  for (int32_t actor = 0; actor < compiled.num_actors; ++actor) {
    const ir::ActorProgram& program = compiled.ProgramOf(actor);
    for (Task& task : tasks_[actor]) {
      for (int32_t i = task.range.begin; i < task.range.end; ++i) {
        const ir::Instruction& instruction = program.instructions[i];
        if (instruction.kind != ir::InstructionKind::kReceive) continue;
        const int32_t sender_actor = global(actor, instruction.peer);
        auto sender = sent_by.find({sender_actor, actor, instruction.tag});
        if (sender != sent_by.end()) task.needs.emplace_back(sender_actor, sender->second);
      }
    }
  }
}

absl::StatusOr<int32_t> Debugger::AddBreakpoint(int32_t actor, const std::string& task) {
  const int32_t num_actors = static_cast<int32_t>(tasks_.size());
  if (actor < -1 || actor >= num_actors) {
    return absl::InvalidArgumentError(absl::StrCat("no actor ", actor, " (actors are 0 to ", num_actors - 1, ")"));
  }
  std::vector<int32_t> runs_on;
  for (int32_t a = 0; a < num_actors; ++a) {
    for (const Task& candidate : tasks_[a]) {
      if (candidate.name == task) {
        runs_on.push_back(a);
        break;
      }
    }
  }
  if (runs_on.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no actor runs a task ", task,
                                                   " (tasks are like F0.1, B2.0, I1.3, W1.3 or update: kind, "
                                                   "stage, '.', microbatch)"));
  }
  if (actor >= 0 && std::find(runs_on.begin(), runs_on.end(), actor) == runs_on.end()) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", actor, " runs no task ", task, "; it runs on actor",
                                                   runs_on.size() > 1 ? "s " : " ", absl::StrJoin(runs_on, ", ")));
  }
  breakpoints_.push_back({next_breakpoint_id_, actor, task});
  return next_breakpoint_id_++;
}

absl::Status Debugger::DeleteBreakpoint(int32_t id) {
  auto it = std::find_if(breakpoints_.begin(), breakpoints_.end(), [id](const Breakpoint& b) { return b.id == id; });
  if (it == breakpoints_.end()) return absl::NotFoundError(absl::StrCat("no breakpoint ", id));
  breakpoints_.erase(it);
  return absl::OkStatus();
}

std::vector<Breakpoint> Debugger::UnmatchedBreakpoints() const {
  std::vector<Breakpoint> unmatched;
  for (const Breakpoint& breakpoint : breakpoints_) {
    bool matched = false;
    for (int32_t a = 0; a < static_cast<int32_t>(tasks_.size()) && !matched; ++a) {
      if (breakpoint.actor >= 0 && breakpoint.actor != a) continue;
      for (const Task& task : tasks_[a]) matched = matched || task.name == breakpoint.task;
    }
    if (!matched) unmatched.push_back(breakpoint);
  }
  return unmatched;
}

int32_t Debugger::BreakpointAt(int32_t actor, const std::string& task) const {
  for (const Breakpoint& breakpoint : breakpoints_) {
    if ((breakpoint.actor == -1 || breakpoint.actor == actor) && breakpoint.task == task) return breakpoint.id;
  }
  return 0;
}

bool Debugger::InputsArrived(const StepState& step, int32_t actor) const {
  const Task& task = tasks_[actor][step.next[actor]];
  for (const auto& [sender, index] : task.needs) {
    if (step.next[sender] <= index) return false;
  }
  return true;
}

bool Debugger::HeldAtBreakpoint(const StepState& step, int32_t actor) const {
  return !step.released[actor] && BreakpointAt(actor, tasks_[actor][step.next[actor]].name) != 0;
}

std::vector<int32_t> Debugger::GangNotReady(const StepState& step, int32_t actor) const {
  std::vector<int32_t> members;
  const int32_t index = step.next[actor];
  for (int32_t member : tasks_[actor][index].gang) {
    if (step.next[member] != index || HeldAtBreakpoint(step, member) || !InputsArrived(step, member)) {
      members.push_back(member);
    }
  }
  return members;
}

bool Debugger::Ready(const StepState& step, int32_t actor) const {
  return InputsArrived(step, actor) && GangNotReady(step, actor).empty();
}

absl::StatusOr<std::optional<StepReport>> Debugger::Start(const std::vector<ir::TensorMap>& microbatches) {
  if (absl::Status status = CheckNoStepInProgress(); !status.ok()) return status;
  absl::StatusOr<std::vector<ir::StepInputs>> inputs = pipeline_->NextInputs(microbatches);
  if (!inputs.ok()) return inputs.status();
  const size_t num_actors = tasks_.size();
  step_ = StepState{pipeline_->steps_done() + 1, *std::move(inputs), std::vector<int32_t>(num_actors, 0),
                    std::vector<int32_t>(num_actors, 0), std::vector<bool>(num_actors, false),
                    std::vector<ir::StepOutputs>(num_actors)};
  return Advance();
}

absl::Status Debugger::CheckNoStepInProgress() const {
  if (!step_.has_value()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("step ", step_->number, " is paused: continue it first"));
}

absl::StatusOr<std::optional<StepReport>> Debugger::Continue() {
  if (!step_.has_value()) return absl::FailedPreconditionError("no step is paused");
  for (size_t actor = 0; actor < tasks_.size(); ++actor) {
    if (step_->paused[actor] != 0) {
      step_->paused[actor] = 0;
      step_->released[actor] = true;
    }
  }
  return Advance();
}

absl::StatusOr<std::optional<StepReport>> Debugger::Advance() {
  StepState& step = *step_;
  const int32_t num_actors = static_cast<int32_t>(tasks_.size());
  while (true) {
    std::map<ActorId, InstructionRange> wave;
    bool all_done = true;
    for (int32_t actor = 0; actor < num_actors; ++actor) {
      if (step.next[actor] >= static_cast<int32_t>(tasks_[actor].size())) continue;
      all_done = false;
      const Task& task = tasks_[actor][step.next[actor]];
      if (!step.released[actor]) {
        if (int32_t id = BreakpointAt(actor, task.name); id != 0) {
          step.paused[actor] = id;
          continue;
        }
      }
      if (Ready(step, actor)) wave[ActorId(actor)] = task.range;
    }
    if (all_done) {
      absl::StatusOr<StepReport> report = pipeline_->FinishStep(std::move(step.results));
      step_.reset();
      if (!report.ok()) return report.status();
      return std::optional<StepReport>(*std::move(report));
    }
    if (wave.empty()) {
      if (std::any_of(step.paused.begin(), step.paused.end(), [](int32_t id) { return id != 0; })) {
        return std::optional<StepReport>();
      }
      std::vector<std::string> stuck;
      for (int32_t actor = 0; actor < num_actors; ++actor) {
        if (step.next[actor] < static_cast<int32_t>(tasks_[actor].size())) {
          stuck.push_back(absl::StrCat("actor ", actor, " before ", tasks_[actor][step.next[actor]].name));
        }
      }
      step_.reset();
      return absl::InternalError(absl::StrCat("no actor can go on (", absl::StrJoin(stuck, ", "),
                                              "): the programs' transfers do not match"));
    }
    absl::StatusOr<std::map<ActorId, ir::StepOutputs>> results =
        pipeline_->launcher().RunRanges(step.number, wave, step.inputs);
    if (!results.ok()) {
      step_.reset();
      return results.status();
    }
    for (auto& [actor_id, result] : *results) {
      const int32_t actor = actor_id.value;
      step.released[actor] = false;
      if (++step.next[actor] == static_cast<int32_t>(tasks_[actor].size())) {
        step.results[actor] = std::move(result);
        step.results[actor].calls = step.next[actor];  // one range per task
      }
    }
  }
}

std::vector<ActorPosition> Debugger::Where() const {
  std::vector<ActorPosition> positions;
  if (!step_.has_value()) return positions;
  for (int32_t actor = 0; actor < static_cast<int32_t>(tasks_.size()); ++actor) {
    ActorPosition position;
    position.actor = actor;
    position.next_task = step_->next[actor];
    position.num_tasks = static_cast<int32_t>(tasks_[actor].size());
    if (position.next_task >= position.num_tasks) {
      position.state = ActorPosition::State::kDone;
    } else {
      const Task& task = tasks_[actor][position.next_task];
      position.task = task.name;
      if (step_->paused[actor] != 0) {
        position.state = ActorPosition::State::kPaused;
        position.breakpoint = step_->paused[actor];
      } else {
        for (const auto& [sender, index] : task.needs) {
          if (step_->next[sender] <= index) position.waits_for.emplace_back(sender, tasks_[sender][index].name);
        }
        // A replica that has not reached (or may not run) the task whose
        // all-reduce this one joins.
        for (int32_t member : GangNotReady(*step_, actor)) position.waits_for.emplace_back(member, task.name);
        position.state = position.waits_for.empty() ? ActorPosition::State::kReady : ActorPosition::State::kWaiting;
      }
    }
    positions.push_back(std::move(position));
  }
  return positions;
}

absl::StatusOr<ir::HostTensor> Debugger::Inspect(int32_t actor, const std::string& name) {
  return pipeline_->launcher().ReadBuffer(ActorId(actor), name);
}

}  // namespace tandem::controller
