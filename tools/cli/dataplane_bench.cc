// `tandem bench dataplane`: throughput of the process data planes between
// two forked processes (shared memory borrowing in place, shared memory
// copying out, TCP over loopback) for 64 KiB ... 64 MiB messages, next to a
// single-thread memcpy and a raw loopback TCP socket measured in the same
// run. Each figure is the better of two rounds of ~256 MiB; a round ends
// when the receiver acknowledges its last message.
//
// With --device cuda[:N] (or fake-cuda): device tensors between two actor
// processes on one device, over the CUDA IPC data plane (DeviceTransport),
// next to a device-to-device copy in one process on the same device
// (DeviceMemory::CopyAsync). Every process that touches the device is a
// forked child (CUDA must not be initialised before a fork); the sender
// reports its rate to the parent over a pipe.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "actor/device_transport.h"
#include "actor/shm_transport.h"
#include "actor/tcp_transport.h"
#include "backends/device.h"
#include "backends/open_device.h"
#include "ir/device_spec.h"
#include "schedules/json_text.h"
#include "tools/cli/commands.h"

namespace tandem::cli {
namespace {

using actor::ShmTransport;
using actor::TcpTransport;
using actor::Transport;

enum class Medium { kShmBorrow, kShmCopy, kTcp, kRawSocket };
constexpr int kRounds = 2;
constexpr int64_t kBytesPerRound = int64_t{256} << 20;

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double MemcpyGbps(int64_t size, int64_t count) {
  std::vector<char> from(size, 1), to(size, 0);
  double best = 1e30;
  for (int round = 0; round < kRounds + 1; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < count; ++i) {
      from[0] = static_cast<char>(i);
      std::memcpy(to.data(), from.data(), size);
    }
    if (round > 0) best = std::min(best, Seconds(start));  // round 0 warms up
  }
  volatile char sink = to[size - 1];
  (void)sink;
  return static_cast<double>(size) * count / best / 1e9;
}

// One side's transport: both processes call this with their actor id.
absl::StatusOr<std::unique_ptr<Transport>> Connect(Medium medium, int32_t self, int socket) {
  const int32_t peer = 1 - self;
  if (medium == Medium::kTcp) {
    absl::StatusOr<std::unique_ptr<TcpTransport>> tcp = TcpTransport::Listen(self, 2, {});
    if (!tcp.ok()) return tcp.status();
    int port = (*tcp)->port(), peer_port = 0;
    if (write(socket, &port, sizeof(port)) != sizeof(port) || read(socket, &peer_port, sizeof(port)) != sizeof(port)) {
      return absl::UnavailableError("port exchange failed");
    }
    std::vector<std::string> addresses(2);
    addresses[peer] = absl::StrCat("127.0.0.1:", peer_port);
    if (absl::Status s = (*tcp)->ConnectPeers(addresses, absl::Seconds(10)); !s.ok()) return s;
    return std::unique_ptr<Transport>(std::move(*tcp));
  }
  ShmTransport::Options options;
  options.receive_mode =
      medium == Medium::kShmCopy ? ShmTransport::ReceiveMode::kCopy : ShmTransport::ReceiveMode::kBorrow;
  absl::StatusOr<std::unique_ptr<ShmTransport>> shm = ShmTransport::Create(self, 2, options);
  if (!shm.ok()) return shm.status();
  if (absl::Status s = actor::SendFd(socket, (*shm)->OutboundFd(peer)); !s.ok()) return s;
  absl::StatusOr<int> fd = actor::ReceiveFd(socket, absl::Now() + absl::Seconds(10));
  if (!fd.ok()) return fd.status();
  if (absl::Status s = (*shm)->AttachInbound(peer, *fd); !s.ok()) return s;
  return std::unique_ptr<Transport>(std::move(*shm));
}

// The receiving child: `count` messages per round, then an acknowledgement.
int TransportReceiver(Medium medium, int socket, int64_t count) {
  absl::StatusOr<std::unique_ptr<Transport>> t = Connect(medium, 1, socket);
  if (!t.ok()) return 1;
  for (int round = 0; round <= kRounds; ++round) {
    for (int64_t i = 0; i < count; ++i) {
      if (!(*t)->Receive(0, round * count + i, absl::Now() + absl::Seconds(30)).ok()) return 2;
    }
    if (!(*t)->Send(0, 1u << 30 | round, {ir::HostTensor::Scalar(1)}).ok()) return 3;
  }
  absl::SleepFor(absl::Milliseconds(200));  // let the last acknowledgement leave
  return 0;
}

absl::StatusOr<double> TransportSender(Medium medium, int socket, int64_t size, int64_t count) {
  absl::StatusOr<std::unique_ptr<Transport>> t = Connect(medium, 0, socket);
  if (!t.ok()) return t.status();
  ir::HostTensor payload(ir::TensorType{ir::DType::kF32, {size / 4}});
  std::memset(payload.data(), 7, size);
  double best = 1e30;
  for (int round = 0; round <= kRounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < count; ++i) {
      if (absl::Status s = (*t)->Send(1, round * count + i, {payload}); !s.ok()) return s;
    }
    absl::StatusOr<std::vector<ir::HostTensor>> ack =
        (*t)->Receive(1, 1u << 30 | round, absl::Now() + absl::Seconds(60));
    if (!ack.ok()) return ack.status();
    if (round > 0) best = std::min(best, Seconds(start));
  }
  return static_cast<double>(size) * count / best / 1e9;
}

int RawReceiver(int socket, int64_t size, int64_t count) {
  int port = 0;
  if (read(socket, &port, sizeof(port)) != sizeof(port)) return 1;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return 2;
  std::vector<char> buffer(size);
  for (int round = 0; round <= kRounds; ++round) {
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t got = 0; got < size;) {
        const ssize_t n = recv(fd, buffer.data() + got, size - got, 0);
        if (n <= 0) return 3;
        got += n;
      }
    }
    char ack = 'a';
    if (send(fd, &ack, 1, MSG_NOSIGNAL) != 1) return 4;
  }
  close(fd);
  return 0;
}

absl::StatusOr<double> RawSender(int socket, int64_t size, int64_t count) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    return absl::UnavailableError("raw socket setup failed");
  }
  int port = ntohs(addr.sin_port);
  if (write(socket, &port, sizeof(port)) != sizeof(port)) return absl::UnavailableError("port exchange failed");
  const int fd = accept(listener, nullptr, nullptr);
  close(listener);
  if (fd < 0) return absl::UnavailableError("accept failed");
  std::vector<char> buffer(size, 7);
  double best = 1e30;
  for (int round = 0; round <= kRounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t sent = 0; sent < size;) {
        const ssize_t n = send(fd, buffer.data() + sent, size - sent, MSG_NOSIGNAL);
        if (n <= 0) return absl::UnavailableError("send failed");
        sent += n;
      }
    }
    char ack;
    if (recv(fd, &ack, 1, 0) != 1) return absl::UnavailableError("no acknowledgement");
    if (round > 0) best = std::min(best, Seconds(start));
  }
  close(fd);
  return static_cast<double>(size) * count / best / 1e9;
}

// Runs one medium between this process (sender) and a forked receiver.
absl::StatusOr<double> Measure(Medium medium, int64_t size, int64_t count) {
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) return absl::UnavailableError("socketpair");
  const pid_t pid = fork();
  if (pid < 0) return absl::UnavailableError("fork failed");
  if (pid == 0) {
    close(sockets[0]);
    _exit(medium == Medium::kRawSocket ? RawReceiver(sockets[1], size, count)
                                       : TransportReceiver(medium, sockets[1], count));
  }
  close(sockets[1]);
  absl::StatusOr<double> gbps = medium == Medium::kRawSocket ? RawSender(sockets[0], size, count)
                                                             : TransportSender(medium, sockets[0], size, count);
  close(sockets[0]);
  // Reap the child within 10 s, killing it if it overstays.
  int status = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (absl::Now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return gbps;
}

// ---- Device tensors on one device.

// The device of a forked child (after the fork: CUDA state does not survive
// one).
absl::StatusOr<std::shared_ptr<backends::Device>> OpenInChild(const ir::DeviceSpec& spec, int32_t actor) {
  absl::StatusOr<std::shared_ptr<backends::Device>> device = backends::OpenDevice(spec, actor);
  if (!device.ok()) return device.status();
  if ((*device)->memory() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("device ", (*device)->name(), " is not device-resident"));
  }
  return device;
}

// Both children's transports: a host channel (shared memory) and the CUDA
// IPC data plane over it, with rings that hold a message of `size` bytes.
struct DevicePair {
  std::shared_ptr<backends::Device> device;
  std::unique_ptr<Transport> host;
  std::unique_ptr<actor::DeviceTransport> transport;
};
absl::StatusOr<DevicePair> ConnectDevices(const ir::DeviceSpec& spec, int32_t self, int socket, int64_t size) {
  DevicePair pair;
  absl::StatusOr<std::shared_ptr<backends::Device>> device = OpenInChild(spec, self);
  if (!device.ok()) return device.status();
  pair.device = *std::move(device);
  absl::StatusOr<std::unique_ptr<Transport>> host = Connect(Medium::kShmCopy, self, socket);
  if (!host.ok()) return host.status();
  pair.host = *std::move(host);
  actor::DeviceTransport::Options options;
  options.ipc.ring_bytes = std::max<int64_t>(int64_t{64} << 20, 2 * size + (int64_t{1} << 20));
  absl::StatusOr<std::unique_ptr<actor::DeviceTransport>> transport =
      actor::DeviceTransport::Create(*pair.host, *pair.device->memory(), 2, options);
  if (!transport.ok()) return transport.status();
  pair.transport = *std::move(transport);
  if (absl::Status s = pair.transport->Connect({1 - self}, absl::Now() + absl::Seconds(30)); !s.ok()) return s;
  return pair;
}

int DeviceReceiver(const ir::DeviceSpec& spec, int socket, int64_t size, int64_t count) {
  absl::StatusOr<DevicePair> pair = ConnectDevices(spec, 1, socket, size);
  if (!pair.ok()) return 1;
  for (int round = 0; round <= kRounds; ++round) {
    for (int64_t i = 0; i < count; ++i) {
      // Dropped at once: the next receive may reuse its memory.
      if (!pair->transport->ReceiveDevice(0, round * count + i, absl::Now() + absl::Seconds(30)).ok()) return 2;
    }
    // The copies out of the ring are on the stream: done before the ack.
    if (!pair->device->memory()->SynchronizeStream(absl::Now() + absl::Seconds(30)).ok()) return 3;
    if (!pair->host->Send(0, 1u << 30 | round, {ir::HostTensor::Scalar(1)}).ok()) return 4;
  }
  if (!pair->transport->Flush(absl::Now() + absl::Seconds(10)).ok()) return 5;
  absl::SleepFor(absl::Milliseconds(200));  // let the last acknowledgement leave
  return 0;
}

absl::StatusOr<double> DeviceSender(const ir::DeviceSpec& spec, int socket, int64_t size, int64_t count) {
  absl::StatusOr<DevicePair> pair = ConnectDevices(spec, 0, socket, size);
  if (!pair.ok()) return pair.status();
  ir::HostTensor host_payload(ir::TensorType{ir::DType::kF32, {size / 4}});
  std::memset(host_payload.data(), 7, size);
  absl::StatusOr<backends::TensorHandle> payload = pair->device->Upload(host_payload);
  if (!payload.ok()) return payload.status();
  double best = 1e30;
  for (int round = 0; round <= kRounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < count; ++i) {
      if (absl::Status s = pair->transport->SendDevice(1, round * count + i, {payload->device()}); !s.ok()) return s;
    }
    absl::StatusOr<std::vector<ir::HostTensor>> ack =
        pair->host->Receive(1, 1u << 30 | round, absl::Now() + absl::Seconds(60));
    if (!ack.ok()) return ack.status();
    if (round > 0) best = std::min(best, Seconds(start));
  }
  if (absl::Status s = pair->transport->Flush(absl::Now() + absl::Seconds(10)); !s.ok()) return s;
  return static_cast<double>(size) * count / best / 1e9;
}

// One process: `count` device-to-device copies of `size` bytes on the
// device's stream, the best of kRounds rounds.
absl::StatusOr<double> DeviceCopy(const ir::DeviceSpec& spec, int64_t size, int64_t count) {
  absl::StatusOr<std::shared_ptr<backends::Device>> device = OpenInChild(spec, 0);
  if (!device.ok()) return device.status();
  backends::DeviceMemory& memory = *(*device)->memory();
  absl::StatusOr<std::shared_ptr<backends::DeviceAllocation>> from = backends::DeviceAllocation::Allocate(memory, size);
  absl::StatusOr<std::shared_ptr<backends::DeviceAllocation>> to = backends::DeviceAllocation::Allocate(memory, size);
  if (!from.ok()) return from.status();
  if (!to.ok()) return to.status();
  double best = 1e30;
  for (int round = 0; round <= kRounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < count; ++i) {
      if (absl::Status s = memory.CopyAsync((*to)->address(), (*from)->address(), size); !s.ok()) return s;
    }
    if (absl::Status s = memory.SynchronizeStream(absl::Now() + absl::Seconds(60)); !s.ok()) return s;
    if (round > 0) best = std::min(best, Seconds(start));
  }
  return static_cast<double>(size) * count / best / 1e9;
}

// Runs `measure` in a forked child and reads its GB/s (or its error) back.
absl::StatusOr<double> InChild(const std::function<absl::StatusOr<double>()>& measure,
                               const std::function<int()>& partner = nullptr, int partner_socket = -1,
                               int own_socket = -1) {
  int result_pipe[2];
  if (pipe2(result_pipe, O_CLOEXEC) != 0) return absl::UnavailableError("pipe failed");
  pid_t partner_pid = -1;
  if (partner) {
    partner_pid = fork();
    if (partner_pid < 0) return absl::UnavailableError("fork failed");
    if (partner_pid == 0) {
      close(result_pipe[0]);
      close(result_pipe[1]);
      if (own_socket >= 0) close(own_socket);
      _exit(partner());
    }
  }
  const pid_t pid = fork();
  if (pid < 0) return absl::UnavailableError("fork failed");
  if (pid == 0) {
    close(result_pipe[0]);
    if (partner_socket >= 0) close(partner_socket);
    absl::StatusOr<double> gbps = measure();
    const std::string reply = gbps.ok() ? absl::StrCat("ok ", *gbps) : absl::StrCat("error ", gbps.status().message());
    (void)!write(result_pipe[1], reply.data(), reply.size());
    _exit(0);
  }
  close(result_pipe[1]);
  if (partner_socket >= 0) close(partner_socket);
  if (own_socket >= 0) close(own_socket);
  std::string reply;
  char buffer[512];
  ssize_t got;
  while ((got = read(result_pipe[0], buffer, sizeof(buffer))) > 0) reply.append(buffer, static_cast<size_t>(got));
  close(result_pipe[0]);
  // Reap both within 10 s, killing what overstays.
  for (pid_t child : {pid, partner_pid}) {
    if (child < 0) continue;
    int status = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (waitpid(child, &status, WNOHANG) != child) {
      if (absl::Now() >= deadline) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  double gbps = 0;
  absl::string_view answer = reply;
  if (absl::ConsumePrefix(&answer, "ok ") && absl::SimpleAtod(answer, &gbps)) return gbps;
  absl::string_view why = reply;
  absl::ConsumePrefix(&why, "error ");
  return absl::UnavailableError(why.empty() ? "the measuring process died" : std::string(why));
}

int RunDeviceDataplaneBench(const ir::DeviceSpec& spec, bool json, std::ostream& out, std::ostream& err) {
  struct Row {
    int64_t size;
    double copy, ipc;
  };
  std::vector<Row> rows;
  for (int64_t size : {int64_t{64} << 10, int64_t{1} << 20, int64_t{16} << 20, int64_t{64} << 20}) {
    const int64_t count = std::max<int64_t>(4, kBytesPerRound / size);
    absl::StatusOr<double> copy = InChild([&] { return DeviceCopy(spec, size, count); });
    if (!copy.ok()) {
      err << "tandem bench dataplane: device copy: " << copy.status().message() << "\n";
      return 1;
    }
    int sockets[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
      err << "tandem bench dataplane: socketpair failed\n";
      return 1;
    }
    absl::StatusOr<double> ipc =
        InChild([&] { return DeviceSender(spec, sockets[0], size, count); },
                [&] { return DeviceReceiver(spec, sockets[1], size, count); }, sockets[1], sockets[0]);
    if (!ipc.ok()) {
      err << "tandem bench dataplane: device IPC: " << ipc.status().message() << "\n";
      return 1;
    }
    rows.push_back({size, *copy, *ipc});
  }
  auto label = [](int64_t size) {
    return size >= (1 << 20) ? absl::StrCat(size >> 20, " MiB") : absl::StrCat(size >> 10, " KiB");
  };
  const std::string device = ir::DeviceSpecName(spec);
  if (json) {
    nlohmann::ordered_json json_rows = nlohmann::ordered_json::array();
    for (const Row& r : rows) {
      json_rows.push_back({{"bytes", r.size}, {"device_copy", r.copy}, {"ipc", r.ipc}, {"ipc_over_copy", r.ipc / r.copy}});
    }
    const nlohmann::ordered_json json = {
        {"unit", "GB/s"}, {"device", device}, {"goal_ipc_over_copy_at_16MiB", 0.8}, {"rows", json_rows}};
    out << schedules::JsonText(json) << "\n";
    return 0;
  }
  out << "device tensors between two processes on " << device << ", GB/s of payload (best of " << kRounds
      << " rounds of ~256 MiB)\n";
  out << absl::StrFormat("%-8s %12s %8s %10s\n", "message", "device-copy", "ipc", "ipc/copy");
  for (const Row& r : rows) {
    out << absl::StrFormat("%-8s %12.2f %8.2f %9.2fx\n", label(r.size), r.copy, r.ipc, r.ipc / r.copy);
  }
  out << "device-copy: one process copying device to device on its stream; ipc: the CUDA IPC data plane\n"
         "(sender copies into the receiver's ring, receiver copies out). goal: ipc >= 0.8x device-copy at 16 MiB\n";
  return 0;
}

int RunDataplaneBench(bool json, std::ostream& out, std::ostream& err) {
  struct Row {
    int64_t size;
    double memcpy, shm, shm_copy, tcp, raw;
  };
  std::vector<Row> rows;
  for (int64_t size : {int64_t{64} << 10, int64_t{1} << 20, int64_t{16} << 20, int64_t{64} << 20}) {
    const int64_t count = std::max<int64_t>(4, kBytesPerRound / size);
    Row row{size, MemcpyGbps(size, count), 0, 0, 0, 0};
    for (auto [medium, field] : {std::pair{Medium::kShmBorrow, &Row::shm}, std::pair{Medium::kShmCopy, &Row::shm_copy},
                                 std::pair{Medium::kTcp, &Row::tcp}, std::pair{Medium::kRawSocket, &Row::raw}}) {
      absl::StatusOr<double> gbps = Measure(medium, size, count);
      if (!gbps.ok()) {
        err << "tandem bench dataplane: " << gbps.status().message() << "\n";
        return 1;
      }
      row.*field = *gbps;
    }
    rows.push_back(row);
  }
  auto label = [](int64_t size) {
    return size >= (1 << 20) ? absl::StrCat(size >> 20, " MiB") : absl::StrCat(size >> 10, " KiB");
  };
  if (json) {
    nlohmann::ordered_json json_rows = nlohmann::ordered_json::array();
    for (const Row& r : rows) {
      json_rows.push_back({{"bytes", r.size}, {"memcpy", r.memcpy}, {"shm", r.shm}, {"shm_copy", r.shm_copy},
                           {"tcp", r.tcp}, {"raw_tcp_socket", r.raw}, {"shm_over_memcpy", r.shm / r.memcpy}});
    }
    const nlohmann::ordered_json json = {
        {"unit", "GB/s"}, {"goal_shm_over_memcpy_at_16MiB", 0.6}, {"rows", json_rows}};
    out << schedules::JsonText(json) << "\n";
    return 0;
  }
  out << "data plane throughput between two processes, GB/s (best of " << kRounds << " rounds of ~256 MiB)\n";
  out << absl::StrFormat("%-8s %8s %8s %10s %8s %10s %11s\n", "message", "memcpy", "shm", "shm-copy", "tcp", "raw-tcp",
                         "shm/memcpy");
  for (const Row& r : rows) {
    out << absl::StrFormat("%-8s %8.2f %8.2f %10.2f %8.2f %10.2f %10.2fx\n", label(r.size), r.memcpy, r.shm, r.shm_copy,
                           r.tcp, r.raw, r.shm / r.memcpy);
  }
  out << "shm: receiver borrows the ring in place (one copy, the default); shm-copy: receiver copies out.\n"
         "goal: shm >= 0.6x memcpy at 16 MiB\n";
  return 0;
}

}  // namespace

void AddDataplaneBench(CommandLine& command_line, CLI::App& bench) {
  CLI::App* command =
      command_line.Add(bench, "dataplane", "data plane throughput between two processes vs a copy", "[--device D] [--json]");
  auto json = std::make_shared<bool>(false);
  auto device = std::make_shared<std::string>("cpu");
  command->add_flag("--json", *json, "print JSON");
  command
      ->add_option("--device", *device,
                   "cpu: the host data planes; cuda[:N] or fake-cuda: device tensors between two processes on one "
                   "device over CUDA IPC, next to a device-to-device copy")
      ->capture_default_str();
  command_line.OnRun(command, [json, device, &streams = command_line.streams()] {
    absl::StatusOr<ir::DeviceSpec> spec = ir::ParseDeviceSpec(*device);
    if (!spec.ok()) {
      streams.err << "tandem bench dataplane: --device: " << spec.status().message() << "\n";
      return 2;
    }
    if (spec->kind == ir::DeviceSpec::Kind::kCpu) return RunDataplaneBench(*json, streams.out, streams.err);
    // (No CheckDeviceVisible here: it would start CUDA in this process,
    // which the forked children then could not use. They say why.)
    return RunDeviceDataplaneBench(*spec, *json, streams.out, streams.err);
  });
}

}  // namespace tandem::cli
