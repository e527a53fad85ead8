#include "rpc/connection.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "capnp/rpc.h"

namespace tandem::rpc {
namespace {

absl::Status ErrnoError(absl::string_view what, absl::string_view path, int error) {
  std::string text = absl::StrCat(what, " ", path, ": ", strerror(error));
  if (error == ENOENT || error == ECONNREFUSED) return absl::UnavailableError(text);
  return absl::InternalError(text);
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

}  // namespace

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

kj::Promise<kj::Own<kj::AsyncCapabilityStream>> UnixListener::Accept() {
  int accepted = accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (accepted >= 0) {
    return provider_.wrapUnixSocketFd(
        kj::AutoCloseFd(accepted), kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK |
                                       kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC);
  }
  int error = errno;
  if (error == EAGAIN || error == EWOULDBLOCK || error == EINTR || error == ECONNABORTED) {
    return observer_.whenBecomesReadable().then([this]() { return Accept(); });
  }
  return KJ_EXCEPTION(FAILED, "accept failed", path_.c_str(), strerror(error));
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

}  // namespace tandem::rpc
