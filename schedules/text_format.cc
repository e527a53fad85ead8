#include "schedules/text_format.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "schedules/limits.h"
#include "schedules/placement.h"

namespace tandem::schedules {
namespace {

constexpr char kStatements[] = "schedule, actors, stages, microbatches, placement, stage-graph or actor";

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r'; }
// The longest schedule name accepted: it is quoted in reports.
constexpr size_t kMaxNameBytes = 256;

bool AllDigits(absl::string_view word) {
  return !word.empty() && std::all_of(word.begin(), word.end(),
                                      [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); });
}

std::optional<TaskKind> KindOf(char letter) {
  switch (letter) {
    case 'F': return TaskKind::kForward;
    case 'B': return TaskKind::kBackward;
    case 'I': return TaskKind::kBackwardInput;
    case 'W': return TaskKind::kBackwardWeight;
    default: return std::nullopt;
  }
}

// One header value with the place it was written, for later errors.
struct Located {
  int32_t value = 0;
  int line = 0;
  size_t column = 0;  // 0-based
};

struct LocatedEdge {
  ir::StageEdge edge;
  int line = 0;
  size_t column = 0;  // 0-based
};

class Parser {
 public:
  explicit Parser(absl::string_view filename) : filename_(filename) {}

  absl::StatusOr<Schedule> Parse(absl::string_view text) {
    const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
    for (size_t i = 0; i < lines.size(); ++i) {
      line_number_ = static_cast<int>(i) + 1;
      absl::string_view line = lines[i];
      if (size_t hash = line.find('#'); hash != absl::string_view::npos) line = line.substr(0, hash);
      line_ = line;
      pos_ = 0;
      if (absl::Status status = ParseLine(); !status.ok()) return status;
    }
    if (!resolved_) {
      pos_ = 0;
      if (absl::Status status = Resolve(); !status.ok()) return status;
    }
    return std::move(schedule_);
  }

 private:
  absl::Status Error(size_t column, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(filename_, ":", line_number_, ":", column + 1,
                                                   ": error: ", message));
  }
  absl::Status ErrorAt(int line, size_t column, absl::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(filename_, ":", line, ":", column + 1, ": error: ", message));
  }

  void SkipSpace() {
    while (pos_ < line_.size() && IsSpace(line_[pos_])) ++pos_;
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ >= line_.size();
  }
  // The run of characters up to whitespace or any of `stops`.
  absl::string_view Word(absl::string_view stops = "") {
    const size_t start = pos_;
    while (pos_ < line_.size() && !IsSpace(line_[pos_]) &&
           stops.find(line_[pos_]) == absl::string_view::npos) {
      ++pos_;
    }
    return line_.substr(start, pos_ - start);
  }

  absl::Status ParseLine() {
    if (AtEnd()) return absl::OkStatus();
    const size_t start = pos_;
    while (pos_ < line_.size() && (std::isalpha(static_cast<unsigned char>(line_[pos_])) || line_[pos_] == '-')) {
      ++pos_;
    }
    const absl::string_view keyword = line_.substr(start, pos_ - start);
    if (keyword == "actor") return ParseActorLine(start);
    if (keyword == "schedule" || keyword == "actors" || keyword == "stages" ||
        keyword == "microbatches" || keyword == "placement" || keyword == "stage-graph") {
      if (pos_ < line_.size() && !IsSpace(line_[pos_])) {
        return Error(pos_, absl::StrCat("expected a space after '", keyword, "'"));
      }
      if (resolved_) {
        return Error(start, absl::StrCat("'", keyword,
                                         "' must come before the first actor line"));
      }
      return ParseHeader(keyword, start);
    }
    pos_ = start;
    return Error(start, absl::StrCat("unknown statement '", Excerpt(Word()),
                                     "': expected ", kStatements));
  }

  absl::Status ParseHeader(absl::string_view keyword, size_t start) {
    auto duplicate = [&](int first_line) {
      return Error(start, absl::StrCat("'", keyword, "' is already set on line ", first_line));
    };
    if (keyword == "schedule") {
      if (name_line_ != 0) return duplicate(name_line_);
      SkipSpace();
      absl::string_view name = line_.substr(pos_);
      while (!name.empty() && IsSpace(name.back())) name.remove_suffix(1);
      if (name.empty()) return Error(pos_, "expected a name after 'schedule'");
      if (name.size() > kMaxNameBytes) {
        return Error(pos_, absl::StrCat("the schedule's name has ", name.size(),
                                        " bytes, more than the ", kMaxNameBytes, " allowed"));
      }
      schedule_.name = std::string(name);
      name_line_ = line_number_;
      return absl::OkStatus();
    }
    if (keyword == "placement") {
      if (placement_line_ != 0) return duplicate(placement_line_);
      placement_line_ = line_number_;
      if (AtEnd()) return Error(pos_, "expected 'loop', 'v' or a list of actors after 'placement'");
      const size_t word_start = pos_;
      const absl::string_view word = Word();
      if (word == "loop" || word == "v") {
        placement_ = std::string(word);
        if (!AtEnd()) {
          return Error(pos_, absl::StrCat("unexpected '", Excerpt(Word()), "' after '", word, "'"));
        }
        return absl::OkStatus();
      }
      placement_ = "explicit";
      pos_ = word_start;
      while (!AtEnd()) {
        const size_t column = pos_;
        const absl::string_view entry = Word();
        const std::optional<int32_t> actor = ParseDecimal(entry);
        if (!actor) {
          return Error(column, absl::StrCat("expected an actor number in the placement list, got '",
                                            Excerpt(entry), "' (or write 'loop' or 'v')"));
        }
        if (static_cast<int64_t>(explicit_placement_.size()) >= kMaxStages) {
          return Error(column, absl::StrCat("the placement list has more than the ", kMaxStages,
                                            " stages a schedule may have"));
        }
        explicit_placement_.push_back(Located{*actor, line_number_, column});
      }
      return absl::OkStatus();
    }
    if (keyword == "stage-graph") {
      if (stage_graph_line_ != 0) return duplicate(stage_graph_line_);
      stage_graph_line_ = line_number_;
      if (AtEnd()) return Error(pos_, "expected stage edges after 'stage-graph', e.g. 'stage-graph 0->2 1->2'");
      while (!AtEnd()) {
        const size_t column = pos_;
        const absl::string_view word = Word();
        absl::StatusOr<std::vector<ir::StageEdge>> edge = ir::ParseStageEdges(word, 1);
        if (!edge.ok() || edge->size() != 1) {
          return Error(column, absl::StrCat("expected a stage edge FROM->TO, e.g. 0->2, got '", Excerpt(word), "'"));
        }
        if (static_cast<int64_t>(stage_edges_.size()) >= kMaxStageEdges) {
          return Error(column, absl::StrCat("the stage graph has more than the ", kMaxStageEdges,
                                            " edges a schedule may have"));
        }
        stage_edges_.push_back(LocatedEdge{edge->front(), line_number_, column});
      }
      return absl::OkStatus();
    }
    std::optional<Located>& field =
        keyword == "actors" ? actors_ : keyword == "stages" ? stages_ : microbatches_;
    if (field) return duplicate(field->line);
    if (AtEnd()) return Error(pos_, absl::StrCat("expected a number after '", keyword, "'"));
    const size_t column = pos_;
    const absl::string_view word = Word();
    const std::optional<int32_t> value = ParseDecimal(word);
    // Checked before anything is sized by it.
    const int64_t bound = keyword == "actors"   ? kMaxActors
                          : keyword == "stages" ? kMaxStages
                                                : kMaxMicrobatches;
    if (AllDigits(word) && (!value || *value > bound)) {
      return Error(column, absl::StrCat(keyword, " ", Excerpt(word), " is more than the ", bound,
                                        " a schedule may have"));
    }
    if (!value || *value < 1) {
      return Error(column, absl::StrCat("expected a positive number after '", keyword,
                                        "', got '", Excerpt(word), "'"));
    }
    if (!AtEnd()) {
      return Error(pos_, absl::StrCat("unexpected '", Excerpt(Word()), "' after the number"));
    }
    field = Located{*value, line_number_, column};
    return absl::OkStatus();
  }

  // Fixes the header once the first actor line (or the end) is reached.
  absl::Status Resolve() {
    resolved_ = true;
    if (!actors_) return Error(pos_, "'actors N' must be set before the first actor line");
    if (!microbatches_) {
      return Error(pos_, "'microbatches N' must be set before the first actor line");
    }
    const int32_t actors = actors_->value;
    const int64_t declared_stages =
        placement_ == "explicit" ? static_cast<int64_t>(explicit_placement_.size())
        : stages_               ? stages_->value
        : placement_ == "v"     ? 2 * int64_t{actors}
                                : actors;
    if (absl::Status status = CheckScheduleSizes(actors, declared_stages, microbatches_->value);
        !status.ok()) {
      return ErrorAt(microbatches_->line, microbatches_->column, status.message());
    }
    int32_t stages = 0;
    if (placement_ == "explicit") {
      stages = static_cast<int32_t>(explicit_placement_.size());
      if (stages_ && stages_->value != stages) {
        return ErrorAt(placement_line_, explicit_placement_[0].column,
                       absl::StrCat("placement lists ", stages, " stages but 'stages' is ",
                                    stages_->value));
      }
      for (const Located& entry : explicit_placement_) {
        if (entry.value >= actors) {
          return ErrorAt(entry.line, entry.column,
                         absl::StrCat("actor ", entry.value, " out of range: the schedule has ",
                                      actors, " actors (0 to ", actors - 1, ")"));
        }
        schedule_.stage_to_actor.push_back(ActorId(entry.value));
      }
    } else {
      stages = stages_ ? stages_->value : placement_ == "v" ? 2 * actors : actors;
      schedule_.stage_to_actor =
          placement_ == "v" ? VPlacement(actors, stages) : LoopPlacement(actors, stages);
    }
    std::vector<ir::StageEdge> edges;
    std::set<ir::StageEdge> seen;
    for (const LocatedEdge& located : stage_edges_) {
      if (absl::Status status = ir::CheckStageEdges(stages, {located.edge}); !status.ok()) {
        return ErrorAt(located.line, located.column, status.message());
      }
      if (!seen.insert(located.edge).second) {
        return ErrorAt(located.line, located.column,
                       absl::StrCat("stage edge ", ir::StageEdgeName(located.edge), " appears twice"));
      }
      edges.push_back(located.edge);
    }
    schedule_.stage_edges = ir::StageGraph(stages, edges).StoredEdges();
    schedule_.num_actors = actors;
    schedule_.num_stages = stages;
    schedule_.num_microbatches = microbatches_->value;
    schedule_.programs.resize(actors);
    return absl::OkStatus();
  }

  absl::Status ParseActorLine(size_t start) {
    if (!resolved_) {
      const size_t saved = pos_;
      pos_ = start;
      if (absl::Status status = Resolve(); !status.ok()) return status;
      pos_ = saved;
    }
    SkipSpace();
    const size_t number_column = pos_;
    const absl::string_view number = Word(":");
    const std::optional<int32_t> actor = ParseDecimal(number);
    if (!actor) {
      return Error(number_column, absl::StrCat("expected an actor number after 'actor', got '",
                                               Excerpt(number), "'"));
    }
    if (*actor >= schedule_.num_actors) {
      return Error(number_column,
                   absl::StrCat("actor ", *actor, " out of range: the schedule has ",
                                schedule_.num_actors, " actors (0 to ", schedule_.num_actors - 1,
                                ")"));
    }
    SkipSpace();
    if (pos_ >= line_.size() || line_[pos_] != ':') {
      return Error(pos_, absl::StrCat("expected ':' after 'actor ", *actor, "'"));
    }
    ++pos_;
    std::vector<Slot>& program = schedule_.programs[*actor];
    while (!AtEnd()) {
      const size_t column = pos_;
      absl::StatusOr<Slot> slot = line_[pos_] == '(' ? ParseGroup() : ParseSingle();
      if (!slot.ok()) return slot.status();
      num_tasks_ += static_cast<int64_t>(slot->tasks.size());
      if (absl::Status status = CheckTaskCount(num_tasks_, "the file"); !status.ok()) {
        return Error(column, status.message());
      }
      program.push_back(*std::move(slot));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Slot> ParseSingle() {
    const size_t column = pos_;
    absl::StatusOr<Task> task = ParseTask(Word(), column);
    if (!task.ok()) return task.status();
    return Slot{{*task}};
  }

  absl::StatusOr<Slot> ParseGroup() {
    const size_t open = pos_++;
    Slot slot;
    while (true) {
      SkipSpace();
      const size_t column = pos_;
      const absl::string_view word = Word(";)");
      if (word.empty()) {
        if (pos_ >= line_.size()) return Error(open, "unclosed group: missing ')'");
        return Error(column, "expected a task in the group");
      }
      absl::StatusOr<Task> task = ParseTask(word, column);
      if (!task.ok()) return task.status();
      slot.tasks.push_back(*task);
      SkipSpace();
      if (pos_ >= line_.size()) return Error(open, "unclosed group: missing ')'");
      if (line_[pos_] == ';') {
        ++pos_;
        continue;
      }
      if (line_[pos_] == ')') {
        ++pos_;
        break;
      }
      return Error(pos_, absl::StrCat("expected ';' or ')' in the group, got '",
                                      Excerpt(line_.substr(pos_, 1)), "'"));
    }
    if (slot.tasks.size() < 2) {
      return Error(open, "a group needs at least two tasks; write one task without parentheses");
    }
    if (pos_ < line_.size() && !IsSpace(line_[pos_])) {
      return Error(pos_, "expected a space after ')'");
    }
    return slot;
  }

  absl::StatusOr<Task> ParseTask(absl::string_view word, size_t column) {
    auto unknown = [&] {
      return Error(column, absl::StrCat("unknown task '", Excerpt(word),
                                        "': expected F, B, I or W, a stage, '.' and a "
                                        "microbatch, e.g. F0.3"));
    };
    if (word.size() < 4) return unknown();
    const std::optional<TaskKind> kind = KindOf(word[0]);
    const size_t dot = word.find('.');
    if (!kind || dot == absl::string_view::npos) return unknown();
    const std::optional<int32_t> stage = ParseDecimal(word.substr(1, dot - 1));
    const std::optional<int32_t> microbatch = ParseDecimal(word.substr(dot + 1));
    if (!stage || !microbatch) return unknown();
    if (*stage >= schedule_.num_stages) {
      return Error(column, absl::StrCat("stage ", *stage, " out of range in '", Excerpt(word),
                                        "': the schedule has ", schedule_.num_stages,
                                        " stages (0 to ", schedule_.num_stages - 1, ")"));
    }
    if (*microbatch >= schedule_.num_microbatches) {
      return Error(column, absl::StrCat("microbatch ", *microbatch, " out of range in '",
                                        Excerpt(word),
                                        "': the schedule has ", schedule_.num_microbatches,
                                        " microbatches (0 to ", schedule_.num_microbatches - 1,
                                        ")"));
    }
    return Task{*kind, StageId(*stage), Microbatch(*microbatch)};
  }

  const absl::string_view filename_;
  int line_number_ = 0;
  absl::string_view line_;
  size_t pos_ = 0;

  int name_line_ = 0;
  std::optional<Located> actors_, stages_, microbatches_;
  std::string placement_ = "loop";
  int placement_line_ = 0;
  std::vector<Located> explicit_placement_;
  int stage_graph_line_ = 0;
  std::vector<LocatedEdge> stage_edges_;
  bool resolved_ = false;
  int64_t num_tasks_ = 0;
  Schedule schedule_;
};

}  // namespace

absl::StatusOr<Schedule> ParseScheduleText(absl::string_view text, absl::string_view filename) {
  return Parser(filename).Parse(text);
}

std::string PrintScheduleText(const Schedule& schedule) {
  std::string text;
  if (!schedule.name.empty()) {
    std::string name = schedule.name;
    for (char& c : name) {
      if (c == '#' || c == '\n') c = '_';
    }
    absl::StrAppend(&text, "schedule ", name, "\n");
  }
  absl::StrAppend(&text, "actors ", schedule.num_actors, "\n");
  absl::StrAppend(&text, "stages ", schedule.num_stages, "\n");
  absl::StrAppend(&text, "microbatches ", schedule.num_microbatches, "\n");
  absl::StrAppend(&text, "placement ",
                  PlacementName(schedule.stage_to_actor, schedule.num_actors), "\n");
  if (!schedule.stage_edges.empty()) {
    absl::StrAppend(&text, "stage-graph ", ir::FormatStageEdges(schedule.stage_edges), "\n");
  }
  for (size_t a = 0; a < schedule.programs.size(); ++a) {
    absl::StrAppend(&text, "actor ", a, ":");
    for (const Slot& slot : schedule.programs[a]) absl::StrAppend(&text, " ", SlotName(slot));
    text += "\n";
  }
  return text;
}

}  // namespace tandem::schedules
