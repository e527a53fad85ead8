#include "ir/optimizers.h"

#include <cmath>
#include <numbers>

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

bool LearningRateFits(const Tensor& parameter, absl::string_view optimizer, double learning_rate,
                      const LearningRateSchedule& schedule) {
  if (!CheckSetting(parameter, optimizer, "learning_rate", learning_rate,
                    std::isfinite(learning_rate) && learning_rate > 0, "a finite number above 0") ||
      !CheckSetting(parameter, optimizer, "warmup_steps", static_cast<double>(schedule.warmup_steps),
                    schedule.warmup_steps >= 0, "at least 0")) {
    return false;
  }
  if (schedule.decay == LearningRateSchedule::Decay::kConstant) return true;
  return CheckSetting(parameter, optimizer, "decay_steps", static_cast<double>(schedule.decay_steps),
                      schedule.decay_steps > schedule.warmup_steps,
                      absl::StrCat("above warmup_steps (", schedule.warmup_steps, ")")) &&
         CheckSetting(parameter, optimizer, "min_lr", schedule.min_lr,
                      std::isfinite(schedule.min_lr) && schedule.min_lr >= 0 && schedule.min_lr <= learning_rate,
                      absl::StrCat("in [0, the learning rate ", learning_rate, "]"));
}

// As many invalid tensors as an update returns (the parameter and its slots).
std::vector<Tensor> Invalid(size_t slots) { return std::vector<Tensor>(slots + 1); }

Tensor Minimum(const Tensor& x, double bound) { return -maximum(-x, full(x, {}, -bound)); }

// The learning rate of one update: a double for a constant schedule (so
// that its ops are the ones a constant rate has always traced to), else
// the traced rate at the step.
struct Rate {
  double constant;
  Tensor scheduled;  // valid unless the schedule is constant

  Rate(const Tensor& step, double peak, const LearningRateSchedule& schedule)
      : constant(peak), scheduled(schedule.constant() ? Tensor() : ScheduledLearningRate(step, peak, schedule)) {}
  Tensor Times(const Tensor& x) const { return scheduled.valid() ? x * scheduled : x * constant; }
  Tensor Over(const Tensor& x) const { return scheduled.valid() ? scheduled / x : constant / x; }
};

}  // namespace

std::optional<LearningRateSchedule::Decay> ParseDecay(absl::string_view name) {
  using Decay = LearningRateSchedule::Decay;
  if (name == "constant") return Decay::kConstant;
  if (name == "linear") return Decay::kLinear;
  if (name == "cosine") return Decay::kCosine;
  return std::nullopt;
}

Tensor ScheduledLearningRate(const Tensor& step, double peak, const LearningRateSchedule& s) {
  using Decay = LearningRateSchedule::Decay;
  Tensor rate = full(step, {}, peak);
  if (s.decay != Decay::kConstant) {
    const double span = static_cast<double>(s.decay_steps - s.warmup_steps);
    Tensor progress = (step - static_cast<double>(s.warmup_steps)) * (1.0 / span);
    progress = Minimum(maximum(progress, full(step, {}, 0.0)), 1.0);
    rate = s.decay == Decay::kLinear
               ? peak - progress * (peak - s.min_lr)
               : s.min_lr + (1.0 + cos(progress * std::numbers::pi)) * (0.5 * (peak - s.min_lr));
  }
  if (s.warmup_steps > 0) rate = rate * Minimum(step * (1.0 / static_cast<double>(s.warmup_steps)), 1.0);
  return rate;
}

std::vector<std::string> Sgd::SlotNames() const {
  if (options_.momentum == 0.0) return {};
  return {"momentum"};
}

std::vector<Tensor> Sgd::Update(const UpdateInputs& in) const {
  if (!LearningRateFits(in.parameter, "sgd", options_.learning_rate, options_.schedule) ||
      !CheckSetting(in.parameter, "sgd", "momentum", options_.momentum,
                    std::isfinite(options_.momentum) && options_.momentum >= 0, "a finite number, at least 0")) {
    return Invalid(SlotNames().size());
  }
  const Rate rate(in.step, options_.learning_rate, options_.schedule);
  if (options_.momentum == 0.0) return {in.parameter - rate.Times(in.gradient)};
  Tensor buffer = in.slots[0] * options_.momentum + in.gradient;
  return {in.parameter - rate.Times(buffer), buffer};
}

std::vector<std::string> Adam::SlotNames() const { return {"m", "v"}; }

std::vector<Tensor> Adam::Update(const UpdateInputs& in) const {
  const AdamOptions& o = options_;
  if (!LearningRateFits(in.parameter, "adam", o.learning_rate, o.schedule) ||
      !CheckSetting(in.parameter, "adam", "beta1", o.beta1, o.beta1 >= 0 && o.beta1 < 1, "in [0, 1)") ||
      !CheckSetting(in.parameter, "adam", "beta2", o.beta2, o.beta2 >= 0 && o.beta2 < 1, "in [0, 1)") ||
      !CheckSetting(in.parameter, "adam", "eps", o.eps, std::isfinite(o.eps) && o.eps > 0, "a finite number above 0") ||
      !CheckSetting(in.parameter, "adam", "weight_decay", o.weight_decay,
                    std::isfinite(o.weight_decay) && o.weight_decay >= 0, "a finite number, at least 0")) {
    return Invalid(SlotNames().size());
  }
  const Rate rate(in.step, o.learning_rate, o.schedule);
  Tensor parameter = in.parameter;
  if (o.weight_decay > 0 && parameter.rank() > 1 && !o.no_decay.contains(in.name)) {
    // torch.optim.AdamW: p *= 1 - lr * weight_decay, then the Adam step.
    parameter = parameter * (1.0 - rate.Times(full(parameter, {}, o.weight_decay)));
  }
  Tensor m = in.slots[0] * o.beta1 + in.gradient * (1.0 - o.beta1);
  Tensor v = in.slots[1] * o.beta2 + in.gradient * in.gradient * (1.0 - o.beta2);
  // 1 - beta^t as -expm1(t log beta), with log beta taken in double: beta
  // itself is not exact in f32 (0.999f = 0.99900001), and 1 - pow(beta, t)
  // in f32 would be off by 1e-5 relative, the whole tolerance a comparison
  // with PyTorch (which does this in double) has.
  Tensor bias_correction1 = -expm1(in.step * std::log(o.beta1));
  Tensor bias_correction2 = -expm1(in.step * std::log(o.beta2));
  Tensor step_size = rate.Over(bias_correction1);
  Tensor denominator = sqrt(v) / sqrt(bias_correction2) + o.eps;
  return {parameter - step_size * m / denominator, m, v};
}

}  // namespace tandem
