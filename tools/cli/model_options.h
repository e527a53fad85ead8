// The options that choose and size an example model (examples/): --model,
// --microbatches, --data-parallel, --layers, --dim, --heads, --seq, --batch, --vocab, --tied,
// --optimizer, --lr, --seed, --data, and --stages where no schedule says
// how many stages there are. Shared by `tandem ir`, `compile`, `train`,
// `repl` and the benchmarks that run the example models.
#ifndef TANDEM_TOOLS_CLI_MODEL_OPTIONS_H_
#define TANDEM_TOOLS_CLI_MODEL_OPTIONS_H_

#include <cstdint>
#include <optional>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "examples/example_job.h"

namespace tandem::cli {

// Declares the model options on `command`, bound to `options`.
void AddModelOptions(CLI::App& command, examples::ExampleJobOptions& options);

// Sets options.stages to a schedule's stage count; InvalidArgument when
// --stages was given and says otherwise.
absl::Status TakeScheduleStages(const CLI::App& command, int32_t stages, examples::ExampleJobOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_MODEL_OPTIONS_H_
