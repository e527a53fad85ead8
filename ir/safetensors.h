// safetensors, Hugging Face's tensor file, which PyTorch and most LLM
// tools read: an 8-byte little-endian header length N, N bytes of a JSON
// object
//   {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//    ..., "__metadata__": {"<key>": "<text>", ...}}
// (padded with spaces), then the data: each tensor's bytes, little-endian in
// C order, at [begin, end) of what follows the header, the tensors tiling
// the data without gaps or overlaps.
//
// `tandem export` writes a checkpoint's parameters this way and `tandem
// train --import` starts from such a file: a tensor of the file is a
// StateFileSlice (ir/state_source.h), which an actor reads in pieces.
#ifndef TANDEM_IR_SAFETENSORS_H_
#define TANDEM_IR_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/dtype.h"
#include "ir/state_source.h"

namespace tandem::ir {

// The most bytes a header may have. The format allows 100 MB; a header
// parses into several times its size, and 16 MiB lists some 150,000
// tensors, far more than any model's file holds.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{16} << 20;
// The most tensors one file may list, and the longest name.
inline constexpr size_t kMaxSafetensorsTensors = 1 << 20;
inline constexpr size_t kMaxSafetensorsNameBytes = 4096;

// One tensor of a safetensors file: its name, type and where its bytes
// begin (ParseSafetensorsHeader: in the data; IndexSafetensors: in the file).
struct SafetensorsEntry {
  std::string name;
  TensorType type;
  int64_t offset = 0;
  friend bool operator==(const SafetensorsEntry&, const SafetensorsEntry&) = default;
};

// The tensors a header lists, in data order, for a data section of
// `data_bytes` bytes. InvalidArgument naming `what` for anything but a JSON
// object of entries whose dtype is F32, I32, BF16 or F16, whose shape fits
// ir/limits.h, whose byte range matches its shape and lies in the data, and
// which together tile the data exactly; and for more than
// kMaxSafetensorsTensors tensors or a name longer than
// kMaxSafetensorsNameBytes. "__metadata__" must map strings to strings.
absl::StatusOr<std::vector<SafetensorsEntry>> ParseSafetensorsHeader(absl::string_view header, uint64_t data_bytes,
                                                                     absl::string_view what);

// The tensors of the file at `path`, offsets in the file: its size and
// header are checked (the header bounded by kMaxSafetensorsHeaderBytes
// before it is read), not its data. NotFound or Unavailable when it cannot
// be read.
absl::StatusOr<std::vector<SafetensorsEntry>> IndexSafetensors(const std::string& path);

// Writes `tensors` (name and source, in this order) as a safetensors file
// at `path`, atomically (ir/state_file.h AtomicFileWriter), each tensor
// copied in pieces from a file slice or made from its initializer one at a
// time, never the whole model at once; `metadata` goes in "__metadata__".
// InvalidArgument for a name given twice or named "__metadata__".
absl::Status WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, StateSource>>& tensors,
                              const std::map<std::string, std::string>& metadata);

// `step`'s first state with its parameters from `tensors` (by parameter
// name; file slices are read by whoever starts from them) and its optimizer
// state from its initializers. InvalidArgument naming the tensor and `what`
// (where the tensors come from) when `tensors` lacks a parameter, holds one
// of another type, or holds a tensor that is no parameter of `step`.
absl::StatusOr<StateSources> ParameterSourcesOf(const StateSources& tensors, absl::string_view what,
                                                const TrainStep& step);

// ParameterSourcesOf the tensors of the safetensors file at `path`, named
// as `step` names its parameters (as `tandem export` writes them); the
// errors of IndexSafetensors.
absl::StatusOr<StateSources> SafetensorsParameterSources(const std::string& path, const TrainStep& step);

}  // namespace tandem::ir

#endif  // TANDEM_IR_SAFETENSORS_H_
