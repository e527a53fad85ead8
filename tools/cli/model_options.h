// The options that choose and size an example model (examples/): --model, --preset,
// --microbatches, --data-parallel, --layers, --dim, --heads, --kv-heads, --mlp-hidden,
// --rope-theta, --norm-eps, --seq, --batch, --vocab, --tied, --precision, --attention,
// --optimizer, --lr, --weight-decay, --decay-embeddings, --clip-grad-norm, --warmup-steps, --lr-schedule, --decay-steps,
// --min-lr, --seed, --tokenizer, --data, --update-every, and --stages where no schedule says
// how many stages there are. Shared by `tandem ir`, `compile`, `train`,
// `repl` and the benchmarks that run the example models.
#ifndef TANDEM_TOOLS_CLI_MODEL_OPTIONS_H_
#define TANDEM_TOOLS_CLI_MODEL_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <optional>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "controller/generation.h"
#include "examples/example_job.h"
#include "schedules/schedule.h"
#include "tools/cli/pipeline_options.h"

namespace tandem::cli {

// Declares the model options on `command`, bound to `options`.
void AddModelOptions(CLI::App& command, examples::ExampleJobOptions& options);

// `options` for the whole model in one process (generate, eval, export):
// one stage, one replica, one microbatch of `batch` sequences.
examples::ExampleJobOptions WholeModelOptions(examples::ExampleJobOptions options, int64_t batch);

// A language model's generation steps (controller/generation.h): its
// prefill and decode forwards with a KV cache (ExampleJob::cached_logits),
// traced with `model`'s stages, microbatches and batch. The errors of
// MakeExampleJob; InvalidArgument for a model without a cached forward.
absl::StatusOr<controller::GenerationSteps> TraceGenerationSteps(const examples::ExampleJobOptions& model);

// Sets options.stages to a schedule's stage count; InvalidArgument when
// --stages was given and says otherwise.
absl::Status TakeScheduleStages(const CLI::App& command, int32_t stages, examples::ExampleJobOptions& options);

// Sets options.updates for the schedule called `schedule`: pipedream
// updates per microbatch, 2bw every --update-every microbatches (default:
// options.stages); InvalidArgument when --update-every does not fit.
absl::Status TakeWeightUpdates(const CLI::App& command, const std::string& schedule,
                               examples::ExampleJobOptions& options);

// The validated schedule --schedule names, for the model `model` describes,
// with model.stages set from it. A chain schedule fixes the stage count,
// then `trace` runs; a graph generator (graph-1f1b, graph-gpipe) gives the
// model one stage per actor, `trace` runs, and the schedule follows the
// traced step's stage graph. `trace` returns the step (owned by the caller)
// and runs exactly once when the result is OK. A --stages that disagrees
// sets `usage_error`.
absl::StatusOr<schedules::Schedule> ResolveModelSchedule(
    const CLI::App& command, const ScheduleOptions& schedule, examples::ExampleJobOptions& model,
    const std::function<absl::StatusOr<const ir::TrainStep*>()>& trace, bool& usage_error);
// The same, tracing the example job `model` describes into `job`.
absl::StatusOr<schedules::Schedule> ResolveModelSchedule(const CLI::App& command, const ScheduleOptions& schedule,
                                                         examples::ExampleJobOptions& model,
                                                         std::optional<examples::ExampleJob>& job,
                                                         bool& usage_error);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_MODEL_OPTIONS_H_
