// Cap'n Proto Text to and from std::string: the conversions every reader
// and writer of the control plane's messages uses.
#ifndef TANDEM_RPC_CAPNP_TEXT_H_
#define TANDEM_RPC_CAPNP_TEXT_H_

#include <string>

#include "capnp/blob.h"

namespace tandem::rpc {

// Its bytes, without the trailing NUL.
inline std::string ToString(capnp::Text::Reader text) { return std::string(text.cStr(), text.size()); }

// `text` as a Text to set, by size: capnp's implicit conversion from
// std::string stops at the first NUL, and a name that does not survive the
// trip could collide with another.
inline capnp::Text::Reader AsText(const std::string& text) { return capnp::Text::Reader(text.data(), text.size()); }

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_CAPNP_TEXT_H_
