// Fuzz target: the state-file reader (ir::DecodeStateFile), which reads the
// per-actor files of a checkpoint from disk. Beyond not crashing: errors
// are InvalidArgument naming the file; what decodes encodes and decodes
// back to equal tensors.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "ir/state_file.h"
#include "tests/fuzz/fuzz_support.h"

namespace tandem::ir {
namespace {

constexpr char kFile[] = "fuzz.state";

bool Equal(const TensorMap& a, const TensorMap& b) {
  if (a.size() != b.size()) return false;
  for (auto it = a.begin(), jt = b.begin(); it != a.end(); ++it, ++jt) {
    if (it->first != jt->first || !it->second.BitwiseEquals(jt->second)) return false;
  }
  return true;
}

void Run(absl::string_view bytes) {
  absl::StatusOr<TensorMap> tensors = DecodeStateFile(bytes, kFile);
  if (!tensors.ok()) {
    fuzz::FuzzCheck(tensors.status().code() == absl::StatusCode::kInvalidArgument ||
                        tensors.status().code() == absl::StatusCode::kResourceExhausted,
                    "unexpected error code: " + tensors.status().ToString());
    fuzz::FuzzCheck(absl::StrContains(tensors.status().message(), kFile),
                    "error does not name the file: " + tensors.status().ToString());
    return;
  }
  const std::string encoded = EncodeStateFile(*tensors);
  absl::StatusOr<TensorMap> decoded = DecodeStateFile(encoded, kFile);
  fuzz::FuzzCheck(decoded.ok(), "an encoded state file does not decode: " + decoded.status().ToString());
  fuzz::FuzzCheck(Equal(*decoded, *tensors), "encode then decode changed the tensors");
}

}  // namespace
}  // namespace tandem::ir

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::ir::Run(tandem::fuzz::AsText(data, size));
  return 0;
}
