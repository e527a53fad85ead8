// Proving the job's token without sending it: the one challenge-response
// that both planes use (control-plane registration, rpc/controller_service.h;
// TCP data-plane connections between actors, actor/tcp_transport.h).
//
// The verifier sends a fresh random nonce (kNonceBytes, from OpenSSL's
// RAND_bytes); the prover answers with
//
//   HMAC-SHA256(token, nonce || context || label)
//
// where the context names who proves what to whom (the registering actor's
// id; the dialing and the receiving actor's ids, each 4 bytes big-endian)
// and the label is a fixed string per use, so that an answer made for one
// use, one actor or one nonce never passes for another. The verifier
// computes the same and compares in constant time (CRYPTO_memcmp). Only the
// nonce and the answer cross the network; the token stays in the processes
// that were given it.
//
// Both ends prove it: on the control plane the registering actor sends a
// nonce of its own with its request for a challenge and hands its Actor
// capability over only once the controller has answered it; on the TCP
// data plane the dialer's hello carries a nonce that the acceptor's welcome
// answers. So a process without the token can pose as neither a controller
// nor an actor. An impostor that relays every message to the real one in
// the middle of a connection is not kept out by proofs alone: what follows
// the handshake is protected too, by TLS on the TCP control plane
// (rpc/control_tls.h) and, on the TCP data plane and a replica group's
// links, by sealing every byte with keys derived from the handshake's
// nonces and the token (actor/sealed_stream.h).
//
// Sizes come from the wire: a nonce or an answer of the wrong length is
// InvalidArgument, never a crash; a wrong answer is PermissionDenied.
//
// ChallengeBook: the verifier's record of the nonces it issued (control
// plane), so that each is answered at most once and only while fresh.
#ifndef TANDEM_RPC_AUTH_H_
#define TANDEM_RPC_AUTH_H_

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace tandem::rpc {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;  // SHA-256

using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBytes>;
using Bytes = absl::Span<const uint8_t>;

// The labels that separate the uses of the token.
inline constexpr absl::string_view kRegistrationLabel = "tandem control-plane registration v1";
inline constexpr absl::string_view kConnectionLabel = "tandem data-plane connection v1";
inline constexpr absl::string_view kControllerLabel = "tandem control-plane controller v1";
inline constexpr absl::string_view kAcceptanceLabel = "tandem data-plane acceptance v1";

// A fresh nonce from OpenSSL's generator; Internal if it fails.
absl::StatusOr<Nonce> MakeNonce();

// HMAC-SHA256 of `message` under `key` (any lengths; an empty key is a key).
absl::StatusOr<Proof> HmacSha256(absl::string_view key, Bytes message);

// Control plane: actor `actor` answers the controller's `nonce`.
// InvalidArgument for a nonce of the wrong length.
absl::StatusOr<Proof> ProveRegistration(absl::string_view token, Bytes nonce, int32_t actor);
// OK if `proof` is that answer; InvalidArgument for a nonce or proof of the
// wrong length; PermissionDenied for a wrong answer.
absl::Status CheckRegistration(absl::string_view token, Bytes nonce, int32_t actor, Bytes proof);

// Data plane: actor `dialer` answers the `nonce` that actor `receiver` sent
// on the connection `dialer` opened. Errors as for registration.
absl::StatusOr<Proof> ProveConnection(absl::string_view token, Bytes nonce, int32_t dialer, int32_t receiver);
absl::Status CheckConnection(absl::string_view token, Bytes nonce, int32_t dialer, int32_t receiver, Bytes proof);

// The other way: the controller answers the `nonce` of registering actor
// `actor`; the receiver of a data-plane connection answers the dialer's
// `nonce`. Errors as for registration.
absl::StatusOr<Proof> ProveController(absl::string_view token, Bytes nonce, int32_t actor);
absl::Status CheckController(absl::string_view token, Bytes nonce, int32_t actor, Bytes proof);
absl::StatusOr<Proof> ProveAcceptance(absl::string_view token, Bytes nonce, int32_t dialer, int32_t receiver);
absl::Status CheckAcceptance(absl::string_view token, Bytes nonce, int32_t dialer, int32_t receiver, Bytes proof);

inline Bytes AsBytes(absl::string_view text) {
  return Bytes(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// The nonces a verifier issued and not yet seen answered. Each can be
// redeemed once (from any connection), within `lifetime` of being issued.
// Nonces are issued to an owner (a control connection): at most
// `max_outstanding` are kept per owner (issuing one more forgets that
// owner's oldest), so no connection's challenges can evict another's — a
// stranger asking for challenges in a loop only forgets its own — and
// Forget(owner) drops an owner's when its connection closes. The last
// `remembered` redeemed or expired ones are remembered so that a replay is
// named as one. Not thread-safe: it belongs to one thread (the
// controller's event loop).
struct ChallengeBookOptions {
  absl::Duration lifetime = absl::Seconds(10);
  size_t max_outstanding = 16;  // per owner
  size_t remembered = 1024;
};

class ChallengeBook {
 public:
  using Options = ChallengeBookOptions;
  using Clock = std::function<absl::Time()>;

  enum class Verdict : uint8_t {
    kFresh,      // issued here, unused, within its lifetime: now used up
    kReplayed,   // answered before
    kExpired,    // issued here longer ago than the lifetime
    kUnknown,    // never issued here (or forgotten)
    kMalformed,  // not kNonceBytes long
  };

  explicit ChallengeBook(Options options = {}, Clock now = absl::Now);
  ChallengeBook(const ChallengeBook&) = delete;
  ChallengeBook& operator=(const ChallengeBook&) = delete;

  // A fresh nonce for `owner`, recorded as outstanding.
  absl::StatusOr<Nonce> Issue(uint64_t owner = 0);
  // Takes `nonce` out of the book, whatever the verdict: a nonce is tried
  // once.
  Verdict Redeem(Bytes nonce);
  // Drops `owner`'s outstanding nonces (its connection is gone).
  void Forget(uint64_t owner);

  size_t outstanding() const { return issued_.size(); }

 private:
  struct Issued {
    absl::Time when;
    uint64_t owner = 0;
  };
  // Moves nonces older than the lifetime to the expired ones.
  void Expire(absl::Time now);
  void Remember(const std::string& nonce, Verdict verdict);
  // Takes `nonce` out of the outstanding ones (and its owner's order).
  void Remove(std::map<std::string, Issued>::iterator it);

  Options options_;
  Clock now_;
  std::map<std::string, Issued> issued_;                // outstanding nonces
  std::map<uint64_t, std::deque<std::string>> owned_;   // each owner's, oldest first
  std::map<std::string, Verdict> spent_;                // kReplayed (was used) or kExpired
  std::deque<std::string> spent_order_;
};

// "a replayed challenge", "an unknown challenge", ...
absl::string_view VerdictName(ChallengeBook::Verdict verdict);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_AUTH_H_
