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
#include "ir/interpreter.h"
#include "ir/train_step.h"
#include "tools/cli/arguments.h"

namespace tandem::cli {

// Declares the model options (--model, --stages, --microbatches, sizes,
// --optimizer, --lr, --seed, --data) on `arguments`.
void AddExampleOptions(Arguments& arguments);

// A traced example model and where its batches come from. Owns everything
// it needs; not thread-safe.
struct ExampleJob {
  std::string description;  // e.g. "gpt: 2 layers, d=64, ..., data: /usr/share/common-licenses"
  ir::TrainStep step;
  // What one step consumes, for throughput: e.g. 8192 "tokens".
  int64_t items_per_step = 0;
  std::string item_name;
  // The microbatches of training step `index` (0-based) from the train split.
  std::function<std::vector<ir::TensorMap>(uint64_t index)> train_batch;
  // A held-out batch set for the validation loss; empty when the task has none.
  std::function<std::vector<ir::TensorMap>(uint64_t index)> validation_batch;
};

// Builds the job the parsed options describe; InvalidArgument for a bad
// model name or sizes that do not fit. `stages`, when given (a schedule's
// stage count), replaces --stages; the model then needs at least that many
// layers, and --layers defaults to it.
absl::StatusOr<ExampleJob> MakeExampleJob(const Arguments& arguments, std::optional<int32_t> stages = {});

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_EXAMPLE_JOB_H_
