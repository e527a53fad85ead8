// The example models behind `tandem ir` and `tandem train`: the options
// that choose and size them, the traced step, and their data.
#ifndef TANDEM_TOOLS_CLI_EXAMPLE_JOB_H_
#define TANDEM_TOOLS_CLI_EXAMPLE_JOB_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "examples/example_job.h"
#include "tools/cli/arguments.h"

namespace tandem::cli {

// Declares the model options (--model, --stages, --microbatches, sizes,
// --optimizer, --lr, --seed, --data) on `arguments`.
void AddExampleOptions(Arguments& arguments);

using examples::ExampleJob;

// Builds the job the parsed options describe; InvalidArgument for a bad
// model name or sizes that do not fit. `stages`, when given (a schedule's
// stage count), replaces --stages; the model then needs at least that many
// layers, and --layers defaults to it.
absl::StatusOr<ExampleJob> MakeExampleJob(const Arguments& arguments, std::optional<int32_t> stages = {});
// The options MakeExampleJob builds from, for callers that change some (the
// REPL's `set microbatches`).
absl::StatusOr<examples::ExampleJobOptions> ExampleJobOptionsFrom(const Arguments& arguments,
                                                                  std::optional<int32_t> stages = {});

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_EXAMPLE_JOB_H_
