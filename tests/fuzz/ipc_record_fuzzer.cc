// Fuzz target: ipc::ParseRecord and its RecordReader, which read the host
// records a CUDA IPC peer sends (actor/ipc_record.h). The input is the
// record's words (an i32 vector). Beyond not crashing: a refusal is
// DataLoss naming the peer; a record that parses can be read word by word
// to its end and past it without reading out of bounds.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "actor/ipc_record.h"
#include "tests/fuzz/fuzz_support.h"

namespace tandem::actor::ipc {
namespace {

constexpr int32_t kPeer = 3;
constexpr int32_t kSelf = 5;

void Run(const uint8_t* data, size_t size) {
  const size_t words = size / sizeof(int32_t);
  std::vector<int32_t> values(words);
  if (words > 0) std::memcpy(values.data(), data, words * sizeof(int32_t));
  std::vector<ir::HostTensor> tensors;
  // The first byte beyond the words chooses an odd shape now and then: no
  // tensor, two tensors, or an f32 one, which a peer may send too.
  const uint8_t shape = size % sizeof(int32_t) != 0 ? data[size - 1] : 0;
  if (shape % 7 != 1) {
    tensors.push_back(ir::HostTensor::FromInts({static_cast<int64_t>(values.size())}, values));
  }
  if (shape % 7 == 2) tensors.push_back(ir::HostTensor::FromInts({1}, {0}));
  if (shape % 7 == 3) tensors = {ir::HostTensor::FromFloats({1}, {1.0f})};
  absl::StatusOr<std::vector<int32_t>> record = ParseRecord(tensors, kPeer, kSelf);
  if (!record.ok()) {
    fuzz::FuzzCheck(record.status().code() == absl::StatusCode::kDataLoss,
                    "unexpected error code: " + record.status().ToString());
    fuzz::FuzzCheck(absl::StrContains(record.status().message(), "actor 3"),
                    "error does not name the peer: " + record.status().ToString());
    return;
  }
  fuzz::FuzzCheck(record->size() >= kRecordHeadWords, "a parsed record shorter than its head");
  (void)KindOf(*record);
  // Reading every field kind, past the end too, stays in bounds and says so.
  RecordReader reader(*record);
  for (size_t i = 0; i < record->size() + 4; ++i) {
    (void)reader.Get32();
    (void)reader.Get64();
    (void)reader.GetHandle<backends::IpcMemHandle>();
  }
  fuzz::FuzzCheck(!reader.ok(), "reading past a record's end did not say so");
}

}  // namespace
}  // namespace tandem::actor::ipc

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::actor::ipc::Run(data, size);
  return 0;
}
