// Fuzz target: the control plane's step decoders (rpc::DecodeStepInputs,
// rpc::DecodeStepOutputs, and through them rpc::DecodeTensor): what an
// actor reads from runStep and the controller from the actors' replies. The input is a Cap'n Proto message read with the connection's
// limits; its root is read both as runStep's parameters (the inputs) and as
// its results (the same layout: the first pointer is the list). Beyond not
// crashing: the decoders never throw and fail only with InvalidArgument;
// what decodes encodes and decodes back to equal tensors.
#include <cstddef>
#include <cstdint>

#include "capnp/message.h"
#include "rpc/connection.h"
#include "rpc/step_codec.h"
#include "tests/fuzz/fuzz_support.h"

namespace tandem::rpc {
namespace {

bool Equal(const ir::StepInputs& a, const ir::StepInputs& b) {
  if (a.size() != b.size()) return false;
  for (auto it = a.begin(), jt = b.begin(); it != a.end(); ++it, ++jt) {
    if (it->first != jt->first || !it->second.BitwiseEquals(jt->second)) return false;
  }
  return true;
}

void CheckError(const absl::Status& status) {
  fuzz::FuzzCheck(status.code() == absl::StatusCode::kInvalidArgument, "unexpected error code: " + status.ToString());
}

void RunInputs(fuzz::FramedMessage& message) {
  std::optional<wire::Actor::RunStepParams::Reader> params = message.GetRoot<wire::Actor::RunStepParams>();
  if (!params.has_value()) return;
  auto inputs = fuzz::ReadOrSkip([&] { return params->getInputs(); });
  if (!inputs.has_value()) return;
  absl::StatusOr<ir::StepInputs> tensors = DecodeStepInputs(*inputs, "input");
  if (!tensors.ok()) return CheckError(tensors.status());
  capnp::MallocMessageBuilder builder;
  auto list = builder.initRoot<wire::Actor::RunStepParams>().initInputs(static_cast<unsigned>(tensors->size()));
  EncodeStepInputs(*tensors, list);
  absl::StatusOr<ir::StepInputs> decoded = DecodeStepInputs(list.asReader(), "input");
  fuzz::FuzzCheck(decoded.ok(), "encoded tensors do not decode: " + decoded.status().ToString());
  fuzz::FuzzCheck(Equal(*decoded, *tensors), "encode then decode changed the tensors");
}

void RunOutputs(fuzz::FramedMessage& message) {
  std::optional<wire::Actor::RunStepResults::Reader> reply = message.GetRoot<wire::Actor::RunStepResults>();
  if (!reply.has_value()) return;
  absl::StatusOr<ir::StepOutputs> decoded = DecodeStepOutputs(*reply, "step 1");
  if (!decoded.ok()) return CheckError(decoded.status());
  capnp::MallocMessageBuilder builder;
  EncodeStepOutputs(*decoded, builder.initRoot<wire::Actor::RunStepResults>());
  absl::StatusOr<ir::StepOutputs> again =
      DecodeStepOutputs(builder.getRoot<wire::Actor::RunStepResults>().asReader(), "step 1");
  fuzz::FuzzCheck(again.ok(), "encoded outputs do not decode: " + again.status().ToString());
  fuzz::FuzzCheck(again->results.size() == decoded->results.size() && again->timings == decoded->timings &&
                      again->peak_live_bytes == decoded->peak_live_bytes && again->origin_ns == decoded->origin_ns,
                  "encode then decode changed the outputs");
}

}  // namespace
}  // namespace tandem::rpc

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::fuzz::FramedMessage message(data, size, tandem::rpc::ToReaderOptions(tandem::rpc::ConnectionLimits{}));
  tandem::rpc::RunInputs(message);
  tandem::rpc::RunOutputs(message);
  return 0;
}
