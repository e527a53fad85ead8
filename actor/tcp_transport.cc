#include "actor/tcp_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/data_plane_frame.h"

namespace tandem::actor {
namespace {

constexpr uint64_t kHelloMagic = 0x54444d48454c4c4f;  // "TDMHELLO"

struct Hello {
  uint64_t magic;
  int32_t from;
  int32_t to;
};

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Reads exactly `size` bytes. Unavailable on EOF or error.
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

void Tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::StatusOr<sockaddr_in> ParseAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 ||
      port > 65535 || inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad address '", address, "' (want IPv4 host:port)"));
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

}  // namespace

struct TcpTransport::Outgoing {
  FrameLayout layout;
  std::vector<ir::HostTensor> tensors;
  std::vector<std::byte> raw;  // SendRawForTesting only
};

struct TcpTransport::Connection {
  int fd = -1;
  std::thread reader;
  std::thread writer;
  std::deque<Outgoing> queue;
  bool writing = false;
  std::map<uint64_t, std::vector<ir::HostTensor>> mailbox;  // by tag
  absl::Status error;  // the connection is gone once set
};

TcpTransport::TcpTransport(int32_t actor, int32_t num_actors, Options options, int listen_fd, int port)
    : actor_(actor), num_actors_(num_actors), options_(std::move(options)), listen_fd_(listen_fd), port_(port) {
  absl::MutexLock lock(&mu_);
  connections_.resize(num_actors);
}

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::Listen(int32_t actor, int32_t num_actors,
                                                                   Options options) {
  if (num_actors < 1 || actor < 0 || actor >= num_actors) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", actor, " is outside [0, ", num_actors, ")"));
  }
  absl::StatusOr<sockaddr_in> addr = ParseAddress(absl::StrCat(options.bind_host, ":1"));
  if (!addr.ok()) return addr.status();
  addr->sin_port = 0;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t length = sizeof(*addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&*addr), &length) != 0) {
    absl::Status status = Errno(absl::StrCat("actor ", actor, ": listening on ", options.bind_host));
    close(fd);
    return status;
  }
  return std::unique_ptr<TcpTransport>(
      new TcpTransport(actor, num_actors, std::move(options), fd, ntohs(addr->sin_port)));
}

TcpTransport::~TcpTransport() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
    for (auto& connection : connections_) {
      if (connection == nullptr) continue;
      shutdown(connection->fd, SHUT_RDWR);
      threads.push_back(std::move(connection->reader));
      threads.push_back(std::move(connection->writer));
    }
  }
  for (std::thread& thread : threads) {
    if (thread.joinable()) thread.join();
  }
  absl::MutexLock lock(&mu_);
  for (auto& connection : connections_) {
    if (connection != nullptr) close(connection->fd);
  }
  close(listen_fd_);
}

absl::Status TcpTransport::CheckPeer(int32_t peer) const {
  if (peer < 0 || peer >= num_actors_) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor ", actor_, ": peer ", peer, " is outside [0, ", num_actors_, ")"));
  }
  if (peer == actor_) return absl::InvalidArgumentError(absl::StrCat("actor ", actor_, " addresses itself"));
  return absl::OkStatus();
}

void TcpTransport::Start(int32_t peer, int fd) {
  Tune(fd);
  absl::MutexLock lock(&mu_);
  auto connection = std::make_unique<Connection>();
  connection->fd = fd;
  connection->reader = std::thread([this, peer, fd] { ReaderLoop(peer, fd); });
  connection->writer = std::thread([this, peer, fd] { WriterLoop(peer, fd); });
  connections_[peer] = std::move(connection);
}

absl::Status TcpTransport::ConnectPeers(const std::vector<std::string>& peer_addresses, absl::Duration timeout) {
  if (static_cast<int32_t>(peer_addresses.size()) != num_actors_) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", actor_, ": ", peer_addresses.size(),
                                                   " addresses for ", num_actors_, " actors"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  for (int32_t peer = 0; peer < actor_; ++peer) {
    absl::StatusOr<sockaddr_in> addr = ParseAddress(peer_addresses[peer]);
    if (!addr.ok()) return addr.status();
    while (true) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return Errno("socket");
      if (connect(fd, reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) == 0) {
        const Hello hello{kHelloMagic, actor_, peer};
        if (absl::Status status = WriteAll(fd, &hello, sizeof(hello)); !status.ok()) {
          close(fd);
          return absl::UnavailableError(absl::StrCat("actor ", actor_, ": hello to actor ", peer, ": ",
                                                     status.message()));
        }
        Start(peer, fd);
        break;
      }
      close(fd);
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("actor ", actor_, ": could not connect to actor ", peer,
                                                        " at ", peer_addresses[peer]));
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  for (int32_t accepted = 0; accepted < num_actors_ - 1 - actor_;) {
    if (!WaitReadable(listen_fd_, deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("actor ", actor_, ": only ", accepted, " of ",
                                                      num_actors_ - 1 - actor_,
                                                      " higher-numbered actors connected in time"));
    }
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Hello hello{};
    if (!WaitReadable(fd, std::min(deadline, absl::Now() + absl::Seconds(2))) ||
        !ReadAll(fd, &hello, sizeof(hello)).ok() || hello.magic != kHelloMagic || hello.to != actor_ ||
        hello.from <= actor_ || hello.from >= num_actors_) {
      std::fprintf(stderr, "tandem: actor %d refused a data-plane connection without a valid hello\n", actor_);
      close(fd);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      if (connections_[hello.from] != nullptr) {
        close(fd);
        continue;
      }
    }
    Start(hello.from, fd);
    ++accepted;
  }
  return absl::OkStatus();
}

absl::Status TcpTransport::Flush(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (true) {
    bool pending = false;
    for (const auto& c : connections_) {
      if (c != nullptr && c->error.ok() && (!c->queue.empty() || c->writing)) pending = true;
    }
    if (!pending) return absl::OkStatus();
    if (changed_.WaitWithDeadline(&mu_, deadline) || absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("actor ", actor_, ": messages still queued at the deadline"));
    }
  }
}

absl::Status TcpTransport::Send(int32_t peer, uint64_t tag, std::vector<ir::HostTensor> tensors) {
  if (absl::Status status = CheckPeer(peer); !status.ok()) return status;
  absl::StatusOr<FrameLayout> layout = PlanFrame(actor_, peer, tag, tensors);
  if (!layout.ok()) return layout.status();
  absl::MutexLock lock(&mu_);
  if (!abort_status_.ok()) return abort_status_;
  Connection* c = connections_[peer].get();
  if (c == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("actor ", actor_, ": not connected to actor ", peer));
  }
  if (!c->error.ok()) return c->error;
  c->queue.push_back(Outgoing{*std::move(layout), std::move(tensors), {}});
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::Status TcpTransport::SendRawForTesting(int32_t peer, const std::vector<std::byte>& bytes) {
  if (absl::Status status = CheckPeer(peer); !status.ok()) return status;
  absl::MutexLock lock(&mu_);
  if (connections_[peer] == nullptr) return absl::FailedPreconditionError("not connected");
  connections_[peer]->queue.push_back(Outgoing{{}, {}, bytes});
  changed_.SignalAll();
  return absl::OkStatus();
}

void TcpTransport::WriterLoop(int32_t peer, int fd) {
  static constexpr std::byte kZeros[kFrameAlignment] = {};
  while (true) {
    Outgoing message;
    {
      absl::MutexLock lock(&mu_);
      Connection& c = *connections_[peer];
      c.writing = false;
      changed_.SignalAll();
      while (!stopping_ && c.error.ok() && c.queue.empty()) changed_.WaitWithTimeout(&mu_, absl::Milliseconds(200));
      if (stopping_ || !c.error.ok()) return;
      message = std::move(c.queue.front());
      c.queue.pop_front();
      c.writing = true;
    }
    absl::Status status;
    if (!message.raw.empty()) {
      status = WriteAll(fd, message.raw.data(), message.raw.size());
    } else {
      std::vector<std::byte> head(message.layout.head_bytes);
      WriteFrameHead(message.layout, head.data());
      status = WriteAll(fd, head.data(), head.size());
      for (size_t i = 0; status.ok() && i < message.tensors.size(); ++i) {
        const uint64_t bytes = message.layout.descriptors[i].bytes;
        status = WriteAll(fd, message.tensors[i].data(), bytes);
        if (status.ok() && AlignFrame(bytes) != bytes) status = WriteAll(fd, kZeros, AlignFrame(bytes) - bytes);
      }
    }
    if (!status.ok()) {
      absl::MutexLock lock(&mu_);
      Connection& c = *connections_[peer];
      if (c.error.ok()) {
        c.error = absl::UnavailableError(
            absl::StrCat("actor ", actor_, ": sending to actor ", peer, " failed: ", status.message()));
      }
      c.writing = false;
      changed_.SignalAll();
      return;
    }
  }
}

absl::Status TcpTransport::ReadFrame(int32_t peer, int fd) {
  FrameHeader header;
  if (absl::Status status = ReadAll(fd, &header, sizeof(header)); !status.ok()) return status;
  if (absl::Status status = ValidateFrameHeader(header, peer, actor_, options_.max_frame_bytes); !status.ok()) {
    return status;
  }
  std::vector<TensorDescriptor> descriptors(header.num_tensors);
  if (absl::Status status = ReadAll(fd, descriptors.data(), descriptors.size() * sizeof(TensorDescriptor));
      !status.ok()) {
    return status;
  }
  std::byte scratch[kFrameAlignment];
  const uint64_t head_pad = FrameHeadBytes(header.num_tensors) - sizeof(header) - descriptors.size() * sizeof(TensorDescriptor);
  if (absl::Status status = ReadAll(fd, scratch, head_pad); !status.ok()) return status;
  absl::StatusOr<std::vector<FrameTensor>> parsed = ParseFrameTensors(header, descriptors.data(), peer);
  if (!parsed.ok()) return parsed.status();
  std::vector<ir::HostTensor> tensors;
  for (FrameTensor& t : *parsed) {
    absl::StatusOr<ir::HostTensor> tensor = ir::HostTensor::Allocate(std::move(t.type));
    if (!tensor.ok()) return tensor.status();
    if (absl::Status status = ReadAll(fd, tensor->data(), t.bytes); !status.ok()) return status;
    if (absl::Status status = ReadAll(fd, scratch, AlignFrame(t.bytes) - t.bytes); !status.ok()) return status;
    tensors.push_back(*std::move(tensor));
  }
  absl::MutexLock lock(&mu_);
  Connection& c = *connections_[peer];
  if (!c.mailbox.emplace(header.tag, std::move(tensors)).second) {
    return absl::DataLossError(absl::StrCat("actor ", peer, " sent tag ", header.tag, " again before it was received"));
  }
  changed_.SignalAll();
  return absl::OkStatus();
}

void TcpTransport::ReaderLoop(int32_t peer, int fd) {
  while (true) {
    absl::Status status = ReadFrame(peer, fd);
    if (status.ok()) continue;
    absl::MutexLock lock(&mu_);
    Connection& c = *connections_[peer];
    if (c.error.ok()) {
      c.error = status.code() == absl::StatusCode::kUnavailable
                    ? absl::UnavailableError(absl::StrCat("actor ", actor_, ": lost the connection to actor ", peer,
                                                          " (", status.message(), ")"))
                    : absl::Status(status.code(), absl::StrCat("actor ", actor_, ": ", status.message()));
    }
    changed_.SignalAll();
    if (!stopping_) shutdown(fd, SHUT_RDWR);  // a corrupt stream cannot be resynchronized
    return;
  }
}

absl::StatusOr<std::vector<ir::HostTensor>> TcpTransport::Receive(int32_t peer, uint64_t tag, absl::Time deadline) {
  if (absl::Status status = CheckPeer(peer); !status.ok()) return status;
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&mu_);
  while (true) {
    if (!abort_status_.ok()) return abort_status_;
    Connection* c = connections_[peer].get();
    if (c == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("actor ", actor_, ": not connected to actor ", peer));
    }
    auto it = c->mailbox.find(tag);
    if (it != c->mailbox.end()) {
      std::vector<ir::HostTensor> tensors = std::move(it->second);
      c->mailbox.erase(it);
      return tensors;
    }
    if (!c->error.ok()) return c->error;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no message from actor ", peer, " with tag ", tag, " after waiting ",
                       absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1)))));
    }
    changed_.WaitWithDeadline(&mu_, deadline);
  }
}

void TcpTransport::Abort(absl::Status status) {
  if (status.ok()) status = absl::AbortedError("aborted");
  absl::MutexLock lock(&mu_);
  if (!abort_status_.ok()) return;
  abort_status_ = std::move(status);
  changed_.SignalAll();
}

}  // namespace tandem::actor
