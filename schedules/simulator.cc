#include "schedules/simulator.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "schedules/dataflow.h"
#include "schedules/task_memory.h"

namespace tandem::schedules {

namespace {

constexpr int kNumKinds = 4;
constexpr int32_t kNone = -1;

// What determined when a slot, a transfer or a reduction could start, for
// the critical path.
struct Cause {
  enum class Kind : uint8_t { kNone, kSlot, kTransfer, kReduction };
  Kind kind = Kind::kNone;
  int32_t index = kNone;  // A global slot index, a transfer or a reduction index.
};

bool IsGradient(TaskKind kind) {
  return kind == TaskKind::kBackward || kind == TaskKind::kBackwardInput;
}

// One run of Simulate(). Slots are numbered globally, actor after actor, and
// tasks likewise in program order, so that all state lives in flat vectors.
class Simulation {
 public:
  Simulation(const Schedule& schedule, const CostModel& costs)
      : schedule_(schedule), costs_(costs) {}

  absl::StatusOr<SimulationResult> Run();

 private:
  // Checks the schedule's shape and the costs, and fills the flat indexes
  // (stage_cost_, location_, tasks_ and the slot tables).
  absl::Status Index();
  absl::Status ComputeStageCosts();
  absl::Status IndexTasks();
  int64_t Key(TaskKind kind, int32_t stage, int32_t microbatch) const {
    return (static_cast<int64_t>(kind) * num_stages_ + stage) * num_microbatches_ + microbatch;
  }
  int32_t Find(TaskKind kind, int32_t stage, int32_t microbatch) const {
    return location_[Key(kind, stage, microbatch)];
  }
  // The task producing the input gradient of (stage, microbatch): B, else I,
  // else (neither is in the schedule) B.
  Task GradientTask(int32_t stage, int32_t microbatch) const {
    const bool split = Find(TaskKind::kBackward, stage, microbatch) == kNone &&
                       Find(TaskKind::kBackwardInput, stage, microbatch) != kNone;
    return Task{split ? TaskKind::kBackwardInput : TaskKind::kBackward, StageId(stage), Microbatch(microbatch)};
  }
  int32_t FindTask(const Task& task) const { return Find(task.kind, task.stage.value, task.microbatch.value); }
  // The producers of `task`'s inputs (schedules/dataflow.h) and readable
  // names for them, also for those missing from the schedule (kNone).
  void Inputs(const Task& task, std::vector<int32_t>& out, std::vector<std::string>* names = nullptr) const;
  // Fills edges_ and the slots' pending input counts.
  void LinkTasks();

  void RunSlot(int32_t actor, int32_t slot);
  // Sends `task`'s outputs and tells its consumers' slots they arrived;
  // pushes actors whose next slot became ready onto `worklist`.
  void Complete(int32_t actor, int32_t task, std::vector<int32_t>& worklist);
  absl::Status StuckError() const;
  // Fills reductions_: per actor, one per stage with a backward task there,
  // released when the stage's last one ends, FIFO on the reduce track.
  void ComputeReductions();
  void ComputeMemory(SimulationResult& result) const;
  void ComputeCriticalPath(SimulationResult& result) const;

  const Schedule& schedule_;
  const CostModel& costs_;
  int32_t num_actors_ = 0;
  int32_t num_stages_ = 0;
  int32_t num_microbatches_ = 0;

  // What a slot waits for, packed so that a producer updates it in one
  // cache line.
  struct SlotState {
    double ready_time = 0.0;  // When its last available input arrived...
    Cause ready_cause;        // ... and from where.
    int32_t pending = 0;      // Inputs not yet available (a missing one never is).
    int32_t actor = 0;
  };

  std::vector<double> stage_cost_;            // [kind * stages + stage].
  std::vector<int32_t> location_;             // Key -> global task index.
  std::vector<Task> tasks_;                   // Global task index -> task.
  ir::StageGraph stages_;
  // The consumers of task t: global task and slot indices
  // [consumers_begin_[t], consumers_begin_[t + 1]).
  std::vector<int32_t> consumers_begin_;
  std::vector<int32_t> consumers_;
  std::vector<int32_t> consumer_slots_;
  std::vector<int32_t> task_slot_;            // Global task index -> global slot.
  std::vector<int32_t> slot_first_task_;      // [slot], plus one past the end.
  std::vector<int32_t> slot_actor_;           // [slot].
  std::vector<int32_t> actor_first_slot_;     // [actor], plus one past the end.

  std::vector<int32_t> next_slot_;   // [actor]: the global slot it runs next.
  std::vector<double> actor_free_;   // [actor].
  std::vector<double> send_free_;    // [actor].
  std::vector<int32_t> last_send_;   // [actor]: its latest transfer.
  std::vector<uint8_t> slot_done_;   // [slot].
  std::vector<uint8_t> queued_;      // [actor]: on the worklist.
  std::vector<SlotState> slot_state_;  // [slot].
  std::vector<SlotTiming> slot_time_;
  std::vector<Cause> slot_cause_;
  std::vector<Transfer> transfers_;
  std::vector<Cause> transfer_cause_;
  std::vector<Reduction> reductions_;
  std::vector<Cause> reduction_cause_;
};

absl::Status Simulation::Index() {
  num_actors_ = schedule_.num_actors;
  num_stages_ = schedule_.num_stages;
  num_microbatches_ = schedule_.num_microbatches;
  if (num_actors_ < 0 || num_stages_ < 0 || num_microbatches_ < 0) {
    return absl::InvalidArgumentError("negative number of actors, stages or microbatches");
  }
  if (static_cast<int64_t>(schedule_.programs.size()) != num_actors_) {
    return absl::InvalidArgumentError(absl::StrCat("the schedule has ", num_actors_,
                                                   " actors but ", schedule_.programs.size(),
                                                   " programs"));
  }
  if (absl::Status status = costs_.Check(); !status.ok()) return status;
  if (absl::Status status = ComputeStageCosts(); !status.ok()) return status;
  return IndexTasks();
}

absl::Status Simulation::ComputeStageCosts() {
  stage_cost_.resize(static_cast<size_t>(kNumKinds) * num_stages_);
  for (int kind = 0; kind < kNumKinds; ++kind) {
    for (int32_t stage = 0; stage < num_stages_; ++stage) {
      stage_cost_[kind * num_stages_ + stage] = costs_.kind_cost[kind];
    }
  }
  for (const auto& [key, cost] : costs_.stage_cost) {
    if (key.second < 0 || key.second >= num_stages_) continue;
    if (!(cost >= 0.0) || std::isinf(cost)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the cost of ", std::string(1, TaskKindLetter(key.first)), " at stage ", key.second,
          " must be finite and non-negative"));
    }
    stage_cost_[static_cast<int>(key.first) * num_stages_ + key.second] = cost;
  }
  // A rematerialised stage's backward recomputes its forward first.
  for (int32_t stage : costs_.remat_stages) {
    if (stage < 0 || stage >= num_stages_) continue;
    const double forward = stage_cost_[static_cast<int>(TaskKind::kForward) * num_stages_ + stage];
    for (TaskKind kind : {TaskKind::kBackward, TaskKind::kBackwardInput}) {
      stage_cost_[static_cast<int>(kind) * num_stages_ + stage] += forward;
    }
  }
  return absl::OkStatus();
}

absl::Status Simulation::IndexTasks() {
  const int64_t num_tasks = schedule_.NumTasks();
  const int64_t grid = static_cast<int64_t>(kNumKinds) * num_stages_ * num_microbatches_;
  // A complete schedule has at least two tasks per (stage, microbatch), so
  // the dense index below is at most twice the task count for one.
  if (grid > 8 * num_tasks + 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the schedule lists ", num_tasks, " tasks, far fewer than its ", num_stages_,
        " stages x ", num_microbatches_, " microbatches need"));
  }
  if (absl::Status status = ir::CheckStageEdges(num_stages_, schedule_.stage_edges); !status.ok()) return status;
  stages_ = schedule_.stage_graph();
  location_.assign(grid, kNone);
  tasks_.reserve(num_tasks);
  task_slot_.reserve(num_tasks);
  actor_first_slot_.reserve(num_actors_ + 1);
  for (int32_t actor = 0; actor < num_actors_; ++actor) {
    actor_first_slot_.push_back(static_cast<int32_t>(slot_actor_.size()));
    const std::vector<Slot>& program = schedule_.programs[actor];
    for (size_t index = 0; index < program.size(); ++index) {
      const Slot& slot = program[index];
      if (slot.tasks.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("actor ", actor, ": slot ", index, " has no tasks"));
      }
      const int32_t global_slot = static_cast<int32_t>(slot_actor_.size());
      slot_actor_.push_back(actor);
      slot_first_task_.push_back(static_cast<int32_t>(tasks_.size()));
      for (const Task& task : slot.tasks) {
        const int kind = static_cast<int>(task.kind);
        if (kind < 0 || kind >= kNumKinds) {
          return absl::InvalidArgumentError(
              absl::StrCat("actor ", actor, ": slot ", index, " has a task of unknown kind"));
        }
        if (task.stage.value < 0 || task.stage.value >= num_stages_) {
          return absl::InvalidArgumentError(absl::StrCat("actor ", actor, ": task ",
                                                         TaskName(task), " names stage ",
                                                         task.stage.value, " of ", num_stages_));
        }
        if (task.microbatch.value < 0 || task.microbatch.value >= num_microbatches_) {
          return absl::InvalidArgumentError(
              absl::StrCat("actor ", actor, ": task ", TaskName(task), " names microbatch ",
                           task.microbatch.value, " of ", num_microbatches_));
        }
        int32_t& location = location_[Key(task.kind, task.stage.value, task.microbatch.value)];
        if (location != kNone) {
          return absl::InvalidArgumentError(
              absl::StrCat("task ", TaskName(task), " appears twice: on actor ",
                           slot_actor_[task_slot_[location]], " and on actor ", actor));
        }
        location = static_cast<int32_t>(tasks_.size());
        tasks_.push_back(task);
        task_slot_.push_back(global_slot);
      }
    }
  }
  actor_first_slot_.push_back(static_cast<int32_t>(slot_actor_.size()));
  slot_first_task_.push_back(static_cast<int32_t>(tasks_.size()));
  return absl::OkStatus();
}

void Simulation::Inputs(const Task& task, std::vector<int32_t>& out, std::vector<std::string>* names) const {
  out.clear();
  if (names != nullptr) names->clear();
  ForEachProducer(
      stages_, task, [&](int32_t stage, int32_t microbatch) { return GradientTask(stage, microbatch); },
      [&](const Task& producer, bool is_gradient) {
        out.push_back(FindTask(producer));
        if (names == nullptr) return;
        if (is_gradient && out.back() == kNone) {
          names->push_back(absl::StrCat(TaskName(producer), " or ",
                                        TaskName({TaskKind::kBackwardInput, producer.stage, producer.microbatch})));
        } else {
          names->push_back(TaskName(producer));
        }
      });
}

void Simulation::LinkTasks() {
  const size_t num_tasks = tasks_.size();
  slot_state_.resize(slot_actor_.size());
  for (size_t slot = 0; slot < slot_actor_.size(); ++slot) {
    slot_state_[slot].actor = slot_actor_[slot];
  }
  auto gradient = [&](int32_t stage, int32_t microbatch) { return GradientTask(stage, microbatch); };
  consumers_begin_.assign(num_tasks + 1, 0);
  consumers_.reserve(2 * num_tasks);
  consumer_slots_.reserve(2 * num_tasks);
  for (size_t t = 0; t < num_tasks; ++t) {
    consumers_begin_[t] = static_cast<int32_t>(consumers_.size());
    ForEachConsumer(stages_, tasks_[t], gradient, [&](const Task& consumer) {
      const int32_t index = FindTask(consumer);
      if (index == kNone) return;
      consumers_.push_back(index);
      consumer_slots_.push_back(task_slot_[index]);
    });
    ForEachProducer(stages_, tasks_[t], gradient, [&](const Task&, bool) { ++slot_state_[task_slot_[t]].pending; });
  }
  consumers_begin_[num_tasks] = static_cast<int32_t>(consumers_.size());
}

void Simulation::RunSlot(int32_t actor, int32_t slot) {
  double start = actor_free_[actor];
  Cause cause;
  if (slot > actor_first_slot_[actor]) cause = {Cause::Kind::kSlot, slot - 1};
  // On a tie the data dependency is the cause: it says more than "the actor
  // was busy until then".
  const SlotState& state = slot_state_[slot];
  if (state.ready_time > start ||
      (state.ready_time == start && state.ready_cause.kind == Cause::Kind::kTransfer)) {
    start = state.ready_time;
    cause = state.ready_cause;
  }
  double cost = 0.0;
  for (int32_t t = slot_first_task_[slot]; t < slot_first_task_[slot + 1]; ++t) {
    const Task& task = tasks_[t];
    const double task_cost =
        stage_cost_[static_cast<int>(task.kind) * num_stages_ + task.stage.value];
    cost = costs_.group_cost == GroupCost::kMax ? std::max(cost, task_cost) : cost + task_cost;
  }
  slot_time_[slot] = {start, start + cost};
  slot_cause_[slot] = cause;
  slot_done_[slot] = 1;
  actor_free_[actor] = start + cost;
}

void Simulation::Complete(int32_t actor, int32_t task, std::vector<int32_t>& worklist) {
  const int32_t slot = task_slot_[task];
  const double end = slot_time_[slot].end;
  int32_t previous_to = kNone;
  double arrival = end;
  Cause arrival_cause{Cause::Kind::kSlot, slot};
  for (int32_t i = consumers_begin_[task]; i < consumers_begin_[task + 1]; ++i) {
    const int32_t consumer_slot = consumer_slots_[i];
    SlotState& consumer = slot_state_[consumer_slot];
    const int32_t to = consumer.actor;
    if (to == actor) {
      arrival = end;
      arrival_cause = {Cause::Kind::kSlot, slot};
    } else if (to != previous_to) {
      // A new transfer on this actor's send track, FIFO behind earlier ones.
      previous_to = to;
      Transfer transfer;
      transfer.from = ActorId(actor);
      transfer.to = ActorId(to);
      transfer.producer = tasks_[task];
      transfer.consumer = tasks_[consumers_[i]];
      transfer.bytes =
          IsGradient(transfer.producer.kind) ? costs_.gradient_bytes : costs_.activation_bytes;
      Cause cause{Cause::Kind::kSlot, slot};
      transfer.start = end;
      if (send_free_[actor] > end) {
        transfer.start = send_free_[actor];
        cause = {Cause::Kind::kTransfer, last_send_[actor]};
      }
      send_free_[actor] = transfer.start + costs_.link.Seconds(transfer.bytes);
      transfer.end = send_free_[actor] + costs_.link.latency;
      last_send_[actor] = static_cast<int32_t>(transfers_.size());
      arrival = transfer.end;
      arrival_cause = {Cause::Kind::kTransfer, last_send_[actor]};
      transfers_.push_back(transfer);
      transfer_cause_.push_back(cause);
    }
    if (arrival > consumer.ready_time ||
        (arrival == consumer.ready_time && arrival_cause.kind == Cause::Kind::kTransfer &&
         consumer.ready_cause.kind != Cause::Kind::kTransfer)) {
      consumer.ready_time = arrival;
      consumer.ready_cause = arrival_cause;
    }
    if (--consumer.pending == 0 && to != actor && next_slot_[to] == consumer_slot &&
        !queued_[to]) {
      queued_[to] = 1;
      worklist.push_back(to);
    }
  }
}

absl::Status Simulation::StuckError() const {
  constexpr int kMaxListed = 8;
  std::vector<std::string> stuck;
  int num_stuck = 0;
  std::vector<int32_t> inputs;
  std::vector<std::string> input_names;
  for (int32_t actor = 0; actor < num_actors_; ++actor) {
    const int32_t slot = next_slot_[actor];
    if (slot == actor_first_slot_[actor + 1]) continue;
    if (++num_stuck > kMaxListed) continue;
    std::vector<std::string> waits;
    std::vector<std::string> names;
    for (int32_t t = slot_first_task_[slot]; t < slot_first_task_[slot + 1]; ++t) {
      const Task& task = tasks_[t];
      names.push_back(TaskName(task));
      Inputs(task, inputs, &input_names);
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (inputs[i] == kNone) {
          waits.push_back(absl::StrCat(input_names[i], ", which is not in the schedule"));
        } else if (const int32_t input_slot = task_slot_[inputs[i]]; !slot_done_[input_slot]) {
          const int32_t input_actor = slot_actor_[input_slot];
          waits.push_back(absl::StrCat(
              TaskName(tasks_[inputs[i]]), input_slot == slot ? " in the same slot" : "",
              input_slot != slot ? absl::StrCat(" (actor ", input_actor, ", slot ",
                                                input_slot - actor_first_slot_[input_actor], ")")
                                 : ""));
        }
      }
    }
    stuck.push_back(absl::StrCat("actor ", actor, ": ", absl::StrJoin(names, "+"), " (slot ",
                                 slot - actor_first_slot_[actor], ") waits for ",
                                 absl::StrJoin(waits, " and ")));
  }
  std::string message = absl::StrCat("the schedule cannot run to completion; stuck tasks: ",
                                     absl::StrJoin(stuck, "; "));
  if (num_stuck > kMaxListed) {
    absl::StrAppend(&message, "; and ", num_stuck - kMaxListed, " more actors");
  }
  return absl::InvalidArgumentError(message);
}

void Simulation::ComputeReductions() {
  if (costs_.data_parallel <= 1) return;
  const double replicas = costs_.data_parallel;
  std::vector<int32_t> last_slot(num_stages_, kNone);  // [stage], on the current actor.
  std::vector<int32_t> stages;                         // Those set in last_slot.
  std::vector<std::pair<int32_t, int32_t>> releases;   // (global slot, stage).
  for (int32_t actor = 0; actor < num_actors_; ++actor) {
    stages.clear();
    for (int32_t slot = actor_first_slot_[actor]; slot < actor_first_slot_[actor + 1]; ++slot) {
      for (int32_t t = slot_first_task_[slot]; t < slot_first_task_[slot + 1]; ++t) {
        if (tasks_[t].kind == TaskKind::kForward) continue;
        const int32_t stage = tasks_[t].stage.value;
        if (last_slot[stage] == kNone) stages.push_back(stage);
        last_slot[stage] = slot;
      }
    }
    // Slots end in program order, so (slot, stage) order is release order,
    // ties broken by stage.
    releases.clear();
    for (const int32_t stage : stages) {
      releases.emplace_back(last_slot[stage], stage);
      last_slot[stage] = kNone;
    }
    std::sort(releases.begin(), releases.end());
    double track_free = 0.0;
    int32_t previous = kNone;
    for (const auto& [slot, stage] : releases) {
      Reduction reduction;
      reduction.actor = ActorId(actor);
      reduction.stage = StageId(stage);
      reduction.bytes = 2.0 * (replicas - 1.0) * costs_.GradientBytes(reduction.stage) / replicas;
      reduction.staging_bytes = 2.0 * costs_.GradientBytes(reduction.stage);
      reduction.released = slot_time_[slot].end;
      reduction.start = reduction.released;
      Cause cause{Cause::Kind::kSlot, slot};
      if (previous != kNone && track_free > reduction.start) {
        reduction.start = track_free;
        cause = {Cause::Kind::kReduction, previous};
      }
      reduction.end = reduction.start + costs_.ReductionTime(reduction.stage);
      track_free = reduction.end;
      previous = static_cast<int32_t>(reductions_.size());
      reductions_.push_back(reduction);
      reduction_cause_.push_back(cause);
    }
  }
}

void Simulation::ComputeMemory(SimulationResult& result) const {
  const double input_frees = costs_.input_grad_frees;
  result.memory.resize(num_actors_);
  for (int32_t actor = 0; actor < num_actors_; ++actor) {
    std::vector<MemoryPoint>& points = result.memory[actor];
    points.push_back({0.0, 0.0});
    // Activations in units of one microbatch's stash at a stage, with no
    // working set: task_memory.h's model, a slot's tasks together.
    MemorySweep sweep;
    auto record = [&](double time) {
      if (points.back().time == time) {
        points.back().live = sweep.live();
      } else {
        points.push_back({time, sweep.live()});
      }
    };
    for (int32_t slot = actor_first_slot_[actor]; slot < actor_first_slot_[actor + 1]; ++slot) {
      TaskMemory together;
      for (int32_t t = slot_first_task_[slot]; t < slot_first_task_[slot + 1]; ++t) {
        const bool remat = costs_.remat_stages.count(tasks_[t].stage.value) > 0;
        const StageMemory stage{.stash = 1.0, .kept = remat ? costs_.remat_kept : 1.0};
        together += MemoryOf(tasks_[t].kind, stage, input_frees);
      }
      if (together.allocated != 0.0) {
        sweep.Start(together);
        record(slot_time_[slot].start);
      }
      if (together.freed != 0.0) {
        sweep.End(together);
        record(slot_time_[slot].end);
      }
    }
    result.per_actor[actor].peak_activations = sweep.peak();
  }
  // Staging in flight: +staging at release, -staging at the end; at equal
  // times the ends come first, as frees do above.
  std::vector<std::pair<double, double>> events;
  for (size_t first = 0; first < reductions_.size();) {
    const int32_t actor = reductions_[first].actor.value;
    size_t last = first;
    events.clear();
    for (; last < reductions_.size() && reductions_[last].actor.value == actor; ++last) {
      events.emplace_back(reductions_[last].released, reductions_[last].staging_bytes);
      events.emplace_back(reductions_[last].end, -reductions_[last].staging_bytes);
    }
    std::sort(events.begin(), events.end());
    double live = 0.0;
    double peak = 0.0;
    for (const auto& [time, change] : events) {
      live += change;
      peak = std::max(peak, live);
    }
    result.per_actor[actor].peak_reduce_staging = peak;
    first = last;
  }
}

void Simulation::ComputeCriticalPath(SimulationResult& result) const {
  int32_t last_actor = kNone;
  for (int32_t actor = 0; actor < num_actors_; ++actor) {
    if (actor_first_slot_[actor] == actor_first_slot_[actor + 1]) continue;
    if (last_actor == kNone || actor_free_[actor] > actor_free_[last_actor]) last_actor = actor;
  }
  if (last_actor == kNone) return;
  Cause cause{Cause::Kind::kSlot, actor_first_slot_[last_actor + 1] - 1};
  // A reduction ends the path only when it ends strictly after every slot.
  double last_end = actor_free_[last_actor];
  for (size_t index = 0; index < reductions_.size(); ++index) {
    if (reductions_[index].end > last_end) {
      last_end = reductions_[index].end;
      cause = {Cause::Kind::kReduction, static_cast<int32_t>(index)};
    }
  }
  std::vector<CriticalStep>& path = result.critical_path;
  while (cause.kind != Cause::Kind::kNone) {
    CriticalStep step;
    if (cause.kind == Cause::Kind::kReduction) {
      const Reduction& reduction = reductions_[cause.index];
      step.kind = CriticalStep::Kind::kReduction;
      step.actor = reduction.actor;
      step.reduction = cause.index;
      step.start = reduction.start;
      step.end = reduction.end;
      cause = reduction_cause_[cause.index];
    } else if (cause.kind == Cause::Kind::kSlot) {
      const int32_t actor = slot_actor_[cause.index];
      step.kind = CriticalStep::Kind::kCompute;
      step.actor = ActorId(actor);
      step.slot = cause.index - actor_first_slot_[actor];
      step.start = slot_time_[cause.index].start;
      step.end = slot_time_[cause.index].end;
      cause = slot_cause_[cause.index];
    } else {
      const Transfer& transfer = transfers_[cause.index];
      step.kind = CriticalStep::Kind::kTransfer;
      step.actor = transfer.from;
      step.transfer = cause.index;
      step.start = transfer.start;
      step.end = transfer.end;
      cause = transfer_cause_[cause.index];
    }
    path.push_back(step);
  }
  std::reverse(path.begin(), path.end());
}

absl::StatusOr<SimulationResult> Simulation::Run() {
  if (absl::Status status = Index(); !status.ok()) return status;
  const size_t num_slots = slot_actor_.size();
  const size_t num_tasks = tasks_.size();
  LinkTasks();
  next_slot_.assign(actor_first_slot_.begin(), actor_first_slot_.end() - 1);
  actor_free_.assign(num_actors_, 0.0);
  send_free_.assign(num_actors_, 0.0);
  last_send_.assign(num_actors_, kNone);
  slot_done_.assign(num_slots, 0);
  slot_time_.assign(num_slots, {});
  slot_cause_.assign(num_slots, {});
  transfers_.reserve(num_tasks);
  transfer_cause_.reserve(num_tasks);

  // Actors that may be able to advance: each is pushed when the inputs of
  // its next slot have all arrived, so the whole run is O(tasks).
  std::vector<int32_t> worklist;
  queued_.assign(num_actors_, 1);
  for (int32_t actor = num_actors_ - 1; actor >= 0; --actor) worklist.push_back(actor);
  while (!worklist.empty()) {
    const int32_t actor = worklist.back();
    worklist.pop_back();
    queued_[actor] = 0;
    for (int32_t& slot = next_slot_[actor];
         slot < actor_first_slot_[actor + 1] && slot_state_[slot].pending == 0; ++slot) {
      RunSlot(actor, slot);
      for (int32_t t = slot_first_task_[slot]; t < slot_first_task_[slot + 1]; ++t) {
        Complete(actor, t, worklist);
      }
    }
  }
  for (int32_t actor = 0; actor < num_actors_; ++actor) {
    if (next_slot_[actor] != actor_first_slot_[actor + 1]) return StuckError();
  }

  ComputeReductions();
  SimulationResult result;
  result.data_parallel = costs_.data_parallel;
  for (int32_t actor = 0; actor < num_actors_; ++actor) {
    result.compute_end = std::max(result.compute_end, actor_free_[actor]);
  }
  result.makespan = result.compute_end;
  result.per_actor.resize(num_actors_);
  for (const Reduction& reduction : reductions_) {
    result.makespan = std::max(result.makespan, reduction.end);
    result.per_actor[reduction.actor.value].reduce_busy += reduction.end - reduction.start;
  }
  result.slot_times.resize(num_actors_);
  double total_idle = 0.0;
  for (int32_t actor = 0; actor < num_actors_; ++actor) {
    ActorStats& stats = result.per_actor[actor];
    stats.actor = ActorId(actor);
    result.slot_times[actor].assign(slot_time_.begin() + actor_first_slot_[actor],
                                    slot_time_.begin() + actor_first_slot_[actor + 1]);
    for (const SlotTiming& timing : result.slot_times[actor]) stats.busy += timing.end - timing.start;
    stats.idle = result.makespan - stats.busy;
    stats.bubble = result.makespan > 0.0 ? stats.idle / result.makespan : 0.0;
    total_idle += stats.idle;
  }
  result.bubble_time = total_idle;
  result.bubble = result.makespan > 0.0 && num_actors_ > 0
                      ? total_idle / (static_cast<double>(num_actors_) * result.makespan)
                      : 0.0;
  ComputeMemory(result);
  ComputeCriticalPath(result);
  result.transfers = std::move(transfers_);
  result.reductions = std::move(reductions_);
  return result;
}

}  // namespace

absl::StatusOr<SimulationResult> Simulate(const Schedule& schedule, const CostModel& costs) {
  Simulation simulation(schedule, costs);
  return simulation.Run();
}

}  // namespace tandem::schedules
