// How actors reach the controller: the one name launchers choose and actors
// are told (`tandem-actor --control`, `tandem train --control`). Its own
// header, free of Cap'n Proto, because the public API (controller/session.h)
// names it; the sockets themselves are rpc/connection.h's.
#ifndef TANDEM_RPC_CONTROL_PLANE_KIND_H_
#define TANDEM_RPC_CONTROL_PLANE_KIND_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::rpc {

enum class ControlPlaneKind : uint8_t {
  kUnix,  // a Unix socket in a private run directory (one host)
  kTcp,   // TCP, "host:port" (across hosts)
};

// "unix" or "tcp".
absl::string_view ControlPlaneKindName(ControlPlaneKind kind);
// InvalidArgument naming the accepted values for anything else.
absl::StatusOr<ControlPlaneKind> ParseControlPlaneKind(absl::string_view name);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_CONTROL_PLANE_KIND_H_
