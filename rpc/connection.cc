#include "rpc/connection.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "capnp/rpc.h"
#include "ir/errno_status.h"
#include "rpc/control_tls.h"
#include "rpc/status_convert.h"

namespace tandem::rpc {
namespace {

// A socket call's failure on `path`: Unavailable when no one listens there,
// Internal otherwise.
absl::Status ErrnoError(absl::string_view what, absl::string_view path, int error) {
  const bool nobody = error == ENOENT || error == ECONNREFUSED;
  return ir::ErrnoStatus(nobody ? absl::StatusCode::kUnavailable : absl::StatusCode::kInternal,
                         absl::StrCat(what, " ", path), error);
}

absl::StatusOr<sockaddr_un> UnixAddress(absl::string_view path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unix socket path '%s' is empty or longer than %d bytes", path, sizeof(address.sun_path) - 1));
  }
  memcpy(address.sun_path, path.data(), path.size());
  return address;
}

// Nagle's algorithm would hold small RPC messages back for an ACK.
void NoDelay(kj::AsyncIoStream& stream) {
  int one = 1;
  stream.setsockopt(IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

absl::string_view ControlPlaneKindName(ControlPlaneKind kind) {
  return kind == ControlPlaneKind::kUnix ? "unix" : "tcp";
}

absl::StatusOr<ControlPlaneKind> ParseControlPlaneKind(absl::string_view name) {
  if (name == "unix") return ControlPlaneKind::kUnix;
  if (name == "tcp") return ControlPlaneKind::kTcp;
  return absl::InvalidArgumentError(absl::StrCat("unknown control plane '", name, "' (expected unix or tcp)"));
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address, bool allow_port_zero) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not host:port: ", why));
  };
  if (address.empty()) return bad("it is empty");
  HostPort result;
  absl::string_view port;
  if (address.front() == '[') {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos) return bad("the IPv6 host has no closing ']'");
    result.host = std::string(address.substr(1, close - 1));
    if (close + 1 >= address.size() || address[close + 1] != ':') return bad("there is no ':port' after the host");
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) return bad("there is no ':port'");
    result.host = std::string(address.substr(0, colon));
    if (result.host.find(':') != std::string::npos) return bad("an IPv6 host goes in brackets, as in [::1]:port");
    port = address.substr(colon + 1);
  }
  if (result.host.empty()) return bad("the host is empty");
  const int lowest = allow_port_zero ? 0 : 1;
  const bool digits = !port.empty() && port.size() <= 5 &&
                      std::all_of(port.begin(), port.end(), [](char c) { return absl::ascii_isdigit(c); });
  if (!digits || !absl::SimpleAtoi(port, &result.port) || result.port < lowest || result.port > 65535) {
    return bad(absl::StrCat("the port '", port, "' is not a number in [", lowest, ", 65535]"));
  }
  return result;
}

std::string FormatHostPort(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<std::string> ThisHostAddress() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return absl::ErrnoToStatus(errno, "gethostname");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int error = getaddrinfo(name, nullptr, &hints, &found); error != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("this host's name '", name, "' does not resolve to an IPv4 address: ", gai_strerror(error)));
  }
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr, text, sizeof(text));
  freeaddrinfo(found);
  return std::string(text);
}

capnp::ReaderOptions ToReaderOptions(const ConnectionLimits& limits) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = limits.max_message_bytes / sizeof(capnp::word);
  options.nestingLimit = limits.nesting_limit;
  return options;
}

RpcConnection::RpcConnection(kj::Own<kj::AsyncCapabilityStream> stream,
                             capnp::rpc::twoparty::Side side, capnp::Capability::Client bootstrap,
                             const ConnectionLimits& limits)
    : side_(side) {
  network_ = kj::heap<capnp::TwoPartyVatNetwork>(*stream, limits.max_fds_per_message, side,
                                                 ToReaderOptions(limits));
  stream_ = kj::mv(stream);
  StartRpc(kj::mv(bootstrap));
}

RpcConnection::RpcConnection(kj::Own<kj::AsyncIoStream> stream, capnp::rpc::twoparty::Side side,
                             capnp::Capability::Client bootstrap, const ConnectionLimits& limits)
    : side_(side), stream_(kj::mv(stream)) {
  network_ = kj::heap<capnp::TwoPartyVatNetwork>(*stream_, side, ToReaderOptions(limits));
  StartRpc(kj::mv(bootstrap));
}

RpcConnection::RpcConnection(ControlStream stream, capnp::rpc::twoparty::Side side,
                             capnp::Capability::Client bootstrap, const ConnectionLimits& limits)
    : side_(side), stream_(kj::mv(stream.stream)) {
  if (stream.unix_socket != nullptr) {
    network_ = kj::heap<capnp::TwoPartyVatNetwork>(*stream.unix_socket, limits.max_fds_per_message, side,
                                                   ToReaderOptions(limits));
  } else {
    network_ = kj::heap<capnp::TwoPartyVatNetwork>(*stream_, side, ToReaderOptions(limits));
  }
  StartRpc(kj::mv(bootstrap));
}

void RpcConnection::StartRpc(capnp::Capability::Client bootstrap) {
  rpc_system_ = kj::heap(capnp::makeRpcServer(*network_, kj::mv(bootstrap)));
}

capnp::Capability::Client RpcConnection::BootstrapCapability() {
  capnp::MallocMessageBuilder message(8);
  auto vat_id = message.initRoot<capnp::rpc::twoparty::VatId>();
  vat_id.setSide(side_ == capnp::rpc::twoparty::Side::CLIENT ? capnp::rpc::twoparty::Side::SERVER
                                                             : capnp::rpc::twoparty::Side::CLIENT);
  return rpc_system_->bootstrap(vat_id);
}

absl::Status CheckPrivateDirectory(absl::string_view path) {
  std::string owned(path);
  struct stat info;
  if (lstat(owned.c_str(), &info) != 0) return ErrnoError("cannot stat", path, errno);
  if (!S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a directory"));
  }
  if (info.st_uid != geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not owned by this user"));
  }
  if ((info.st_mode & 07777) != 0700) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s has mode %04o, not 0700", path, info.st_mode & 07777));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MakeJobToken() {
  unsigned char bytes[32];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    ssize_t got = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (got < 0) return absl::InternalError("getrandom failed while making the job token");
    filled += static_cast<size_t>(got);
  }
  std::string token;
  for (unsigned char byte : bytes) absl::StrAppendFormat(&token, "%02x", byte);
  return token;
}

absl::StatusOr<std::string> MakePrivateRunDirectory(absl::string_view parent) {
  std::string base(parent);
  if (base.empty()) {
    const char* tmpdir = getenv("TMPDIR");
    base = tmpdir != nullptr && tmpdir[0] != '\0' ? tmpdir : "/tmp";
  }
  std::string templ = absl::StrCat(base, "/tandem-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) return ErrnoError("cannot create a directory in", base, errno);
  // mkdtemp creates 0700; set it explicitly so the umask cannot matter, then check.
  if (chmod(templ.c_str(), 0700) != 0) return ErrnoError("cannot chmod", templ, errno);
  absl::Status checked = CheckPrivateDirectory(templ);
  if (!checked.ok()) return checked;
  return templ;
}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Listen(kj::AsyncIoContext& io,
                                                                   std::string path) {
  absl::StatusOr<sockaddr_un> address = UnixAddress(path);
  if (!address.ok()) return address.status();
  std::string directory = path.substr(0, path.rfind('/') == std::string::npos ? 0 : path.rfind('/'));
  absl::Status private_directory = CheckPrivateDirectory(directory.empty() ? "." : directory);
  if (!private_directory.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("refusing to listen on ", path, ": ",
                                                   private_directory.message()));
  }
  kj::AutoCloseFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoError("cannot create a socket for", path, errno);
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof(sockaddr_un)) != 0) {
    return ErrnoError("cannot bind", path, errno);
  }
  if (listen(fd.get(), 128) != 0) return ErrnoError("cannot listen on", path, errno);
  return std::unique_ptr<UnixListener>(new UnixListener(io, kj::mv(fd), std::move(path)));
}

UnixListener::UnixListener(kj::AsyncIoContext& io, kj::AutoCloseFd fd, std::string path)
    : provider_(*io.lowLevelProvider),
      fd_(kj::mv(fd)),
      observer_(io.unixEventPort, fd_.get(), kj::UnixEventPort::FdObserver::OBSERVE_READ),
      path_(std::move(path)) {}

UnixListener::~UnixListener() { unlink(path_.c_str()); }

kj::Promise<ControlStream> UnixListener::Accept() {
  int accepted = accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (accepted >= 0) {
    return ControlStream::Unix(provider_.wrapUnixSocketFd(
        kj::AutoCloseFd(accepted), kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK |
                                       kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC));
  }
  int error = errno;
  if (error == EAGAIN || error == EWOULDBLOCK || error == EINTR || error == ECONNABORTED) {
    return observer_.whenBecomesReadable().then([this]() { return Accept(); });
  }
  return KJ_EXCEPTION(FAILED, "accept failed", path_.c_str(), ir::ErrnoText(error));
}

absl::StatusOr<std::unique_ptr<TcpListener>> TcpListener::Listen(kj::AsyncIoContext& io, absl::string_view host,
                                                                 std::shared_ptr<kj::TlsContext> tls) {
  if (host.empty()) return absl::InvalidArgumentError("the control plane's TCP bind address is empty");
  if (tls == nullptr) return absl::InvalidArgumentError("the TCP control plane needs the controller's TLS identity");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string owned(host);
  if (int error = getaddrinfo(owned.c_str(), "0", &hints, &found); error != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen for the control plane on '", host, "': ", gai_strerror(error)));
  }
  kj::AutoCloseFd fd(socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  int error = fd.get() < 0 ? errno : 0;
  if (error == 0 && (bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0 || listen(fd.get(), 128) != 0)) {
    error = errno;
  }
  freeaddrinfo(found);
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (error == 0 && getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &length) != 0) error = errno;
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for the control plane on ", host, ": ", ir::ErrnoText(error)));
  }
  const int port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(bound).sin6_port
                                                     : reinterpret_cast<const sockaddr_in&>(bound).sin_port);
  kj::Own<kj::ConnectionReceiver> receiver = io.lowLevelProvider->wrapListenSocketFd(
      kj::mv(fd), kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK | kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC);
  auto listener = std::unique_ptr<TcpListener>(new TcpListener(kj::mv(receiver), owned, std::move(tls)));
  listener->port_ = port;
  return listener;
}

TcpListener::TcpListener(kj::Own<kj::ConnectionReceiver> receiver, std::string host,
                         std::shared_ptr<kj::TlsContext> tls)
    : receiver_(kj::mv(receiver)), tls_(std::move(tls)), host_(std::move(host)), port_(0) {}

kj::Promise<ControlStream> TcpListener::Accept() {
  return receiver_->accept().then([](kj::Own<kj::AsyncIoStream> stream) {
    NoDelay(*stream);
    return ControlStream::Tcp(kj::mv(stream));
  });
}

kj::Promise<ControlStream> TcpListener::Secure(ControlStream stream) {
  return tls_->wrapServer(kj::mv(stream.stream)).then([tls = tls_](kj::Own<kj::AsyncIoStream> secured) {
    return ControlStream::Tcp(secured.attach(tls));
  });
}

absl::StatusOr<kj::Own<kj::AsyncCapabilityStream>> ConnectUnix(kj::AsyncIoContext& io,
                                                                absl::string_view path) {
  absl::StatusOr<sockaddr_un> address = UnixAddress(path);
  if (!address.ok()) return address.status();
  kj::AutoCloseFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoError("cannot create a socket for", path, errno);
  // A Unix-domain connect completes at once or fails (EAGAIN: backlog full).
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof(sockaddr_un)) != 0) {
    int error = errno;
    if (error == EAGAIN) {
      return absl::UnavailableError(absl::StrCat("controller at ", path, " is not accepting"));
    }
    return ErrnoError("cannot connect to", path, error);
  }
  return io.lowLevelProvider->wrapUnixSocketFd(
      kj::mv(fd), kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK |
                      kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC);
}

kj::Promise<ControlStream> DialController(kj::AsyncIoContext& io, ControlPlaneKind kind, absl::string_view address,
                                          absl::Duration timeout, absl::string_view certificate_pem) {
  if (kind == ControlPlaneKind::kUnix) {
    absl::StatusOr<kj::Own<kj::AsyncCapabilityStream>> stream = ConnectUnix(io, address);
    if (!stream.ok()) return ToKjException(stream.status());
    return ControlStream::Unix(*std::move(stream));
  }
  absl::StatusOr<HostPort> endpoint = ParseHostPort(address);
  if (!endpoint.ok()) return ToKjException(endpoint.status());
  absl::StatusOr<std::shared_ptr<kj::TlsContext>> tls = ActorTls(certificate_pem);
  if (!tls.ok()) return ToKjException(tls.status());
  const std::string where = FormatHostPort(endpoint->host, endpoint->port);
  kj::Promise<ControlStream> connect =
      io.provider->getNetwork()
          .parseAddress(kj::StringPtr(where.c_str()))
          .then([](kj::Own<kj::NetworkAddress> resolved) { return resolved->connect().attach(kj::mv(resolved)); })
          .then(
              [tls = *tls, where](kj::Own<kj::AsyncIoStream> stream) {
                NoDelay(*stream);
                return tls->wrapClient(kj::mv(stream), kControllerTlsName)
                    .then(
                        [tls](kj::Own<kj::AsyncIoStream> secured) { return ControlStream::Tcp(secured.attach(tls)); },
                        [where](kj::Exception&& exception) -> ControlStream {
                          kj::throwFatalException(ToKjException(absl::PermissionDeniedError(absl::StrCat(
                              "the TLS handshake with the controller at ", where,
                              " failed (is it this job's controller?): ", exception.getDescription().cStr()))));
                        });
              },
              [where](kj::Exception&& exception) -> kj::Promise<ControlStream> {
                kj::throwFatalException(ToKjException(absl::UnavailableError(absl::StrCat(
                    "cannot reach the controller at ", where, ": ", exception.getDescription().cStr()))));
              });
  const int64_t millis = std::max<int64_t>(absl::ToInt64Milliseconds(timeout), 0);
  return connect.exclusiveJoin(
      io.provider->getTimer().afterDelay(millis * kj::MILLISECONDS).then([where, timeout]() -> ControlStream {
        kj::throwFatalException(ToKjException(absl::DeadlineExceededError(absl::StrCat(
            "no connection to the controller at ", where, " within ", absl::FormatDuration(timeout)))));
      }));
}

}  // namespace tandem::rpc
