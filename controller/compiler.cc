#include "controller/compiler.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/actor_lowering.h"
#include "controller/step_plan.h"
#include "ir/all_reduce.h"
#include "ir/hash.h"
#include "ir/limits.h"
#include "ir/op_def.h"
#include "ir/verifier.h"
#include "schedules/generators.h"
#include "schedules/validator.h"

namespace tandem::controller {
namespace {

using ir::Instruction;
using ir::InstructionKind;

// A forward value may only flow to its own stage or to one the schedule's
// stage graph orders after it (a later stage of a chain): say where one
// does not, naming the stages, their actors and tasks.
absl::Status CheckForwardDataflow(const ir::TrainStep& step, const schedules::Schedule& schedule) {
  const ir::Graph& graph = step.microbatch;
  const ir::StageGraph stages = schedule.stage_graph();
  std::set<std::pair<int32_t, int32_t>> reachable;  // (from, to) pairs checked already
  for (ir::ValueId id = 0; id < graph.size(); ++id) {
    const ir::Node& node = graph.node(id);
    if (node.phase != ir::Phase::kForward || node.op == ir::OpKind::kInput) continue;
    for (ir::ValueId operand : node.operands) {
      const ir::Node& producer = graph.node(operand);
      if (producer.op == ir::OpKind::kInput || producer.op == ir::OpKind::kConstant ||
          producer.phase != ir::Phase::kForward || producer.stage == node.stage ||
          reachable.contains({producer.stage, node.stage})) {
        continue;
      }
      if (stages.Reaches(producer.stage, node.stage)) {
        reachable.insert({producer.stage, node.stage});
        continue;
      }
      auto actor = [&](int32_t stage) { return schedule.ActorOf(StageId(stage)).value; };
      const std::string why =
          producer.stage > node.stage
              ? std::string("a forward value can only flow to the same or a later stage")
              : absl::StrCat("the schedule's stage graph (", ir::FormatStageEdges(stages.Edges()), ") has no path ",
                             producer.stage, "->...->", node.stage,
                             ", so no task order it allows computes the value before it is read");
      return absl::InvalidArgumentError(absl::StrCat(
          "stage ", node.stage, " (actor ", actor(node.stage), ", task F", node.stage, ".m): %", id, " = ",
          ir::OpName(node.op), node.location.known() ? " at " + node.location.ToString() : "", " reads %", operand,
          " of ", producer.stage > node.stage ? "the later " : "", "stage ", producer.stage, " (actor ",
          actor(producer.stage), ", task F", producer.stage, ".m): ", why));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFits(const ir::TrainStep& step, const schedules::Schedule& schedule) {
  if (schedule.num_stages != step.num_stages) {
    const bool model_larger = step.num_stages > schedule.num_stages;
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", step.name, "' has ", step.num_stages, " stages but schedule '", schedule.name, "' places ",
        schedule.num_stages, " on ", schedule.num_actors, " actors: ",
        model_larger ? absl::StrCat("stages ", schedule.num_stages, "..", step.num_stages - 1, " of the model have no actor")
                     : absl::StrCat("the schedule's stages ", step.num_stages, "..", schedule.num_stages - 1,
                                    " have no model ops"),
        " (trace the model with as many stages as the schedule has)"));
  }
  if (absl::Status status = CheckForwardDataflow(step, schedule); !status.ok()) return status;
  if (absl::Status status = ir::VerifyTrainStep(step); !status.ok()) return status;
  if (schedule.num_microbatches != step.num_microbatches) {
    return absl::InvalidArgumentError(absl::StrCat("model '", step.name, "' is traced for ", step.num_microbatches,
                                                   " microbatches but schedule '", schedule.name, "' runs ",
                                                   schedule.num_microbatches));
  }
  bool has_backward = false;
  for (int32_t actor = 0; actor < schedule.num_actors; ++actor) {
    for (size_t slot = 0; slot < schedule.programs[actor].size(); ++slot) {
      for (const schedules::Task& task : schedule.programs[actor][slot].tasks) {
        if (task.kind == schedules::TaskKind::kForward) continue;
        has_backward = true;
        if (step.forward_only()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "model '", step.name, "' is forward-only but actor ", actor, " runs ", schedules::TaskName(task),
              " (slot ", slot, "): use ForwardOnly(schedule)"));
        }
      }
    }
  }
  if (!step.forward_only() || has_backward) return schedules::Validate(schedule);
  return absl::OkStatus();
}

// Every receive has one matching send and the streams, in program order plus
// send-before-receive, have no cycle: buffered sends then cannot deadlock.
absl::Status CheckStreams(const std::vector<ir::ActorProgram>& programs) {
  const int32_t actors = static_cast<int32_t>(programs.size());
  std::map<std::tuple<int32_t, int32_t, uint64_t>, int32_t> sends;  // (from, to, tag) -> count
  for (const ir::ActorProgram& program : programs) {
    for (const Instruction& instruction : program.instructions) {
      if (instruction.kind == InstructionKind::kSend) ++sends[{program.actor, instruction.peer, instruction.tag}];
    }
  }
  for (const ir::ActorProgram& program : programs) {
    for (const Instruction& instruction : program.instructions) {
      if (instruction.kind != InstructionKind::kReceive) continue;
      auto it = sends.find({instruction.peer, program.actor, instruction.tag});
      if (it == sends.end() || it->second != 1) {
        return absl::InternalError(absl::StrCat("actor ", program.actor, ": task ", instruction.task.ToString(),
                                                " receives tag ", instruction.tag, " from actor ", instruction.peer,
                                                ", which sends it ", it == sends.end() ? 0 : it->second, " times"));
      }
    }
  }
  // Simulate: each actor advances while it can; a receive waits for its send.
  std::vector<size_t> next(actors, 0);
  std::set<std::tuple<int32_t, int32_t, uint64_t>> sent;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int32_t actor = 0; actor < actors; ++actor) {
      const std::vector<Instruction>& stream = programs[actor].instructions;
      while (next[actor] < stream.size()) {
        const Instruction& instruction = stream[next[actor]];
        if (instruction.kind == InstructionKind::kReceive &&
            !sent.count({instruction.peer, actor, instruction.tag})) {
          break;
        }
        if (instruction.kind == InstructionKind::kSend) sent.insert({actor, instruction.peer, instruction.tag});
        ++next[actor];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int32_t actor = 0; actor < actors; ++actor) {
    const std::vector<Instruction>& stream = programs[actor].instructions;
    if (next[actor] == stream.size()) continue;
    const Instruction& waiting = stream[next[actor]];
    absl::StrAppend(&stuck, stuck.empty() ? "" : "; ", "actor ", actor, " at ", waiting.task.ToString(),
                    " waits for actor ", waiting.peer);
  }
  if (!stuck.empty()) return absl::InvalidArgumentError(absl::StrCat("the compiled step would deadlock: ", stuck));
  return absl::OkStatus();
}

// The counts of `program` as replica `replica` runs it; `buckets` gets the
// element count of each all-reduce.
ActorStats Count(const ir::ActorProgram& program, int32_t replica, std::vector<int64_t>& buckets) {
  ActorStats stats;
  stats.instructions = static_cast<int32_t>(program.instructions.size());
  std::vector<double> function_flops;
  for (const ir::Function& function : program.functions) function_flops.push_back(ir::GraphCost(function.graph).flops);
  for (const Instruction& instruction : program.instructions) {
    switch (instruction.kind) {
      case InstructionKind::kRun:
        ++stats.runs;
        stats.flops += function_flops[instruction.function];
        break;
      case InstructionKind::kSend:
        ++stats.sends;
        for (ir::BufferId id : instruction.buffers) stats.bytes_sent += program.buffers[id].type.num_bytes();
        break;
      case InstructionKind::kReceive: ++stats.receives; break;
      case InstructionKind::kAllReduceStart: {
        ++stats.all_reduces;
        int64_t elements = 0;
        for (ir::BufferId id : instruction.buffers) elements += program.buffers[id].type.num_elements();
        buckets.push_back(elements);
        stats.reduce_bytes_sent +=
            ir::AllReduceSentBytes(elements, static_cast<int32_t>(instruction.group.size()), replica);
        break;
      }
      default: break;
    }
  }
  return stats;
}

}  // namespace

namespace {

// Whether `step`'s weight versions are the ones the asynchronous `mode`
// runs: PipeDream's stage s p-1-s updates behind, 2BW's every stage one.
bool TracedFor(const ir::TrainStep& step, schedules::WeightUpdateMode mode) {
  if (step.version_delay.empty()) return false;
  for (int32_t s = 0; s < static_cast<int32_t>(step.version_delay.size()); ++s) {
    const int32_t expected = mode == schedules::WeightUpdateMode::kPipeDream ? step.num_stages - 1 - s : 1;
    if (step.version_delay[s] != expected) return false;
  }
  return true;
}

// A schedule named for an asynchronous pipeline runs only a step traced for
// it (its order alone is 1F1B's: a synchronous step would run silently as
// synchronous). An asynchronous step updates each parameter on the one
// actor that holds it, right after the group that completes its gradient.
absl::Status CheckAsynchronous(const StepPlan& plan, const schedules::Schedule& schedule) {
  const ir::TrainStep& step = plan.step();
  const schedules::WeightUpdateMode mode = schedules::WeightUpdateModeOf(schedule.name);
  if (mode != schedules::WeightUpdateMode::kFlush && !step.forward_only() && !TracedFor(step, mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "schedule '", schedule.name, "' needs a step traced for it (`tandem train --schedule ", schedule.name,
        "` traces one, as ExampleJob(updates='", schedule.name, "') does in Python); step '", step.name,
        "' is traced ", step.asynchronous() ? "for the other asynchronous mode" : "to update after the whole step"));
  }
  if (!step.asynchronous() || step.forward_only()) return absl::OkStatus();
  for (const ir::StateSpec& spec : step.state) {
    if (spec.role != ir::StateRole::kParameter) continue;
    const std::set<int32_t> holders = plan.Holders(spec.name);
    if (holders.size() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", spec.name, "' is used on actors ", absl::StrJoin(holders, " and "), "; ",
          step.microbatches_per_update == 1 ? "pipedream" : "2bw",
          " updates each parameter where it lives, mid-step, so it must live on one actor (untie it)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<bool> RematEveryStage(int32_t num_stages, bool remat) {
  return remat ? std::vector<bool>(num_stages, true) : std::vector<bool>();
}

// What makes a step smaller, for the size errors below.
constexpr absl::string_view kSmallerStep =
    "fewer microbatches, or more of them per actor through fewer actors or stages, make it smaller";

absl::StatusOr<CompiledStep> Compile(const ir::TrainStep& step, const schedules::Schedule& schedule,
                                     const CompileOptions& options) {
  if (absl::Status status = CheckFits(step, schedule); !status.ok()) return status;
  // Every task lowers to at least one instruction: a schedule past the
  // step's bound is refused before anything is lowered.
  int64_t tasks = 0;
  for (const auto& actor_program : schedule.programs) {
    for (const auto& slot : actor_program) tasks += static_cast<int64_t>(slot.tasks.size());
  }
  if (tasks > ir::kMaxStepInstructions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "schedule '", schedule.name, "' has ", tasks, " tasks on its ", schedule.num_actors, " actors (",
        schedule.num_microbatches, " microbatches of ", schedule.num_stages, " stages): more than the ",
        ir::kMaxStepInstructions, " instructions a compiled step may have; ", kSmallerStep));
  }
  absl::StatusOr<StepPlan> plan = StepPlan::Build(step, schedule, options.remat);
  if (!plan.ok()) return plan.status();
  if (absl::Status status = CheckAsynchronous(*plan, schedule); !status.ok()) return status;
  CompiledStep compiled;
  for (int32_t stage = 0; stage < step.num_stages; ++stage) compiled.remat.push_back(plan->Remat(stage));
  compiled.model = step.name;
  compiled.schedule = schedule.name;
  compiled.actors_per_replica = schedule.num_actors;
  compiled.num_replicas = step.num_replicas;
  compiled.num_actors = schedule.num_actors * step.num_replicas;
  compiled.num_stages = schedule.num_stages;
  compiled.num_microbatches = schedule.num_microbatches;
  int64_t instructions = 0;
  for (int32_t actor = 0; actor < schedule.num_actors; ++actor) {
    absl::StatusOr<ir::ActorProgram> program = LowerActor(*plan, actor);
    if (!program.ok()) return program.status();
    // Sizes follow from the user's flags: too large is their error, not a
    // bug the verifier found.
    if (absl::Status status = ir::CheckProgramSize(program->instructions.size(), program->buffers.size());
        !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", actor, ": ", status.message(), "; ", kSmallerStep));
    }
    instructions += static_cast<int64_t>(program->instructions.size());
    if (instructions > ir::kMaxStepInstructions) {
      return absl::InvalidArgumentError(absl::StrCat("the programs of actors 0 to ", actor, " have ", instructions,
                                                     " instructions, more than the ", ir::kMaxStepInstructions,
                                                     " a compiled step may have; ", kSmallerStep));
    }
    if (absl::Status status = ir::VerifyActorProgram(*program); !status.ok()) {
      return absl::InternalError(absl::StrCat("actor ", actor, ": ", status.message()));
    }
    compiled.programs.push_back(*std::move(program));
  }
  // Replicas communicate only through all-reduces, which every member of a
  // group starts at the same point of the same program: one replica's
  // streams stand for all of them.
  if (absl::Status status = CheckStreams(compiled.programs); !status.ok()) return status;
  ir::ContentHasher hash;
  std::vector<std::vector<int64_t>> buckets(schedule.num_actors);
  for (const ir::ActorProgram& program : compiled.programs) {
    compiled.stats.push_back(Count(program, 0, buckets[program.actor]));
    hash.AddUint64(ir::HashActorProgram(program));
  }
  // The other replicas count the same, but for the shards they own.
  for (int32_t actor = schedule.num_actors; actor < compiled.num_actors; ++actor) {
    ActorStats stats = compiled.stats[compiled.Position(actor)];
    stats.reduce_bytes_sent = 0;
    for (int64_t elements : buckets[compiled.Position(actor)]) {
      stats.reduce_bytes_sent += ir::AllReduceSentBytes(elements, step.num_replicas, compiled.Replica(actor));
    }
    compiled.stats.push_back(stats);
  }
  compiled.hash = hash.Digest();
  return compiled;
}

std::string DumpCompiledStep(const CompiledStep& compiled, bool with_functions) {
  const bool replicated = compiled.num_replicas > 1;
  std::string out = absl::StrFormat("compiled step %016x: model %s, schedule %s, %d actors, %d stages, %d microbatches",
                                    compiled.hash, compiled.model, compiled.schedule, compiled.num_actors,
                                    compiled.num_stages, compiled.num_microbatches);
  if (replicated) {
    absl::StrAppendFormat(&out, " per replica, %d data-parallel replicas of %d actors", compiled.num_replicas,
                          compiled.actors_per_replica);
  }
  std::vector<int32_t> remat;
  for (int32_t stage = 0; stage < static_cast<int32_t>(compiled.remat.size()); ++stage) {
    if (compiled.remat[stage]) remat.push_back(stage);
  }
  if (!remat.empty()) absl::StrAppend(&out, ", rematerialising stages ", absl::StrJoin(remat, ", "));
  absl::StrAppend(&out, "\n\n actor  instructions   runs  sends  receives  bytes sent  static peak bytes",
                  replicated ? "  all-reduces  reduce bytes sent" : "", "  GFLOP/step\n");
  for (int32_t actor = 0; actor < compiled.num_actors; ++actor) {
    const ActorStats& s = compiled.stats[actor];
    absl::StrAppendFormat(&out, " %5d  %12d  %5d  %5d  %8d  %10d  %17d", actor, s.instructions, s.runs, s.sends,
                          s.receives, s.bytes_sent, compiled.ProgramOf(actor).static_peak_bytes);
    if (replicated) absl::StrAppendFormat(&out, "  %11d  %17d", s.all_reduces, s.reduce_bytes_sent);
    absl::StrAppendFormat(&out, "  %10.4g\n", s.flops / 1e9);
  }
  for (const ir::ActorProgram& program : compiled.programs) {
    absl::StrAppend(&out, "\n", ir::PrintActorProgram(program, with_functions));
  }
  return out;
}

schedules::Schedule ForwardOnly(const schedules::Schedule& schedule) {
  schedules::Schedule forward = schedule;
  for (auto& program : forward.programs) {
    std::vector<schedules::Slot> kept;
    for (const schedules::Slot& slot : program) {
      schedules::Slot only;
      for (const schedules::Task& task : slot.tasks) {
        if (task.kind == schedules::TaskKind::kForward) only.tasks.push_back(task);
      }
      if (!only.tasks.empty()) kept.push_back(std::move(only));
    }
    program = std::move(kept);
  }
  return forward;
}

}  // namespace tandem::controller
