// TLS for the TCP control plane: what protects the controller's frames
// across hosts.
//
// The controller makes a key pair (EC P-256) and a self-signed certificate
// for the name kControllerTlsName when a job starts; the private key never
// leaves its memory. Actors are given the certificate as they are given
// the job's token (the launcher puts it in TANDEM_CONTROLLER_CERT) and
// trust it alone: no system trust store, so a TLS connection comes up only
// with the job's controller. Every frame after that is encrypted and
// authenticated by TLS (kj-tls over OpenSSL, Debian's libcapnp-dev), so
// nobody on the path reads, changes, replays or injects control messages,
// and an impostor in the middle cannot relay the token challenge either:
// it has no key for the certificate. Inside the TLS connection the actor
// still registers by proving the token (rpc/auth.h), which is what keeps
// strangers out; TLS needs no client certificates.
//
// Why TLS over an HMAC per frame keyed from the handshake: TLS also hides
// what is sent (tensors, losses, parameters), Debian ships it for KJ
// streams, and it is no protocol of our own to get right.
//
// The Unix-domain control plane needs none: its socket lies in a private
// (0700) directory of one host.
#ifndef TANDEM_RPC_CONTROL_TLS_H_
#define TANDEM_RPC_CONTROL_TLS_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kj/async-io.h"
#include "kj/compat/tls.h"
#include "kj/timer.h"

namespace tandem::rpc {

// The name the certificate is made for, which actors check.
inline constexpr char kControllerTlsName[] = "tandem-controller";
// A certificate given to an actor is refused beyond this size before it is
// parsed (a P-256 one is about 600 bytes).
inline constexpr size_t kMaxCertificateBytes = 16 << 10;

// How long the controller waits for a connection's TLS handshake.
inline constexpr absl::Duration kTlsHandshakeTimeout = absl::Seconds(10);

// The controller's key and certificate, PEM-encoded.
struct ControllerIdentity {
  std::string certificate_pem;
  std::string private_key_pem;
};

// A fresh identity: a P-256 key and a certificate for kControllerTlsName,
// signed by that key, valid from a day ago (clocks of other hosts may lag)
// for ten years (a job may run long; the key dies with the controller).
// Internal when OpenSSL fails.
absl::StatusOr<ControllerIdentity> MakeControllerIdentity();

// TLS as the controller serves it: `identity`'s key and certificate; a
// handshake not done within `handshake_timeout` (on `timer`) fails, so a
// silent connection costs nothing but its socket until then.
// InvalidArgument for an identity OpenSSL cannot read.
absl::StatusOr<std::shared_ptr<kj::TlsContext>> ControllerTls(const ControllerIdentity& identity, kj::Timer& timer,
                                                               absl::Duration handshake_timeout);

// TLS as an actor dials: trusting `certificate_pem` alone, and only for
// kControllerTlsName. InvalidArgument for an empty or oversized
// certificate, or one OpenSSL cannot read.
absl::StatusOr<std::shared_ptr<kj::TlsContext>> ActorTls(absl::string_view certificate_pem);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_CONTROL_TLS_H_
