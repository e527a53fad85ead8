// The example fill jobs behind `tandem train --fill SPEC`: inference or
// training of an example model, run by a pipeline's actors in its bubbles
// (controller/fill.h).
//
// SPEC is "infer:MODEL[,key=value...]" or "train:MODEL[,key=value...]":
// MODEL is mlp; keys batch (rows per piece, default 256), layers, dim
// (default: the model's), items (pieces' worth of work in all; default 0,
// as many as the steps take) and, to train, lr (Adam's learning rate,
// default 1e-3). Every piece takes one batch of a dataset of up to 256
// distinct batches (64 MiB at most; examples/data/synthetic.h's
// classification task) that is part of the job's state: it goes to the
// filling actors once, and a piece's input is only the index of its batch.
// An inference piece classifies its batch; a training piece is one Adam
// update on it (ir/single_update.h), so each filling actor trains its own
// copy of the model.
#ifndef TANDEM_EXAMPLES_FILL_JOB_H_
#define TANDEM_EXAMPLES_FILL_JOB_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/initial_state.h"

namespace tandem::examples {

struct ExampleFillJob {
  std::string name;         // the spec as given, e.g. "infer:mlp"
  std::string description;  // e.g. "mlp inference: 4 hidden layers of 64, 16 rows per piece, ..."
  // A piece (controller::FillJob::piece): its result is the logits, or the
  // loss before its update.
  ir::Graph piece;
  // The dataset ("data", and "targets" to train), the parameters and, to
  // train, Adam's moments and the update counter.
  ir::TensorMap state;
  // The inputs of item `item`: "item", the index of its batch.
  std::function<ir::TensorMap(int64_t item)> input;
  int64_t items = 0;        // 0: endless
  int64_t rows_per_item = 0;
};

// InvalidArgument for a spec that does not parse (naming the piece), an
// unknown model or key, or sizes out of examples/limits.h's bounds.
absl::StatusOr<ExampleFillJob> MakeExampleFillJob(const std::string& spec, uint64_t seed = 1);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_FILL_JOB_H_
