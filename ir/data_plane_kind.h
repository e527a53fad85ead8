// How the actors of a job move tensors between each other: the one name of
// a data plane that launchers choose, actors are told (tandem-actor
// --transport) and SessionOptions carry.
#ifndef TANDEM_IR_DATA_PLANE_KIND_H_
#define TANDEM_IR_DATA_PLANE_KIND_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::ir {

enum class DataPlaneKind : uint8_t {
  kShm,  // shared-memory rings between the processes of one host
  kTcp,  // TCP connections (loopback on one host)
  // By placement: shared memory between actors on one host, TCP between
  // hosts (the host each actor reported when it registered).
  kAuto,
};

// "shm", "tcp" or "auto".
absl::string_view DataPlaneKindName(DataPlaneKind kind);
// InvalidArgument naming the accepted values for anything else.
absl::StatusOr<DataPlaneKind> ParseDataPlaneKind(absl::string_view name);

}  // namespace tandem::ir

#endif  // TANDEM_IR_DATA_PLANE_KIND_H_
