// The tensors of step calls on the wire (rpc/tandem.capnp): a step's inputs
// as NamedTensor lists (state has its own codec, rpc/state_codec.h), and what an actor reports
// after a step (ir::StepOutputs) as a runStep or runRange reply. Shared by
// the controller's launcher and the actor's service so that both ends read
// and write the same shape.
//
// Pure functions; thread-safe. Decoding validates every tensor
// (DecodeTensor) and refuses a (name, microbatch) given twice: an
// InvalidArgument naming `what` and the entry.
#ifndef TANDEM_RPC_STEP_CODEC_H_
#define TANDEM_RPC_STEP_CODEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "ir/host_tensor.h"
#include "ir/limits.h"
#include "ir/step_io.h"
#include "rpc/status_convert.h"
#include "rpc/tandem.capnp.h"

namespace tandem::rpc {

// `list` must have been initialized to inputs.size() entries.
void EncodeStepInputs(const ir::StepInputs& inputs, capnp::List<wire::NamedTensor>::Builder list);
absl::StatusOr<ir::StepInputs> DecodeStepInputs(capnp::List<wire::NamedTensor>::Reader list, absl::string_view what);

// The number of entries EncodeStepResults writes (init the list with it).
unsigned CountStepResults(const ir::StepResults& results);
void EncodeStepResults(const ir::StepResults& results, capnp::List<wire::NamedResult>::Builder list);
absl::StatusOr<ir::StepResults> DecodeStepResults(capnp::List<wire::NamedResult>::Reader list, absl::string_view what);

// A runStep or runRange reply (their result structs have the same fields):
// results, peak bytes, timings relative to `startNanos` = origin_ns, the
// time outside the instructions (inputsNanos, settleNanos). The
// dispatch-call count is the launcher's, not on the wire.
template <typename ReplyBuilder>
void EncodeStepOutputs(const ir::StepOutputs& outputs, ReplyBuilder reply) {
  EncodeStepResults(outputs.results, reply.initResults(CountStepResults(outputs.results)));
  reply.setPeakLiveBytes(outputs.peak_live_bytes);
  reply.setDevicePeakBytes(outputs.device_peak_bytes);
  reply.setStartNanos(outputs.origin_ns);
  reply.setInputsNanos(outputs.inputs_ns);
  reply.setSettleNanos(outputs.settle_ns);
  auto timings = reply.initTimings(static_cast<unsigned>(outputs.timings.size()));
  for (unsigned i = 0; i < outputs.timings.size(); ++i) {
    timings[i].setInstruction(outputs.timings[i].instruction);
    timings[i].setStartNanos(outputs.timings[i].start_ns);
    timings[i].setDurationNanos(outputs.timings[i].duration_ns);
  }
}

template <typename ReplyReader>
absl::StatusOr<ir::StepOutputs> DecodeStepOutputs(const ReplyReader& reply, absl::string_view what) {
  return CatchMalformedMessage(what, [&]() -> absl::StatusOr<ir::StepOutputs> {
    ir::StepOutputs outputs;
    absl::StatusOr<ir::StepResults> results = DecodeStepResults(reply.getResults(), what);
    if (!results.ok()) return results.status();
    outputs.results = *std::move(results);
    outputs.peak_live_bytes = reply.getPeakLiveBytes();
    outputs.device_peak_bytes = reply.getDevicePeakBytes();
    outputs.origin_ns = reply.getStartNanos();
    outputs.inputs_ns = reply.getInputsNanos();
    outputs.settle_ns = reply.getSettleNanos();
    // A timing per instruction at most: bounded before it is allocated.
    if (reply.getTimings().size() > ir::kMaxProgramInstructions) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", reply.getTimings().size(),
                                                     " instruction timings is more than the ",
                                                     ir::kMaxProgramInstructions, " instructions a program may have"));
    }
    outputs.timings.reserve(reply.getTimings().size());
    for (wire::InstructionTiming::Reader timing : reply.getTimings()) {
      outputs.timings.push_back({timing.getInstruction(), timing.getStartNanos(), timing.getDurationNanos()});
    }
    return outputs;
  });
}

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_STEP_CODEC_H_
