// Fuzz target: ir::ParseSafetensorsHeader, what `tandem train --import`
// reads of a safetensors file from elsewhere. The input is a whole file: an
// 8-byte little-endian header length, the header, then the data, framed as
// ir::IndexSafetensors frames it. Beyond not crashing: a refusal is
// InvalidArgument naming the file; what parses tiles the data exactly, in
// order, each tensor's bytes matching its type.
#include <cstddef>
#include <cstdint>

#include "absl/strings/match.h"
#include "ir/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

namespace tandem::ir {
namespace {

void Run(const uint8_t* data, size_t size) {
  if (size < 8) return;
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | data[i];
  if (header_bytes > size - 8) return;  // IndexSafetensors refuses it before reading
  const absl::string_view header(reinterpret_cast<const char*>(data) + 8, header_bytes);
  const uint64_t data_bytes = size - 8 - header_bytes;
  absl::StatusOr<std::vector<SafetensorsEntry>> entries = ParseSafetensorsHeader(header, data_bytes, "fuzz.safetensors");
  if (!entries.ok()) {
    fuzz::FuzzCheck(entries.status().code() == absl::StatusCode::kInvalidArgument,
                    "unexpected error code: " + entries.status().ToString());
    fuzz::FuzzCheck(absl::StrContains(entries.status().message(), "fuzz.safetensors"),
                    "error does not name the file: " + entries.status().ToString());
    return;
  }
  uint64_t covered = 0;
  for (const SafetensorsEntry& entry : *entries) {
    fuzz::FuzzCheck(entry.offset >= 0 && static_cast<uint64_t>(entry.offset) == covered, "a gap or an overlap");
    covered += static_cast<uint64_t>(entry.type.num_bytes());
  }
  fuzz::FuzzCheck(covered == data_bytes, "the tensors do not cover the data");
}

}  // namespace
}  // namespace tandem::ir

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::ir::Run(data, size);
  return 0;
}
