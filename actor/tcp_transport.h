// TcpTransport: the data plane between actor processes over TCP (between
// hosts; the tests use 127.0.0.1).
//
// One connection per pair of actors, carrying frames both ways (the frame
// format of data_plane_frame.h, padding included). Setup: every actor
// listens (Listen, loopback unless Options::bind_host says otherwise, on a
// port the OS picks) and publishes its port; ConnectPeers then connects to
// every lower-numbered actor and waits for every higher-numbered one.
//
// Both ends of every connection prove the job's token, which never crosses
// it (rpc/auth.h): the accepting actor sends a challenge (a fresh 32-byte
// nonce); the dialer answers with a hello naming itself and the actor it
// dialed, HMAC-SHA256(token, nonce || dialer || receiver || label) and a
// nonce of its own; the acceptor checks it and welcomes the dialer with its
// answer to that nonce, which the dialer checks before it sends anything
// (a listener without the token is PermissionDenied). From then on every
// byte of the connection, both ways, is sealed with keys derived from the
// handshake's two nonces and the token (actor/sealed_stream.h): frames
// cannot be read or changed between hosts, and a record that fails its tag
// is DataLoss naming the peer. Anything else (a wrong
// answer, a hello from no dialing peer or for another actor, a peer that
// is connected already, no answer within Options::handshake_timeout, more
// than Options::max_pending_handshakes connections being challenged at
// once) is refused: the connection is closed, counted
// (refused_connections()) and logged (rate-limited), and nothing of the
// job is disturbed. The listener stays open for the transport's life, so a
// stranger who comes later is refused the same way.
//
// Who completes what:
//  - A thread of its own accepts and challenges connections, from Listen
//    until destruction; it never blocks on one peer (one poll over all).
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
// the connection; sizes read from the wire are bounded before anything is
// allocated (Options::max_frame_bytes).
//
// Ownership: the transport owns its sockets and threads; the destructor
// shuts the sockets down and joins the threads (unwritten messages are
// dropped: call Flush first). Thread-safety: Send and Receive from one actor
// thread; Abort, Flush and refused_connections() from any thread.
#ifndef TANDEM_ACTOR_TCP_TRANSPORT_H_
#define TANDEM_ACTOR_TCP_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "actor/peer_mailbox.h"
#include "actor/sealed_stream.h"
#include "actor/transport.h"
#include "ir/host_tensor.h"

namespace tandem::actor {

class TcpTransport final : public Transport {
 public:
  struct Options {
    std::string bind_host = "127.0.0.1";
    uint64_t max_frame_bytes = uint64_t{4} << 30;  // larger frames are DataLoss
    // The job's token, which every connection proves: both ends of a
    // connection need the same (empty only where one process plays both
    // ends, as in benchmarks).
    std::string token;
    // How long a connecting peer has to answer the challenge.
    absl::Duration handshake_timeout = absl::Seconds(5);
    // Connections challenged at once; more are refused at once.
    int max_pending_handshakes = 64;
    // Where refusals are logged (rate-limited); default: stderr.
    std::function<void(absl::string_view line)> log;
    // When the ends are ranks of a group rather than actors (a replica
    // group's collective links): each rank's actor, and what the group is
    // called, so that messages name the actor ("actor 5 (rank 1 of its
    // replica group)"), not the rank as if it were one. Empty: ranks are
    // actors.
    std::vector<int32_t> actor_ids;
    std::string group_name;
  };

  // Listens on a port of `options.bind_host` that the OS picks, and starts
  // accepting (and challenging) connections.
  static absl::StatusOr<std::unique_ptr<TcpTransport>> Listen(int32_t actor, int32_t num_actors, Options options);
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;
  ~TcpTransport() override;

  int port() const { return port_; }

  // Connects to every lower-numbered peer, `peer_addresses[p]` being
  // "host:port" of actor p (this actor's own entry is ignored; an empty one
  // is a peer reached another way, which neither side dials), answering its
  // challenge; then waits for every higher-numbered peer with an address to
  // connect.
  // Returns once every connection is up, or: DeadlineExceeded /
  // Unavailable naming the missing peers; PermissionDenied when a peer
  // refused this actor's answer (the two were given different tokens).
  absl::Status ConnectPeers(const std::vector<std::string>& peer_addresses, absl::Duration timeout);

  // Connections refused so far (see above).
  int64_t refused_connections() const { return refused_.load(std::memory_order_relaxed); }

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
  struct Handshake;

  TcpTransport(int32_t actor, int32_t num_actors, Options options, int listen_fd, int wake_fd, int port);
  // Dials `peer` at `address` and answers its challenge, by `deadline`.
  absl::Status Dial(int32_t peer, const std::string& address, absl::Time deadline);
  // The accepting thread: challenges every connection, starts the proven.
  void AcceptLoop();
  // A complete hello on `handshake`: the dialing peer it proves, or why not.
  absl::StatusOr<int32_t> Verify(const Handshake& handshake);
  // Starts the connection's reader and writer, which seal its frames with
  // `keys` (actor/sealed_stream.h).
  void Start(int32_t peer, int fd, const StreamKeys& keys);
  void ReaderLoop(int32_t peer, int fd, const SealKey& key);
  void WriterLoop(int32_t peer, int fd, const SealKey& key);
  absl::Status ReadFrame(int32_t peer, SealedReader& reader);

  // "actor 3", or with Options::actor_ids "actor 5 (rank 1 of its replica
  // group)", for messages.
  static std::string ActorName(const Options& options, int32_t rank);
  std::string Name(int32_t rank) const;

  const int32_t actor_;
  const int32_t num_actors_;
  const Options options_;
  const int listen_fd_;
  const int wake_fd_;  // an eventfd: written once, to stop the accepting thread
  const int port_;
  std::atomic<int64_t> refused_{0};
  std::thread acceptor_;

  absl::Mutex mu_;
  absl::CondVar changed_;  // a connection, a lost peer, a queued or written send, an abort
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);  // by peer
  // Frames read and not yet received, each peer's error (its connection is
  // gone once set), the abort status.
  PeerMailbox<std::vector<ir::HostTensor>> mailbox_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_TCP_TRANSPORT_H_
