#include "tests/testing/recording_relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace tandem::test {
namespace {

[[noreturn]] void Die(const char* what) {
  std::perror(what);
  std::abort();
}

sockaddr_in Loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

}  // namespace

RecordingRelay::RecordingRelay(std::string target) : target_(std::move(target)) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = Loopback(0);
  socklen_t length = sizeof(address);
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(listen_fd_, 64) != 0 || getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    Die("RecordingRelay: listen");
  }
  port_ = ntohs(address.sin_port);
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) Die("RecordingRelay: eventfd");
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

RecordingRelay::~RecordingRelay() {
  const uint64_t one = 1;
  if (write(stop_fd_, &one, sizeof(one)) != sizeof(one)) Die("RecordingRelay: stop");
  acceptor_.join();
  std::vector<std::thread> pumps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (int fd : sockets_) shutdown(fd, SHUT_RDWR);
    pumps = std::move(pumps_);
  }
  for (std::thread& pump : pumps) pump.join();
  for (int fd : sockets_) close(fd);
  close(listen_fd_);
  close(stop_fd_);
}

std::string RecordingRelay::address() const { return "127.0.0.1:" + std::to_string(port_); }

std::vector<RecordingRelay::Record> RecordingRelay::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

int RecordingRelay::connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(records_.size() / 2);
}

int64_t RecordingRelay::total_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t total = 0;
  for (const Record& record : records_) total += static_cast<int64_t>(record.bytes.size());
  return total;
}

bool RecordingRelay::Carried(const std::string& needle) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Record& record : records_) {
    if (record.bytes.find(needle) != std::string::npos) return true;
  }
  return false;
}

void RecordingRelay::AcceptLoop() {
  const size_t colon = target_.rfind(':');
  const int target_port = std::atoi(target_.substr(colon + 1).c_str());
  while (true) {
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) continue;
    if (fds[0].revents != 0) return;
    const int dialer = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (dialer < 0) continue;
    const int upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address = Loopback(target_port);
    if (upstream < 0 || connect(upstream, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      close(dialer);
      if (upstream >= 0) close(upstream);
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      close(dialer);
      close(upstream);
      return;
    }
    const int connection = static_cast<int>(records_.size() / 2);
    sockets_.push_back(dialer);
    sockets_.push_back(upstream);
    records_.push_back({connection, true, ""});
    records_.push_back({connection, false, ""});
    const size_t forth = records_.size() - 2;
    pumps_.emplace_back([this, dialer, upstream, forth] { Pump(dialer, upstream, forth); });
    pumps_.emplace_back([this, dialer, upstream, forth] { Pump(upstream, dialer, forth + 1); });
  }
}

void RecordingRelay::Pump(int from, int to, size_t record) {
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = recv(from, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    {
      std::lock_guard<std::mutex> lock(mu_);
      records_[record].bytes.append(buffer, static_cast<size_t>(n));
    }
    for (ssize_t sent = 0; sent < n;) {
      const ssize_t m = send(to, buffer + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
      if (m <= 0) {
        shutdown(from, SHUT_RD);
        return;
      }
      sent += m;
    }
  }
  shutdown(to, SHUT_WR);
}

}  // namespace tandem::test
