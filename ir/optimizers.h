// Optimizers, written in the tensor API so that their update is traced into
// the step's `update` graph like any other ops, and a compiler can place each
// parameter's update next to the parameter.
#ifndef TANDEM_IR_OPTIMIZERS_H_
#define TANDEM_IR_OPTIMIZERS_H_

#include <string>
#include <vector>

#include "ir/tensor.h"

namespace tandem {

// An optimizer keeps zero-initialized slots per parameter (e.g. Adam's m and
// v) and traces one parameter's update. Implementations are immutable and
// thread-compatible.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // "sgd", "adam": prefixes the slot state names ("adam.m.<parameter>").
  virtual std::string name() const = 0;
  virtual std::vector<std::string> SlotNames() const = 0;
  // Traces the update of `parameter` given its gradient (already averaged
  // over microbatches), its slots (in SlotNames() order) and the 1-based step
  // number (an f32 scalar). Returns the new parameter, then the new slots.
  // Settings out of their range (a learning rate that is NaN, infinite or
  // not above 0, ...) fail the trace with InvalidArgument naming them.
  virtual std::vector<Tensor> Update(const Tensor& parameter, const Tensor& gradient,
                                     const std::vector<Tensor>& slots, const Tensor& step) const = 0;
};

struct SgdOptions {
  double learning_rate = 0.01;
  double momentum = 0.0;
};

// SGD with heavy-ball momentum, as PyTorch's torch.optim.SGD (dampening 0):
// buffer = momentum * buffer + g; parameter -= learning_rate * buffer.
class Sgd : public Optimizer {
 public:
  explicit Sgd(SgdOptions options) : options_(options) {}
  std::string name() const override { return "sgd"; }
  std::vector<std::string> SlotNames() const override;
  std::vector<Tensor> Update(const Tensor& parameter, const Tensor& gradient,
                             const std::vector<Tensor>& slots, const Tensor& step) const override;

 private:
  SgdOptions options_;
};

struct AdamOptions {
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

// Adam (Kingma & Ba, 2015) in the arrangement of torch.optim.Adam:
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),
// with 1 - b^t computed as -expm1(t log b) to keep f32 close to double.
class Adam : public Optimizer {
 public:
  explicit Adam(AdamOptions options) : options_(options) {}
  std::string name() const override { return "adam"; }
  std::vector<std::string> SlotNames() const override;
  std::vector<Tensor> Update(const Tensor& parameter, const Tensor& gradient,
                             const std::vector<Tensor>& slots, const Tensor& step) const override;

 private:
  AdamOptions options_;
};

}  // namespace tandem

#endif  // TANDEM_IR_OPTIMIZERS_H_
