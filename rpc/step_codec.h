// The tensors of step calls on the wire (rpc/tandem.capnp): a step's inputs
// and an actor's state as NamedTensor lists, and its emitted results as
// NamedResult lists. Shared by the controller's launcher and the actor's
// service so that both ends read and write the same shape.
//
// Pure functions; thread-safe. Decoding validates every tensor
// (DecodeTensor) and refuses a (name, microbatch) given twice: an
// InvalidArgument naming `what` and the entry.
#ifndef TANDEM_RPC_STEP_CODEC_H_
#define TANDEM_RPC_STEP_CODEC_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/host_tensor.h"
#include "rpc/tandem.capnp.h"

namespace tandem::rpc {

// Tensors by (name, microbatch); microbatch -1 for per-step ones.
using NamedTensors = std::map<std::pair<std::string, int32_t>, ir::HostTensor>;
// Emitted results by name, then microbatch: results["loss"][3].
using NamedResults = std::map<std::string, std::map<int32_t, ir::HostTensor>>;

// `list` must have been initialized to tensors.size() entries.
void EncodeNamedTensors(const NamedTensors& tensors, capnp::List<wire::NamedTensor>::Builder list);
// Tensors by name alone, each with microbatch -1 (an actor's state).
void EncodeNamedTensors(const std::map<std::string, ir::HostTensor>& tensors,
                        capnp::List<wire::NamedTensor>::Builder list);
absl::StatusOr<NamedTensors> DecodeNamedTensors(capnp::List<wire::NamedTensor>::Reader list, absl::string_view what);

// The number of entries EncodeNamedResults writes (init the list with it).
unsigned CountNamedResults(const NamedResults& results);
void EncodeNamedResults(const NamedResults& results, capnp::List<wire::NamedResult>::Builder list);
absl::StatusOr<NamedResults> DecodeNamedResults(capnp::List<wire::NamedResult>::Reader list, absl::string_view what);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_STEP_CODEC_H_
