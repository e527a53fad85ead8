#include "controller/repl.h"

#include <signal.h>

#include <chrono>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "controller/line_reader.h"
#include "schedules/resolve.h"
#include "schedules/simulation_report.h"
#include "schedules/simulator.h"

namespace tandem {
namespace {

struct Command {
  std::string name;
  std::string usage;
  std::string help;
};

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"help", "help [COMMAND]", "list the commands, or explain one"},
      {"show", "show model|ir [STAGE]|schedule|placement|program ACTOR|memory",
       "what was traced (model, ir), split and placed (schedule, placement), lowered (program ACTOR: its "
       "instruction stream) and how much memory each actor needs (memory: static and measured peaks)"},
      {"sim", "sim", "simulate the schedule with unit costs (F=1, B=2, I=W=1): makespan and bubble per actor"},
      {"draw", "draw [ascii|svg FILE|perfetto FILE]", "draw the simulated schedule (ascii on screen by default)"},
      {"step", "step [N]", "run N steps (default 1); with breakpoints, runs task by task and stops where one pauses"},
      {"run", "run", "run steps up to --steps in all, or until a breakpoint pauses"},
      {"loss", "loss", "the last step's loss per microbatch, and the recent mean losses"},
      {"break", "break ACTOR|* TASK", "pause ACTOR (or every actor) before TASK, e.g. `break 2 B2.0` (kind, stage, "
                                      "'.', microbatch; `update` for the optimizer step)"},
      {"delete", "delete [ID]", "delete breakpoint ID, or all of them"},
      {"continue", "continue", "let the paused actors go on, to the next pause or the end of the step"},
      {"where", "where", "every actor's position in the paused step and what it waits for"},
      {"inspect", "inspect ACTOR VALUE [MB]",
       "a live buffer of an actor (VALUE as `show program` names it, e.g. %26 with MB 0, or a parameter): "
       "shape, dtype, min/max/mean/norm, NaN/Inf and the first values"},
      {"trace", "trace on|off|save FILE", "record measured per-instruction timings of the steps run, and write "
                                          "them as a Perfetto/Chrome trace"},
      {"set", "set schedule NAME|FILE | set microbatches M",
       "recompile for another schedule or microbatch count and go on from the current parameters"},
      {"actors", "actors", "each actor's process, state, stages and memory"},
      {"quit", "quit", "shut the actors down and leave (also: exit, end of input)"},
  };
  return commands;
}


// Ctrl-C at an interactive REPL: a long `step N` or `run` stops after the
// step in progress and the prompt comes back (steps are never cut in the
// middle: the actors' state stays consistent). Set by the SIGINT handler
// Run() installs for an interactive session; cleared before every command.
volatile sig_atomic_t g_interrupted = 0;

void OnInterrupt(int) { g_interrupted = 1; }

}  // namespace

Repl::Repl(std::unique_ptr<Session> session, ReplModel model, ReplOptions options, std::ostream& out,
           std::ostream& err)
    : session_(std::move(session)),
      model_(std::move(model)),
      options_(std::move(options)),
      out_(out),
      err_(err),
      debugger_(&session_->debugger()) {}

Repl::~Repl() = default;

absl::Status Repl::Run(const std::optional<std::string>& script) {
  LineReader reader(script, "(tandem) ");
  if (!reader.error().ok()) return reader.error();
  struct sigaction previous {};
  if (reader.interactive()) {
    struct sigaction action {};
    action.sa_handler = OnInterrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous);
  }
  while (std::optional<std::string> line = reader.Next(out_)) {
    g_interrupted = 0;  // a Ctrl-C at the prompt does not stop the next command
    if (!Execute(*line)) break;
  }
  if (reader.interactive()) sigaction(SIGINT, &previous, nullptr);
  return absl::OkStatus();
}

bool Repl::Execute(const std::string& line) {
  std::vector<std::string> words = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipWhitespace());
  if (words.empty() || words[0][0] == '#') return true;
  if (words[0] == "quit" || words[0] == "exit") return false;
  if (absl::Status status = Dispatch(words); !status.ok()) {
    err_ << "error: " << status.message() << "\n";
    err_.flush();
  }
  out_.flush();
  return true;
}

absl::StatusOr<int32_t> Repl::ParseActor(const std::string& word) const {
  int32_t actor = 0;
  const int32_t actors = session_->compiled().num_actors;
  if (!absl::SimpleAtoi(word, &actor) || actor < 0 || actor >= actors) {
    return absl::InvalidArgumentError(absl::StrCat("'", word, "' is not an actor (0 to ", actors - 1, ")"));
  }
  return actor;
}

std::string Repl::ActorName(int32_t actor) const {
  const controller::CompiledStep& compiled = session_->compiled();
  if (compiled.num_replicas == 1) return absl::StrCat("actor ", actor);
  return absl::StrCat("actor ", actor, " (replica ", compiled.Replica(actor), ")");
}

absl::Status Repl::Dispatch(const std::vector<std::string>& words) {
  const std::string& command = words[0];
  auto count = [&](size_t min, size_t max) -> absl::Status {
    if (words.size() - 1 >= min && words.size() - 1 <= max) return absl::OkStatus();
    for (const Command& known : Commands()) {
      if (known.name == command) return absl::InvalidArgumentError(absl::StrCat("usage: ", known.usage));
    }
    return absl::InvalidArgumentError("bad arguments");
  };
  if (command == "help") {
    Help(words);
    return absl::OkStatus();
  }
  if (command == "show") return Show(words);
  if (command == "sim") {
    if (absl::Status s = count(0, 0); !s.ok()) return s;
    absl::StatusOr<schedules::SimulationResult> result = schedules::Simulate(session_->schedule(), {});
    if (!result.ok()) return result.status();
    out_ << schedules::SimulationTable(session_->schedule(), *result);
    return absl::OkStatus();
  }
  if (command == "draw") return Draw(words);
  if (command == "step") {
    if (absl::Status s = count(0, 1); !s.ok()) return s;
    int64_t n = 1;
    if (words.size() == 2 && (!absl::SimpleAtoi(words[1], &n) || n < 1)) {
      return absl::InvalidArgumentError(absl::StrCat("step takes a positive count, not '", words[1], "'"));
    }
    return Step(n);
  }
  if (command == "run") {
    if (absl::Status s = count(0, 0); !s.ok()) return s;
    const int64_t left = options_.steps - session_->steps_done();
    if (left <= 0) {
      return absl::FailedPreconditionError(absl::StrCat(session_->steps_done(), " steps done, --steps is ",
                                                        options_.steps, ": use step N to go further"));
    }
    return Step(left);
  }
  if (command == "loss") {
    Loss();
    return absl::OkStatus();
  }
  if (command == "break") return Break(words);
  if (command == "delete") {
    if (absl::Status s = count(0, 1); !s.ok()) return s;
    if (words.size() == 1) {
      out_ << "deleted " << debugger_->breakpoints().size() << " breakpoint(s)\n";
      debugger_->DeleteAllBreakpoints();
      return absl::OkStatus();
    }
    int32_t id = 0;
    if (!absl::SimpleAtoi(words[1], &id)) return absl::InvalidArgumentError("usage: delete [ID]");
    if (absl::Status s = debugger_->DeleteBreakpoint(id); !s.ok()) return s;
    out_ << "deleted breakpoint " << id << "\n";
    return absl::OkStatus();
  }
  if (command == "continue") {
    if (absl::Status s = count(0, 0); !s.ok()) return s;
    return Continue();
  }
  if (command == "where") {
    if (absl::Status s = count(0, 0); !s.ok()) return s;
    Where();
    return absl::OkStatus();
  }
  if (command == "inspect") return Inspect(words);
  if (command == "trace") return Trace(words);
  if (command == "set") return Set(words);
  if (command == "actors") {
    if (absl::Status s = count(0, 0); !s.ok()) return s;
    Actors();
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown command '", command, "' (try help)"));
}

void Repl::Help(const std::vector<std::string>& words) {
  for (const Command& command : Commands()) {
    if (words.size() > 1 && command.name != words[1]) continue;
    if (words.size() > 1) {
      out_ << command.usage << "\n  " << command.help << "\n";
      return;
    }
    out_ << "  " << command.usage << "\n      " << command.help << "\n";
  }
  if (words.size() > 1) out_ << "no command '" << words[1] << "'\n";
}

absl::Status Repl::Step(int64_t count) {
  if (absl::Status status = debugger_->CheckNoStepInProgress(); !status.ok()) return status;
  for (int64_t i = 0; i < count; ++i) {
    if (g_interrupted != 0) {
      g_interrupted = 0;
      out_ << absl::StrFormat("interrupted after step %d\n", session_->steps_done());
      return absl::OkStatus();
    }
    absl::StatusOr<std::vector<ir::TensorMap>> next_batch =
        model_.train_batch(static_cast<uint64_t>(session_->steps_done()), session_->compiled().num_microbatches);
    if (!next_batch.ok()) return next_batch.status();
    const std::vector<ir::TensorMap>& batch = *next_batch;
    const auto start = std::chrono::steady_clock::now();
    if (debugger_->breakpoints().empty()) {
      absl::StatusOr<controller::StepReport> report = session_->Step(batch);
      if (!report.ok()) return report.status();
      Record(*report, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      continue;
    }
    absl::StatusOr<std::optional<controller::StepReport>> report = debugger_->Start(batch);
    if (!report.ok()) return report.status();
    if (!report->has_value()) {
      ReportPause();
      return absl::OkStatus();
    }
    Record(**report, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return absl::OkStatus();
}

absl::Status Repl::Continue() {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::optional<controller::StepReport>> report = debugger_->Continue();
  if (!report.ok()) return report.status();
  if (!report->has_value()) {
    ReportPause();
    return absl::OkStatus();
  }
  Record(**report, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return absl::OkStatus();
}

void Repl::Record(const controller::StepReport& report, double seconds) {
  last_ = report;
  const float mean = report.losses.empty() ? 0.0f
                                           : std::accumulate(report.losses.begin(), report.losses.end(), 0.0f) /
                                                 static_cast<float>(report.losses.size());
  history_.emplace_back(report.step, mean);
  if (tracing_ && trace_.has_value()) trace_->AddStep(report);
  out_ << absl::StrFormat("step %d: loss %.4f (%.1f ms)\n", report.step, mean, seconds * 1e3);
}

void Repl::ReportPause() {
  std::vector<std::string> paused;
  for (const controller::ActorPosition& position : debugger_->Where()) {
    if (position.state == controller::ActorPosition::State::kPaused) {
      paused.push_back(absl::StrFormat("%s before %s (breakpoint %d)", ActorName(position.actor), position.task,
                                       position.breakpoint));
    }
  }
  out_ << absl::StrFormat("step %d paused: %s\n", debugger_->step_number(), absl::StrJoin(paused, "; "));
}

void Repl::Where() {
  std::vector<controller::ActorPosition> positions = debugger_->Where();
  if (positions.empty()) {
    out_ << absl::StrFormat("no step in progress (%d steps done)\n", session_->steps_done());
    return;
  }
  out_ << absl::StrFormat("step %d:\n", debugger_->step_number());
  // Who waits for each actor.
  std::map<int32_t, std::vector<std::string>> waiters;
  for (const controller::ActorPosition& position : positions) {
    for (const auto& [actor, task] : position.waits_for) {
      waiters[actor].push_back(absl::StrFormat("%s (for %s)", ActorName(position.actor), task));
    }
  }
  for (const controller::ActorPosition& position : positions) {
    std::string line = absl::StrFormat("  %s  task %d/%d", ActorName(position.actor),
                                       std::min(position.next_task + 1, position.num_tasks), position.num_tasks);
    switch (position.state) {
      case controller::ActorPosition::State::kDone:
        line += "  done with the step";
        break;
      case controller::ActorPosition::State::kPaused:
        absl::StrAppendFormat(&line, "  paused before %s (breakpoint %d)", position.task, position.breakpoint);
        break;
      case controller::ActorPosition::State::kReady:
        absl::StrAppendFormat(&line, "  ready to run %s", position.task);
        break;
      case controller::ActorPosition::State::kWaiting: {
        std::vector<std::string> needs;
        for (const auto& [actor, task] : position.waits_for) {
          needs.push_back(absl::StrFormat("%s's %s", ActorName(actor), task));
        }
        absl::StrAppendFormat(&line, "  before %s, waiting for %s", position.task, absl::StrJoin(needs, " and "));
        break;
      }
    }
    if (auto it = waiters.find(position.actor); it != waiters.end()) {
      absl::StrAppend(&line, "; waited for by ", absl::StrJoin(it->second, ", "));
    }
    out_ << line << "\n";
  }
}

absl::Status Repl::Break(const std::vector<std::string>& words) {
  if (words.size() == 1) {
    if (debugger_->breakpoints().empty()) out_ << "no breakpoints\n";
    for (const controller::Breakpoint& breakpoint : debugger_->breakpoints()) {
      out_ << absl::StrFormat("breakpoint %d: %s %s\n", breakpoint.id,
                              breakpoint.actor < 0 ? "*" : absl::StrCat(breakpoint.actor), breakpoint.task);
    }
    return absl::OkStatus();
  }
  if (words.size() != 3) return absl::InvalidArgumentError("usage: break ACTOR|* TASK");
  int32_t actor = -1;
  if (words[1] != "*") {
    absl::StatusOr<int32_t> parsed = ParseActor(words[1]);
    if (!parsed.ok()) return parsed.status();
    actor = *parsed;
  }
  absl::StatusOr<int32_t> id = debugger_->AddBreakpoint(actor, words[2]);
  if (!id.ok()) return id.status();
  out_ << absl::StrFormat("breakpoint %d: %s pauses before %s\n", *id,
                          actor < 0 ? "every actor" : absl::StrCat("actor ", actor), words[2]);
  return absl::OkStatus();
}

absl::Status Repl::Inspect(const std::vector<std::string>& words) {
  if (words.size() < 3 || words.size() > 4) return absl::InvalidArgumentError("usage: inspect ACTOR VALUE [MB]");
  absl::StatusOr<int32_t> actor = ParseActor(words[1]);
  if (!actor.ok()) return actor.status();
  std::string name = words[2];
  if (words.size() == 4) {
    int32_t microbatch = 0;
    if (!absl::SimpleAtoi(words[3], &microbatch) || microbatch < 0) {
      return absl::InvalidArgumentError(absl::StrCat("'", words[3], "' is not a microbatch"));
    }
    absl::StrAppend(&name, "@", microbatch);
  }
  absl::StatusOr<ir::HostTensor> tensor = debugger_->Inspect(*actor, name);
  if (!tensor.ok()) return tensor.status();
  out_ << absl::StrFormat("actor %d %s: %s", *actor, name, ir::SummarizeTensor(*tensor));
  return absl::OkStatus();
}

absl::Status Repl::Trace(const std::vector<std::string>& words) {
  if (words.size() == 2 && words[1] == "on") {
    if (!trace_.has_value()) trace_.emplace(session_->compiled());
    tracing_ = true;
    out_ << "tracing the steps to come\n";
    return absl::OkStatus();
  }
  if (words.size() == 2 && words[1] == "off") {
    tracing_ = false;
    out_ << "tracing off (" << (trace_.has_value() ? trace_->steps() : 0) << " steps recorded)\n";
    return absl::OkStatus();
  }
  if (words.size() == 3 && words[1] == "save") {
    if (!trace_.has_value() || trace_->steps() == 0) {
      return absl::FailedPreconditionError("no steps traced: trace on, then step");
    }
    std::ofstream file(words[2]);
    file << trace_->ToJson();
    file.close();
    if (!file) return absl::UnavailableError(absl::StrCat("cannot write ", words[2]));
    out_ << absl::StrFormat("wrote %d traced steps to %s (ui.perfetto.dev; the same format as `draw perfetto`)\n",
                            trace_->steps(), words[2]);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("usage: trace on|off|save FILE");
}

absl::Status Repl::Set(const std::vector<std::string>& words) {
  if (words.size() != 3) return absl::InvalidArgumentError("usage: set schedule NAME|FILE | set microbatches M");
  if (absl::Status status = debugger_->CheckNoStepInProgress(); !status.ok()) return status;
  const controller::CompiledStep& compiled = session_->compiled();
  if (words[1] == "schedule") {
    absl::StatusOr<schedules::Schedule> schedule =
        schedules::ResolveSchedule(words[2], compiled.actors_per_replica, compiled.num_microbatches,
                                   options_.virtual_stages, session_->train_step().stage_edges);
    if (!schedule.ok()) return schedule.status();
    options_.schedule = words[2];
    return Recompile(std::nullopt, *std::move(schedule));
  }
  if (words[1] == "microbatches") {
    int32_t microbatches = 0;
    if (!absl::SimpleAtoi(words[2], &microbatches) || microbatches < 1) {
      return absl::InvalidArgumentError(absl::StrCat("'", words[2], "' is not a microbatch count"));
    }
    absl::StatusOr<ir::TrainStep> step = model_.trace(microbatches);
    if (!step.ok()) return step.status();
    absl::StatusOr<schedules::Schedule> schedule =
        schedules::ResolveSchedule(options_.schedule, compiled.actors_per_replica, microbatches,
                                   options_.virtual_stages, step->stage_edges);
    if (!schedule.ok()) return schedule.status();
    return Recompile(*std::move(step), *std::move(schedule));
  }
  return absl::InvalidArgumentError("usage: set schedule NAME|FILE | set microbatches M");
}

absl::Status Repl::Recompile(std::optional<ir::TrainStep> step, schedules::Schedule schedule) {
  absl::Status status = step.has_value() ? session_->Recompile(*std::move(step), std::move(schedule))
                                         : session_->SetSchedule(std::move(schedule));
  if (!status.ok()) return status;
  if (trace_.has_value()) {
    trace_.reset();
    tracing_ = false;
    out_ << "(the trace of the old schedule is dropped; trace on to start anew)\n";
  }
  const controller::CompiledStep& compiled = session_->compiled();
  out_ << absl::StrFormat("recompiled: schedule %s, %d microbatches, %d actors; going on after step %d\n",
                          compiled.schedule, compiled.num_microbatches, compiled.num_actors, session_->steps_done());
  for (const controller::Breakpoint& breakpoint : debugger_->UnmatchedBreakpoints()) {
    out_ << absl::StrFormat("note: breakpoint %d (%s %s) matches no task of this schedule\n", breakpoint.id,
                            breakpoint.actor < 0 ? "*" : absl::StrCat(breakpoint.actor), breakpoint.task);
  }
  return absl::OkStatus();
}

}  // namespace tandem
