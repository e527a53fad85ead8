// Blocking socket I/O for the TCP data plane (actor/tcp_transport.h):
// whole reads and writes that retry on EINTR, a read bounded by a deadline,
// and the names and addresses its errors and dials use. Errors are
// Unavailable naming the call (and DeadlineExceeded for a read not done in
// time), never an abort.
#ifndef TANDEM_ACTOR_SOCKET_IO_H_
#define TANDEM_ACTOR_SOCKET_IO_H_

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tandem::actor::socket_io {

// Unavailable: "`what`: " and errno's text.
absl::Status Errno(absl::string_view what);

// Reads exactly `size` bytes. Unavailable on EOF or error.
absl::Status ReadAll(int fd, void* data, size_t size);
// Writes exactly `size` bytes (no SIGPIPE). Unavailable on error.
absl::Status WriteAll(int fd, const void* data, size_t size);
// Whether `fd` becomes readable before `deadline`.
bool WaitReadable(int fd, absl::Time deadline);
// Reads exactly `size` bytes by `deadline`: DeadlineExceeded when they do
// not come in time, Unavailable on EOF or error.
absl::Status ReadAllBy(int fd, void* data, size_t size, absl::Time deadline);

// "127.0.0.1:40312" or "[::1]:40312" for `address`, or "an unknown address".
std::string PeerName(const sockaddr_storage& address);
// TCP_NODELAY: the data plane sends whole frames and waits on them.
void Tune(int fd);
// "host:port" (IPv4); InvalidArgument naming the address otherwise.
absl::StatusOr<sockaddr_in> ParseAddress(const std::string& address);

}  // namespace tandem::actor::socket_io

#endif  // TANDEM_ACTOR_SOCKET_IO_H_
