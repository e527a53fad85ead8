// TcpTransport: the data plane between actor processes over TCP (between
// hosts; the tests use 127.0.0.1).
//
// One connection per pair of actors, carrying frames both ways (the frame
// format of data_plane_frame.h, padding included). Setup: every actor
// listens (Listen, loopback unless Options::bind_host says otherwise) and
// publishes its port; ConnectPeers then connects to every lower-numbered
// actor and accepts every higher-numbered one. A connecting actor introduces
// itself with a hello (magic, its id, the id it expects); anything else is
// refused.
//
// Who completes what:
//  - Send (actor thread) never blocks: it queues the message (shared tensor
//    handles, no copy) for the connection's writer thread, which writes the
//    frame with blocking sends, in Send order.
//  - A reader thread per connection reads frames straight into fresh
//    tensors (one copy, from the socket) and files them in a mailbox keyed
//    by (peer, tag); Receive (actor thread) waits on the mailbox with the
//    deadline. Frames for other tags stay there until asked for.
//  - Abort (any thread) wakes every Receive; later calls return it.
// On disconnect: EOF or a socket error ends the connection's reader; every
// Receive from that peer whose message has not arrived returns Unavailable
// naming the peer. A malformed frame is DataLoss naming the peer and closes
// the connection.
//
// Ownership: the transport owns its sockets and threads; the destructor
// shuts the sockets down and joins the threads (unwritten messages are
// dropped: call Flush first). Thread-safety: Send and Receive from one actor
// thread; Abort and Flush from any thread.
#ifndef TANDEM_ACTOR_TCP_TRANSPORT_H_
#define TANDEM_ACTOR_TCP_TRANSPORT_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "actor/transport.h"
#include "ir/host_tensor.h"

namespace tandem::actor {

class TcpTransport final : public Transport {
 public:
  struct Options {
    std::string bind_host = "127.0.0.1";
    uint64_t max_frame_bytes = uint64_t{4} << 30;  // larger frames are DataLoss
  };

  // Listens on an ephemeral port of `options.bind_host`.
  static absl::StatusOr<std::unique_ptr<TcpTransport>> Listen(int32_t actor, int32_t num_actors, Options options);
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;
  ~TcpTransport() override;

  int port() const { return port_; }

  // Connects to every peer, `peer_addresses[p]` being "host:port" of actor
  // p (this actor's own entry is ignored). Returns once every connection is
  // up, or DeadlineExceeded / Unavailable naming the missing peers.
  absl::Status ConnectPeers(const std::vector<std::string>& peer_addresses, absl::Duration timeout);

  // Waits until every queued message is written to its socket, at most
  // until `deadline`.
  absl::Status Flush(absl::Time deadline);

  int32_t actor() const override { return actor_; }
  absl::Status Send(int32_t peer, uint64_t tag, std::vector<ir::HostTensor> tensors) override;
  absl::StatusOr<std::vector<ir::HostTensor>> Receive(int32_t peer, uint64_t tag, absl::Time deadline) override;
  void Abort(absl::Status status) override;

  // For tests: writes `bytes` on the connection to `peer`, as is.
  absl::Status SendRawForTesting(int32_t peer, const std::vector<std::byte>& bytes);

 private:
  struct Connection;
  struct Outgoing;

  TcpTransport(int32_t actor, int32_t num_actors, Options options, int listen_fd, int port);
  absl::Status CheckPeer(int32_t peer) const;
  void Start(int32_t peer, int fd);
  void ReaderLoop(int32_t peer, int fd);
  void WriterLoop(int32_t peer, int fd);
  absl::Status ReadFrame(int32_t peer, int fd);

  const int32_t actor_;
  const int32_t num_actors_;
  const Options options_;
  const int listen_fd_;
  const int port_;

  absl::Mutex mu_;
  absl::CondVar changed_;  // a message, an error, a queued send or an abort
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);  // by peer
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_TCP_TRANSPORT_H_
