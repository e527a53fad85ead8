#include "rpc/step_codec.h"

#include "absl/strings/str_cat.h"
#include "rpc/program_codec.h"

namespace tandem::rpc {
namespace {

std::string ToString(capnp::Text::Reader text) { return std::string(text.cStr(), text.size()); }

}  // namespace

void EncodeNamedTensors(const NamedTensors& tensors, capnp::List<wire::NamedTensor>::Builder list) {
  unsigned index = 0;
  for (const auto& [key, tensor] : tensors) {
    list[index].setName(key.first);
    list[index].setMicrobatch(key.second);
    EncodeTensor(tensor, list[index].initTensor());
    ++index;
  }
}

void EncodeNamedTensors(const std::map<std::string, ir::HostTensor>& tensors,
                        capnp::List<wire::NamedTensor>::Builder list) {
  unsigned index = 0;
  for (const auto& [name, tensor] : tensors) {
    list[index].setName(name);
    list[index].setMicrobatch(-1);
    EncodeTensor(tensor, list[index].initTensor());
    ++index;
  }
}

absl::StatusOr<NamedTensors> DecodeNamedTensors(capnp::List<wire::NamedTensor>::Reader list, absl::string_view what) {
  NamedTensors tensors;
  for (wire::NamedTensor::Reader entry : list) {
    std::string name = ToString(entry.getName());
    absl::StatusOr<ir::HostTensor> tensor = DecodeTensor(entry.getTensor(), absl::StrCat(what, " ", name));
    if (!tensor.ok()) return tensor.status();
    if (!tensors.emplace(std::make_pair(name, entry.getMicrobatch()), *std::move(tensor)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", name, " for microbatch ", entry.getMicrobatch(), " is given twice"));
    }
  }
  return tensors;
}

unsigned CountNamedResults(const NamedResults& results) {
  unsigned count = 0;
  for (const auto& [name, by_microbatch] : results) count += static_cast<unsigned>(by_microbatch.size());
  return count;
}

void EncodeNamedResults(const NamedResults& results, capnp::List<wire::NamedResult>::Builder list) {
  unsigned index = 0;
  for (const auto& [name, by_microbatch] : results) {
    for (const auto& [microbatch, tensor] : by_microbatch) {
      wire::NamedResult::Builder result = list[index++];
      result.setName(name);
      result.setMicrobatch(microbatch);
      EncodeTensor(tensor, result.initTensor());
    }
  }
}

absl::StatusOr<NamedResults> DecodeNamedResults(capnp::List<wire::NamedResult>::Reader list, absl::string_view what) {
  NamedResults results;
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

}  // namespace tandem::rpc
