// Helpers shared by the data-plane transport tests: forked children joined
// to the test by a socketpair (reaped, killed when they overstay), a
// blocking byte exchange over it, a go-ahead, and deterministic tensors to
// send.
#ifndef TANDEM_TESTS_ACTOR_TRANSPORT_TEST_UTIL_H_
#define TANDEM_TESTS_ACTOR_TRANSPORT_TEST_UTIL_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "ir/host_tensor.h"

namespace tandem::actor::testing {

inline absl::Time In(absl::Duration timeout) { return absl::Now() + timeout; }

// Reports why a child fails and returns its exit code.
inline int ChildFailure(int code, absl::string_view why) {
  std::fprintf(stderr, "child failure %d: %s\n", code, std::string(why).c_str());
  return code;
}

// Blocking byte exchange over the socketpair, for handles and go-aheads.
inline bool WriteAll(int socket, const void* data, size_t bytes) {
  return write(socket, data, bytes) == static_cast<ssize_t>(bytes);
}
inline bool ReadAll(int socket, void* data, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = read(socket, static_cast<char*>(data) + done, bytes - done);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A go-ahead from the test to a forked child, through a pipe made before
// the fork: the test Give()s it once; the child's Wait() says whether it
// came within `timeout`. A child that must not start (receiving, say)
// before the test is done with something waits for it, so that "the test
// did not wait for the child" is a fact about order, not about timing.
class GoAhead {
 public:
  GoAhead() {
    if (pipe2(fds_, O_CLOEXEC) != 0) std::abort();
  }
  GoAhead(const GoAhead&) = delete;
  GoAhead& operator=(const GoAhead&) = delete;
  ~GoAhead() {
    close(fds_[0]);
    close(fds_[1]);
  }
  void Give() const { (void)!write(fds_[1], "g", 1); }
  bool Wait(absl::Duration timeout) const {
    pollfd p{fds_[0], POLLIN, 0};
    char byte;
    return poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 1 && read(fds_[0], &byte, 1) == 1;
  }

 private:
  int fds_[2];
};

// A stranger on loopback: connects to "127.0.0.1:PORT" `address`, sends
// `bytes` and waits until the far end hangs up (at most 5 s), dropping
// what it is sent. Whether it was hung up on.
inline bool SendGarbage(const std::string& address, const std::string& bytes) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(static_cast<uint16_t>(std::atoi(address.c_str() + colon + 1)));
  peer.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool closed = false;
  if (connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) == 0 &&
      send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size())) {
    char buffer[256];
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (!closed && absl::Now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 50) > 0) closed = recv(fd, buffer, sizeof(buffer), 0) <= 0;
    }
  }
  close(fd);
  return closed;
}

// A forked child running `body(socket)`; reaped (killed if need be) by the
// test. Fork before the parent starts any thread of its own.
class ForkedChild {
 public:
  explicit ForkedChild(std::function<int(int socket)> body) {
    int sockets[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) std::abort();
    std::fflush(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      close(sockets[0]);
      _exit(body(sockets[1]));
    }
    close(sockets[1]);
    socket_ = sockets[0];
  }
  ForkedChild(const ForkedChild&) = delete;
  ForkedChild& operator=(const ForkedChild&) = delete;
  ~ForkedChild() {
    if (pid_ > 0) Wait(absl::Seconds(1));
    close(socket_);
  }
  int socket() const { return socket_; }
  pid_t pid() const { return pid_; }
  // The child's exit code; -1 when it had to be killed or died by a signal.
  int Wait(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) != pid_) {
      if (absl::Now() >= deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        pid_ = -1;
        return -1;
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int socket_ = -1;
};

// `elements` i32 values that depend on `seed` and the position.
inline ir::HostTensor Pattern(uint64_t seed, int64_t elements) {
  ir::HostTensor t(ir::TensorType{ir::DType::kI32, {elements}});
  for (int64_t i = 0; i < elements; ++i) t.i32()[i] = static_cast<int32_t>((seed * 1000003 + i) * 2654435761u);
  return t;
}

// Deterministic tensors of several dtypes and shapes, scaled by `seed`, one
// of them empty.
inline std::vector<ir::HostTensor> MixedTensors(int seed) {
  std::vector<ir::HostTensor> tensors;
  tensors.push_back(ir::HostTensor::FromFloats({2, 3}, {0.5f * seed, -1, 2, 3.25f, 1e-20f, 7}));
  tensors.push_back(ir::HostTensor::FromInts({5}, {seed, -2, 3, 1 << 30, 0}));
  ir::HostTensor half(ir::TensorType{ir::DType::kBF16, {4, 1, 3}});
  for (int64_t i = 0; i < half.num_bytes(); ++i) half.data()[i] = std::byte(static_cast<uint8_t>(i * 37 + seed));
  tensors.push_back(half);
  tensors.push_back(ir::HostTensor::Scalar(static_cast<float>(seed)));
  tensors.push_back(ir::HostTensor(ir::TensorType{ir::DType::kF16, {0, 4}}));
  return tensors;
}

// Replica `replica`'s bucket of an all-reduce test: values whose float sum
// depends on the order of the additions, so that only the replica-ordered
// sum gives the reference's bits.
inline std::vector<float> OrderSensitiveBucket(int32_t replica, int64_t elements) {
  std::vector<float> bucket(elements);
  for (int64_t i = 0; i < elements; ++i) {
    const float big = (i % 3 == 0) ? 1e8f : 1.0f;
    bucket[i] = (replica % 2 == 0 ? big : -big) + 0.1f * static_cast<float>(replica + 1) + static_cast<float>(i);
  }
  return bucket;
}

}  // namespace tandem::actor::testing

#endif  // TANDEM_TESTS_ACTOR_TRANSPORT_TEST_UTIL_H_
