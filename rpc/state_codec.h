// State on the control plane: where each state tensor comes from
// (ir::StateSource as wire::StateSource), and tensors of any size as
// TensorPieces of at most ir::kStatePieceBytes, sent one piece per call and
// put together again by a TensorAssembler. No control message carries more
// than a piece, whatever the model's size.
//
// Pure functions and a value type; not synchronized. Nothing here throws:
// malformed input is an InvalidArgument status.
#ifndef TANDEM_RPC_STATE_CODEC_H_
#define TANDEM_RPC_STATE_CODEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/host_tensor.h"
#include "ir/state_source.h"
#include "rpc/tandem.capnp.h"

namespace tandem::rpc {

// Bytes [offset, offset + min(max_bytes, kStatePieceBytes, what is left))
// of `tensor` into `builder`. OutOfRange for an offset past the tensor's
// end (an offset at its end gives an empty piece).
absl::Status EncodeTensorPiece(const ir::HostTensor& tensor, uint64_t offset, uint64_t max_bytes,
                               wire::TensorPiece::Builder builder);

// Puts one tensor together from its pieces, in order. `what` names it in
// errors.
class TensorAssembler {
 public:
  explicit TensorAssembler(std::string what) : what_(std::move(what)) {}
  // The first piece (offset 0) fixes the type and allocates the tensor
  // (ResourceExhausted when it cannot); each next one must have the same
  // type, continue where the last ended and stay within the tensor.
  absl::Status Add(wire::TensorPiece::Reader piece);
  bool started() const { return tensor_.defined(); }
  bool complete() const { return started() && received_ == static_cast<uint64_t>(tensor_.num_bytes()); }
  uint64_t received() const { return received_; }
  // The whole tensor; FailedPrecondition naming it and what arrived unless
  // complete().
  absl::StatusOr<ir::HostTensor> Take();

 private:
  std::string what_;
  ir::HostTensor tensor_;
  uint64_t received_ = 0;
};

// The sources of `sources` into `list`: held tensors as `staged` (their
// bytes go by stageState, before the loadState that carries this list).
void EncodeStateSources(const ir::StateSources& sources, capnp::List<wire::StateSource>::Builder list);
// Decoded sources; a `staged` one stays a HostTensor source with no tensor
// yet (undefined), for the receiver to fill from what it staged.
// InvalidArgument naming `what` for a malformed entry or a binding twice.
absl::StatusOr<ir::StateSources> DecodeStateSources(capnp::List<wire::StateSource>::Reader list,
                                                    absl::string_view what);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_STATE_CODEC_H_
