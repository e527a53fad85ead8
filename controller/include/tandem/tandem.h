// Tandem's controller API: everything a training script needs, in one
// include. Link Tandem::tandem (find_package(Tandem) after `cmake --install`).
//
//  1. Declare the model with the tracing API: a function of a tandem::Tracer
//     that declares parameters (Tracer::Parameter), inputs and labels, and
//     returns the microbatch's scalar loss, built from tandem::Tensor ops
//     (matmul, relu, layer_norm, softmax, cross_entropy, ...: ir/tensor.h)
//     and the layers of ir/layers.h (tandem::layers::Linear, LayerNorm,
//     CausalSelfAttention, GeluMlp), each declaring its parameters in its own
//     name scope (Tracer::Scope). pipeline_yield(x) ends one pipeline stage
//     and begins the next.
//  2. Trace it: tandem::TraceTrainStep(name, model, optimizer, {microbatches})
//     differentiates it and adds the optimizer's update (tandem::Sgd,
//     tandem::Adam: ir/optimizers.h). Errors name the op and the model's
//     file:line.
//  3. Choose a schedule: schedules::ResolveSchedule("1f1b", actors,
//     microbatches) for a built-in one or a .sched/.csv file, the generators
//     of schedules/generators.h, or a schedules::Schedule built in code (a
//     task list per actor; check it with schedules::Validate).
//  4. Run it: tandem::Session::Start(step, schedule) starts one actor process
//     per actor on this host; Session::Step(microbatches) runs a training
//     step and returns each microbatch's loss; Session::State() gathers the
//     parameters; Session::SaveCheckpoint / Session::Resume checkpoint.
//  5. Debug it: tandem::Repl(session, model, options, out, err).Run({}) opens
//     the controller REPL over the running session (controller/repl.h).
//  6. Evaluate on the controller: cpu::EvaluateLosses(step, state, batch);
//     cpu::RunReferenceStep is the single-process reference the pipeline
//     equals bit for bit.
// Every fallible call returns absl::Status(Or): nothing throws. The example
// models (tandem::examples::GptModel, MlpModel), their data and the example
// jobs are not part of this header or library: include <tandem/examples.h>
// and link Tandem::examples for them.
#ifndef TANDEM_TANDEM_H_
#define TANDEM_TANDEM_H_

#include "controller/checkpoint.h"
#include "controller/generation.h"
#include "controller/repl.h"
#include "controller/session.h"
#include "ir/layers.h"
#include "ir/optimizers.h"
#include "ir/trace.h"
#include "ir/tracer.h"
#include "schedules/generators.h"
#include "schedules/resolve.h"
#include "schedules/schedule.h"
#include "schedules/validator.h"

#endif  // TANDEM_TANDEM_H_
