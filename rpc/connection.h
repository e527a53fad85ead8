// Control-plane connections: one Cap'n Proto two-party connection per
// actor, over a connected stream socket, with message limits set on purpose.
// Two kinds of socket (ControlPlaneKind): a Unix socket in a private run
// directory (one host; it also carries the shared-memory data plane's file
// descriptors), or TCP (across hosts; on one host with `--control tcp`),
// listening on a port the OS picks. Neither carries the job's token: see
// rpc/auth.h.
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
#include "absl/time/time.h"
#include "capnp/capability.h"
#include "capnp/message.h"
#include "capnp/rpc-twoparty.h"
#include "kj/async-io.h"
#include "kj/async-unix.h"
#include "kj/compat/tls.h"
#include "kj/io.h"
#include "rpc/control_plane_kind.h"

namespace tandem::rpc {

// A TCP endpoint: "host:port", with an IPv6 host in brackets ("[::1]:80").
struct HostPort {
  std::string host;
  int port = 0;
};
// InvalidArgument, quoting `address` and saying what is wrong, unless it is
// host:port with a port in [1, 65535] (or [0, 65535] with `allow_port_zero`,
// for "any free port").
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address, bool allow_port_zero = false);
// "host:port", bracketing an IPv6 host.
std::string FormatHostPort(absl::string_view host, int port);

// The IPv4 address this host's name resolves to: what the other hosts of a
// cluster reach it by. InvalidArgument naming the host when it does not
// resolve.
absl::StatusOr<std::string> ThisHostAddress();

// A connected control-plane stream: a Unix socket, which also carries file
// descriptors, or a TCP connection, which does not.
struct ControlStream {
  static ControlStream Unix(kj::Own<kj::AsyncCapabilityStream> socket) {
    kj::AsyncCapabilityStream* unix_socket = socket.get();
    return ControlStream{kj::mv(socket), unix_socket};
  }
  static ControlStream Tcp(kj::Own<kj::AsyncIoStream> socket) { return ControlStream{kj::mv(socket), nullptr}; }

  kj::Own<kj::AsyncIoStream> stream;
  kj::AsyncCapabilityStream* unix_socket = nullptr;  // `stream` when it is a Unix socket, else null
};

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
  // Either of the above, by the stream's kind.
  RpcConnection(ControlStream stream, capnp::rpc::twoparty::Side side, capnp::Capability::Client bootstrap,
                const ConnectionLimits& limits);
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

// Where the controller accepts control connections. Owned by whoever serves
// them (ControlServer); not thread-safe: it belongs to the event-loop thread
// that made it.
class ControlListener {
 public:
  virtual ~ControlListener() noexcept(false) = default;  // as KJ's members
  // Resolves with the next connection, on the event-loop thread. Only one
  // Accept may be outstanding at a time.
  virtual kj::Promise<ControlStream> Accept() = 0;
  // What an accepted stream must go through before RPC runs over it: TLS's
  // handshake on TCP (rpc/control_tls.h), nothing on a Unix socket. Each
  // connection's own promise, so a slow peer never holds up Accept.
  virtual kj::Promise<ControlStream> Secure(ControlStream stream) { return kj::mv(stream); }
  virtual ControlPlaneKind kind() const = 0;
  // What actors dial: the socket's path, or "host:port".
  virtual std::string address() const = 0;
};

// A listening Unix-domain socket; unlinks its path when destroyed.
class UnixListener final : public ControlListener {
 public:
  // Binds `path` (which must lie in a private directory and fit in
  // sockaddr_un) and listens. InvalidArgument for a bad path, Internal for
  // a failed system call.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Listen(kj::AsyncIoContext& io,
                                                              std::string path);
  ~UnixListener() override;

  kj::Promise<ControlStream> Accept() override;
  ControlPlaneKind kind() const override { return ControlPlaneKind::kUnix; }
  std::string address() const override { return path_; }
  const std::string& path() const { return path_; }

 private:
  UnixListener(kj::AsyncIoContext& io, kj::AutoCloseFd fd, std::string path);

  kj::LowLevelAsyncIoProvider& provider_;
  kj::AutoCloseFd fd_;
  kj::UnixEventPort::FdObserver observer_;
  std::string path_;
};

// A listening TCP socket on a port the OS picks (never a fixed one, so that
// jobs sharing a host cannot collide), serving TLS (rpc/control_tls.h).
class TcpListener final : public ControlListener {
 public:
  // Listens on `host` (an address of this host: "127.0.0.1" for loopback,
  // a routable one across hosts), port 0, with `tls` (ControllerTls).
  // InvalidArgument for a host that does not resolve or no `tls`,
  // Unavailable if it cannot be bound.
  static absl::StatusOr<std::unique_ptr<TcpListener>> Listen(kj::AsyncIoContext& io, absl::string_view host,
                                                             std::shared_ptr<kj::TlsContext> tls);

  kj::Promise<ControlStream> Accept() override;
  // The TLS handshake as the server; fails when the peer does not complete
  // it within the context's handshake timeout.
  kj::Promise<ControlStream> Secure(ControlStream stream) override;
  ControlPlaneKind kind() const override { return ControlPlaneKind::kTcp; }
  std::string address() const override { return FormatHostPort(host_, port_); }
  int port() const { return port_; }

 private:
  TcpListener(kj::Own<kj::ConnectionReceiver> receiver, std::string host, std::shared_ptr<kj::TlsContext> tls);

  kj::Own<kj::ConnectionReceiver> receiver_;
  std::shared_ptr<kj::TlsContext> tls_;  // shared with every stream it wraps
  std::string host_;
  int port_;
};

// Connects to the Unix socket at `path` without blocking the event loop;
// Unavailable if nobody listens there.
absl::StatusOr<kj::Own<kj::AsyncCapabilityStream>> ConnectUnix(kj::AsyncIoContext& io,
                                                                absl::string_view path);

// Connects to the controller at `address` (a socket path, or host:port by
// `kind`) on the event loop, within `timeout`; over TCP with TLS, trusting
// `certificate_pem` alone (ActorTls; ignored for a Unix socket). Resolves
// with the stream, or fails (rpc/async_status.h's ToStatusOr turns it into
// a status) with: InvalidArgument for an address that is not of its kind's
// form or an unusable certificate; Unavailable naming the address and the
// reason when nobody answers there (refused, unreachable, a host that does
// not resolve); PermissionDenied when what answers fails the TLS handshake
// (not the job's controller); DeadlineExceeded when the connection is not
// up within `timeout`.
kj::Promise<ControlStream> DialController(kj::AsyncIoContext& io, ControlPlaneKind kind, absl::string_view address,
                                          absl::Duration timeout, absl::string_view certificate_pem = "");

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_CONNECTION_H_
