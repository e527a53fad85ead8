// Fuzz target: the checkpoint MANIFEST parser
// (controller::ParseCheckpointManifest), which reads what a resumed job
// finds on disk. Beyond not crashing: errors are DataLoss naming the file;
// what parses prints and parses back to the same manifest.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "controller/checkpoint.h"
#include "tests/fuzz/fuzz_support.h"

namespace tandem::controller {
namespace {

constexpr char kFile[] = "ck/step-00000010/MANIFEST";

void Run(absl::string_view text) {
  absl::StatusOr<CheckpointManifest> manifest = ParseCheckpointManifest(text, kFile);
  if (!manifest.ok()) {
    fuzz::FuzzCheck(manifest.status().code() == absl::StatusCode::kDataLoss,
                    "unexpected error code: " + manifest.status().ToString());
    fuzz::FuzzCheck(absl::StrContains(manifest.status().message(), kFile),
                    "error does not name the file: " + manifest.status().ToString());
    return;
  }
  absl::StatusOr<CheckpointManifest> again = ParseCheckpointManifest(PrintCheckpointManifest(*manifest), kFile);
  fuzz::FuzzCheck(again.ok(), "a printed manifest does not parse: " + again.status().ToString());
  fuzz::FuzzCheck(*again == *manifest, "print then parse changed the manifest");
}

}  // namespace
}  // namespace tandem::controller

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::controller::Run(tandem::fuzz::AsText(data, size));
  return 0;
}
