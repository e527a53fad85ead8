// The example fill jobs behind `tandem train --fill SPEC`: inference of an
// example model, run by a pipeline's actors in its bubbles
// (controller/fill.h).
//
// SPEC is "infer:MODEL[,key=value...]": MODEL is mlp; keys batch (rows per
// piece, default 256), layers, dim (default: the model's) and items (pieces'
// worth of inputs in all; default 0, as many as the steps take). The
// requests cycle through a dataset of up to 256 distinct batches (64 MiB at
// most) that is part of the model's state: it goes to the filling actors
// once, and a piece's input is only the index of its batch.
#ifndef TANDEM_EXAMPLES_FILL_JOB_H_
#define TANDEM_EXAMPLES_FILL_JOB_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "ir/interpreter.h"
#include "ir/train_step.h"

namespace tandem::examples {

struct ExampleFillJob {
  std::string name;         // the spec as given, e.g. "infer:mlp"
  std::string description;  // e.g. "mlp inference: 4 hidden layers of 64, 16 rows per piece, ..."
  ir::TrainStep step;       // forward-only, one stage, one microbatch
  ir::TensorMap state;      // the model's parameters (its initializers, seeded)
  // The inputs of item `item`: "item", the index of its batch in the
  // dataset (state "data").
  std::function<ir::TensorMap(int64_t item)> input;
  int64_t items = 0;        // 0: endless
  int64_t rows_per_item = 0;
};

// InvalidArgument for a spec that does not parse (naming the piece), an
// unknown model or key, or sizes out of examples/limits.h's bounds.
absl::StatusOr<ExampleFillJob> MakeExampleFillJob(const std::string& spec, uint64_t seed = 1);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_FILL_JOB_H_
