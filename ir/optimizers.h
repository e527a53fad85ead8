// Optimizers, written in the tensor API so that their update is traced into
// the step's `update` graph like any other ops, and a compiler can place each
// parameter's update next to the parameter.
#ifndef TANDEM_IR_OPTIMIZERS_H_
#define TANDEM_IR_OPTIMIZERS_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "ir/tensor.h"

namespace tandem {

// A learning rate as a function of the step number, computed inside the
// traced update from its step input (so that a pipeline, a resumed run and
// the reference all see the same rate at the same step): a linear warmup
// from 0 over `warmup_steps`, then a decay from the peak rate to `min_lr`
// reached at step `decay_steps` and held after it.
struct LearningRateSchedule {
  enum class Decay : uint8_t { kConstant, kLinear, kCosine };
  Decay decay = Decay::kConstant;
  int64_t warmup_steps = 0;  // lr * min(1, t / warmup_steps) during warmup; 0: none
  int64_t decay_steps = 0;   // the step where a decay reaches min_lr (above warmup_steps)
  double min_lr = 0.0;       // the floor a decay ends at, in [0, the peak rate]

  bool constant() const { return decay == Decay::kConstant && warmup_steps == 0; }
};

// "constant", "linear", "cosine"; nullopt for any other name.
std::optional<LearningRateSchedule::Decay> ParseDecay(absl::string_view name);

// The rate at `step` (an f32 scalar, 1 for the first step), traced from
// `step`'s builder:
//   warmup (t < warmup_steps):  peak * t / warmup_steps
//   then, with p = clamp((t - warmup_steps) / (decay_steps - warmup_steps), 0, 1):
//     linear:  peak - (peak - min_lr) p
//     cosine:  min_lr + (peak - min_lr) (1 + cos(pi p)) / 2
// For a constant schedule, a scalar constant of `peak`.
Tensor ScheduledLearningRate(const Tensor& step, double peak, const LearningRateSchedule& schedule);

// What one parameter's update reads: its full name (for per-parameter
// choices such as weight decay), its value, its gradient (already averaged
// over microbatches and, when asked, clipped), its slots in SlotNames()
// order, and the step number (an f32 scalar, 1 for the first step).
struct UpdateInputs {
  std::string name;
  Tensor parameter;
  Tensor gradient;
  std::vector<Tensor> slots;
  Tensor step;
};

// An optimizer keeps zero-initialized slots per parameter (e.g. Adam's m and
// v) and traces one parameter's update. Implementations are immutable and
// thread-compatible.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // "sgd", "adam": prefixes the slot state names ("adam.m.<parameter>").
  virtual std::string name() const = 0;
  virtual std::vector<std::string> SlotNames() const = 0;
  // Traces the update of `in.parameter`. Returns the new parameter, then
  // the new slots. Settings out of their range (a learning rate that is
  // NaN, infinite or not above 0, ...) fail the trace with InvalidArgument
  // naming them.
  virtual std::vector<Tensor> Update(const UpdateInputs& in) const = 0;
};

struct SgdOptions {
  double learning_rate = 0.01;
  double momentum = 0.0;
  LearningRateSchedule schedule;
};

// SGD with heavy-ball momentum, as PyTorch's torch.optim.SGD (dampening 0):
// buffer = momentum * buffer + g; parameter -= learning_rate * buffer.
class Sgd : public Optimizer {
 public:
  explicit Sgd(SgdOptions options) : options_(std::move(options)) {}
  std::string name() const override { return "sgd"; }
  std::vector<std::string> SlotNames() const override;
  std::vector<Tensor> Update(const UpdateInputs& in) const override;

 private:
  SgdOptions options_;
};

struct AdamOptions {
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  LearningRateSchedule schedule;
  // AdamW's decoupled weight decay (Loshchilov & Hutter, 2019), as
  // torch.optim.AdamW: parameter *= 1 - lr * weight_decay before the Adam
  // step. Parameters of rank 1 (norm gains, biases) never decay, nor those
  // named in `no_decay` (a model's embeddings, by choice).
  double weight_decay = 0.0;
  std::set<std::string> no_decay;
};

// Adam (Kingma & Ba, 2015) in the arrangement of torch.optim.Adam:
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),
// with 1 - b^t computed as -expm1(t log b) to keep f32 close to double.
// With weight_decay above 0, AdamW.
class Adam : public Optimizer {
 public:
  explicit Adam(AdamOptions options) : options_(std::move(options)) {}
  std::string name() const override { return "adam"; }
  std::vector<std::string> SlotNames() const override;
  std::vector<Tensor> Update(const UpdateInputs& in) const override;

 private:
  AdamOptions options_;
};

}  // namespace tandem

#endif  // TANDEM_IR_OPTIMIZERS_H_
