// The records IpcTransport (ipc_transport.h) and NcclTransport
// (nccl_transport.h) exchange on their host channels:
// each is one i32 vector, [magic, kind, sender, receiver, ...], written with
// RecordWriter and read back, bounds-checked, with RecordReader. What
// follows the head depends on the kind (setup: exported handles; message:
// tag, slot and tensor layouts; release; closed); ipc_transport.cc writes
// and reads each kind.
#ifndef TANDEM_ACTOR_IPC_RECORD_H_
#define TANDEM_ACTOR_IPC_RECORD_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/device_memory.h"
#include "ir/host_tensor.h"

namespace tandem::actor::ipc {

// Host records are i32 tensors: [magic, kind, sender, receiver, ...].
constexpr int32_t kRecordMagic = 0x54444950;  // "TDIP"
enum class RecordKind : int32_t {
  kSetup = 1,
  kMessage = 2,
  kRelease = 3,
  kClosed = 4,
  kNcclSetup = 5,    // NcclTransport (actor/nccl_transport.h): a communicator's unique id
  kNcclMessage = 6,  // NcclTransport: a message's tag and tensor types
};
constexpr size_t kRecordHeadWords = 4;
constexpr size_t kHandleWords = backends::kIpcHandleBytes / sizeof(int32_t);
constexpr int kMaxRank = 8;
constexpr size_t kTypeWords = 2 + 2 * kMaxRank;            // dtype, rank, dims
constexpr size_t kTensorWords = kTypeWords + 2 + 2;         // type, offset, bytes
constexpr size_t kMaxTensors = 4096;

// Builds a record: the head, then 32-bit words, 64-bit values as two words
// (low first) and 64-byte handles as 16 words.
class RecordWriter {
 public:
  RecordWriter(RecordKind kind, int32_t sender, int32_t receiver)
      : words_{kRecordMagic, static_cast<int32_t>(kind), sender, receiver} {}
  void Put32(int32_t value) { words_.push_back(value); }
  void Put64(uint64_t value) {
    words_.push_back(static_cast<int32_t>(static_cast<uint32_t>(value)));
    words_.push_back(static_cast<int32_t>(static_cast<uint32_t>(value >> 32)));
  }
  void PutHandle(const std::array<std::byte, backends::kIpcHandleBytes>& bytes) {
    const size_t at = words_.size();
    words_.resize(at + kHandleWords);
    std::memcpy(words_.data() + at, bytes.data(), backends::kIpcHandleBytes);
  }
  std::vector<int32_t> Take() { return std::move(words_); }

 private:
  std::vector<int32_t> words_;
};

// Reads a record past its head; every read is bounds-checked (ok() turns
// false on a short record).
class RecordReader {
 public:
  explicit RecordReader(const std::vector<int32_t>& words) : words_(words), at_(kRecordHeadWords) {}
  bool ok() const { return ok_; }
  size_t left() const { return words_.size() - at_; }
  int32_t Get32() {
    if (!Have(1)) return 0;
    return words_[at_++];
  }
  uint64_t Get64() {
    if (!Have(2)) return 0;
    const uint64_t low = static_cast<uint32_t>(words_[at_]);
    const uint64_t high = static_cast<uint32_t>(words_[at_ + 1]);
    at_ += 2;
    return low | (high << 32);
  }
  template <typename Handle>
  Handle GetHandle() {
    Handle handle;
    if (!Have(kHandleWords)) return handle;
    std::memcpy(handle.bytes.data(), words_.data() + at_, backends::kIpcHandleBytes);
    at_ += kHandleWords;
    return handle;
  }

 private:
  bool Have(size_t n) {
    if (words_.size() - at_ < n) ok_ = false;
    return ok_;
  }
  const std::vector<int32_t>& words_;
  size_t at_;
  bool ok_ = true;
};

// The words of a host record received from `peer` by `self`, with the head
// checked: DataLoss ("actor 1: malformed record from actor 0: bad magic")
// for anything but one i32 vector with the magic, addressed from `peer` to
// `self`.
absl::StatusOr<std::vector<int32_t>> ParseRecord(const std::vector<ir::HostTensor>& tensors, int32_t peer,
                                                 int32_t self);

inline RecordKind KindOf(const std::vector<int32_t>& words) { return static_cast<RecordKind>(words[1]); }

// A record's words as the one i32 vector a host channel carries.
inline ir::HostTensor RecordTensor(const std::vector<int32_t>& words) {
  return ir::HostTensor::FromInts({static_cast<int64_t>(words.size())}, words);
}

// A tensor's type as kTypeWords words: dtype, rank, kMaxRank extents (64
// bits each, unused ones 0). The type must have rank <= kMaxRank.
void PutType(RecordWriter& writer, const ir::TensorType& type);
// Reads one back: InvalidArgument for an unknown dtype, a rank over
// kMaxRank, or extents whose bytes are not a tensor's (ir/limits.h); the
// reader's ok() turns false on a short record.
absl::StatusOr<ir::TensorType> GetType(RecordReader& reader);

}  // namespace tandem::actor::ipc

#endif  // TANDEM_ACTOR_IPC_RECORD_H_
