#include "schedules/validator.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "schedules/happens_before.h"
#include "schedules/limits.h"

namespace tandem::schedules {
namespace {

constexpr int kMaxReported = 20;

// Collects problems; keeps the first kMaxReported and counts the rest.
class Problems {
 public:
  void Add(std::string message) {
    if (lines_.size() < kMaxReported) lines_.push_back(std::move(message));
    ++count_;
  }
  bool empty() const { return count_ == 0; }
  absl::Status ToStatus() const {
    if (count_ == 0) return absl::OkStatus();
    std::string text = absl::StrJoin(lines_, "\n");
    if (count_ > kMaxReported) {
      absl::StrAppend(&text, "\n... and ", count_ - kMaxReported, " more problems");
    }
    return absl::InvalidArgumentError(text);
  }

 private:
  std::vector<std::string> lines_;
  int64_t count_ = 0;
};

std::string Where(const internal::SlotTable& table, int32_t node) {
  const int32_t actor = table.ActorOfNode(node);
  return absl::StrCat("actor ", actor, ", slot ", node - table.first_node[actor]);
}

absl::Status CheckSizes(const Schedule& schedule) {
  if (schedule.num_actors < 1 || schedule.num_stages < 1 || schedule.num_microbatches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a schedule needs at least one actor, stage and microbatch: got actors=",
        schedule.num_actors, ", stages=", schedule.num_stages,
        ", microbatches=", schedule.num_microbatches));
  }
  if (absl::Status status = CheckScheduleSizes(schedule.num_actors, schedule.num_stages,
                                               schedule.num_microbatches);
      !status.ok()) {
    return status;
  }
  const int64_t num_tasks = schedule.NumTasks();
  if (absl::Status status = CheckTaskCount(num_tasks, "the schedule"); !status.ok()) return status;
  // The dense (kind, stage, microbatch) table below stays in proportion to
  // the schedule: a complete one has at least two tasks per pair.
  const int64_t pairs = int64_t{schedule.num_stages} * schedule.num_microbatches;
  if (pairs > num_tasks + 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the schedule lists ", num_tasks, " tasks, far fewer than its ", schedule.num_stages,
        " stages x ", schedule.num_microbatches, " microbatches need (a forward and a backward each)"));
  }
  if (static_cast<int64_t>(schedule.stage_to_actor.size()) != schedule.num_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement has ", schedule.stage_to_actor.size(), " entries but the schedule has ",
                     schedule.num_stages, " stages"));
  }
  if (absl::Status status = ir::CheckStageEdges(schedule.num_stages, schedule.stage_edges); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("stage-graph: ", status.message()));
  }
  Problems problems;
  for (int32_t s = 0; s < schedule.num_stages; ++s) {
    const int32_t actor = schedule.stage_to_actor[s].value;
    if (actor < 0 || actor >= schedule.num_actors) {
      problems.Add(absl::StrCat("placement: stage ", s, " is placed on actor ", actor,
                                ", out of range [0, ", schedule.num_actors, ")"));
    }
  }
  if (static_cast<int64_t>(schedule.programs.size()) != schedule.num_actors) {
    problems.Add(absl::StrCat("the schedule has ", schedule.num_actors, " actors but ",
                              schedule.programs.size(), " programs"));
  }
  int64_t slots = 0;
  for (const auto& program : schedule.programs) slots += static_cast<int64_t>(program.size());
  if (slots >= int64_t{1} << 31) problems.Add("schedule too large to validate: over 2^31 slots");
  return problems.ToStatus();
}

// Ranges, placement and occurrence counts. Fills table.node_of_task with
// each task's first occurrence and `counts` with its number of occurrences.
void CheckTasks(const Schedule& schedule, internal::SlotTable& table,
                std::vector<int32_t>& counts, Problems& problems) {
  for (int32_t a = 0; a < schedule.num_actors; ++a) {
    const std::vector<Slot>& program = schedule.programs[a];
    for (int32_t i = 0; i < static_cast<int32_t>(program.size()); ++i) {
      const int32_t node = table.first_node[a] + i;
      if (program[i].tasks.empty()) {
        problems.Add(absl::StrCat("actor ", a, ", slot ", i, ": empty slot (a group with no tasks)"));
      }
      for (const Task& task : program[i].tasks) {
        const int32_t s = task.stage.value, m = task.microbatch.value;
        auto where = [&] { return absl::StrCat("actor ", a, ", slot ", i, ": ", TaskName(task)); };
        if (s < 0 || s >= schedule.num_stages) {
          problems.Add(absl::StrCat(where(), ": stage ", s, " out of range [0, ",
                                    schedule.num_stages, ")"));
          continue;
        }
        if (m < 0 || m >= schedule.num_microbatches) {
          problems.Add(absl::StrCat(where(), ": microbatch ", m, " out of range [0, ",
                                    schedule.num_microbatches, ")"));
          continue;
        }
        const int32_t owner = schedule.stage_to_actor[s].value;
        if (owner != a) {
          problems.Add(absl::StrCat(where(), ": stage ", s, " is placed on actor ", owner,
                                    ", so its tasks must run there"));
        }
        const int64_t index = table.Index(task.kind, s, m);
        if (counts[index]++ == 0) {
          table.node_of_task[index] = node;
        } else {
          problems.Add(absl::StrCat(where(), ": duplicate task, already at ",
                                    Where(table, table.node_of_task[index])));
        }
      }
    }
  }
}

// Every F once; B xor (I and W); W after its I.
void CheckCompleteness(const Schedule& schedule, const internal::SlotTable& table,
                       const std::vector<int32_t>& counts, Problems& problems) {
  auto name = [](TaskKind kind, int32_t s, int32_t m) {
    return TaskName(Task{kind, StageId(s), Microbatch(m)});
  };
  for (int32_t s = 0; s < schedule.num_stages; ++s) {
    for (int32_t m = 0; m < schedule.num_microbatches; ++m) {
      auto count = [&](TaskKind kind) { return counts[table.Index(kind, s, m)]; };
      auto at = [&](TaskKind kind) { return Where(table, table.NodeOf(kind, s, m)); };
      if (count(TaskKind::kForward) == 0) {
        problems.Add(absl::StrCat("missing task ", name(TaskKind::kForward, s, m)));
      }
      const int32_t full = count(TaskKind::kBackward);
      const int32_t input = count(TaskKind::kBackwardInput);
      const int32_t weight = count(TaskKind::kBackwardWeight);
      if (full > 0 && (input > 0 || weight > 0)) {
        const TaskKind half = input > 0 ? TaskKind::kBackwardInput : TaskKind::kBackwardWeight;
        problems.Add(absl::StrCat(
            at(TaskKind::kBackward), ": ", name(TaskKind::kBackward, s, m), " mixes with ",
            name(half, s, m), " at ", at(half),
            ": a (stage, microbatch) has either a full backward B or both halves I and W"));
      } else if (full == 0 && input == 0 && weight == 0) {
        problems.Add(absl::StrCat("missing task ", name(TaskKind::kBackward, s, m), " (or ",
                                  name(TaskKind::kBackwardInput, s, m), " and ",
                                  name(TaskKind::kBackwardWeight, s, m), ")"));
      } else if (input > 0 && weight == 0) {
        problems.Add(absl::StrCat("missing task ", name(TaskKind::kBackwardWeight, s, m),
                                  " (the weight-gradient half of ",
                                  name(TaskKind::kBackwardInput, s, m), " at ",
                                  at(TaskKind::kBackwardInput), ")"));
      } else if (weight > 0 && input == 0) {
        problems.Add(absl::StrCat("missing task ", name(TaskKind::kBackwardInput, s, m),
                                  " (the input-gradient half of ",
                                  name(TaskKind::kBackwardWeight, s, m), " at ",
                                  at(TaskKind::kBackwardWeight), ")"));
      } else if (input > 0 && weight > 0) {
        const int32_t i_node = table.NodeOf(TaskKind::kBackwardInput, s, m);
        const int32_t w_node = table.NodeOf(TaskKind::kBackwardWeight, s, m);
        if (table.ActorOfNode(i_node) == table.ActorOfNode(w_node) && w_node <= i_node) {
          problems.Add(absl::StrCat(
              Where(table, w_node), ": ", name(TaskKind::kBackwardWeight, s, m),
              w_node == i_node ? " runs in the same slot as its " : " runs before its ",
              name(TaskKind::kBackwardInput, s, m), " (", Where(table, i_node),
              "): W needs the I's results"));
        }
      }
    }
  }
}

}  // namespace

absl::Status Validate(const Schedule& schedule, ValidateOptions options) {
  if (absl::Status status = CheckSizes(schedule); !status.ok()) return status;
  internal::SlotTable table;
  table.num_stages = schedule.num_stages;
  table.num_microbatches = schedule.num_microbatches;
  table.first_node.assign(schedule.num_actors + 1, 0);
  for (int32_t a = 0; a < schedule.num_actors; ++a) {
    table.first_node[a + 1] =
        table.first_node[a] + static_cast<int32_t>(schedule.programs[a].size());
  }
  const int64_t table_size = 4 * int64_t{schedule.num_stages} * schedule.num_microbatches;
  table.node_of_task.assign(table_size, -1);
  std::vector<int32_t> counts(table_size, 0);

  Problems problems;
  CheckTasks(schedule, table, counts, problems);
  CheckCompleteness(schedule, table, counts, problems);
  if (!problems.empty()) return problems.ToStatus();

  if (std::optional<std::string> deadlock =
          internal::FindDeadlock(schedule, table, options.rendezvous)) {
    return absl::InvalidArgumentError(*deadlock);
  }
  return absl::OkStatus();
}

}  // namespace tandem::schedules
