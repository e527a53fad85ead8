// Tracing a model into a TrainStep (or a forward-only step).
#ifndef TANDEM_IR_TRACE_H_
#define TANDEM_IR_TRACE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "ir/optimizers.h"
#include "ir/tracer.h"
#include "ir/train_step.h"

namespace tandem {

// A model: declares its parameters and inputs on the tracer and returns the
// microbatch's scalar loss (or, for a forward-only step, its output).
using ModelFunction = std::function<Tensor(Tracer&)>;

// How the microbatch loop updates the weights (ir/train_step.h,
// schedules/FORMAT.md "Asynchronous pipelines").
struct WeightUpdates {
  enum class Mode : uint8_t {
    kFlush,      // one update after all microbatches: synchronous training
    kPipeDream,  // an update per microbatch; stage s of p computes on the weights of p-1-s updates ago
    kTwoBuffer,  // PipeDream-2BW: an update every `every` microbatches, on gradients of the previous version
  };
  Mode mode = Mode::kFlush;
  int32_t every = 0;  // kTwoBuffer: microbatches per update, dividing num_microbatches
};

struct TraceOptions {
  int32_t num_microbatches = 1;  // per replica
  // Data-parallel replicas of the pipeline: the update averages over all
  // num_replicas * num_microbatches microbatches of the global batch.
  int32_t num_replicas = 1;
  uint64_t seed = 0;  // mixed into every parameter initializer's seed
  WeightUpdates updates;
  // Clip the gradients by their global norm across every stage and replica
  // to at most this (ir/train_step.h `norm`); 0: no clipping. Synchronous
  // steps only.
  double clip_grad_norm = 0;
  // A step whose global gradient norm is not a finite number (a NaN or an
  // infinity in any stage's gradients) leaves every parameter and optimizer
  // slot as it was, instead of updating them with it. Synchronous steps
  // only. Every synchronous step computes each stage's part of the norm
  // (ir/train_step.h `norm`), for whoever runs it to see; this makes the
  // update read them too.
  bool skip_nonfinite_updates = false;
};

// Traces `model` once, differentiates it, and traces `optimizer`'s update
// (see ir/train_step.h for the structure). Errors from the model (shape and
// dtype mismatches, parameters declared twice or never declared) come back
// as InvalidArgument naming the op and the model's file:line. Asynchronous
// `updates` need one replica, a chain of stages and, under PipeDream, each
// parameter on one stage, and neither clip gradients nor skip non-finite
// updates; InvalidArgument says which is missing.
absl::StatusOr<ir::TrainStep> TraceTrainStep(const std::string& name, const ModelFunction& model,
                                             const Optimizer& optimizer,
                                             const TraceOptions& options = {});

// Traces `model` without a backward or update: an inference pipeline. The
// microbatch graph's single output is named "output".
absl::StatusOr<ir::TrainStep> TraceForwardStep(const std::string& name, const ModelFunction& model,
                                               const TraceOptions& options = {});

}  // namespace tandem

#endif  // TANDEM_IR_TRACE_H_
