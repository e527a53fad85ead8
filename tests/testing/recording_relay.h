// RecordingRelay: a TCP relay on loopback that keeps every byte it
// forwards, for tests that assert on what crosses a socket (the job's token
// must never). Each connection accepted on its own port is joined to a
// fresh connection to the target; bytes are forwarded both ways as they
// come and appended to that direction's record.
//
// Owned by the test; its threads (one accepting, two per connection) end
// in the destructor, which shuts every socket down. Thread-safe: records
// may be read while traffic flows.
#ifndef TANDEM_TESTS_TESTING_RECORDING_RELAY_H_
#define TANDEM_TESTS_TESTING_RECORDING_RELAY_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem::test {

class RecordingRelay {
 public:
  // What one connection carried in one direction.
  struct Record {
    int connection = 0;     // in the order they were accepted
    bool to_target = true;  // from the dialer to the target, or back
    std::string bytes;
  };

  // Relays to `target` ("127.0.0.1:port"), listening on 127.0.0.1 at a
  // port the OS picks. Aborts the test binary if it cannot listen.
  explicit RecordingRelay(std::string target);
  RecordingRelay(const RecordingRelay&) = delete;
  RecordingRelay& operator=(const RecordingRelay&) = delete;
  ~RecordingRelay();

  // "127.0.0.1:port": where to dial instead of the target.
  std::string address() const;
  const std::string& target() const { return target_; }
  std::vector<Record> records() const;
  int connections() const;
  // Bytes relayed so far, both ways.
  int64_t total_bytes() const;
  // True if `needle` occurs in one direction of one connection.
  bool Carried(const std::string& needle) const;

 private:
  void AcceptLoop();
  void Pump(int from, int to, size_t record);

  std::string target_;
  int listen_fd_ = -1;
  int port_ = 0;
  int stop_fd_ = -1;
  mutable std::mutex mu_;
  std::vector<Record> records_;  // guarded by mu_
  std::vector<int> sockets_;     // guarded by mu_
  std::vector<std::thread> pumps_;  // guarded by mu_
  bool stopping_ = false;           // guarded by mu_
  std::thread acceptor_;
};

}  // namespace tandem::test

#endif  // TANDEM_TESTS_TESTING_RECORDING_RELAY_H_
