// State files: a set of named tensors (an actor's parameters and optimizer
// state) in one self-describing binary file, and the crash-safe file writes
// checkpoints are made of.
//
// Layout (little-endian):
//   "TNDMSTAT" magic, u32 version (1), u32 tensor count, then per tensor in
//   name order: u32 name length, the name, u8 dtype (ir::DType), u32 rank,
//   rank x i64 extents, u64 byte count, the bytes.
// The file carries no checksum of its own: whoever writes it records
// StateChecksum() of the bytes elsewhere (the checkpoint manifest), so a
// reader checks the file before decoding it.
#ifndef TANDEM_IR_STATE_FILE_H_
#define TANDEM_IR_STATE_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/interpreter.h"

namespace tandem::ir {

std::string EncodeStateFile(const TensorMap& tensors);
// InvalidArgument naming `what` (e.g. the file's path) and the problem for
// anything that is not a well-formed state file: a bad magic or version, a
// truncated record, an unknown dtype, a byte count that disagrees with the
// shape, trailing bytes, a name twice.
absl::StatusOr<TensorMap> DecodeStateFile(absl::string_view bytes, absl::string_view what);

// CRC-32 (the zlib/PNG polynomial) of `bytes`, as 8 lower-case hex digits.
std::string StateChecksum(absl::string_view bytes);

// Writes `bytes` to `path` so that a crash at any moment leaves either the
// old file (or none) or the whole new one: a temporary file beside it,
// fsync, rename over `path`, fsync of the directory. Unavailable with the
// path and errno's text on failure.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes);
// fsync of a directory, so that renames and creations in it are durable.
absl::Status SyncDirectory(const std::string& path);
// The whole file; NotFound or Unavailable naming the path.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace tandem::ir

#endif  // TANDEM_IR_STATE_FILE_H_
