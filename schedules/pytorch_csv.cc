#include "schedules/pytorch_csv.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "schedules/limits.h"

namespace tandem::schedules {
namespace {

enum class ActionType { kF, kB, kBW, kI, kW, kSendF, kRecvF, kSendB, kRecvB };
constexpr int kNumTransferTypes = 4;  // kSendF .. kRecvB

struct ActionName {
  absl::string_view name;
  ActionType type;
};
constexpr ActionName kActionNames[] = {
    {"F", ActionType::kF},           {"B", ActionType::kB},
    {"BW", ActionType::kBW},         {"I", ActionType::kI},
    {"W", ActionType::kW},           {"SEND_F", ActionType::kSendF},
    {"RECV_F", ActionType::kRecvF},  {"SEND_B", ActionType::kSendB},
    {"RECV_B", ActionType::kRecvB},
};

bool IsTransfer(ActionType type) { return type >= ActionType::kSendF; }
int TransferIndex(ActionType type) {
  return static_cast<int>(type) - static_cast<int>(ActionType::kSendF);
}
absl::string_view NameOf(ActionType type) {
  for (const ActionName& entry : kActionNames) {
    if (entry.type == type) return entry.name;
  }
  return "?";
}

std::string ActionText(ActionType type, int32_t stage, int32_t mb) {
  return absl::StrCat(stage, NameOf(type), mb);
}

// Where an action was written.
struct Place {
  int32_t rank = 0;
  int32_t cell = 0;     // 0-based index in the row.
  int line = 0;         // 1-based.
  size_t column = 0;    // 0-based.
};

struct Action {
  ActionType type = ActionType::kF;
  int32_t stage = 0;
  int32_t microbatch = 0;
  Place place;
};

// One non-empty compute cell: one action, or an OVERLAP_F_B group.
struct ComputeCell {
  Place place;
  std::vector<Action> actions;
};

class CsvReader {
 public:
  CsvReader(absl::string_view filename, PytorchCsvStats* stats)
      : filename_(filename), stats_(stats) {}

  absl::StatusOr<Schedule> Read(absl::string_view text) {
    // One row per rank; empty rows at the end do not count. At most
    // kMaxActors rows are kept, however many lines the file has.
    std::vector<absl::string_view> rows;
    int64_t empty_rows = 0;  // seen since the last non-empty row
    for (absl::string_view row : absl::StrSplit(text, '\n')) {
      if (!row.empty() && row.back() == '\r') row.remove_suffix(1);
      if (row.empty()) {
        ++empty_rows;
        continue;
      }
      if (static_cast<int64_t>(rows.size()) + empty_rows >= kMaxActors) {
        return absl::InvalidArgumentError(absl::StrCat(filename_, ":", rows.size() + empty_rows + 1,
                                                       ": error: more than the ", kMaxActors,
                                                       " ranks (rows) a schedule may have"));
      }
      rows.insert(rows.end(), empty_rows, absl::string_view());
      empty_rows = 0;
      rows.push_back(row);
    }
    if (rows.empty()) return absl::InvalidArgumentError(absl::StrCat(filename_, ": error: empty file"));
    num_ranks_ = static_cast<int32_t>(rows.size());
    cells_.resize(num_ranks_);
    for (int32_t r = 0; r < num_ranks_; ++r) {
      if (absl::Status s = ReadRow(r, rows[r]); !s.ok()) return s;
    }
    if (num_stages_ == 0) {
      return absl::InvalidArgumentError(absl::StrCat(filename_, ": error: no compute actions"));
    }
    // A rank without compute actions holds no stage: nothing would run
    // there, and no export could write it back (its row would be empty).
    for (int32_t r = 0; r < num_ranks_; ++r) {
      if (cells_[r].empty()) {
        return absl::InvalidArgumentError(absl::StrCat(filename_, ":", r + 1, ": error: rank ", r,
                                                       " has no compute action (every rank runs a stage)"));
      }
    }
    if (absl::Status s = CheckScheduleSizes(num_ranks_, num_stages_, num_microbatches_); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(filename_, ": error: ", s.message()));
    }
    // The checks below index dense (stage, microbatch) tables. A complete
    // schedule has at least two actions per pair, so a file with far fewer
    // is incomplete, and its tables would be out of proportion to it.
    if (int64_t{num_stages_} * num_microbatches_ > num_compute_actions_ + 4096) {
      return absl::InvalidArgumentError(absl::StrCat(
          filename_, ": error: the file's ", num_compute_actions_, " compute actions are far fewer than its ",
          num_stages_, " stages x ", num_microbatches_,
          " microbatches need (a forward and a backward each)"));
    }
    ConvertLegacyBackwards();
    if (absl::Status s = InferPlacement(); !s.ok()) return s;
    if (absl::Status s = CheckTransfers(); !s.ok()) return s;
    return Build();
  }

 private:
  absl::Status Error(const Place& place, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(filename_, ":", place.line, ":",
                                                   place.column + 1, ": error: rank ", place.rank,
                                                   ", cell ", place.cell, ": ", message));
  }

  absl::Status ReadRow(int32_t rank, absl::string_view row) {
    size_t start = 0;
    for (int32_t cell = 0;; ++cell) {
      size_t end = row.find(',', start);
      if (end == absl::string_view::npos) end = row.size();
      absl::string_view text = row.substr(start, end - start);
      size_t column = start;
      while (!text.empty() && text.front() == ' ') {
        text.remove_prefix(1);
        ++column;
      }
      while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
      if (!text.empty()) {
        const Place place{rank, cell, rank + 1, column};
        if (absl::Status s = ReadCell(text, place); !s.ok()) return s;
      }
      if (end == row.size()) break;
      start = end + 1;
    }
    return absl::OkStatus();
  }

  absl::Status ReadCell(absl::string_view text, const Place& place) {
    ComputeCell cell{place, {}};
    if (text.front() != '(') {
      absl::StatusOr<Action> action = ReadAction(text, place);
      if (!action.ok()) return action.status();
      if (IsTransfer(action->type)) {
        transfers_.push_back(*action);
        return absl::OkStatus();
      }
      cell.actions.push_back(*action);
    } else {
      const size_t close = text.find(')');
      if (close == absl::string_view::npos) return Error(place, "unclosed group: missing ')'");
      if (text.substr(close + 1) != "OVERLAP_F_B") {
        return Error(place, absl::StrCat("unsupported group '", Excerpt(text),
                                         "': expected (a;b)OVERLAP_F_B"));
      }
      size_t offset = 1;
      for (absl::string_view part : absl::StrSplit(text.substr(1, close - 1), ';')) {
        Place part_place = place;
        part_place.column += offset;
        offset += part.size() + 1;
        absl::StatusOr<Action> action = ReadAction(part, part_place);
        if (!action.ok()) return action.status();
        if (IsTransfer(action->type)) {
          return Error(part_place, absl::StrCat("a transfer (", Excerpt(part),
                                                ") cannot be part of an OVERLAP_F_B group"));
        }
        cell.actions.push_back(*action);
      }
      if (cell.actions.size() < 2) {
        return Error(place, absl::StrCat("group '", Excerpt(text), "' needs at least two actions"));
      }
    }
    for (const Action& action : cell.actions) {
      num_stages_ = std::max(num_stages_, action.stage + 1);
      num_microbatches_ = std::max(num_microbatches_, action.microbatch + 1);
    }
    num_compute_actions_ += static_cast<int64_t>(cell.actions.size());
    cells_[place.rank].push_back(std::move(cell));
    return absl::OkStatus();
  }

  absl::StatusOr<Action> ReadAction(absl::string_view text, const Place& place) {
    auto malformed = [&] {
      return Error(place, absl::StrCat("malformed action '", Excerpt(text),
                                       "': expected <stage><TYPE><microbatch>, e.g. 2F0"));
    };
    size_t i = 0;
    while (i < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) ++i;
    const size_t type_start = i;
    while (i < text.size() && !absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) ++i;
    const std::optional<int32_t> stage = ParseDecimal(text.substr(0, type_start));
    const absl::string_view type = text.substr(type_start, i - type_start);
    const std::optional<int32_t> microbatch = ParseDecimal(text.substr(i));
    if (!stage || type.empty()) return malformed();
    for (const ActionName& entry : kActionNames) {
      if (entry.name != type) continue;
      if (!microbatch) return malformed();
      // Checked before any table is sized by them.
      if (*stage >= kMaxStages) {
        return Error(place, absl::StrCat("stage ", *stage, " in '", Excerpt(text), "' is beyond the ",
                                         kMaxStages, " stages a schedule may have"));
      }
      if (*microbatch >= kMaxMicrobatches) {
        return Error(place, absl::StrCat("microbatch ", *microbatch, " in '", Excerpt(text),
                                         "' is beyond the ", kMaxMicrobatches,
                                         " microbatches a schedule may have"));
      }
      if (absl::Status s = CheckTaskCount(++num_actions_, "the file"); !s.ok()) return Error(place, s.message());
      return Action{entry.type, *stage, *microbatch, place};
    }
    return Error(place, absl::StrCat("unsupported action type '", Excerpt(type), "' in '", Excerpt(text),
                                     "': Tandem reads F, B, BW, I, W, SEND_F, RECV_F, SEND_B, "
                                     "RECV_B and (a;b)OVERLAP_F_B"));
  }

  int64_t Index(int32_t stage, int32_t mb) const {
    return int64_t{stage} * num_microbatches_ + mb;
  }

  // Older dialect: B followed later on its rank by a W of the same (stage,
  // microbatch) is the input-gradient half, unless an I of it exists.
  void ConvertLegacyBackwards() {
    const int64_t size = int64_t{num_stages_} * num_microbatches_;
    std::vector<char> has_input(size, 0);
    std::vector<int32_t> last_weight_cell(size, -1);  // per rank, filled row by row
    for (const auto& row : cells_) {
      for (const ComputeCell& cell : row) {
        for (const Action& a : cell.actions) {
          if (a.type == ActionType::kI) has_input[Index(a.stage, a.microbatch)] = 1;
        }
      }
    }
    for (auto& row : cells_) {
      std::fill(last_weight_cell.begin(), last_weight_cell.end(), -1);
      for (const ComputeCell& cell : row) {
        for (const Action& a : cell.actions) {
          if (a.type == ActionType::kW) last_weight_cell[Index(a.stage, a.microbatch)] = cell.place.cell;
        }
      }
      for (ComputeCell& cell : row) {
        for (Action& a : cell.actions) {
          const int64_t index = Index(a.stage, a.microbatch);
          if (a.type == ActionType::kB && !has_input[index] &&
              last_weight_cell[index] > cell.place.cell) {
            a.type = ActionType::kI;
            if (stats_ != nullptr) ++stats_->legacy_input_backwards;
          }
        }
      }
    }
  }

  absl::Status InferPlacement() {
    std::vector<std::optional<Place>> first(num_stages_);
    for (const auto& row : cells_) {
      for (const ComputeCell& cell : row) {
        for (const Action& a : cell.actions) {
          std::optional<Place>& seen = first[a.stage];
          if (!seen) {
            seen = a.place;
          } else if (seen->rank != a.place.rank) {
            return Error(a.place, absl::StrCat("stage ", a.stage, " runs here on rank ",
                                               a.place.rank, " but also on rank ", seen->rank,
                                               " (line ", seen->line, ", cell ", seen->cell,
                                               "): a stage belongs to one rank"));
          }
        }
      }
    }
    for (int32_t s = 0; s < num_stages_; ++s) {
      if (!first[s]) {
        return absl::InvalidArgumentError(absl::StrCat(
            filename_, ": error: stage ", s, " has no compute action, so its rank is unknown (the "
            "file uses stages 0 to ", num_stages_ - 1, ")"));
      }
      owner_.push_back(first[s]->rank);
    }
    return absl::OkStatus();
  }

  // Checks every SEND/RECV against the cross-rank dataflow edges.
  absl::Status CheckTransfers() {
    if (transfers_.empty()) return absl::OkStatus();
    const int64_t size = int64_t{num_stages_} * num_microbatches_;
    // Where each compute kind of (stage, mb) runs: F, and the backward that
    // makes the input gradient (B or I).
    std::vector<std::optional<Place>> forward(size), gradient(size);
    for (const auto& row : cells_) {
      for (const ComputeCell& cell : row) {
        for (const Action& a : cell.actions) {
          const int64_t index = Index(a.stage, a.microbatch);
          if (a.type == ActionType::kF && !forward[index]) forward[index] = cell.place;
          if ((a.type == ActionType::kB || a.type == ActionType::kBW ||
               a.type == ActionType::kI) &&
              !gradient[index]) {
            gradient[index] = cell.place;
          }
        }
      }
    }
    auto cross = [&](int32_t a, int32_t b) { return owner_[a] != owner_[b]; };
    // Whether a transfer of this type for stage s is expected; its task.
    auto expected = [&](ActionType type, int32_t s) {
      switch (type) {
        case ActionType::kSendF: return s + 1 < num_stages_ && cross(s, s + 1);
        case ActionType::kRecvF: return s > 0 && cross(s - 1, s);
        case ActionType::kSendB: return s > 0 && cross(s - 1, s);
        default: return s + 1 < num_stages_ && cross(s, s + 1);
      }
    };
    auto task_text = [&](ActionType type, int32_t s, int32_t m) {
      const bool is_forward = type == ActionType::kSendF || type == ActionType::kRecvF;
      return is_forward ? ActionText(ActionType::kF, s, m) : absl::StrCat(s, "B/I", m);
    };
    auto task_place = [&](ActionType type, int64_t index) -> const std::optional<Place>& {
      return type == ActionType::kSendF || type == ActionType::kRecvF ? forward[index]
                                                                      : gradient[index];
    };
    std::vector<std::optional<Place>> seen(kNumTransferTypes * size);
    for (const Action& t : transfers_) {
      const std::string text = ActionText(t.type, t.stage, t.microbatch);
      if (t.stage >= num_stages_ || t.microbatch >= num_microbatches_) {
        return Error(t.place, absl::StrCat(text, " names stage ", t.stage, ", microbatch ",
                                           t.microbatch, ", outside the ", num_stages_,
                                           " stages and ", num_microbatches_,
                                           " microbatches of the compute actions"));
      }
      const bool is_send = t.type == ActionType::kSendF || t.type == ActionType::kSendB;
      if (!expected(t.type, t.stage)) {
        return Error(t.place, absl::StrCat("extra ", text, ": no cross-rank dataflow edge ",
                                           is_send ? "leaves" : "enters", " stage ", t.stage,
                                           " there"));
      }
      if (t.place.rank != owner_[t.stage]) {
        return Error(t.place, absl::StrCat(text, " is on rank ", t.place.rank, " but stage ",
                                           t.stage, " runs on rank ", owner_[t.stage]));
      }
      const int64_t index = Index(t.stage, t.microbatch);
      std::optional<Place>& first = seen[TransferIndex(t.type) * size + index];
      if (first) {
        return Error(t.place, absl::StrCat("duplicate ", text, " (first at cell ", first->cell,
                                           ")"));
      }
      first = t.place;
      const std::optional<Place>& task = task_place(t.type, index);
      if (!task) continue;  // The missing task is the validator's to report.
      if (is_send && t.place.cell < task->cell) {
        return Error(t.place, absl::StrCat(text, " comes before ",
                                           task_text(t.type, t.stage, t.microbatch), " (cell ",
                                           task->cell, "), which produces what it sends"));
      }
      if (!is_send && t.place.cell > task->cell) {
        return Error(t.place, absl::StrCat(text, " comes after ",
                                           task_text(t.type, t.stage, t.microbatch), " (cell ",
                                           task->cell, "), which needs what it receives"));
      }
    }
    for (int type_index = 0; type_index < kNumTransferTypes; ++type_index) {
      const auto type = static_cast<ActionType>(static_cast<int>(ActionType::kSendF) + type_index);
      const bool is_send = type == ActionType::kSendF || type == ActionType::kSendB;
      for (int32_t s = 0; s < num_stages_; ++s) {
        if (!expected(type, s)) continue;
        for (int32_t m = 0; m < num_microbatches_; ++m) {
          const int64_t index = Index(s, m);
          if (seen[type_index * size + index]) continue;
          const std::optional<Place>& task = task_place(type, index);
          if (!task) continue;
          return Error(*task, absl::StrCat("missing ", ActionText(type, s, m), " ",
                                           is_send ? "after " : "before ",
                                           task_text(type, s, m), " on rank ", owner_[s]));
        }
      }
    }
    if (stats_ != nullptr) stats_->transfers_checked = static_cast<int64_t>(transfers_.size());
    return absl::OkStatus();
  }

  Schedule Build() const {
    Schedule schedule;
    schedule.num_actors = num_ranks_;
    schedule.num_stages = num_stages_;
    schedule.num_microbatches = num_microbatches_;
    for (int32_t rank : owner_) schedule.stage_to_actor.push_back(ActorId(rank));
    schedule.programs.resize(num_ranks_);
    for (int32_t r = 0; r < num_ranks_; ++r) {
      for (const ComputeCell& cell : cells_[r]) {
        Slot slot;
        for (const Action& a : cell.actions) {
          TaskKind kind = TaskKind::kForward;
          switch (a.type) {
            case ActionType::kB:
            case ActionType::kBW: kind = TaskKind::kBackward; break;
            case ActionType::kI: kind = TaskKind::kBackwardInput; break;
            case ActionType::kW: kind = TaskKind::kBackwardWeight; break;
            default: break;
          }
          slot.tasks.push_back(Task{kind, StageId(a.stage), Microbatch(a.microbatch)});
        }
        schedule.programs[r].push_back(std::move(slot));
      }
    }
    return schedule;
  }

  const absl::string_view filename_;
  PytorchCsvStats* const stats_;
  int32_t num_ranks_ = 0;
  int32_t num_stages_ = 0;
  int32_t num_microbatches_ = 0;
  int64_t num_actions_ = 0;          // compute and transfer
  int64_t num_compute_actions_ = 0;  // tasks of the schedule
  std::vector<std::vector<ComputeCell>> cells_;  // Per rank.
  std::vector<Action> transfers_;
  std::vector<int32_t> owner_;  // Rank of each stage.
};

char CsvLetter(TaskKind kind) {
  return kind == TaskKind::kBackward ? 'B' : TaskKindLetter(kind);
}

std::string CsvTask(const Task& task) {
  return absl::StrCat(task.stage.value, std::string(1, CsvLetter(task.kind)),
                      task.microbatch.value);
}

}  // namespace

absl::StatusOr<Schedule> ParsePytorchCsv(absl::string_view text, absl::string_view filename,
                                         PytorchCsvStats* stats) {
  if (stats != nullptr) *stats = PytorchCsvStats{};
  return CsvReader(filename, stats).Read(text);
}

std::string PrintPytorchCsv(const Schedule& schedule) {
  std::string text;
  for (const std::vector<Slot>& program : schedule.programs) {
    for (size_t i = 0; i < program.size(); ++i) {
      if (i > 0) text += ",";
      const std::vector<Task>& tasks = program[i].tasks;
      if (tasks.size() == 1) {
        text += CsvTask(tasks[0]);
        continue;
      }
      text += "(";
      for (size_t k = 0; k < tasks.size(); ++k) {
        absl::StrAppend(&text, k == 0 ? "" : ";", CsvTask(tasks[k]));
      }
      text += ")OVERLAP_F_B";
    }
    text += "\n";
  }
  return text;
}

}  // namespace tandem::schedules
