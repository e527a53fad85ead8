#include "rpc/control_tls.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rpc/openssl_error.h"

namespace tandem::rpc {
namespace {

absl::Status Failed(absl::string_view step) {
  return absl::InternalError(absl::StrCat("cannot make the controller's TLS identity: ", step, ": ", OpenSslError()));
}

struct FreeKey {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct FreeCertificate {
  void operator()(X509* certificate) const { X509_free(certificate); }
};
struct FreeBio {
  void operator()(BIO* bio) const { BIO_free(bio); }
};

// What `write` put into a memory BIO.
template <typename Write>
absl::StatusOr<std::string> Pem(absl::string_view what, const Write& write) {
  std::unique_ptr<BIO, FreeBio> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || write(bio.get()) != 1) return Failed(absl::StrCat("writing the ", what));
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(length));
}

absl::Status AddExtension(X509* certificate, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, certificate, certificate, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
  if (extension == nullptr) return Failed(absl::StrCat("the extension ", value));
  const int added = X509_add_ext(certificate, extension, -1);
  X509_EXTENSION_free(extension);
  return added == 1 ? absl::OkStatus() : Failed(absl::StrCat("adding ", value));
}

// A TLS context with what it was configured from, kept alive beside it.
struct HeldContext {
  std::optional<kj::TlsKeypair> keypair;
  std::optional<kj::TlsCertificate> trusted;
  std::optional<kj::TlsContext> context;
};

// Runs `make`, turning a KJ exception (OpenSSL refusing a PEM) into
// InvalidArgument saying `what`.
template <typename Make>
absl::StatusOr<std::shared_ptr<kj::TlsContext>> Build(absl::string_view what, const Make& make) {
  auto held = std::make_shared<HeldContext>();
  KJ_IF_MAYBE(exception, kj::runCatchingExceptions([&] { make(*held); })) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", exception->getDescription().cStr()));
  }
  return std::shared_ptr<kj::TlsContext>(held, &*held->context);
}

}  // namespace

absl::StatusOr<ControllerIdentity> MakeControllerIdentity() {
  std::unique_ptr<EVP_PKEY, FreeKey> key(EVP_EC_gen("P-256"));
  if (key == nullptr) return Failed("a P-256 key");
  std::unique_ptr<X509, FreeCertificate> certificate(X509_new());
  if (certificate == nullptr || X509_set_version(certificate.get(), 2) != 1) return Failed("a certificate");
  // A random 64-bit serial: certificates of two jobs never look alike.
  std::unique_ptr<BIGNUM, decltype(&BN_free)> serial(BN_new(), BN_free);
  if (serial == nullptr || BN_rand(serial.get(), 64, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(certificate.get())) == nullptr) {
    return Failed("a serial number");
  }
  constexpr long kDay = 24 * 60 * 60;
  if (X509_gmtime_adj(X509_getm_notBefore(certificate.get()), -kDay) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(certificate.get()), 3650 * kDay) == nullptr ||
      X509_set_pubkey(certificate.get(), key.get()) != 1) {
    return Failed("the validity and key");
  }
  X509_NAME* name = X509_get_subject_name(certificate.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(kControllerTlsName),
                                 -1, -1, 0) != 1 ||
      X509_set_issuer_name(certificate.get(), name) != 1) {
    return Failed("the name");
  }
  for (auto [nid, value] : {std::pair{NID_subject_alt_name, "DNS:tandem-controller"},
                            std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                            std::pair{NID_key_usage, "critical,digitalSignature,keyCertSign"}}) {
    if (absl::Status added = AddExtension(certificate.get(), nid, value); !added.ok()) return added;
  }
  if (X509_sign(certificate.get(), key.get(), EVP_sha256()) == 0) return Failed("signing");
  ControllerIdentity identity;
  absl::StatusOr<std::string> certificate_pem =
      Pem("certificate", [&](BIO* bio) { return PEM_write_bio_X509(bio, certificate.get()); });
  if (!certificate_pem.ok()) return certificate_pem.status();
  absl::StatusOr<std::string> key_pem = Pem("key", [&](BIO* bio) {
    return PEM_write_bio_PrivateKey(bio, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  });
  if (!key_pem.ok()) return key_pem.status();
  identity.certificate_pem = *std::move(certificate_pem);
  identity.private_key_pem = *std::move(key_pem);
  return identity;
}

absl::StatusOr<std::shared_ptr<kj::TlsContext>> ControllerTls(const ControllerIdentity& identity, kj::Timer& timer,
                                                               absl::Duration handshake_timeout) {
  return Build("the controller's TLS identity", [&](HeldContext& held) {
    held.keypair.emplace(kj::TlsKeypair{kj::TlsPrivateKey(kj::StringPtr(identity.private_key_pem.c_str())),
                                        kj::TlsCertificate(kj::StringPtr(identity.certificate_pem.c_str()))});
    kj::TlsContext::Options options;
    options.useSystemTrustStore = false;
    options.defaultKeypair = *held.keypair;
    options.timer = timer;
    options.acceptTimeout = std::max<int64_t>(absl::ToInt64Milliseconds(handshake_timeout), 1) * kj::MILLISECONDS;
    held.context.emplace(kj::mv(options));
  });
}

absl::StatusOr<std::shared_ptr<kj::TlsContext>> ActorTls(absl::string_view certificate_pem) {
  if (certificate_pem.empty()) {
    return absl::InvalidArgumentError(
        "no controller certificate: the TCP control plane is TLS (the launcher sets TANDEM_CONTROLLER_CERT)");
  }
  if (certificate_pem.size() > kMaxCertificateBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the controller certificate has ", certificate_pem.size(),
                                                   " bytes, more than ", kMaxCertificateBytes));
  }
  const std::string pem(certificate_pem);
  return Build("the controller certificate", [&](HeldContext& held) {
    held.trusted.emplace(kj::StringPtr(pem.c_str()));
    kj::TlsContext::Options options;
    options.useSystemTrustStore = false;
    options.trustedCertificates = kj::arrayPtr(&*held.trusted, 1);
    held.context.emplace(kj::mv(options));
  });
}

}  // namespace tandem::rpc
