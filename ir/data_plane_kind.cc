#include "ir/data_plane_kind.h"

#include "absl/strings/str_cat.h"

namespace tandem::ir {

absl::string_view DataPlaneKindName(DataPlaneKind kind) {
  switch (kind) {
    case DataPlaneKind::kShm:
      return "shm";
    case DataPlaneKind::kTcp:
      return "tcp";
    case DataPlaneKind::kAuto:
      return "auto";
  }
  return "?";
}

absl::StatusOr<DataPlaneKind> ParseDataPlaneKind(absl::string_view name) {
  if (name == "shm") return DataPlaneKind::kShm;
  if (name == "tcp") return DataPlaneKind::kTcp;
  if (name == "auto") return DataPlaneKind::kAuto;
  return absl::InvalidArgumentError(absl::StrCat("unknown transport '", name, "' (expected shm, tcp or auto)"));
}

}  // namespace tandem::ir
