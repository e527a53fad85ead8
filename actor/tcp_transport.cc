#include "actor/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/data_plane_frame.h"
#include "actor/socket_io.h"
#include "ir/errno_status.h"
#include "rpc/auth.h"
#include "rpc/rate_limited_log.h"

namespace tandem::actor {

std::string TcpTransport::ActorName(const Options& options, int32_t rank) {
  if (options.actor_ids.empty()) return absl::StrCat("actor ", rank);
  if (rank < 0 || rank >= static_cast<int32_t>(options.actor_ids.size())) return absl::StrCat("rank ", rank);
  return absl::StrCat("actor ", options.actor_ids[static_cast<size_t>(rank)], " (rank ", rank, " of its ",
                      options.group_name, ")");
}

std::string TcpTransport::Name(int32_t rank) const { return ActorName(options_, rank); }
namespace {

// The handshake, in order: the acceptor's challenge, the dialer's hello
// (its answer, and a challenge of its own), the acceptor's welcome (its
// answer to that): each side proves the job's token to the other
// (rpc/auth.h). Fixed sizes: nothing read here is allocated by a size from
// the wire.
constexpr uint64_t kChallengeMagic = 0x54444d43484c4e47;  // "TDMCHLNG"
constexpr uint64_t kHelloMagic = 0x54444d48454c4c4f;      // "TDMHELLO"
constexpr uint64_t kWelcomeMagic = 0x54444d57454c434d;    // "TDMWELCM"

struct Challenge {
  uint64_t magic;
  uint8_t nonce[rpc::kNonceBytes];
};

}  // namespace

// Named, not anonymous: a nested class of the header's class holds one, and
// in a unity batch (this file not the main one) GCC refuses a field of an
// anonymous namespace's type there (-Wsubobject-linkage).
namespace tcp_handshake {

struct Hello {
  uint64_t magic;
  int32_t from;
  int32_t to;
  uint8_t proof[rpc::kProofBytes];  // rpc::ProveConnection(token, challenge nonce, from, to)
  uint8_t nonce[rpc::kNonceBytes];  // the dialer's challenge to the acceptor
};

}  // namespace tcp_handshake

namespace {

using tcp_handshake::Hello;

struct Welcome {
  uint64_t magic;
  uint8_t proof[rpc::kProofBytes];  // rpc::ProveAcceptance(token, hello nonce, from, to)
};

// The acceptor's welcome to a verified hello: its answer to the dialer's
// challenge.
absl::StatusOr<Welcome> WelcomeFor(absl::string_view token, const Hello& hello, int32_t acceptor) {
  absl::StatusOr<rpc::Proof> proof =
      rpc::ProveAcceptance(token, rpc::Bytes(hello.nonce, sizeof(hello.nonce)), hello.from, acceptor);
  if (!proof.ok()) return proof.status();
  Welcome welcome{kWelcomeMagic, {}};
  std::copy(proof->begin(), proof->end(), welcome.proof);
  return welcome;
}

using socket_io::Errno;
using socket_io::ParseAddress;
using socket_io::PeerName;
using socket_io::ReadAllBy;
using socket_io::Tune;
using socket_io::WriteAll;

}  // namespace

struct TcpTransport::Outgoing {
  FrameLayout layout;
  std::vector<ir::HostTensor> tensors;
  std::vector<std::byte> raw;  // SendRawForTesting only
};

// A connection being challenged: what the acceptor sent, and the hello so
// far.
struct TcpTransport::Handshake {
  int fd = -1;
  std::string from;  // the far end's address, for notices
  absl::Time deadline;
  rpc::Nonce nonce{};
  Hello hello{};
  size_t received = 0;  // bytes of `hello`
};

struct TcpTransport::Connection {
  int fd = -1;
  std::thread reader;
  std::thread writer;
  std::deque<Outgoing> queue;
  bool writing = false;
};

TcpTransport::TcpTransport(int32_t actor, int32_t num_actors, Options options, int listen_fd, int wake_fd, int port)
    : actor_(actor),
      num_actors_(num_actors),
      options_(std::move(options)),
      listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      port_(port),
      mailbox_(num_actors) {
  {
    absl::MutexLock lock(&mu_);
    connections_.resize(num_actors);
  }
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::Listen(int32_t actor, int32_t num_actors,
                                                                   Options options) {
  if (absl::Status status = CheckActor(actor, num_actors); !status.ok()) return status;
  absl::StatusOr<sockaddr_in> addr = ParseAddress(absl::StrCat(options.bind_host, ":1"));
  if (!addr.ok()) return addr.status();
  addr->sin_port = 0;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t length = sizeof(*addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&*addr), &length) != 0) {
    absl::Status status = Errno(absl::StrCat(ActorName(options, actor), ": listening on ", options.bind_host));
    close(fd);
    return status;
  }
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    absl::Status status = Errno("eventfd");
    close(fd);
    return status;
  }
  return std::unique_ptr<TcpTransport>(
      new TcpTransport(actor, num_actors, std::move(options), fd, wake_fd, ntohs(addr->sin_port)));
}

TcpTransport::~TcpTransport() {
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) != sizeof(one)) std::perror("tandem: waking the data plane's acceptor");
  acceptor_.join();
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
  close(wake_fd_);
}

void TcpTransport::Start(int32_t peer, int fd, const StreamKeys& keys) {
  Tune(fd);
  absl::MutexLock lock(&mu_);
  auto connection = std::make_unique<Connection>();
  connection->fd = fd;
  connection->reader = std::thread([this, peer, fd, key = keys.receive] { ReaderLoop(peer, fd, key); });
  connection->writer = std::thread([this, peer, fd, key = keys.send] { WriterLoop(peer, fd, key); });
  connections_[peer] = std::move(connection);
  changed_.SignalAll();
}

absl::Status TcpTransport::Dial(int32_t peer, const std::string& address, absl::Time deadline) {
  absl::StatusOr<sockaddr_in> addr = ParseAddress(address);
  if (!addr.ok()) return addr.status();
  const std::string to = absl::StrCat(Name(actor_), ": connecting to ", Name(peer), " at ", address);
  int fd = -1;
  Challenge challenge{};
  absl::Status status;
  // Until the peer challenges us: it may not listen yet, or be busy
  // challenging others (then it hangs up at once; we try again).
  while (true) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Errno("socket");
    if (connect(fd, reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) == 0) {
      status = ReadAllBy(fd, &challenge, sizeof(challenge), deadline);
      if (status.code() != absl::StatusCode::kUnavailable) break;
    }
    close(fd);
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(to, ": it did not challenge this actor in time"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (status.ok() && challenge.magic != kChallengeMagic) {
    status = absl::DataLossError("what answered is not a Tandem data plane (no challenge)");
  }
  Hello hello{kHelloMagic, actor_, peer, {}, {}};
  if (status.ok()) {
    absl::StatusOr<rpc::Proof> proof =
        rpc::ProveConnection(options_.token, rpc::Bytes(challenge.nonce, sizeof(challenge.nonce)), actor_, peer);
    absl::StatusOr<rpc::Nonce> ours = rpc::MakeNonce();
    status = proof.ok() ? ours.status() : proof.status();
    if (status.ok()) {
      std::copy(proof->begin(), proof->end(), hello.proof);
      std::copy(ours->begin(), ours->end(), hello.nonce);
    }
  }
  if (status.ok()) status = WriteAll(fd, &hello, sizeof(hello));
  Welcome welcome{};
  if (status.ok()) {
    status = ReadAllBy(fd, &welcome, sizeof(welcome), deadline);
    if (status.code() == absl::StatusCode::kUnavailable) {
      status = absl::PermissionDeniedError(
          "it refused this actor's answer to its challenge (were the two given different job tokens?)");
    } else if (status.ok() && welcome.magic != kWelcomeMagic) {
      status = absl::DataLossError("it answered the hello with something else than a welcome");
    } else if (status.ok()) {
      if (absl::Status proven = rpc::CheckAcceptance(options_.token, rpc::Bytes(hello.nonce, sizeof(hello.nonce)),
                                                     actor_, peer, rpc::Bytes(welcome.proof, sizeof(welcome.proof)));
          !proven.ok()) {
        status = absl::PermissionDeniedError(
            "its welcome does not answer this actor's challenge with the job's token: it is not this job's actor");
      }
    }
  }
  absl::StatusOr<StreamKeys> keys = absl::FailedPreconditionError("the handshake did not finish");
  if (status.ok()) {
    rpc::Nonce acceptor_nonce;
    rpc::Nonce dialer_nonce;
    std::copy(std::begin(challenge.nonce), std::end(challenge.nonce), acceptor_nonce.begin());
    std::copy(std::begin(hello.nonce), std::end(hello.nonce), dialer_nonce.begin());
    keys = DeriveStreamKeys(options_.token, acceptor_nonce, dialer_nonce, actor_, peer, /*is_dialer=*/true);
    status = keys.status();
  }
  if (!status.ok()) {
    close(fd);
    return absl::Status(status.code(), absl::StrCat(to, ": ", status.message()));
  }
  Start(peer, fd, *keys);
  return absl::OkStatus();
}

absl::Status TcpTransport::ConnectPeers(const std::vector<std::string>& peer_addresses, absl::Duration timeout) {
  if (static_cast<int32_t>(peer_addresses.size()) != num_actors_) {
    return absl::InvalidArgumentError(absl::StrCat(Name(actor_), ": ", peer_addresses.size(),
                                                   " addresses for ", num_actors_, " actors"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  for (int32_t peer = 0; peer < actor_; ++peer) {
    if (peer_addresses[peer].empty()) continue;  // reached another way
    {
      absl::MutexLock lock(&mu_);
      if (connections_[peer] != nullptr) continue;
    }
    if (absl::Status status = Dial(peer, peer_addresses[peer], deadline); !status.ok()) return status;
  }
  // The higher-numbered actors dial us; the accepting thread starts them.
  int32_t expected = 0;
  for (int32_t peer = actor_ + 1; peer < num_actors_; ++peer) expected += peer_addresses[peer].empty() ? 0 : 1;
  absl::MutexLock lock(&mu_);
  while (true) {
    if (!mailbox_.abort_status().ok()) return mailbox_.abort_status();
    int32_t connected = 0;
    for (int32_t peer = actor_ + 1; peer < num_actors_; ++peer) {
      connected += !peer_addresses[peer].empty() && connections_[peer] != nullptr ? 1 : 0;
    }
    if (connected == expected) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(Name(actor_), ": only ", connected, " of ", expected,
                                                      " higher-numbered actors connected in time"));
    }
    changed_.WaitWithDeadline(&mu_, deadline);
  }
}

absl::StatusOr<int32_t> TcpTransport::Verify(const Handshake& handshake) {
  const Hello& hello = handshake.hello;
  if (hello.magic != kHelloMagic) return absl::InvalidArgumentError("it sent no Tandem data-plane hello");
  if (hello.to != actor_) {
    return absl::InvalidArgumentError(absl::StrCat("its hello is for actor ", hello.to, ", not this one"));
  }
  if (hello.from <= actor_ || hello.from >= num_actors_) {
    return absl::InvalidArgumentError(
        absl::StrCat("its hello claims actor ", hello.from, ", which does not dial this one"));
  }
  if (absl::Status proven = rpc::CheckConnection(options_.token, handshake.nonce, hello.from, hello.to,
                                                 rpc::Bytes(hello.proof, sizeof(hello.proof)));
      !proven.ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat("its answer as actor ", hello.from, " to the challenge was not made with the job's token"));
  }
  absl::MutexLock lock(&mu_);
  if (connections_[hello.from] != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat(Name(hello.from), " is connected already"));
  }
  return hello.from;
}

void TcpTransport::AcceptLoop() {
  auto sink = options_.log;
  if (!sink) {
    sink = [](absl::string_view line) {
      const std::string text = absl::StrCat("tandem: ", line, "\n");
      fwrite(text.data(), 1, text.size(), stderr);
    };
  }
  // Anyone who can reach the port can cause these notices.
  rpc::RateLimitedLog notices(std::move(sink), absl::StrCat(Name(actor_), " data plane"));
  std::vector<Handshake> pending;
  auto refuse = [&](int fd, absl::string_view from, absl::string_view why) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    notices.Log(absl::StrCat(Name(actor_), " refused a data-plane connection from ", from, ": ", why));
    close(fd);
  };
  while (true) {
    std::vector<pollfd> fds = {{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    absl::Time wake_at = absl::Now() + absl::Seconds(1);  // at least a Tick a second
    for (const Handshake& handshake : pending) {
      fds.push_back({handshake.fd, POLLIN, 0});
      wake_at = std::min(wake_at, handshake.deadline);
    }
    const int64_t wait_ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(wake_at - absl::Now()) + 1);
    if (poll(fds.data(), fds.size(), static_cast<int>(wait_ms)) < 0 && errno != EINTR) {
      notices.Log(absl::StrCat(Name(actor_), ": the data plane stopped accepting: poll: ", ir::ErrnoText(errno)));
      break;
    }
    if (fds[0].revents != 0) break;
    notices.Tick();
    const absl::Time now = absl::Now();
    // Handshakes in progress, last first so that erasing keeps the indices.
    for (size_t i = pending.size(); i-- > 0;) {
      Handshake& handshake = pending[i];
      if (fds[2 + i].revents != 0) {
        auto* into = reinterpret_cast<char*>(&handshake.hello) + handshake.received;
        const ssize_t n = recv(handshake.fd, into, sizeof(Hello) - handshake.received, MSG_DONTWAIT);
        if (n > 0) handshake.received += static_cast<size_t>(n);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          refuse(handshake.fd, handshake.from, "it hung up before it answered the challenge");
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
      }
      if (handshake.received == sizeof(Hello)) {
        absl::StatusOr<int32_t> peer = Verify(handshake);
        absl::StatusOr<Welcome> welcome =
            peer.ok() ? WelcomeFor(options_.token, handshake.hello, actor_) : absl::StatusOr<Welcome>(peer.status());
        rpc::Nonce dialer_nonce;
        std::copy(std::begin(handshake.hello.nonce), std::end(handshake.hello.nonce), dialer_nonce.begin());
        const absl::StatusOr<StreamKeys> keys =
            welcome.ok()
                ? DeriveStreamKeys(options_.token, handshake.nonce, dialer_nonce, *peer, actor_, /*is_dialer=*/false)
                : absl::StatusOr<StreamKeys>(welcome.status());
        const int fd = handshake.fd;
        const std::string from = handshake.from;
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
        if (!keys.ok()) {
          refuse(fd, from, keys.status().message());
        } else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 ||
                   !WriteAll(fd, &*welcome, sizeof(Welcome)).ok()) {
          refuse(fd, from, absl::StrCat(Name(*peer), " was gone before it was welcomed"));
        } else {
          Start(*peer, fd, *keys);
        }
      } else if (now >= handshake.deadline) {
        refuse(handshake.fd, handshake.from,
               absl::StrCat("no answer to the challenge within ", absl::FormatDuration(options_.handshake_timeout)));
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    if ((fds[1].revents & POLLIN) == 0) continue;
    // New connections: each gets a challenge at once.
    for (int accepted = 0; accepted < 16; ++accepted) {
      sockaddr_storage address{};
      socklen_t length = sizeof(address);
      const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      Handshake handshake;
      handshake.fd = fd;
      handshake.from = PeerName(address);
      handshake.deadline = absl::Now() + options_.handshake_timeout;
      if (static_cast<int>(pending.size()) >= options_.max_pending_handshakes) {
        refuse(fd, handshake.from,
               absl::StrCat("too many connections (", pending.size(), ") are answering challenges at once"));
        continue;
      }
      absl::StatusOr<rpc::Nonce> nonce = rpc::MakeNonce();
      if (!nonce.ok()) {
        refuse(fd, handshake.from, nonce.status().message());
        continue;
      }
      handshake.nonce = *nonce;
      Challenge challenge{kChallengeMagic, {}};
      std::copy(nonce->begin(), nonce->end(), challenge.nonce);
      // A fresh socket's buffer takes these few bytes at once.
      if (send(fd, &challenge, sizeof(challenge), MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof(challenge)) {
        refuse(fd, handshake.from, "it could not be sent a challenge");
        continue;
      }
      Tune(fd);
      pending.push_back(std::move(handshake));
    }
  }
  for (const Handshake& handshake : pending) close(handshake.fd);
}

absl::Status TcpTransport::Flush(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (true) {
    bool pending = false;
    for (int32_t peer = 0; peer < num_actors_; ++peer) {
      const Connection* c = connections_[peer].get();
      if (c != nullptr && mailbox_.peer_error(peer).ok() && (!c->queue.empty() || c->writing)) pending = true;
    }
    if (!pending) return absl::OkStatus();
    if (changed_.WaitWithDeadline(&mu_, deadline) || absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(Name(actor_), ": messages still queued at the deadline"));
    }
  }
}

absl::Status TcpTransport::Send(int32_t peer, uint64_t tag, std::vector<ir::HostTensor> tensors) {
  if (absl::Status status = CheckPeer(actor_, num_actors_, peer); !status.ok()) return status;
  absl::StatusOr<FrameLayout> layout = PlanFrame(actor_, peer, tag, tensors);
  if (!layout.ok()) return layout.status();
  absl::MutexLock lock(&mu_);
  if (!mailbox_.abort_status().ok()) return mailbox_.abort_status();
  Connection* c = connections_[peer].get();
  if (c == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(Name(actor_), ": not connected to ", Name(peer)));
  }
  if (!mailbox_.peer_error(peer).ok()) return mailbox_.peer_error(peer);
  c->queue.push_back(Outgoing{*std::move(layout), std::move(tensors), {}});
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::Status TcpTransport::SendRawForTesting(int32_t peer, const std::vector<std::byte>& bytes) {
  if (absl::Status status = CheckPeer(actor_, num_actors_, peer); !status.ok()) return status;
  absl::MutexLock lock(&mu_);
  if (connections_[peer] == nullptr) return absl::FailedPreconditionError("not connected");
  connections_[peer]->queue.push_back(Outgoing{{}, {}, bytes});
  changed_.SignalAll();
  return absl::OkStatus();
}

void TcpTransport::WriterLoop(int32_t peer, int fd, const SealKey& key) {
  static constexpr std::byte kZeros[kFrameAlignment] = {};
  SealedWriter writer(fd, key);
  while (true) {
    Outgoing message;
    {
      absl::MutexLock lock(&mu_);
      Connection& c = *connections_[peer];
      c.writing = false;
      changed_.SignalAll();
      while (!stopping_ && mailbox_.peer_error(peer).ok() && c.queue.empty()) {
        changed_.WaitWithTimeout(&mu_, absl::Milliseconds(200));
      }
      if (stopping_ || !mailbox_.peer_error(peer).ok()) return;
      message = std::move(c.queue.front());
      c.queue.pop_front();
      c.writing = true;
    }
    absl::Status status;
    if (!message.raw.empty()) {
      status = writer.Write(message.raw.data(), message.raw.size());
    } else {
      std::vector<std::byte> head(message.layout.head_bytes);
      WriteFrameHead(message.layout, head.data());
      status = writer.Write(head.data(), head.size());
      for (size_t i = 0; status.ok() && i < message.tensors.size(); ++i) {
        const uint64_t bytes = message.layout.descriptors[i].bytes;
        status = writer.Write(message.tensors[i].data(), bytes);
        if (status.ok() && AlignFrame(bytes) != bytes) status = writer.Write(kZeros, AlignFrame(bytes) - bytes);
      }
    }
    if (status.ok()) status = writer.Flush();
    if (!status.ok()) {
      absl::MutexLock lock(&mu_);
      mailbox_.FailPeer(peer, absl::UnavailableError(absl::StrCat(Name(actor_), ": sending to ", Name(peer),
                                                                  " failed: ", status.message())));
      connections_[peer]->writing = false;
      changed_.SignalAll();
      return;
    }
  }
}

absl::Status TcpTransport::ReadFrame(int32_t peer, SealedReader& reader) {
  FrameHeader header;
  if (absl::Status status = reader.Read(&header, sizeof(header)); !status.ok()) return status;
  if (absl::Status status = ValidateFrameHeader(header, peer, actor_, options_.max_frame_bytes); !status.ok()) {
    return status;
  }
  std::vector<TensorDescriptor> descriptors(header.num_tensors);
  if (absl::Status status = reader.Read(descriptors.data(), descriptors.size() * sizeof(TensorDescriptor));
      !status.ok()) {
    return status;
  }
  std::byte scratch[kFrameAlignment];
  const uint64_t head_pad = FrameHeadBytes(header.num_tensors) - sizeof(header) - descriptors.size() * sizeof(TensorDescriptor);
  if (absl::Status status = reader.Read(scratch, head_pad); !status.ok()) return status;
  absl::StatusOr<std::vector<FrameTensor>> parsed = ParseFrameTensors(header, descriptors.data(), peer);
  if (!parsed.ok()) return parsed.status();
  std::vector<ir::HostTensor> tensors;
  for (FrameTensor& t : *parsed) {
    absl::StatusOr<ir::HostTensor> tensor = ir::HostTensor::Allocate(std::move(t.type));
    if (!tensor.ok()) return tensor.status();
    if (absl::Status status = reader.Read(tensor->data(), t.bytes); !status.ok()) return status;
    if (absl::Status status = reader.Read(scratch, AlignFrame(t.bytes) - t.bytes); !status.ok()) return status;
    tensors.push_back(*std::move(tensor));
  }
  absl::MutexLock lock(&mu_);
  return mailbox_.File(peer, header.tag, std::move(tensors));
}

void TcpTransport::ReaderLoop(int32_t peer, int fd, const SealKey& key) {
  SealedReader reader(fd, key);
  while (true) {
    absl::Status status = ReadFrame(peer, reader);
    if (status.ok()) continue;
    absl::MutexLock lock(&mu_);
    mailbox_.FailPeer(peer, status.code() == absl::StatusCode::kUnavailable
                                ? absl::UnavailableError(absl::StrCat(Name(actor_), ": lost the connection to ",
                                                                      Name(peer), " (", status.message(), ")"))
                                : absl::Status(status.code(), absl::StrCat(Name(actor_), ": ", status.message())));
    changed_.SignalAll();  // the writer and Flush
    if (!stopping_) shutdown(fd, SHUT_RDWR);  // a corrupt stream cannot be resynchronized
    return;
  }
}

absl::StatusOr<std::vector<ir::HostTensor>> TcpTransport::Receive(int32_t peer, uint64_t tag, absl::Time deadline) {
  if (absl::Status status = CheckPeer(actor_, num_actors_, peer); !status.ok()) return status;
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&mu_);
  if (connections_[peer] == nullptr && mailbox_.abort_status().ok()) {
    return absl::FailedPreconditionError(absl::StrCat(Name(actor_), ": not connected to ", Name(peer)));
  }
  return mailbox_.Receive(mu_, peer, tag, start, deadline);
}

void TcpTransport::Abort(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (mailbox_.Abort(std::move(status))) changed_.SignalAll();  // ConnectPeers
}

}  // namespace tandem::actor
