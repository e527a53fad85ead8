#include "ir/optimizers.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

// Records InvalidArgument on the parameter's trace unless `value` lies in
// its range; the trace then stops there, as for a shape error.
bool CheckSetting(const Tensor& parameter, absl::string_view optimizer, absl::string_view name, double value,
                  bool valid, absl::string_view range) {
  if (valid) return true;
  if (parameter.builder() != nullptr) {
    const ir::SourceLocation location = parameter.valid()
                                            ? parameter.builder()->graph().node(parameter.id()).location
                                            : ir::SourceLocation{};
    parameter.builder()->Fail(location, absl::StrCat(optimizer, ": ", name, " ", value, " must be ", range));
  }
  return false;
}

bool LearningRateFits(const Tensor& parameter, absl::string_view optimizer, double learning_rate) {
  return CheckSetting(parameter, optimizer, "learning_rate", learning_rate,
                      std::isfinite(learning_rate) && learning_rate > 0, "a finite number above 0");
}

// As many invalid tensors as an update returns (the parameter and its slots).
std::vector<Tensor> Invalid(size_t slots) { return std::vector<Tensor>(slots + 1); }

}  // namespace

std::vector<std::string> Sgd::SlotNames() const {
  if (options_.momentum == 0.0) return {};
  return {"momentum"};
}

std::vector<Tensor> Sgd::Update(const Tensor& parameter, const Tensor& gradient,
                                const std::vector<Tensor>& slots, const Tensor& step) const {
  if (!LearningRateFits(parameter, "sgd", options_.learning_rate) ||
      !CheckSetting(parameter, "sgd", "momentum", options_.momentum,
                    std::isfinite(options_.momentum) && options_.momentum >= 0, "a finite number, at least 0")) {
    return Invalid(SlotNames().size());
  }
  if (options_.momentum == 0.0) return {parameter - gradient * options_.learning_rate};
  Tensor buffer = slots[0] * options_.momentum + gradient;
  return {parameter - buffer * options_.learning_rate, buffer};
}

std::vector<std::string> Adam::SlotNames() const { return {"m", "v"}; }

std::vector<Tensor> Adam::Update(const Tensor& parameter, const Tensor& gradient,
                                 const std::vector<Tensor>& slots, const Tensor& step) const {
  const AdamOptions& o = options_;
  if (!LearningRateFits(parameter, "adam", o.learning_rate) ||
      !CheckSetting(parameter, "adam", "beta1", o.beta1, o.beta1 >= 0 && o.beta1 < 1, "in [0, 1)") ||
      !CheckSetting(parameter, "adam", "beta2", o.beta2, o.beta2 >= 0 && o.beta2 < 1, "in [0, 1)") ||
      !CheckSetting(parameter, "adam", "eps", o.eps, std::isfinite(o.eps) && o.eps > 0, "a finite number above 0")) {
    return Invalid(SlotNames().size());
  }
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
