#include "rpc/step_codec.h"

#include "absl/strings/str_cat.h"
#include "rpc/capnp_text.h"
#include "rpc/program_codec.h"
#include "rpc/status_convert.h"

namespace tandem::rpc {
namespace {

// The Read* functions read every entry of `list`; a malformed message
// throws, which the public Decode* turn into statuses.

absl::StatusOr<ir::StepInputs> ReadStepInputs(capnp::List<wire::NamedTensor>::Reader list, absl::string_view what) {
  ir::StepInputs inputs;
  for (wire::NamedTensor::Reader entry : list) {
    std::string name = ToString(entry.getName());
    absl::StatusOr<ir::HostTensor> tensor = DecodeTensor(entry.getTensor(), absl::StrCat(what, " ", name));
    if (!tensor.ok()) return tensor.status();
    if (!inputs.emplace(ir::InputKey{name, entry.getMicrobatch()}, *std::move(tensor)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", name, " for microbatch ", entry.getMicrobatch(), " is given twice"));
    }
  }
  return inputs;
}

absl::StatusOr<ir::StepResults> ReadStepResults(capnp::List<wire::NamedResult>::Reader list, absl::string_view what) {
  ir::StepResults results;
  for (wire::NamedResult::Reader entry : list) {
    std::string name = ToString(entry.getName());
    absl::StatusOr<ir::HostTensor> tensor = DecodeTensor(entry.getTensor(), absl::StrCat("result ", name, " of ", what));
    if (!tensor.ok()) return tensor.status();
    if (!results[name].emplace(entry.getMicrobatch(), *std::move(tensor)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("result ", name, " for microbatch ", entry.getMicrobatch(), " of ", what, " is given twice"));
    }
  }
  return results;
}

}  // namespace

void EncodeStepInputs(const ir::StepInputs& inputs, capnp::List<wire::NamedTensor>::Builder list) {
  unsigned index = 0;
  for (const auto& [key, tensor] : inputs) {
    list[index].setName(AsText(key.binding));
    list[index].setMicrobatch(key.microbatch);
    EncodeTensor(tensor, list[index].initTensor());
    ++index;
  }
}

absl::StatusOr<ir::StepInputs> DecodeStepInputs(capnp::List<wire::NamedTensor>::Reader list, absl::string_view what) {
  return CatchMalformedMessage(what, [&] { return ReadStepInputs(list, what); });
}

unsigned CountStepResults(const ir::StepResults& results) {
  unsigned count = 0;
  for (const auto& [name, by_microbatch] : results) count += static_cast<unsigned>(by_microbatch.size());
  return count;
}

void EncodeStepResults(const ir::StepResults& results, capnp::List<wire::NamedResult>::Builder list) {
  unsigned index = 0;
  for (const auto& [name, by_microbatch] : results) {
    for (const auto& [microbatch, tensor] : by_microbatch) {
      wire::NamedResult::Builder result = list[index++];
      result.setName(AsText(name));
      result.setMicrobatch(microbatch);
      EncodeTensor(tensor, result.initTensor());
    }
  }
}

absl::StatusOr<ir::StepResults> DecodeStepResults(capnp::List<wire::NamedResult>::Reader list, absl::string_view what) {
  return CatchMalformedMessage(absl::StrCat("results of ", what), [&] { return ReadStepResults(list, what); });
}

}  // namespace tandem::rpc
