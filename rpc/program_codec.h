// Conversions between Tandem's in-memory values (ir::ActorProgram,
// ir::HostTensor) and their Cap'n Proto wire forms (rpc/tandem.capnp).
//
// A program travels as plain data: each function as its name and IR text
// (ir::PrintGraph, parsed back with ir::ParseGraph: the closed op set, never
// code), buffers and instructions as structs. Decoding validates everything
// it reads: enum values, tensor shapes and byte counts, the parsed graphs,
// ir::VerifyActorProgram, and the content hash the program was sent under.
//
// Pure functions; thread-safe. Nothing here throws: malformed input is an
// InvalidArgument status.
#ifndef TANDEM_RPC_PROGRAM_CODEC_H_
#define TANDEM_RPC_PROGRAM_CODEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/actor_program.h"
#include "ir/host_tensor.h"
#include "rpc/tandem.capnp.h"

namespace tandem::rpc {

// Largest tensor accepted on the control plane; anything bigger belongs on
// the data plane. Well under the connection's message limit.
inline constexpr int64_t kMaxControlTensorBytes = int64_t{16} << 20;

void EncodeTensorType(const ir::TensorType& type, wire::TensorType::Builder builder);
// `what` names the value in messages (a tensor or buffer name).
absl::StatusOr<ir::TensorType> DecodeTensorType(wire::TensorType::Reader reader,
                                                absl::string_view what);

// Copies `tensor` (which must be defined) into `builder`.
void EncodeTensor(const ir::HostTensor& tensor, wire::Tensor::Builder builder);
// InvalidArgument naming `what` for an unknown dtype, a negative or
// overflowing shape, a tensor above kMaxControlTensorBytes, or a byte count
// that does not match the shape.
absl::StatusOr<ir::HostTensor> DecodeTensor(wire::Tensor::Reader reader, absl::string_view what);

// Encodes `program` completely (functions as IR text).
void EncodeProgram(const ir::ActorProgram& program, wire::ActorProgram::Builder builder);

// Decodes and verifies a program: InvalidArgument (naming the function,
// buffer or instruction) for malformed fields, unparsable graphs or a
// program that fails ir::VerifyActorProgram.
absl::StatusOr<ir::ActorProgram> DecodeProgram(wire::ActorProgram::Reader reader);

// DecodeProgram, then checks that ir::HashActorProgram equals
// `expected_hash` (InvalidArgument otherwise, with both hashes).
absl::StatusOr<ir::ActorProgram> DecodeProgram(wire::ActorProgram::Reader reader,
                                               uint64_t expected_hash);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_PROGRAM_CODEC_H_
