#include "actor/ipc_record.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "ir/limits.h"

namespace tandem::actor::ipc {

absl::StatusOr<std::vector<int32_t>> ParseRecord(const std::vector<ir::HostTensor>& tensors, int32_t peer,
                                                 int32_t self) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("actor ", self, ": malformed record from actor ", peer, ": ", why));
  };
  if (tensors.size() != 1 || tensors[0].dtype() != ir::DType::kI32 || tensors[0].shape().size() != 1) {
    return bad("not one i32 vector");
  }
  absl::Span<const int32_t> ints = tensors[0].ints();
  std::vector<int32_t> words(ints.begin(), ints.end());
  if (words.size() < kRecordHeadWords || words[0] != kRecordMagic) return bad("bad magic");
  if (words[2] != peer || words[3] != self) {
    return bad(absl::StrCat("addressed from actor ", words[2], " to actor ", words[3]));
  }
  return words;
}

void PutType(RecordWriter& writer, const ir::TensorType& type) {
  writer.Put32(static_cast<int32_t>(type.dtype));
  writer.Put32(static_cast<int32_t>(type.rank()));
  for (int axis = 0; axis < kMaxRank; ++axis) {
    writer.Put64(axis < type.rank() ? static_cast<uint64_t>(type.shape[axis]) : 0);
  }
}

absl::StatusOr<ir::TensorType> GetType(RecordReader& reader) {
  const int32_t dtype = reader.Get32();
  const int32_t rank = reader.Get32();
  if (dtype < 0 || dtype > static_cast<int32_t>(ir::DType::kF16) || rank < 0 || rank > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat("dtype ", dtype, " and rank ", rank));
  }
  ir::TensorType type;
  type.dtype = static_cast<ir::DType>(dtype);
  for (int axis = 0; axis < kMaxRank; ++axis) {
    const uint64_t dim = reader.Get64();
    if (axis < rank) type.shape.push_back(static_cast<int64_t>(dim));
  }
  // The shape's bytes, bounded (ir/limits.h) before any product is taken.
  if (absl::StatusOr<int64_t> bytes = ir::CheckedNumBytes(type); !bytes.ok()) return bytes.status();
  return type;
}

}  // namespace tandem::actor::ipc
