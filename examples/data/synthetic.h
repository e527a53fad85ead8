// A synthetic classification task for the example MLP: inputs drawn from a
// standard normal, labelled by a fixed random linear "teacher" (the argmax of
// x W), so a model can learn it.
#ifndef TANDEM_EXAMPLES_DATA_SYNTHETIC_H_
#define TANDEM_EXAMPLES_DATA_SYNTHETIC_H_

#include <cstdint>
#include <vector>

#include "examples/models/mlp.h"
#include "ir/initial_state.h"

namespace tandem::examples {

// "x" f32 [batch_size, input_dim] and "labels" i32 [batch_size]; the same
// (config, seed, index) gives the same batch.
ir::TensorMap ClassificationBatch(const MlpConfig& config, uint64_t seed, uint64_t index);

// Batches 0 .. batches-1 of ClassificationBatch(config, seed, index) as one
// dataset (MlpDatasetModel's inputs): "data" f32 [batches, batch_size *
// input_dim] and "targets" f32 [batches, batch_size], the labels as floats.
ir::TensorMap ClassificationDataset(const MlpConfig& config, uint64_t seed, int64_t batches);

// The label of each row of `x` (f32 [batch, dim]): the argmax over
// `classes` of x W, for the teacher W f32 [dim, classes] drawn from a
// standard normal with `teacher_seed` (the first class on a tie).
std::vector<int32_t> TeacherLabels(const ir::HostTensor& x, int64_t classes, uint64_t teacher_seed);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_DATA_SYNTHETIC_H_
