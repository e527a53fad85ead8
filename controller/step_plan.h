// The compiler's plan of one step: which function each task runs, who
// produces every value a task needs, and which values cross between actors.
// Built and checked once; lowering then reads it per actor.
#ifndef TANDEM_CONTROLLER_STEP_PLAN_H_
#define TANDEM_CONTROLLER_STEP_PLAN_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/function_extraction.h"
#include "ir/train_step.h"
#include "schedules/schedule.h"

namespace tandem::controller {

// One task of the schedule, where it runs.
struct PlannedTask {
  schedules::TaskKind kind = schedules::TaskKind::kForward;
  int32_t stage = 0;
  int32_t microbatch = 0;
  int32_t actor = 0;
  int32_t slot = 0;      // index in the actor's program
  int32_t position = 0;  // index among the actor's tasks, in program order

  ir::TaskLabel Label() const;
  std::string Describe() const;  // "F1.3 (actor 2, slot 5)"
};

// The values one task sends to one other actor, in one message.
struct PlannedMessage {
  int32_t producer = 0;        // task index
  int32_t to_actor = 0;
  int32_t first_consumer = 0;  // task index of the first task on to_actor that needs it
  std::vector<ir::ValueId> values;
  uint64_t tag = 0;
};

class StepPlan {
 public:
  // Plans `step` under `schedule` (already validated), or says, naming the
  // task, actor and value, why the schedule cannot run the step.
  //
  // Rematerialisation: a stage with remat[stage] set keeps only its inputs
  // between its forward and its backward. Its backward function (B, or I
  // when the backward is split) recomputes the forward values the backward
  // reads, from those inputs, and hands W the ones W reads, so that W
  // recomputes nothing. Its forward then exports only what later stages and
  // the step's outputs need. Empty: no stage rematerialises.
  static absl::StatusOr<StepPlan> Build(const ir::TrainStep& step, const schedules::Schedule& schedule,
                                        const std::vector<bool>& remat = {});

  const ir::TrainStep& step() const { return *step_; }
  const schedules::Schedule& schedule() const { return *schedule_; }
  const std::vector<PlannedTask>& tasks() const { return tasks_; }
  const std::vector<int32_t>& actor_tasks(int32_t actor) const { return actor_tasks_[actor]; }
  const std::vector<PlannedMessage>& messages() const { return messages_; }
  // Messages sent right after task `task`, and received right before it.
  const std::vector<int32_t>& sends_after(int32_t task) const { return sends_after_[task]; }
  const std::vector<int32_t>& receives_before(int32_t task) const { return receives_before_[task]; }

  // Whether `stage` recomputes its forward in its backward.
  bool Remat(int32_t stage) const { return !remat_.empty() && remat_[stage]; }
  // The function a task of `kind` at `stage` runs.
  const ExtractedFunction& Function(schedules::TaskKind kind, int32_t stage) const;
  // The graph output name a microbatch value is, or "".
  const std::string& OutputName(ir::ValueId value) const;
  // The state tensor called `name`, or null.
  const ir::StateSpec* State(const std::string& name) const;
  // Whether microbatch output `output` is a cache's new value: then
  // microbatch m's value goes to state ir::CacheStateName(output, m).
  bool IsCache(const std::string& output) const;
  // The accumulator summing microbatch output `gradient` ("grad.p.s0").
  const std::string& AccumulatorOf(const std::string& gradient) const { return accumulator_of_.at(gradient); }
  // The actors that hold parameter `name` (use it in some function).
  std::set<int32_t> Holders(const std::string& parameter) const;
  // The actors that hold some parameter: those that run an update.
  std::set<int32_t> UpdatingActors() const;
  // The first tag after those of the loop's messages.
  uint64_t first_update_tag() const { return tasks_.size(); }
  // The tag of stage `stage`'s partial gradient norm (clipping), after the
  // accumulators' tags.
  uint64_t norm_tag(int32_t stage) const {
    return first_update_tag() + step_->accumulators.size() + static_cast<uint64_t>(stage);
  }

  // The update's view of accumulator `name` (of step().accumulators).
  struct AccumulatorInfo {
    int32_t index = 0;      // in step().accumulators; its tag is first_update_tag() + index
    std::string parameter;  // whose update reads it
    int32_t actor = 0;      // where the microbatch gradients are summed
    int32_t stage = 0;      // the stage whose backward produces them
  };
  const AccumulatorInfo& Accumulator(const std::string& name) const { return accumulators_.at(name); }

 private:
  StepPlan() = default;
  absl::Status BuildFunctions();
  absl::Status PlanTasks();
  absl::Status PlanValues();
  void PlanAccumulators();
  int32_t FindTask(schedules::TaskKind kind, int32_t stage, int32_t microbatch) const;
  // The task that produces `value` for task `consumer` (a rematerialised
  // stage's backward recomputes its own forward values), or -1.
  int32_t Producer(ir::ValueId value, const PlannedTask& consumer) const;

  const ir::TrainStep* step_ = nullptr;
  const schedules::Schedule* schedule_ = nullptr;
  std::vector<bool> remat_;  // by stage; empty: none
  std::map<std::pair<int, int32_t>, ExtractedFunction> functions_;  // (kind, stage)
  std::vector<std::string> output_names_;                          // by value
  std::vector<PlannedTask> tasks_;
  std::vector<std::vector<int32_t>> actor_tasks_;
  std::map<std::tuple<int, int32_t, int32_t>, int32_t> task_index_;
  std::vector<PlannedMessage> messages_;
  std::vector<std::vector<int32_t>> sends_after_;
  std::vector<std::vector<int32_t>> receives_before_;
  std::map<std::string, std::set<int32_t>> holders_;
  std::map<std::string, AccumulatorInfo> accumulators_;
  std::map<std::string, const ir::StateSpec*> state_;
  std::set<std::string> cache_outputs_;  // the microbatch outputs that rewrite a cache
  std::map<std::string, std::string> accumulator_of_;  // gradient output -> accumulator
};

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_STEP_PLAN_H_
