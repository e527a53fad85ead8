#include "actor/socket_io.h"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ir/errno_status.h"
#include "rpc/connection.h"

namespace tandem::actor::socket_io {

absl::Status Errno(absl::string_view what) { return ir::ErrnoStatus(absl::StatusCode::kUnavailable, what); }

absl::Status ReadAll(int fd, void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = recv(fd, p, size, 0);
    if (n == 0) return absl::UnavailableError("connection closed");
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("recv");
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("send");
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

bool WaitReadable(int fd, absl::Time deadline) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return false;
  }
}

absl::Status ReadAllBy(int fd, void* data, size_t size, absl::Time deadline) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    if (!WaitReadable(fd, deadline)) return absl::DeadlineExceededError("no answer in time");
    const ssize_t n = recv(fd, p, size, MSG_DONTWAIT);
    if (n == 0) return absl::UnavailableError("connection closed");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return Errno("recv");
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

std::string PeerName(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(address);
    inet_ntop(AF_INET, &in.sin_addr, host, sizeof(host));
    return absl::StrCat(host, ":", ntohs(in.sin_port));
  }
  if (address.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(address);
    inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof(host));
    return absl::StrCat("[", host, "]:", ntohs(in6.sin6_port));
  }
  return "an unknown address";
}

void Tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::StatusOr<sockaddr_in> ParseAddress(const std::string& address) {
  absl::StatusOr<rpc::HostPort> parsed = rpc::ParseHostPort(address);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (!parsed.ok() || inet_pton(AF_INET, parsed->host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad address '", address, "' (want IPv4 host:port)"));
  }
  addr.sin_port = htons(static_cast<uint16_t>(parsed->port));
  return addr;
}

}  // namespace tandem::actor::socket_io
