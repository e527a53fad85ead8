// The compiler: from a traced training step and a schedule to one
// ActorProgram per actor (DESIGN.md steps 3, 5, 6 and 7).
//
//  - Split: the microbatch graph is cut at its stages into functions per task
//    kind: F (the stage's forward), B (its whole backward), I and W (the
//    halves of a split backward). The update graph is cut per actor: each
//    actor updates the parameters it holds.
//  - Place: a stage's values live on the actor the schedule places it on.
//    Parameters live on every actor that uses them (a tied embedding on the
//    first and last stage's actors), and each such actor applies the same
//    update, so the copies stay bit-identical. Data inputs go to the actors
//    that use them; constants are recomputed where needed, never shipped.
//  - Communicate: a value produced by a task on one actor and used on
//    another crosses once per (producing task, receiving actor): one send
//    right after the producer, one receive right before the first task that
//    needs it, matched by tag. A value used on the same actor is handed over
//    in place, whatever the stages.
//  - Accumulate: gradients are accumulated in microbatch order, one
//    accumulator per (parameter, stage); a gradient produced early is held
//    until its turn (and counted in the memory peak). Accumulators of a
//    parameter used on several actors are sent to each holder after the loop.
//  - Lifetimes: every buffer is freed after its last use; the static peak of
//    live bytes per actor follows.
//
// A compiled step is identified by a content hash: running it again needs
// only the step's inputs.
#ifndef TANDEM_CONTROLLER_COMPILER_H_
#define TANDEM_CONTROLLER_COMPILER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/actor_program.h"
#include "ir/train_step.h"
#include "schedules/schedule.h"

namespace tandem::controller {

// Counts per actor, for dumps, tests and benchmarks.
struct ActorStats {
  int32_t runs = 0;
  int32_t sends = 0;
  int32_t receives = 0;
  int64_t bytes_sent = 0;
  int32_t instructions = 0;
  int32_t all_reduces = 0;
  int64_t reduce_bytes_sent = 0;  // by its all-reduces (ir/all_reduce.h)
  // The arithmetic of its runs in one step, by the op table's costs
  // (ir::GraphCost of each run's function): a static estimate of how the
  // work falls on the actors.
  double flops = 0.0;
};

// With data parallelism the job runs `num_replicas` copies of the schedule's
// pipeline. Actor a is position a % actors_per_replica (the schedule's actor)
// of replica a / actors_per_replica; replica r runs microbatches
// [r * num_microbatches, (r + 1) * num_microbatches) of the global batch,
// numbered 0..num_microbatches-1 in its programs and inputs. Each position
// has ONE program, compiled once and run by every replica
// (ir/actor_program.h): compile cost does not grow with the replicas.
struct CompiledStep {
  std::string model;
  std::string schedule;
  int32_t num_actors = 0;          // of all replicas
  int32_t actors_per_replica = 0;  // the schedule's actors
  int32_t num_replicas = 1;
  int32_t num_stages = 0;
  int32_t num_microbatches = 0;    // per replica
  int32_t Replica(int32_t actor) const { return actor / actors_per_replica; }
  int32_t Position(int32_t actor) const { return actor % actors_per_replica; }
  // The microbatches of one step over all replicas: the global batch.
  int32_t global_microbatches() const { return num_microbatches * num_replicas; }
  std::vector<ir::ActorProgram> programs;  // one per position (actors_per_replica)
  // The program global actor `actor` runs (as replica Replica(actor)).
  const ir::ActorProgram& ProgramOf(int32_t actor) const { return programs[Position(actor)]; }
  std::vector<ActorStats> stats;           // one per actor
  std::vector<bool> remat;                 // by stage: recomputes its forward in its backward
  uint64_t hash = 0;                       // over every program
};

struct CompileOptions {
  // By stage (empty: none): the stage keeps only its inputs of each
  // microbatch in flight and recomputes its forward inside its backward
  // (controller/step_plan.h). The results stay bit-identical.
  std::vector<bool> remat;
};

// Remat for every one of `num_stages` stages (`--remat stage`), or none.
std::vector<bool> RematEveryStage(int32_t num_stages, bool remat);

// Compiles `step` for `schedule`, on step.num_replicas replicas of it.
// InvalidArgument, naming the stage, actor and task, when they do not fit:
// different stage or microbatch counts, an invalid schedule, an order that
// violates the model's dataflow, or a forward value flowing to an earlier
// stage.
absl::StatusOr<CompiledStep> Compile(const ir::TrainStep& step, const schedules::Schedule& schedule,
                                     const CompileOptions& options = {});

// Every actor's instruction stream with its static peak memory.
std::string DumpCompiledStep(const CompiledStep& compiled, bool with_functions = false);

// The schedule's tasks with only its forwards kept: what a forward-only
// (inference) step runs.
schedules::Schedule ForwardOnly(const schedules::Schedule& schedule);

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_COMPILER_H_
