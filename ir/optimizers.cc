#include "ir/optimizers.h"

#include <cmath>

namespace tandem {

std::vector<std::string> Sgd::SlotNames() const {
  if (options_.momentum == 0.0) return {};
  return {"momentum"};
}

std::vector<Tensor> Sgd::Update(const Tensor& parameter, const Tensor& gradient,
                                const std::vector<Tensor>& slots, const Tensor& step) const {
  if (options_.momentum == 0.0) return {parameter - gradient * options_.learning_rate};
  Tensor buffer = slots[0] * options_.momentum + gradient;
  return {parameter - buffer * options_.learning_rate, buffer};
}

std::vector<std::string> Adam::SlotNames() const { return {"m", "v"}; }

std::vector<Tensor> Adam::Update(const Tensor& parameter, const Tensor& gradient,
                                 const std::vector<Tensor>& slots, const Tensor& step) const {
  const AdamOptions& o = options_;
  Tensor m = slots[0] * o.beta1 + gradient * (1.0 - o.beta1);
  Tensor v = slots[1] * o.beta2 + gradient * gradient * (1.0 - o.beta2);
  // 1 - beta^t as -expm1(t log beta), with log beta taken in double: beta
  // itself is not exact in f32 (0.999f = 0.99900001), and 1 - pow(beta, t)
  // in f32 would be off by 1e-5 relative, the whole tolerance a comparison
  // with PyTorch (which does this in double) has.
  Tensor bias_correction1 = -expm1(step * std::log(o.beta1));
  Tensor bias_correction2 = -expm1(step * std::log(o.beta2));
  Tensor step_size = o.learning_rate / bias_correction1;
  Tensor denominator = sqrt(v) / sqrt(bias_correction2) + o.eps;
  return {parameter - step_size * m / denominator, m, v};
}

}  // namespace tandem
