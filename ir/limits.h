// The largest tensors and texts Tandem's IR accepts, wherever they come
// from: a traced model, an IR text file, a state file or the wire. Every
// reader checks a shape here before anything is allocated from it, and the
// products of extents are computed without overflow.
// Constants and pure functions; thread-safe.
#ifndef TANDEM_IR_LIMITS_H_
#define TANDEM_IR_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/dtype.h"

namespace tandem::ir {

// Axes of one tensor.
inline constexpr int64_t kMaxRank = 16;
// Bytes of one tensor: 1 TiB, more than any host or device holds, so a
// shape over it is a mistake; it also keeps every byte count and offset
// computed from a shape far from overflowing.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 40;
// Data-parallel replicas of one pipeline.
inline constexpr int32_t kMaxReplicas = 4096;
// Pipeline stages of one model (as schedules/limits.h allows).
inline constexpr int32_t kMaxStages = 65536;
// Weight versions a stage of an asynchronous pipeline keeps beyond its
// latest (ir/train_step.h): PipeDream's stage s of p keeps p-1-s.
inline constexpr int32_t kMaxVersionDelay = 1024;
// Edges of one model's stage graph (ir/stage_graph.h), as read from text.
inline constexpr int64_t kMaxStageEdges = 65536;
// The most bytes of state that move as one piece: through a file read or
// write, or across the control plane (rpc/tandem.capnp's TensorPiece).
// State of any size moves as many pieces, never refused for its size.
inline constexpr int64_t kStatePieceBytes = int64_t{4} << 20;
// Bytes of an IR text file read whole (a traced step, `tandem ir dump`):
// a 1.3B-parameter GPT's step prints to a few MiB.
inline constexpr int64_t kMaxIrTextBytes = int64_t{256} << 20;
// Instructions and buffers of one actor program (ir/actor_program.h). A
// program holds a few of each per task and value, so a million is far past
// any schedule; the verifier refuses more, and a decoder before it
// allocates (a Cap'n Proto list of empty structs costs a peer no bytes).
inline constexpr int64_t kMaxProgramInstructions = int64_t{1} << 20;
inline constexpr int64_t kMaxProgramBuffers = int64_t{1} << 20;
// Instructions of one compiled step, all actors' programs of a replica
// together (replicas share them): the controller holds them all while it
// compiles, some 650 bytes each with their buffers, so this keeps a compile
// under a gigabyte. Each task is at least one instruction, so a schedule of
// more tasks is refused before lowering. GPT-3's shapes over 96 stages and
// 192 microbatches take about 400,000.
inline constexpr int64_t kMaxStepInstructions = int64_t{1} << 20;

// The number of elements of `shape`, or InvalidArgument naming the shape
// when an extent is negative, the rank is over kMaxRank, or the product
// passes kMaxTensorBytes elements (never a wrapped value).
absl::StatusOr<int64_t> CheckedNumElements(const Shape& shape);
// The bytes of `type`; InvalidArgument naming the type as above, or when
// they pass kMaxTensorBytes ("f32[1000000,4000000] has 16000000000000
// bytes, more than the 1099511627776 a tensor may have").
absl::StatusOr<int64_t> CheckedNumBytes(const TensorType& type);

}  // namespace tandem::ir

#endif  // TANDEM_IR_LIMITS_H_
