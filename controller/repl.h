// Repl: the controller REPL, an interactive session over a live pipeline
// (`tandem repl`; a controller script can open one over its own Session).
//
// Commands (`help` explains each): show model|ir [STAGE]|schedule|placement|
// program ACTOR|memory; sim; draw [ascii|svg FILE|perfetto FILE]; step [N];
// run; loss; break ACTOR|* TASK; delete [ID]; continue; where; inspect ACTOR
// VALUE [MB]; trace on|off|save FILE; set schedule NAME|FILE; set
// microbatches M; actors; quit. With data-parallel replicas, actors are
// numbered across the replicas (actor a is position a % P of replica
// a / P) and `where`, `actors`, `show placement|memory|program` say which
// replica each one is. Breakpoints go through the Debugger
// (controller/debugger.h). No command error ends the session: it is printed
// as "error: ..." on the error stream.
//
// Lines come from a script, from stdin when it is not a terminal (echoed
// after the prompt, so a transcript reads like a session), or from a prompt
// with line editing and history (libedit; the history file is
// $TANDEM_HISTORY or ~/.tandem_history). Not thread-safe.
#ifndef TANDEM_CONTROLLER_REPL_H_
#define TANDEM_CONTROLLER_REPL_H_

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/debugger.h"
#include "controller/session.h"
#include "controller/step_trace.h"

namespace tandem {

// What the REPL trains: where the step comes from and its data.
struct ReplModel {
  std::string description;
  // The step traced for `microbatches` microbatches (for `set microbatches`:
  // the update's 1/M is part of the traced step).
  std::function<absl::StatusOr<ir::TrainStep>(int32_t microbatches)> trace;
  // The microbatches of training step `index` (0-based).
  std::function<absl::StatusOr<std::vector<ir::TensorMap>>(uint64_t index, int32_t microbatches)> train_batch;
};

struct ReplOptions {
  // The schedule's name or file, for `set microbatches` to regenerate it.
  std::string schedule = "1f1b";
  int32_t virtual_stages = 0;  // for the generators that take it
  int64_t steps = 100;         // what `run` goes up to
};

class Repl {
 public:
  Repl(std::unique_ptr<Session> session, ReplModel model, ReplOptions options, std::ostream& out, std::ostream& err);
  ~Repl();

  // Runs one command line; false once the session should end (quit, exit).
  bool Execute(const std::string& line);
  // Reads and runs lines from `script` (a file), or from stdin, or from a
  // prompt when stdin is a terminal, until quit or the end of input.
  // NotFound for a script that cannot be read.
  absl::Status Run(const std::optional<std::string>& script);

  Session& session() { return *session_; }

 private:
  absl::Status Dispatch(const std::vector<std::string>& words);
  absl::Status Show(const std::vector<std::string>& words);
  absl::Status ShowModel();
  absl::Status ShowIr(const std::vector<std::string>& words);
  absl::Status ShowPlacement();
  absl::Status ShowMemory();
  absl::Status Draw(const std::vector<std::string>& words);
  absl::Status Step(int64_t count);
  absl::Status Continue();
  absl::Status Break(const std::vector<std::string>& words);
  absl::Status Inspect(const std::vector<std::string>& words);
  absl::Status Trace(const std::vector<std::string>& words);
  absl::Status Set(const std::vector<std::string>& words);
  void Where();
  void Actors();
  void Help(const std::vector<std::string>& words);
  void Loss();
  // After a step: a line, the loss history, the trace.
  void Record(const controller::StepReport& report, double seconds);
  // A paused step: which actors stopped where.
  void ReportPause();
  // Applies a new schedule (and, for `set microbatches`, a re-traced step).
  absl::Status Recompile(std::optional<ir::TrainStep> step, schedules::Schedule schedule);
  absl::StatusOr<int32_t> ParseActor(const std::string& word) const;
  // "actor 3", or with data-parallel replicas "actor 3 (replica 1)".
  std::string ActorName(int32_t actor) const;

  std::unique_ptr<Session> session_;
  ReplModel model_;
  ReplOptions options_;
  std::ostream& out_;
  std::ostream& err_;
  controller::Debugger* debugger_;  // the session's
  std::optional<controller::StepReport> last_;
  std::vector<std::pair<int64_t, float>> history_;  // (step, mean loss)
  std::optional<controller::StepTrace> trace_;
  bool tracing_ = false;
};

}  // namespace tandem

#endif  // TANDEM_CONTROLLER_REPL_H_
