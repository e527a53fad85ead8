#include "ir/device_spec.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace tandem::ir {
namespace {

absl::Status BadSpec(absl::string_view text) {
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown device '", text, "': expected cpu, cuda or cuda:N (either with +tf32 or +bf16), or fake-cuda or fake-cuda/N (1 <= N <= ",
      kMaxFakeGpus, " emulated GPUs per host)"));
}

}  // namespace

absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text) {
  DeviceSpec spec;
  if (text == "cpu") return spec;
  absl::string_view rest = text;
  if (absl::ConsumePrefix(&rest, "fake-cuda")) {
    spec.kind = DeviceSpec::Kind::kFakeCuda;
    if (rest.empty()) return spec;
    if (!absl::ConsumePrefix(&rest, "/") || rest.empty() || rest[0] == '+' || rest[0] == '-' ||
        !absl::SimpleAtoi(rest, &spec.fake_gpus) || spec.fake_gpus < 1 || spec.fake_gpus > kMaxFakeGpus) {
      return BadSpec(text);
    }
    return spec;
  }
  if (!absl::ConsumePrefix(&rest, "cuda")) return BadSpec(text);
  spec.kind = DeviceSpec::Kind::kCuda;
  if (absl::ConsumeSuffix(&rest, "+bf16")) {
    spec.precision = DeviceSpec::Precision::kBf16;
  } else if (absl::ConsumeSuffix(&rest, "+tf32")) {
    spec.precision = DeviceSpec::Precision::kTf32;
  }
  if (rest.empty()) return spec;
  int index = -1;
  if (!absl::ConsumePrefix(&rest, ":") || rest.empty() || rest[0] == '+' || rest[0] == '-' ||
      !absl::SimpleAtoi(rest, &index) || index < 0) {
    return BadSpec(text);
  }
  spec.index = index;
  return spec;
}

std::string DeviceSpecName(const DeviceSpec& spec) {
  if (spec.kind == DeviceSpec::Kind::kCpu) return "cpu";
  if (spec.kind == DeviceSpec::Kind::kFakeCuda) {
    return spec.fake_gpus == 1 ? "fake-cuda" : absl::StrCat("fake-cuda/", spec.fake_gpus);
  }
  std::string name = spec.index < 0 ? "cuda" : absl::StrCat("cuda:", spec.index);
  if (spec.precision == DeviceSpec::Precision::kTf32) absl::StrAppend(&name, "+tf32");
  if (spec.precision == DeviceSpec::Precision::kBf16) absl::StrAppend(&name, "+bf16");
  return name;
}

bool ActorsShareDevice(const DeviceSpec& spec, int32_t a, int32_t b, int visible) {
  switch (spec.kind) {
    case DeviceSpec::Kind::kCpu:
      return false;
    case DeviceSpec::Kind::kFakeCuda:
      return GpuForRank(a, spec.fake_gpus) == GpuForRank(b, spec.fake_gpus);
    case DeviceSpec::Kind::kCuda:
      return spec.index >= 0 || GpuForRank(a, visible) == GpuForRank(b, visible);
  }
  return false;
}

int GpuForRank(int32_t rank, int visible) { return visible > 0 ? std::max(rank, 0) % visible : 0; }

}  // namespace tandem::ir
