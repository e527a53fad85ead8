#include "ir/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "ir/errno_status.h"
#include "ir/excerpt.h"
#include "ir/limits.h"
#include "ir/read_file.h"
#include "ir/state_file.h"
#include "nlohmann/json.hpp"

namespace tandem::ir {
namespace {

constexpr char kMetadata[] = "__metadata__";

struct SafetensorsDTypeName {
  const char* name;
  DType dtype;
};
constexpr SafetensorsDTypeName kDTypes[] = {
    {"F32", DType::kF32}, {"I32", DType::kI32}, {"BF16", DType::kBF16}, {"F16", DType::kF16}};

const char* SafetensorsDType(DType dtype) {
  for (const SafetensorsDTypeName& entry : kDTypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  return "";
}

}  // namespace

absl::StatusOr<std::vector<SafetensorsEntry>> ParseSafetensorsHeader(absl::string_view header, uint64_t data_bytes,
                                                                     absl::string_view what) {
  auto bad = [what](absl::string_view problem) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a safetensors file: ", problem));
  };
  const nlohmann::json json = nlohmann::json::parse(header.begin(), header.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return bad("its header is not a JSON object");
  if (json.size() > kMaxSafetensorsTensors + 1) {
    return bad(absl::StrCat("it lists ", json.size(), " entries, more than the ", kMaxSafetensorsTensors,
                            " tensors a file may have"));
  }
  std::vector<SafetensorsEntry> entries;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) of each entry, in entries' order
  for (const auto& [name, value] : json.items()) {
    if (name.size() > kMaxSafetensorsNameBytes) {
      return bad(absl::StrCat("a name of ", name.size(), " bytes is longer than ", kMaxSafetensorsNameBytes));
    }
    if (name == kMetadata) {
      if (!value.is_object()) return bad("__metadata__ is not an object");
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) return bad(absl::StrCat("__metadata__ '", Excerpt(key), "' is not a string"));
      }
      continue;
    }
    const std::string tensor = absl::StrCat("tensor '", Excerpt(name), "'");
    if (!value.is_object()) return bad(absl::StrCat(tensor, " is not an object"));
    auto dtype = value.find("dtype");
    auto shape = value.find("shape");
    auto offsets = value.find("data_offsets");
    if (dtype == value.end() || !dtype->is_string() || shape == value.end() || !shape->is_array() ||
        offsets == value.end() || !offsets->is_array() || offsets->size() != 2) {
      return bad(absl::StrCat(tensor, " needs a dtype, a shape and data_offsets [begin, end]"));
    }
    SafetensorsEntry entry{name, {}, 0};
    const std::string& dtype_name = dtype->get_ref<const std::string&>();
    const SafetensorsDTypeName* known = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                                          [&](const SafetensorsDTypeName& d) { return dtype_name == d.name; });
    if (known == std::end(kDTypes)) {
      return bad(absl::StrCat(tensor, " has dtype '", Excerpt(dtype_name), "'; Tandem reads F32, I32, BF16 and F16"));
    }
    entry.type.dtype = known->dtype;
    if (shape->size() > static_cast<size_t>(kMaxRank)) {
      return bad(absl::StrCat(tensor, " has ", shape->size(), " axes, more than ", kMaxRank));
    }
    for (const nlohmann::json& extent : *shape) {
      if (!extent.is_number_unsigned()) return bad(absl::StrCat(tensor, "'s shape is not a list of extents"));
      const uint64_t value_of = extent.get<uint64_t>();
      if (value_of > static_cast<uint64_t>(kMaxTensorBytes)) return bad(absl::StrCat(tensor, " is too large"));
      entry.type.shape.push_back(static_cast<int64_t>(value_of));
    }
    absl::StatusOr<int64_t> bytes = CheckedNumBytes(entry.type);
    if (!bytes.ok()) return bad(absl::StrCat(tensor, ": ", bytes.status().message()));
    if (!(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return bad(absl::StrCat(tensor, "'s data_offsets are not byte offsets"));
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>();
    const uint64_t end = (*offsets)[1].get<uint64_t>();
    if (begin > end || end > data_bytes || end - begin != static_cast<uint64_t>(*bytes)) {
      return bad(absl::StrCat(tensor, " (", TypeToString(entry.type), ", ", *bytes, " bytes) has data_offsets [",
                              begin, ", ", end, "], which do not fit its size or the ", data_bytes,
                              " bytes of data"));
    }
    entry.offset = static_cast<int64_t>(begin);
    entries.push_back(std::move(entry));
    ranges.emplace_back(begin, end);
  }
  // In data order, the ranges must tile [0, data_bytes).
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  uint64_t covered = 0;
  std::vector<SafetensorsEntry> sorted;
  for (size_t i : order) {
    if (ranges[i].first != covered) {
      return bad(absl::StrCat("tensor '", Excerpt(entries[i].name), "' begins at byte ", ranges[i].first,
                              " of the data, where ", covered, " was expected (the tensors overlap or leave a gap)"));
    }
    covered = ranges[i].second;
    sorted.push_back(std::move(entries[i]));
  }
  if (covered != data_bytes) {
    return bad(absl::StrCat("the tensors cover ", covered, " of its ", data_bytes, " bytes of data"));
  }
  return sorted;
}

absl::StatusOr<std::vector<SafetensorsEntry>> IndexSafetensors(const std::string& path) {
  const FileDescriptor file(open(path.c_str(), kOpenForReading));
  if (!file.valid()) {
    return ErrnoStatus(errno == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kUnavailable,
                       absl::StrCat("open ", path));
  }
  const int fd = file.get();
  int64_t file_bytes = 0;
  if (absl::Status regular = RequireRegularFile(fd, path, &file_bytes); !regular.ok()) return regular;
  const auto size = static_cast<uint64_t>(file_bytes);
  unsigned char length_bytes[8];
  if (size < sizeof(length_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a safetensors file: ", size, " bytes"));
  }
  if (absl::Status status = ReadExactlyAt(fd, length_bytes, 8, 0, path); !status.ok()) {
    return status;
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | length_bytes[i];
  if (header_bytes > kMaxSafetensorsHeaderBytes || header_bytes > size - 8) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a safetensors file: a header of ", header_bytes,
                                                   " bytes (at most ", kMaxSafetensorsHeaderBytes, " and the file's ",
                                                   size - 8, ")"));
  }
  std::string header(header_bytes, '\0');
  if (absl::Status status = ReadExactlyAt(fd, header.data(), header_bytes, 8, path); !status.ok()) return status;
  const uint64_t data_start = 8 + header_bytes;
  absl::StatusOr<std::vector<SafetensorsEntry>> entries = ParseSafetensorsHeader(header, size - data_start, path);
  if (!entries.ok()) return entries.status();
  for (SafetensorsEntry& entry : *entries) entry.offset += static_cast<int64_t>(data_start);
  return entries;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, StateSource>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header[kMetadata] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, source] : tensors) {
    if (name == kMetadata || !names.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor name '", Excerpt(name), "' ",
                                                     name == kMetadata ? "is reserved" : "is given twice"));
    }
    const uint64_t bytes = static_cast<uint64_t>(source.type.num_bytes());
    header[name] = {{"dtype", SafetensorsDType(source.type.dtype)},
                    {"shape", source.type.shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  // nlohmann's object keeps its keys sorted; the data follows `tensors`'
  // order, which the offsets say. Spaces pad the header to 8 bytes.
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);

  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  if (absl::Status status = (*writer)->Append(prefix); !status.ok()) return status;
  if (absl::Status status = (*writer)->Append(text); !status.ok()) return status;
  for (const auto& [name, source] : tensors) {
    absl::Status status;
    if (const auto* slice = std::get_if<StateFileSlice>(&source.origin)) {
      status = ForEachStatePiece(slice->path, slice->offset, source.type.num_bytes(),
                                 [&](absl::string_view piece) { return (*writer)->Append(piece); });
    } else {
      absl::StatusOr<HostTensor> tensor = MaterializeState(name, source);
      status = tensor.ok() ? (*writer)->Append(absl::string_view(reinterpret_cast<const char*>(tensor->data()),
                                                                 static_cast<size_t>(tensor->num_bytes())))
                           : tensor.status();
    }
    if (!status.ok()) return status;
  }
  absl::StatusOr<WrittenFile> written = (*writer)->Commit();
  return written.ok() ? absl::OkStatus() : written.status();
}

absl::StatusOr<StateSources> ParameterSourcesOf(const StateSources& tensors, absl::string_view what,
                                                const TrainStep& step) {
  StateSources sources = SeedSources(step);
  for (const auto& [name, tensor] : tensors) {
    const StateSpec* spec = step.FindState(name);
    if (spec == nullptr || spec->role != StateRole::kParameter) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " holds '", Excerpt(name), "', which is no parameter of ", step.name));
    }
    if (tensor.type != spec->type) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": parameter '", name, "' is ", TypeToString(tensor.type),
                                                     " there and ", TypeToString(spec->type), " in ", step.name));
    }
    sources[name] = tensor;
  }
  for (const StateSpec& spec : step.state) {
    if (spec.role == StateRole::kParameter && !tensors.contains(spec.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has no parameter '", spec.name, "' of ", step.name, " (", TypeToString(spec.type), ")"));
    }
  }
  return sources;
}

absl::StatusOr<StateSources> SafetensorsParameterSources(const std::string& path, const TrainStep& step) {
  absl::StatusOr<std::vector<SafetensorsEntry>> entries = IndexSafetensors(path);
  if (!entries.ok()) return entries.status();
  StateSources tensors;
  for (const SafetensorsEntry& entry : *entries) {
    tensors[entry.name] = StateSource{entry.type, StateFileSlice{path, entry.offset}};
  }
  return ParameterSourcesOf(tensors, path, step);
}

}  // namespace tandem::ir
