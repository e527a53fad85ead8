// The first values of state: tensors filled by their seeded initializers
// (ir/train_step.h's Initializer), the same bits on every run and host.
// What an actor generates its state from (ir/state_source.h) and what the
// reference starts from.
#ifndef TANDEM_IR_INITIAL_STATE_H_
#define TANDEM_IR_INITIAL_STATE_H_

#include "absl/status/statusor.h"
#include "ir/host_tensor.h"
#include "ir/train_step.h"

namespace tandem::ir {

// A tensor of `type` (f32) filled by `initializer`: the same arguments give
// the same bits on every run. The errors of HostTensor::Allocate.
absl::StatusOr<HostTensor> MakeTensor(const TensorType& type, const Initializer& initializer);
// The first value of a state tensor, from its seeded initializer.
inline absl::StatusOr<HostTensor> InitialValue(const StateSpec& spec) { return MakeTensor(spec.type, spec.init); }
// InitialValue of every state tensor of `step`, by name; ResourceExhausted
// naming the tensor when one cannot be allocated.
absl::StatusOr<TensorMap> InitialState(const TrainStep& step);

}  // namespace tandem::ir

#endif  // TANDEM_IR_INITIAL_STATE_H_
