// OpenSSL's reason for its last failure, for the message of an Internal
// status: the one home for it (rpc/auth.cc, rpc/control_tls.cc,
// actor/sealed_stream.cc).
#ifndef TANDEM_RPC_OPENSSL_ERROR_H_
#define TANDEM_RPC_OPENSSL_ERROR_H_

#include <openssl/err.h>

#include <string>

namespace tandem::rpc {

// Takes the error off OpenSSL's queue; "no reason given" when it is empty.
inline std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "no reason given";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_OPENSSL_ERROR_H_
