// Control-plane connections: one Cap'n Proto two-party connection per
// actor, over a connected stream socket, with message limits set on purpose.
//
// Limits. Control messages carry programs, step inputs and losses; bulk
// tensors travel on the data plane. Both sides build their
// TwoPartyVatNetwork with the same ConnectionLimits, so:
//  - a sender refuses to send a message above max_message_bytes (the call
//    fails locally, the connection stays up);
//  - a receiver that gets one anyway (a peer with other limits) drops that
//    connection: its calls fail with Unavailable, other connections are
//    unaffected.
// nesting_limit bounds recursion when reading; our schema nests < 8 deep.
// max_fds_per_message bounds descriptors accepted per message: the
// shared-memory data plane hands each actor one ring per peer in one
// message at startup, so it caps the actors per host at 65.
//
// Threading: every object here belongs to the thread whose KJ event loop
// (kj::setupAsyncIo) created it, and must be used and destroyed there.
#ifndef TANDEM_RPC_CONNECTION_H_
#define TANDEM_RPC_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "capnp/capability.h"
#include "capnp/message.h"
#include "capnp/rpc-twoparty.h"
#include "kj/async-io.h"
#include "kj/async-unix.h"
#include "kj/io.h"

namespace tandem::rpc {

// 64 MiB: the largest control message either side sends or accepts.
inline constexpr uint64_t kDefaultMaxMessageBytes = uint64_t{64} << 20;

struct ConnectionLimits {
  uint64_t max_message_bytes = kDefaultMaxMessageBytes;
  int nesting_limit = 32;
  uint32_t max_fds_per_message = 64;
};

// traversalLimitInWords = max_message_bytes / 8, nestingLimit as given.
capnp::ReaderOptions ToReaderOptions(const ConnectionLimits& limits);

// One end of a two-party RPC connection. Owns the stream, the vat network
// and the RPC system; destroying it closes the connection (the peer's
// pending calls fail with DISCONNECTED -> Unavailable, and ours likewise).
// Not thread-safe: belongs to the event-loop thread that made it.
class RpcConnection {
 public:
  // `bootstrap` is the capability this side offers the peer (may be null
  // for a pure client). A capability stream (Unix socket) also carries file
  // descriptors.
  RpcConnection(kj::Own<kj::AsyncCapabilityStream> stream, capnp::rpc::twoparty::Side side,
                capnp::Capability::Client bootstrap, const ConnectionLimits& limits);
  RpcConnection(kj::Own<kj::AsyncIoStream> stream, capnp::rpc::twoparty::Side side,
                capnp::Capability::Client bootstrap, const ConnectionLimits& limits);
  RpcConnection(const RpcConnection&) = delete;
  RpcConnection& operator=(const RpcConnection&) = delete;

  // The peer's bootstrap capability. Calls on it complete on this thread;
  // they fail with Unavailable once the connection drops.
  template <typename Interface>
  typename Interface::Client Bootstrap() {
    return BootstrapCapability().castAs<Interface>();
  }

  // Resolves (on this thread) when the peer disconnects or the stream fails.
  kj::Promise<void> OnDisconnect() { return network_->onDisconnect(); }

 private:
  void StartRpc(capnp::Capability::Client bootstrap);
  capnp::Capability::Client BootstrapCapability();

  capnp::rpc::twoparty::Side side_;
  kj::Own<kj::AsyncIoStream> stream_;
  kj::Own<capnp::TwoPartyVatNetwork> network_;
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc_system_;
};

// Creates a fresh directory for this job's sockets under `parent` (default:
// $TMPDIR or /tmp), mode 0700, owned by us, and checks both. Returns its
// path. The caller removes it when the job ends.
absl::StatusOr<std::string> MakePrivateRunDirectory(absl::string_view parent = "");

// A job's secret: 32 random bytes from the kernel, as 64 hex digits.
absl::StatusOr<std::string> MakeJobToken();

// OK if `path` is a directory owned by the effective user with mode 0700.
absl::Status CheckPrivateDirectory(absl::string_view path);

// A listening Unix-domain socket. Owned by whoever serves connections (the
// controller); unlinks its path when destroyed. Not thread-safe.
class UnixListener {
 public:
  // Binds `path` (which must lie in a private directory and fit in
  // sockaddr_un) and listens. InvalidArgument for a bad path, Internal for
  // a failed system call.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Listen(kj::AsyncIoContext& io,
                                                              std::string path);
  ~UnixListener();

  // Resolves with the next connection, on the event-loop thread. Only one
  // Accept may be outstanding at a time.
  kj::Promise<kj::Own<kj::AsyncCapabilityStream>> Accept();

  const std::string& path() const { return path_; }

 private:
  UnixListener(kj::AsyncIoContext& io, kj::AutoCloseFd fd, std::string path);

  kj::LowLevelAsyncIoProvider& provider_;
  kj::AutoCloseFd fd_;
  kj::UnixEventPort::FdObserver observer_;
  std::string path_;
};

// Connects to the Unix socket at `path` without blocking the event loop;
// Unavailable if nobody listens there.
absl::StatusOr<kj::Own<kj::AsyncCapabilityStream>> ConnectUnix(kj::AsyncIoContext& io,
                                                                absl::string_view path);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_CONNECTION_H_
