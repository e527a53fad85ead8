#include "examples/data/synthetic.h"

#include <vector>

namespace tandem::examples {

std::vector<int32_t> TeacherLabels(const ir::HostTensor& x, int64_t classes, uint64_t teacher_seed) {
  const int64_t batch = x.type().shape.at(0);
  const int64_t dim = x.type().shape.at(1);
  ir::HostTensor teacher = *ir::MakeTensor({ir::DType::kF32, {dim, classes}},
                                           {ir::Initializer::Kind::kNormal, 0.0, 1.0, teacher_seed});
  std::vector<int32_t> labels(batch);
  for (int64_t b = 0; b < batch; ++b) {
    int32_t best = 0;
    float best_score = 0;
    for (int64_t k = 0; k < classes; ++k) {
      float score = 0;
      for (int64_t i = 0; i < dim; ++i) score += x.f32()[b * dim + i] * teacher.f32()[i * classes + k];
      if (k == 0 || score > best_score) {
        best = static_cast<int32_t>(k);
        best_score = score;
      }
    }
    labels[b] = best;
  }
  return labels;
}

ir::TensorMap ClassificationBatch(const MlpConfig& c, uint64_t seed, uint64_t index) {
  // MakeExampleJob bounds the sizes: these are small.
  ir::HostTensor x = *ir::MakeTensor({ir::DType::kF32, {c.batch_size, c.input_dim}},
                                     {ir::Initializer::Kind::kNormal, 0.0, 1.0, seed * 7919 + index + 1});
  const std::vector<int32_t> labels = TeacherLabels(x, c.num_classes, seed);
  return {{"x", x}, {"labels", ir::HostTensor::FromInts({c.batch_size}, labels)}};
}

ir::TensorMap ClassificationDataset(const MlpConfig& c, uint64_t seed, int64_t batches) {
  const int64_t row = c.batch_size * c.input_dim;
  std::vector<float> data, targets;
  data.reserve(static_cast<size_t>(batches * row));
  targets.reserve(static_cast<size_t>(batches * c.batch_size));
  for (int64_t b = 0; b < batches; ++b) {
    const ir::TensorMap batch = ClassificationBatch(c, seed, static_cast<uint64_t>(b));
    const ir::HostTensor& x = batch.at("x");
    data.insert(data.end(), x.f32(), x.f32() + row);
    const ir::HostTensor& labels = batch.at("labels");
    for (int64_t k = 0; k < c.batch_size; ++k) targets.push_back(static_cast<float>(labels.i32()[k]));
  }
  return {{"data", ir::HostTensor::FromFloats({batches, row}, std::move(data))},
          {"targets", ir::HostTensor::FromFloats({batches, c.batch_size}, std::move(targets))}};
}

}  // namespace tandem::examples
