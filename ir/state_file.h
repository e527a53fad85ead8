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
//
// State is as large as the model: files are written, checked and read in
// pieces of at most kStatePieceBytes (WriteStateFile, IndexStateFile,
// ReadStateTensor), never as one buffer of the whole file.
#ifndef TANDEM_IR_STATE_FILE_H_
#define TANDEM_IR_STATE_FILE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/host_tensor.h"
#include "ir/limits.h"
#include "ir/train_step.h"

namespace tandem::ir {

// CRC-32 (the zlib/PNG polynomial), fed in pieces. Not synchronized.
class Checksum {
 public:
  void Update(absl::string_view bytes);
  // 8 lower-case hex digits.
  std::string Hex() const;

 private:
  unsigned long crc_ = 0;  // zlib's uLong
};
// The Checksum of `bytes`, as 8 lower-case hex digits.
std::string StateChecksum(absl::string_view bytes);

// The in-memory form, for small state (tests, fuzzing).
std::string EncodeStateFile(const TensorMap& tensors);
// InvalidArgument naming `what` (e.g. the file's path) and the problem for
// anything that is not a well-formed state file: a bad magic or version, a
// truncated record, an unknown dtype, a byte count that disagrees with the
// shape, trailing bytes, a name twice.
absl::StatusOr<TensorMap> DecodeStateFile(absl::string_view bytes, absl::string_view what);

// What a finished file holds: its size and Checksum.
struct WrittenFile {
  uint64_t bytes = 0;
  std::string checksum;
};

// A file written so that a crash at any moment leaves either the old file
// (or none) or the whole new one: appended to a temporary file beside
// `path`, then Commit() fsyncs it, renames it over `path` and fsyncs the
// directory. A `path` that is a symbolic link is written through: the file
// it names is replaced and the link stays. A `path` (or link target) that
// exists and is no regular file (a device, a FIFO, a directory) is
// InvalidArgument naming it, before anything is written. Destroying it
// uncommitted removes the temporary file. Other errors are Unavailable
// with the path and errno's text. Not synchronized.
class AtomicFileWriter {
 public:
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Create(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  absl::Status Append(absl::string_view bytes);
  absl::StatusOr<WrittenFile> Commit();

 private:
  AtomicFileWriter(std::string path, std::string temporary, int fd)
      : path_(std::move(path)), temporary_(std::move(temporary)), fd_(fd) {}
  std::string path_;
  std::string temporary_;
  int fd_ = -1;
  WrittenFile written_;
  Checksum checksum_;
};

// Writes `bytes` to `path` through an AtomicFileWriter.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes);
// `tensors` as a state file at `path` through an AtomicFileWriter, each
// tensor's bytes written straight from the tensor: the file's size and
// checksum, for the checkpoint manifest.
absl::StatusOr<WrittenFile> WriteStateFile(const std::string& path, const TensorMap& tensors);

// fsync of a directory, so that renames and creations in it are durable.
absl::Status SyncDirectory(const std::string& path);

// One tensor of a state file: its name, type and where its bytes begin.
struct StateFileEntry {
  std::string name;
  TensorType type;
  int64_t offset = 0;
};
// The size and Checksum of the file at `path`, read piece by piece.
// Unavailable or NotFound when it cannot be read.
absl::StatusOr<WrittenFile> ChecksumFile(const std::string& path);
// The records of the state file at `path` in file order, checked as
// DecodeStateFile checks them (InvalidArgument naming the path) but reading
// only their headers. Unavailable or NotFound when it cannot be read.
absl::StatusOr<std::vector<StateFileEntry>> IndexStateFile(const std::string& path);
// The tensor of `type` whose bytes begin at `offset` in the state file at
// `path` (a StateFileEntry), read in pieces. Unavailable or NotFound when it
// cannot be read, InvalidArgument when the file ends before the tensor;
// ResourceExhausted when the tensor cannot be allocated.
absl::StatusOr<HostTensor> ReadStateTensor(const std::string& path, int64_t offset, const TensorType& type);

// Hands `bytes` bytes at `offset` of the file at `path` to `sink` in pieces
// of at most kStatePieceBytes, in order: a tensor copied from one file to
// another without holding it. The errors of ReadStateTensor, or the sink's.
absl::Status ForEachStatePiece(const std::string& path, int64_t offset, int64_t bytes,
                               const std::function<absl::Status(absl::string_view)>& sink);

// Whether `bytes` bytes at `offset_a` of the file at `path_a` equal those at
// `offset_b` of `path_b`, compared piece by piece (a tensor two state files
// both hold). The errors of ReadStateTensor.
absl::StatusOr<bool> StateBytesEqual(const std::string& path_a, int64_t offset_a, const std::string& path_b,
                                     int64_t offset_b, int64_t bytes);

}  // namespace tandem::ir

#endif  // TANDEM_IR_STATE_FILE_H_
