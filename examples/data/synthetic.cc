#include "examples/data/synthetic.h"

#include <vector>

namespace tandem::examples {

ir::TensorMap ClassificationBatch(const MlpConfig& c, uint64_t seed, uint64_t index) {
  using Kind = ir::Initializer::Kind;
  // MakeExampleJob bounds the sizes: these are small.
  ir::HostTensor x = *ir::MakeTensor({ir::DType::kF32, {c.batch_size, c.input_dim}},
                                     {Kind::kNormal, 0.0, 1.0, seed * 7919 + index + 1});
  ir::HostTensor teacher = *ir::MakeTensor({ir::DType::kF32, {c.input_dim, c.num_classes}},
                                           {Kind::kNormal, 0.0, 1.0, seed});
  std::vector<int32_t> labels(c.batch_size);
  for (int64_t b = 0; b < c.batch_size; ++b) {
    int32_t best = 0;
    float best_score = 0;
    for (int64_t k = 0; k < c.num_classes; ++k) {
      float score = 0;
      for (int64_t i = 0; i < c.input_dim; ++i) score += x.f32()[b * c.input_dim + i] * teacher.f32()[i * c.num_classes + k];
      if (k == 0 || score > best_score) {
        best = static_cast<int32_t>(k);
        best_score = score;
      }
    }
    labels[b] = best;
  }
  return {{"x", x}, {"labels", ir::HostTensor::FromInts({c.batch_size}, labels)}};
}

}  // namespace tandem::examples
