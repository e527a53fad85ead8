// LocalLauncher's calls to its actors and how it reports their failure:
// waiting (bounded) for a set of calls while watching for dead, stopped or
// silent actors, and choosing the most telling error when several fail.
// local_launcher.cc starts the actors and drives the steps through these.
#include <sys/types.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "controller/local_launcher.h"
#include "ir/process_stat.h"

namespace tandem::controller {
namespace {

// True if /proc says the process is stopped (SIGSTOP, SIGTSTP, a tracer).
bool ProcessIsStopped(pid_t pid) {
  const std::optional<ir::ProcessStat> stat = ir::ReadProcessStat(pid);
  return stat.has_value() && stat->stopped();
}

// The most useful of several failures: an actor's own error rather than the
// aborts it caused in its peers.
bool MoreTelling(const absl::Status& a, const absl::Status& b) {
  auto rank = [](const absl::Status& s) { return s.code() == absl::StatusCode::kAborted ? 1 : 0; };
  return rank(a) < rank(b);
}

}  // namespace

absl::Status LocalLauncher::Fail(absl::Status status) {
  // The loop thread takes the board's mutex to report a call's end: waiting
  // on it while holding that mutex would deadlock (a step's deadline meeting
  // a call that just finished).
  board_->mu.AssertNotHeld();
  if (!broken_.has_value()) broken_ = status;
  if (loop_ != nullptr) {
    loop_->executor.executeSync([this] { loop_->CancelCalls("the launcher failed"); });
  }
  return *broken_;
}

absl::Status LocalLauncher::Await(absl::string_view what, absl::Duration timeout, const std::function<bool()>& ready,
                                  const std::function<bool(int32_t actor)>& pending) {
  absl::Time deadline = absl::Now() + timeout;
  const absl::Duration tick = absl::Milliseconds(50);
  // An actor not registered yet sends no heartbeats: a stopped process is
  // seen in /proc instead, once it has stayed stopped as long as a silent
  // actor may.
  std::vector<std::optional<absl::Time>> stopped_since(num_actors_);
  // The controller itself may not run for a while (SIGSTOP, a suspended
  // terminal, a starved machine). Its loop sent no heartbeats then, so the
  // actors' silence over that time says nothing about them: silence counts
  // from the controller's return, the deadline moves by the pause, and an
  // error that follows a pause says so. A pause shows as a gap between this
  // thread's looks, or between the loop's heartbeat ticks (the board's), far
  // past their period.
  const absl::Duration pause_threshold = ControllerPauseAfter(options_.heartbeat_interval);
  const absl::Time started = absl::Now();
  absl::Time last_look = started;
  absl::Time resumed = absl::InfinitePast();
  controller_pause_ = absl::ZeroDuration();
  while (true) {
    {
      absl::MutexLock lock(&board_->mu);
      board_->changed.WaitWithTimeout(&board_->mu, tick);
      const absl::Time now = absl::Now();
      const absl::Duration gap = now - last_look;
      absl::Duration pause = std::max(gap, now - board_->last_tick);
      // A pause the loop saw end just before this wait began counts too.
      if (board_->loop_resumed > resumed && board_->loop_resumed > started - 2 * pause_threshold) {
        pause = std::max(pause, board_->loop_pause);
      }
      if (pause > pause_threshold) {
        resumed = now;
        controller_pause_ = std::max(controller_pause_, pause);
      }
      if (gap > pause_threshold) deadline += gap;
      last_look = now;
      if (ready()) return absl::OkStatus();
    }
    // A process that ended says more than the calls it broke.
    if (std::optional<ExitInfo> exit = processes_->Poll(); exit.has_value()) {
      return Fail(MarkActorLost(NotePause(absl::UnavailableError(
          absl::StrCat(Describe(exit->actor.value), " died during ", what, ": ", exit->Describe())))));
    }
    // The failure, if any, is decided under the board's mutex and reported
    // (Fail waits on the loop thread) after it is released.
    std::optional<absl::Status> failure;
    const absl::Time now = absl::Now();
    {
      absl::MutexLock lock(&board_->mu);
      for (int32_t actor = 0; actor < num_actors_ && !failure.has_value(); ++actor) {
        if (!pending(actor)) continue;
        if (!board_->registered[actor]) {
          const pid_t pid = processes_->pid(ActorId{actor});
          if (!ProcessIsStopped(pid)) {
            stopped_since[actor].reset();
          } else if (!stopped_since[actor].has_value() || *stopped_since[actor] < resumed) {
            stopped_since[actor] = now;
          } else if (now - *stopped_since[actor] >= options_.unresponsive_after) {
            failure = absl::DeadlineExceededError(absl::StrCat(Describe(actor), " stopped during ", what,
                                                               " before it registered: its process ", pid,
                                                               " is stopped (e.g. by SIGSTOP)"));
          }
          continue;
        }
        const absl::Duration silent = now - std::max(board_->last_heard[actor], resumed);
        if (silent < options_.unresponsive_after) continue;
        const pid_t pid = processes_->pid(ActorId{actor});
        failure = absl::DeadlineExceededError(absl::StrCat(
            Describe(actor), " stopped answering during ", what, ": no heartbeat for ",
            absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(100))),
            ProcessIsStopped(pid) ? absl::StrCat(" (its process ", pid, " is stopped, e.g. by SIGSTOP)") : ""));
      }
      if (!failure.has_value() && now > deadline) {
        std::vector<std::string> late;
        for (int32_t actor = 0; actor < num_actors_; ++actor) {
          if (pending(actor)) late.push_back(Describe(actor));
        }
        failure = absl::DeadlineExceededError(absl::StrCat(what, ": ", absl::StrJoin(late, ", "),
                                                           " did not finish within ", absl::FormatDuration(timeout)));
      }
    }
    if (failure.has_value()) return Fail(MarkActorLost(NotePause(*std::move(failure))));
  }
}

absl::Status LocalLauncher::NotePause(absl::Status status) const {
  if (controller_pause_ <= absl::ZeroDuration() || status.ok()) return status;
  return absl::Status(
      status.code(),
      absl::StrCat(status.message(), " (the controller itself did not run for ",
                   absl::FormatDuration(absl::Trunc(controller_pause_, absl::Milliseconds(100))),
                   ": stopped, e.g. by SIGSTOP, or starved; its actors end by themselves once it has been silent for ",
                   absl::FormatDuration(options_.controller_timeout), ")"));
}

absl::Status LocalLauncher::CallAll(absl::string_view what, absl::Duration timeout,
                                    std::function<void(int32_t actor)> issue) {
  std::vector<int32_t> everyone(num_actors_);
  for (int32_t actor = 0; actor < num_actors_; ++actor) everyone[actor] = actor;
  return CallSome(what, timeout, everyone, std::move(issue));
}

absl::Status LocalLauncher::CallSome(absl::string_view what, absl::Duration timeout,
                                     const std::vector<int32_t>& actors, std::function<void(int32_t actor)> issue) {
  if (broken_.has_value()) return *broken_;
  {
    absl::MutexLock lock(&board_->mu);
    // Actors left out count as done.
    board_->done.assign(num_actors_, absl::OkStatus());
    for (int32_t actor : actors) board_->done[actor] = std::nullopt;
  }
  loop_->executor.executeSync([&] {
    for (int32_t actor : actors) issue(actor);
  });
  CallBoard& board = *board_;
  auto all_done_or_failed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(board.mu) {
    bool all = true;
    for (const std::optional<absl::Status>& status : board.done) {
      if (!status.has_value()) {
        all = false;
      } else if (!status->ok()) {
        return true;
      }
    }
    return all;
  };
  auto pending = [&](int32_t actor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(board.mu) {
    return !board.done[actor].has_value();
  };
  if (absl::Status waited = Await(what, timeout, all_done_or_failed, pending); !waited.ok()) return waited;

  // Every call ended, or one failed: report the most telling failure. A
  // failure breaks the others' calls within moments; wait that long for the
  // whole picture, since the first to fail is not always the cause (an
  // actor's all-reduce with a peer whose node is gone, say).
  std::optional<std::pair<int32_t, absl::Status>> failure;
  {
    absl::MutexLock lock(&board_->mu);
    const absl::Time settle = absl::Now() + absl::Seconds(1);
    auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(board_->mu) {
      for (int32_t actor : actors) {
        if (!board_->done[actor].has_value()) return false;
      }
      return true;
    };
    bool failed = false;
    for (int32_t actor : actors) failed = failed || (board_->done[actor].has_value() && !board_->done[actor]->ok());
    while (failed && !settled()) {
      if (board_->changed.WaitWithDeadline(&board_->mu, settle)) break;  // the moment passed
    }
  }
  // An actor that is gone (it no longer answers) explains its peers'
  // errors, whichever came first.
  std::vector<int32_t> failed_actors;
  std::vector<absl::Status> statuses(num_actors_);
  {
    absl::MutexLock lock(&board_->mu);
    for (int32_t actor = 0; actor < num_actors_; ++actor) {
      const std::optional<absl::Status>& status = board_->done[actor];
      if (!status.has_value() || status->ok()) continue;
      failed_actors.push_back(actor);
      statuses[actor] = *status;
    }
  }
  const std::vector<bool> answering = Answering(failed_actors, absl::Seconds(1));
  for (int32_t actor : failed_actors) {
    const bool gone = !answering[actor];
    const bool failure_gone = failure.has_value() && !answering[failure->first];
    if (!failure.has_value() || (gone && !failure_gone) ||
        (gone == failure_gone && MoreTelling(statuses[actor], failure->second))) {
      failure.emplace(actor, statuses[actor]);
    }
  }
  if (failure.has_value() && !answering[failure->first]) {
    failure->second = absl::UnavailableError(
        absl::StrCat("it no longer answers (its process or its node is gone): ", failure->second.message()));
  }
  if (!failure.has_value()) return absl::OkStatus();
  // A broken connection is usually a process that died: give the process
  // group a moment to report it, which names how it ended.
  if (failure->second.code() == absl::StatusCode::kUnavailable) {
    absl::StatusOr<ExitInfo> exit = processes_->WaitAny(absl::Seconds(1));
    if (exit.ok()) {
      return Fail(MarkActorLost(NotePause(absl::UnavailableError(
          absl::StrCat(Describe(exit->actor.value), " died during ", what, ": ", exit->Describe())))));
    }
  }
  const auto& [actor, status] = *failure;
  absl::Status reported =
      NotePause(absl::Status(status.code(), absl::StrCat(Describe(actor), ", ", what, ": ", status.message())));
  // An actor that still answers failed by itself (a kernel's error, a full
  // disk): a restart would only repeat it.
  return Fail(answering[actor] ? reported : MarkActorLost(std::move(reported)));
}

std::vector<bool> LocalLauncher::Answering(const std::vector<int32_t>& actors, absl::Duration timeout) {
  // Per actor: 1 answered (or not asked), 0 refused or gone, -1 no reply yet.
  struct Replies {
    absl::Mutex mu;
    absl::CondVar changed;
    std::vector<int> reply ABSL_GUARDED_BY(mu);
    int32_t pending ABSL_GUARDED_BY(mu) = 0;
    void Set(int32_t actor, bool answered) {
      absl::MutexLock lock(&mu);
      reply[actor] = answered ? 1 : 0;
      --pending;
      changed.SignalAll();
    }
  };
  auto replies = std::make_shared<Replies>();
  {
    absl::MutexLock lock(&replies->mu);
    replies->reply.assign(num_actors_, 1);
    for (int32_t actor : actors) replies->reply[actor] = -1;
    replies->pending = static_cast<int32_t>(actors.size());
  }
  if (loop_ != nullptr && !actors.empty()) {
    loop_->executor.executeSync([&] {
      for (int32_t actor : actors) {
        if (!loop_->has_actor(actor)) {
          replies->Set(actor, false);
          continue;
        }
        loop_->tasks.add(loop_->actor(actor).healthRequest().send().then(
            [replies, actor](auto&&) { replies->Set(actor, true); },
            [replies, actor](kj::Exception&&) { replies->Set(actor, false); }));
      }
    });
  }
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&replies->mu);
  while (replies->pending > 0 && !replies->changed.WaitWithDeadline(&replies->mu, deadline)) {
  }
  std::vector<bool> answering(num_actors_);
  for (int32_t actor = 0; actor < num_actors_; ++actor) answering[actor] = replies->reply[actor] == 1;
  return answering;
}

}  // namespace tandem::controller
