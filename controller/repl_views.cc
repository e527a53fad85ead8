// The REPL's views of the job (repl.h): `show model|ir|placement|memory`,
// `draw`, `actors` and `loss`; what they print and nothing else. The command
// loop and the debugging commands are repl.cc's.
#include "controller/repl.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ir/printer.h"
#include "schedules/drawing.h"
#include "schedules/simulator.h"
#include "schedules/text_format.h"

namespace tandem {

absl::Status Repl::Show(const std::vector<std::string>& words) {
  const std::string what = words.size() > 1 ? words[1] : "";
  const controller::CompiledStep& compiled = session_->compiled();
  if (what == "model" && words.size() == 2) return ShowModel();
  if (what == "ir" && words.size() <= 3) return ShowIr(words);
  if (what == "schedule" && words.size() == 2) {
    out_ << schedules::PrintScheduleText(session_->schedule());
    return absl::OkStatus();
  }
  if (what == "placement" && words.size() == 2) return ShowPlacement();
  if (what == "program" && words.size() == 3) {
    absl::StatusOr<int32_t> actor = ParseActor(words[2]);
    if (!actor.ok()) return actor.status();
    if (compiled.num_replicas > 1) {
      out_ << absl::StrFormat("# actor %d runs position %d's program as replica %d (its peers are the actors of "
                              "replica %d: add %d to the peers below)\n",
                              *actor, compiled.Position(*actor), compiled.Replica(*actor), compiled.Replica(*actor),
                              compiled.Replica(*actor) * compiled.actors_per_replica);
    }
    out_ << ir::PrintActorProgram(compiled.ProgramOf(*actor));
    return absl::OkStatus();
  }
  if (what == "memory" && words.size() == 2) return ShowMemory();
  return absl::InvalidArgumentError("usage: show model|ir [STAGE]|schedule|placement|program ACTOR|memory");
}

absl::Status Repl::ShowModel() {
  const ir::TrainStep& step = session_->train_step();
  int64_t parameters = 0, bytes = 0;
  for (const ir::StateSpec& spec : step.state) {
    bytes += spec.type.num_bytes();
    if (spec.role == ir::StateRole::kParameter) parameters += spec.type.num_elements();
  }
  out_ << model_.description << "\n"
       << absl::StrFormat("step %s: %d stages, %d microbatches, %d parameters, %d state tensors (%s with the "
                          "optimizer's), %d ops per microbatch, %d in the update\n",
                          step.name, step.num_stages, step.num_microbatches, parameters, step.state.size(),
                          ir::FormatBytes(bytes), step.microbatch.nodes().size(), step.update.nodes().size());
  return absl::OkStatus();

}

absl::Status Repl::ShowIr(const std::vector<std::string>& words) {
  const controller::CompiledStep& compiled = session_->compiled();
  const ir::TrainStep& step = session_->train_step();
  if (words.size() == 2) {
    out_ << ir::PrintTrainStep(step);
    return absl::OkStatus();
  }
  int32_t stage = 0;
  if (!absl::SimpleAtoi(words[2], &stage) || stage < 0 || stage >= compiled.num_stages) {
    return absl::InvalidArgumentError(absl::StrCat("'", words[2], "' is not a stage (0 to ", compiled.num_stages - 1,
                                                   ")"));
  }
  // The stage's functions (F, B or I/W), from the actor that holds it.
  const std::string suffix = absl::StrCat(stage);
  for (const ir::ActorProgram& program : compiled.programs) {
    for (const ir::Function& function : program.functions) {
      if (function.name.size() > 1 && function.name.substr(1) == suffix) {
        out_ << "# " << function.name << " on actor " << program.actor
             << (compiled.num_replicas > 1 ? " and its replicas" : "") << "\n"
             << ir::PrintGraph(function.graph);
      }
    }
  }
  return absl::OkStatus();

}

absl::Status Repl::ShowPlacement() {
  const controller::CompiledStep& compiled = session_->compiled();
  const ir::TrainStep& step = session_->train_step();
  const schedules::Schedule& schedule = session_->schedule();
  // The actors that run pipeline position `position`, in replica order.
  auto replicas_of = [&](int32_t position) {
    std::vector<int32_t> actors;
    for (int32_t r = 0; r < compiled.num_replicas; ++r) actors.push_back(position + r * compiled.actors_per_replica);
    return absl::StrJoin(actors, ", ");
  };
  for (int32_t stage = 0; stage < schedule.num_stages; ++stage) {
    const int32_t position = schedule.stage_to_actor[stage].value;
    if (compiled.num_replicas == 1) {
      out_ << absl::StrFormat("stage %d -> actor %d\n", stage, position);
    } else {
      out_ << absl::StrFormat("stage %d -> actors %s (one per replica; gradients all-reduced among them)\n",
                              stage, replicas_of(position));
    }
  }
  for (const ir::ActorProgram& program : compiled.programs) {
    std::vector<std::string> state;
    int64_t bytes = 0;
    for (const ir::Buffer& buffer : program.buffers) {
      if (buffer.kind != ir::BufferKind::kState) continue;
      bytes += buffer.type.num_bytes();
      const ir::StateSpec* spec = step.FindState(buffer.binding);
      if (spec != nullptr && spec->role == ir::StateRole::kParameter) state.push_back(buffer.binding);
    }
    const std::string who = compiled.num_replicas == 1
                                ? absl::StrCat("actor ", program.actor, " holds")
                                : absl::StrCat("actors ", replicas_of(program.actor), " each hold");
    out_ << absl::StrFormat("%s %d parameters (%s of state with their optimizer slots): %s\n", who,
                            state.size(), ir::FormatBytes(bytes), absl::StrJoin(state, ", "));
  }
  return absl::OkStatus();

}

absl::Status Repl::ShowMemory() {
  const controller::CompiledStep& compiled = session_->compiled();
  const bool replicas = compiled.num_replicas > 1;
  out_ << (replicas ? "actor  replica  static peak  measured peak (last step)\n"
                    : "actor  static peak  measured peak (last step)\n");
  for (int32_t actor = 0; actor < compiled.num_actors; ++actor) {
    const std::string measured = last_.has_value() && actor < static_cast<int32_t>(last_->peak_live_bytes.size())
                                     ? ir::FormatBytes(last_->peak_live_bytes[actor])
                                     : "-";
    const std::string peak = ir::FormatBytes(compiled.ProgramOf(actor).static_peak_bytes);
    if (replicas) {
      out_ << absl::StrFormat("%5d  %7d  %11s  %13s\n", actor, compiled.Replica(actor), peak, measured);
    } else {
      out_ << absl::StrFormat("%5d  %11s  %13s\n", actor, peak, measured);
    }
  }
  return absl::OkStatus();

}

absl::Status Repl::Draw(const std::vector<std::string>& words) {
  const std::string format = words.size() > 1 ? words[1] : "ascii";
  if (!((format == "ascii" && words.size() <= 2) || ((format == "svg" || format == "perfetto") && words.size() == 3))) {
    return absl::InvalidArgumentError("usage: draw [ascii|svg FILE|perfetto FILE]");
  }
  absl::StatusOr<schedules::SimulationResult> result = schedules::Simulate(session_->schedule(), {});
  if (!result.ok()) return result.status();
  if (format == "ascii") {
    out_ << schedules::DrawAscii(session_->schedule(), *result);
    return absl::OkStatus();
  }
  const std::string drawing = format == "svg" ? schedules::DrawSvg(session_->schedule(), *result)
                                              : schedules::DrawPerfetto(session_->schedule(), *result);
  std::ofstream file(words[2]);
  file << drawing;
  file.close();
  if (!file) return absl::UnavailableError(absl::StrCat("cannot write ", words[2]));
  out_ << "wrote " << words[2] << "\n";
  return absl::OkStatus();
}

void Repl::Actors() {
  const controller::CompiledStep& compiled = session_->compiled();
  const bool replicas = compiled.num_replicas > 1;
  std::vector<controller::ActorPosition> positions = debugger_->Where();
  out_ << (replicas ? "actor  replica  process     state                              stages  static peak  measured peak\n"
                    : "actor  process     state                              stages  static peak  measured peak\n");
  for (int32_t actor = 0; actor < compiled.num_actors; ++actor) {
    std::string state = "idle";
    if (!positions.empty()) {
      const controller::ActorPosition& position = positions[actor];
      switch (position.state) {
        case controller::ActorPosition::State::kDone: state = "done with the step"; break;
        case controller::ActorPosition::State::kPaused: state = absl::StrCat("paused before ", position.task); break;
        case controller::ActorPosition::State::kReady: state = absl::StrCat("ready to run ", position.task); break;
        case controller::ActorPosition::State::kWaiting: state = absl::StrCat("waiting, before ", position.task); break;
      }
    }
    std::vector<std::string> stages;
    for (int32_t stage = 0; stage < session_->schedule().num_stages; ++stage) {
      if (session_->schedule().stage_to_actor[stage].value == compiled.Position(actor)) {
        stages.push_back(absl::StrCat(stage));
      }
    }
    const std::string measured = last_.has_value() && actor < static_cast<int32_t>(last_->peak_live_bytes.size())
                                     ? ir::FormatBytes(last_->peak_live_bytes[actor])
                                     : "-";
    const std::string replica = replicas ? absl::StrFormat("%7d  ", compiled.Replica(actor)) : "";
    out_ << absl::StrFormat("%5d  %s%-10s  %-33s  %6s  %11s  %13s\n", actor, replica,
                            session_->DescribeActor(ActorId(actor)), state, absl::StrJoin(stages, ","),
                            ir::FormatBytes(compiled.ProgramOf(actor).static_peak_bytes), measured);
  }
}

void Repl::Loss() {
  if (!last_.has_value()) {
    out_ << "no step run yet\n";
    return;
  }
  std::vector<std::string> losses;
  for (float loss : last_->losses) losses.push_back(absl::StrFormat("%.6f", loss));
  out_ << absl::StrFormat("step %d: mean loss %.6f; per microbatch: %s\n", last_->step, history_.back().second,
                          absl::StrJoin(losses, " "));
  if (history_.size() > 1) {
    std::vector<std::string> recent;
    for (size_t i = history_.size() > 10 ? history_.size() - 10 : 0; i < history_.size(); ++i) {
      recent.push_back(absl::StrFormat("%d: %.4f", history_[i].first, history_[i].second));
    }
    out_ << "recent steps: " << absl::StrJoin(recent, ", ") << "\n";
  }
}

}  // namespace tandem
