// Authenticated encryption of a TCP data-plane connection (actor/
// tcp_transport.h), both ways, with keys from its handshake: what crosses
// hosts (activations, gradients, a replica group's all-reduce shares) can
// be neither read nor changed on the way. Shared memory and CUDA IPC stay
// as they are: they never leave the host.
//
// Keys. The handshake leaves both ends two fresh nonces, the acceptor's
// challenge Na and the dialer's Nd, and the ids of the dialer d and the
// receiver r; each direction gets its own 256-bit key
//
//   HMAC-SHA256(token, label || Na || Nd || d || r || direction)
//
// (label "tandem data-plane frames v1", ids 4 bytes big-endian, direction
// "dialer to receiver" or "receiver to dialer"), so only the two ends,
// which hold the job's token, know them, and no key is used on two
// connections or two directions.
//
// Records. The bytes of one direction are cut into records:
//
//   uint32 L (little-endian, 1 .. kMaxRecordBytes)
//   L bytes of AES-256-GCM ciphertext
//   16 bytes of GCM tag
//
// with the 96-bit IV 0^32 || the record's number in this direction (uint64,
// little-endian, from 0) and L as the additional authenticated data. A
// record is decrypted whole and its tag checked before a byte of it is
// handed on; a record that fails (forged, reordered, replayed, cut) is
// DataLoss, and the connection cannot go on. A length outside its bounds is
// DataLoss before anything is allocated from it.
//
// SealedWriter and SealedReader each belong to one thread (a connection's
// writer and reader); neither owns the socket.
#ifndef TANDEM_ACTOR_SEALED_STREAM_H_
#define TANDEM_ACTOR_SEALED_STREAM_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rpc/auth.h"

namespace tandem::actor {

inline constexpr size_t kSealKeyBytes = 32;
inline constexpr size_t kSealTagBytes = 16;
inline constexpr size_t kMaxRecordBytes = size_t{1} << 20;

using SealKey = std::array<uint8_t, kSealKeyBytes>;

// One end's keys: what it sends with, what it receives with.
struct StreamKeys {
  SealKey send{};
  SealKey receive{};
};

// The keys of the connection actor `dialer` opened to actor `receiver`,
// for the end that `is_dialer` says (the two ends get each other's send and
// receive keys). Internal if OpenSSL fails.
absl::StatusOr<StreamKeys> DeriveStreamKeys(absl::string_view token, const rpc::Nonce& acceptor_nonce,
                                            const rpc::Nonce& dialer_nonce, int32_t dialer, int32_t receiver,
                                            bool is_dialer);

// An OpenSSL AES-256-GCM context with its key set (sealed_stream.cc).
struct GcmContext;

// Seals the bytes written to it into records on `fd`. Write buffers up to a
// record's worth; Flush seals and sends what is buffered (call it at the
// end of each message). Unavailable when the socket fails, Internal when
// OpenSSL does.
class SealedWriter {
 public:
  SealedWriter(int fd, const SealKey& key);
  ~SealedWriter();
  SealedWriter(const SealedWriter&) = delete;
  SealedWriter& operator=(const SealedWriter&) = delete;

  absl::Status Write(const void* data, size_t size);
  absl::Status Flush();

 private:
  int fd_;
  std::unique_ptr<GcmContext> cipher_;
  uint64_t records_ = 0;
  std::vector<uint8_t> plain_;   // what is buffered
  std::vector<uint8_t> sealed_;  // one record on its way
};

// Reads records from `fd` and hands on their checked plaintext. Read
// returns exactly `size` bytes: Unavailable on end of file or a socket
// error, DataLoss for a record that is malformed or fails its tag (the
// stream is then done), Internal when OpenSSL fails.
class SealedReader {
 public:
  SealedReader(int fd, const SealKey& key);
  ~SealedReader();
  SealedReader(const SealedReader&) = delete;
  SealedReader& operator=(const SealedReader&) = delete;

  absl::Status Read(void* data, size_t size);

 private:
  absl::Status NextRecord();

  int fd_;
  std::unique_ptr<GcmContext> cipher_;
  uint64_t records_ = 0;
  std::vector<uint8_t> sealed_;
  std::vector<uint8_t> plain_;
  size_t served_ = 0;  // of plain_
  absl::Status broken_;
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_SEALED_STREAM_H_
