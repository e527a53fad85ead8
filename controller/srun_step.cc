#include "controller/srun_step.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tandem::controller {
namespace {

constexpr absl::string_view kSrunError = "srun: error: ";

// `name` in PATH, or "".
std::string FindInPath(absl::string_view name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view directory : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(directory, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

void WriteToStderr(absl::string_view line) {
  const std::string text = absl::StrCat(line, "\n");
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = write(STDERR_FILENO, text.data() + written, text.size() - written);
    if (n <= 0) return;
    written += static_cast<size_t>(n);
  }
}

// "12: text" (srun --label, which pads the number with spaces): the task
// and the text, or nullopt for a line without a label.
std::optional<std::pair<int32_t, absl::string_view>> SplitLabel(absl::string_view line) {
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(line);
  const size_t colon = rest.find(": ");
  if (colon == absl::string_view::npos || colon == 0 || colon > 9) return std::nullopt;
  int32_t task = 0;
  if (!absl::SimpleAtoi(rest.substr(0, colon), &task) || task < 0) return std::nullopt;
  return std::make_pair(task, rest.substr(colon + 2));
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> ParseSrunTaskList(absl::string_view list, int32_t num_tasks) {
  std::vector<int32_t> tasks;
  for (absl::string_view range : absl::StrSplit(list, ',')) {
    const size_t dash = range.find('-');
    const absl::string_view low = range.substr(0, dash);
    const absl::string_view high = dash == absl::string_view::npos ? low : range.substr(dash + 1);
    int32_t first = 0;
    int32_t last = 0;
    if (!absl::SimpleAtoi(low, &first) || !absl::SimpleAtoi(high, &last) || first < 0 || last < first ||
        last >= num_tasks) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", list, "' is not a list of srun tasks in [0, ", num_tasks, ")"));
    }
    for (int32_t task = first; task <= last; ++task) tasks.push_back(task);
  }
  return tasks;
}

SrunStep::SrunStep(SrunStepOptions options) : options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  seen_.assign(options_.num_actors, false);
  nodes_.assign(options_.num_actors, "");
}

SrunStep::~SrunStep() { Shutdown(options_.min_grace).IgnoreError(); }

absl::StatusOr<std::unique_ptr<SrunStep>> SrunStep::Start(SrunStepOptions options) {
  if (options.num_actors < 1) return absl::InvalidArgumentError("an srun step needs at least one actor");
  if (std::getenv("SLURM_JOB_ID") == nullptr) {
    return absl::FailedPreconditionError(
        "--launcher slurm runs inside a Slurm allocation (an sbatch script, or salloc): SLURM_JOB_ID is not set");
  }
  if (options.srun.empty()) options.srun = FindInPath("srun");
  if (options.srun.empty()) {
    return absl::FailedPreconditionError("--launcher slurm: no srun in PATH (is Slurm's client installed?)");
  }
  ProcessSpec srun;
  srun.program = options.srun;
  srun.args = {absl::StrCat("--ntasks=", options.num_actors),
               "--kill-on-bad-exit=1",
               "--label",
               "--unbuffered",
               "--export=ALL",
               "--job-name=tandem-actors"};
  srun.args.insert(srun.args.end(), options.srun_args.begin(), options.srun_args.end());
  srun.args.push_back(options.actor.program);
  srun.args.insert(srun.args.end(), options.actor.args.begin(), options.actor.args.end());
  // srun passes its own environment on (--export=ALL): the actor's
  // variables (the token) travel that way, never in argv.
  srun.environment = options.actor.environment;

  auto step = std::unique_ptr<SrunStep>(new SrunStep(std::move(options)));
  ProcessGroupOptions group;
  group.prefix_lines = false;
  SrunStep* self = step.get();
  group.sink = [self](absl::string_view line) { self->OnLine(line); };
  absl::StatusOr<std::unique_ptr<ProcessGroup>> started = ProcessGroup::Start({std::move(srun)}, std::move(group));
  if (!started.ok()) return started.status();
  step->srun_ = *std::move(started);
  return step;
}

void SrunStep::SetNode(int32_t actor, const std::string& node) {
  absl::MutexLock lock(&mu_);
  if (actor >= 0 && actor < static_cast<int32_t>(nodes_.size())) nodes_[actor] = node;
}

void SrunStep::OnLine(absl::string_view line) {
  const LineSink& sink = options_.sink ? options_.sink : LineSink(WriteToStderr);
  absl::string_view text = line;
  std::optional<int32_t> task;
  if (auto labelled = SplitLabel(line); labelled.has_value() && labelled->first < options_.num_actors) {
    task = labelled->first;
    text = labelled->second;
  }
  std::string prefix = "[srun] ";
  {
    absl::MutexLock lock(&mu_);
    // scancel, a time limit, kill-on-bad-exit: slurmstepd says so on the
    // step's output. Tasks whose end came first learn what followed.
    if (absl::StrContains(text, "***") && absl::StrContains(text, "CANCELLED") && cancelled_.empty()) {
      const size_t stars = text.find("***");
      cancelled_ = std::string(absl::StripAsciiWhitespace(text.substr(stars)));
      for (Ended& ended : ended_) absl::StrAppend(&ended.exit.report, "; then Slurm: ", cancelled_);
    }
    if (task.has_value()) {
      prefix = nodes_[*task].empty() ? absl::StrCat("[actor ", *task, "] ")
                                     : absl::StrCat("[actor ", *task, " on ", nodes_[*task], "] ");
    } else if (absl::StartsWith(text, kSrunError)) {
      last_error_ = std::string(text);
      // "srun: error: NODE: task K: REASON" or "... tasks 0-2,5: REASON".
      std::vector<absl::string_view> parts = absl::StrSplit(text.substr(kSrunError.size()), absl::MaxSplits(": ", 2));
      if (parts.size() == 3) {
        absl::string_view list = parts[1];
        if (absl::ConsumePrefix(&list, "tasks ") || absl::ConsumePrefix(&list, "task ")) {
          if (absl::StatusOr<std::vector<int32_t>> tasks = ParseSrunTaskList(list, options_.num_actors); tasks.ok()) {
            for (int32_t ended : *tasks) {
              if (seen_[ended]) continue;
              seen_[ended] = true;
              ExitInfo exit;
              exit.actor = ActorId(ended);
              exit.program = options_.actor.program;
              exit.node = std::string(parts[0]);
              exit.report = std::string(parts[2]);
              // Slurm cancelled the step before this task ended: that is
              // why it ended. (A cancellation reported after a task's end
              // is srun --kill-on-bad-exit answering that end.)
              if (!cancelled_.empty()) absl::StrAppend(&exit.report, " (", cancelled_, ")");
              ended_.push_back({std::move(exit), absl::Now()});
            }
          }
        }
      }
    }
  }
  sink(absl::StrCat(prefix, text));
}

std::optional<ExitInfo> SrunStep::TakeLocked(bool srun_ended) {
  if (ended_.empty()) return std::nullopt;
  if (!srun_ended && absl::Now() - ended_.front().parsed < options_.settle) return std::nullopt;
  ExitInfo exit = std::move(ended_.front().exit);
  ended_.pop_front();
  return exit;
}

bool SrunStep::SrunEnded() {
  {
    absl::MutexLock lock(&mu_);
    if (srun_exit_.has_value()) return true;
  }
  std::optional<ExitInfo> exit = srun_->Poll();
  if (!exit.has_value()) return false;
  // Reaps srun and drains its output, so its last lines are parsed below.
  srun_->Shutdown(absl::ZeroDuration()).IgnoreError();
  exit->actor = ActorId(-1);
  exit->program = "srun";
  absl::MutexLock lock(&mu_);
  srun_exit_ = std::move(exit);
  return true;
}

std::optional<ExitInfo> SrunStep::Poll() {
  {
    absl::MutexLock lock(&mu_);
    if (std::optional<ExitInfo> exit = TakeLocked(/*srun_ended=*/false); exit.has_value()) return exit;
  }
  if (!SrunEnded()) return std::nullopt;
  absl::MutexLock lock(&mu_);
  if (std::optional<ExitInfo> exit = TakeLocked(/*srun_ended=*/true); exit.has_value()) return exit;
  if (srun_reported_) return std::nullopt;
  srun_reported_ = true;
  ExitInfo exit = *srun_exit_;
  exit.report = !cancelled_.empty() ? cancelled_ : last_error_;
  if (absl::StrContains(last_error_, "More processors requested than permitted")) {
    absl::StrAppend(&exit.report, " (the allocation has fewer tasks than the job's ", options_.num_actors,
                    " actors: ask for them, e.g. salloc -n ", options_.num_actors, ")");
  }
  return exit;
}

absl::StatusOr<ExitInfo> SrunStep::WaitAny(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (std::optional<ExitInfo> exit = Poll(); exit.has_value()) return *exit;
    {
      absl::MutexLock lock(&mu_);
      if (srun_reported_) return absl::FailedPreconditionError("every end of the srun step was reported");
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) return absl::DeadlineExceededError("no task of the srun step ended");
    absl::SleepFor(std::min(absl::Milliseconds(20), deadline - now));
  }
}

absl::Status SrunStep::Shutdown(absl::Duration grace) {
  if (srun_ == nullptr) return absl::OkStatus();
  absl::Status status = srun_->Shutdown(std::max(grace, options_.min_grace));
  if (!SrunEnded()) {
    // The group reaped srun without reporting it: nothing more will come.
    absl::MutexLock lock(&mu_);
    srun_reported_ = true;
  }
  return status;
}

}  // namespace tandem::controller
