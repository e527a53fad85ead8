#include "actor/ipc_record.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

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

}  // namespace tandem::actor::ipc
