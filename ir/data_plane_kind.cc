#include "ir/data_plane_kind.h"

#include "absl/strings/str_cat.h"

namespace tandem::ir {

absl::string_view DataPlaneKindName(DataPlaneKind kind) { return kind == DataPlaneKind::kShm ? "shm" : "tcp"; }

absl::StatusOr<DataPlaneKind> ParseDataPlaneKind(absl::string_view name) {
  if (name == "shm") return DataPlaneKind::kShm;
  if (name == "tcp") return DataPlaneKind::kTcp;
  return absl::InvalidArgumentError(absl::StrCat("unknown transport '", name, "' (expected shm or tcp)"));
}

}  // namespace tandem::ir
