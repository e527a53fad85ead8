// A Cap'n Proto Text as a std::string (its bytes, without the trailing
// NUL): the one conversion every reader of the control plane's messages uses.
#ifndef TANDEM_RPC_CAPNP_TEXT_H_
#define TANDEM_RPC_CAPNP_TEXT_H_

#include <string>

#include "capnp/blob.h"

namespace tandem::rpc {

inline std::string ToString(capnp::Text::Reader text) { return std::string(text.cStr(), text.size()); }

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_CAPNP_TEXT_H_
