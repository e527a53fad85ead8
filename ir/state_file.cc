#include "ir/state_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/excerpt.h"
#include "ir/limits.h"

namespace tandem::ir {
namespace {

constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'S', 'T', 'A', 'T'};
constexpr uint32_t kVersion = 1;

template <typename T>
void Put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// Reads fixed-size fields and byte runs off a buffer; every read is checked.
class Reader {
 public:
  Reader(absl::string_view bytes, absl::string_view what) : bytes_(bytes), what_(what) {}

  template <typename T>
  absl::StatusOr<T> Get(absl::string_view field) {
    if (bytes_.size() - offset_ < sizeof(T)) return Truncated(field);
    T value;
    std::memcpy(&value, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }
  absl::StatusOr<absl::string_view> Take(uint64_t size, absl::string_view field) {
    if (bytes_.size() - offset_ < size) return Truncated(field);
    absl::string_view run = bytes_.substr(offset_, size);
    offset_ += size;
    return run;
  }
  size_t remaining() const { return bytes_.size() - offset_; }
  absl::Status Error(absl::string_view problem) const {
    return absl::InvalidArgumentError(absl::StrCat(what_, " is not a valid state file: ", problem));
  }

 private:
  absl::Status Truncated(absl::string_view field) const {
    return Error(absl::StrCat("truncated at byte ", offset_, " (reading ", field, ")"));
  }
  absl::string_view bytes_;
  absl::string_view what_;
  size_t offset_ = 0;
};

absl::Status Errno(absl::string_view action, const std::string& path) {
  return absl::UnavailableError(absl::StrCat("cannot ", action, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

std::string EncodeStateFile(const TensorMap& tensors) {
  std::string out(kMagic, sizeof(kMagic));
  Put<uint32_t>(out, kVersion);
  Put<uint32_t>(out, static_cast<uint32_t>(tensors.size()));
  for (const auto& [name, tensor] : tensors) {
    Put<uint32_t>(out, static_cast<uint32_t>(name.size()));
    out.append(name);
    Put<uint8_t>(out, static_cast<uint8_t>(tensor.dtype()));
    Put<uint32_t>(out, static_cast<uint32_t>(tensor.shape().size()));
    for (int64_t extent : tensor.shape()) Put<int64_t>(out, extent);
    Put<uint64_t>(out, static_cast<uint64_t>(tensor.num_bytes()));
    out.append(reinterpret_cast<const char*>(tensor.data()), static_cast<size_t>(tensor.num_bytes()));
  }
  return out;
}

absl::StatusOr<TensorMap> DecodeStateFile(absl::string_view bytes, absl::string_view what) {
  Reader reader(bytes, what);
  absl::StatusOr<absl::string_view> magic = reader.Take(sizeof(kMagic), "the magic");
  if (!magic.ok()) return magic.status();
  if (*magic != absl::string_view(kMagic, sizeof(kMagic))) return reader.Error("bad magic (not a Tandem state file)");
  absl::StatusOr<uint32_t> version = reader.Get<uint32_t>("the version");
  if (!version.ok()) return version.status();
  if (*version != kVersion) {
    return reader.Error(absl::StrCat("version ", *version, ", this build reads version ", kVersion));
  }
  absl::StatusOr<uint32_t> count = reader.Get<uint32_t>("the tensor count");
  if (!count.ok()) return count.status();
  TensorMap tensors;
  for (uint32_t index = 0; index < *count; ++index) {
    absl::StatusOr<uint32_t> name_size = reader.Get<uint32_t>("a name's length");
    if (!name_size.ok()) return name_size.status();
    absl::StatusOr<absl::string_view> name = reader.Take(*name_size, "a name");
    if (!name.ok()) return name.status();
    const std::string tensor_name(*name);
    const std::string quoted = Excerpt(tensor_name);
    absl::StatusOr<uint8_t> dtype = reader.Get<uint8_t>("a dtype");
    if (!dtype.ok()) return dtype.status();
    if (*dtype > static_cast<uint8_t>(DType::kF16)) {
      return reader.Error(absl::StrCat("tensor '", quoted, "' has unknown dtype ", *dtype));
    }
    absl::StatusOr<uint32_t> rank = reader.Get<uint32_t>("a rank");
    if (!rank.ok()) return rank.status();
    if (*rank > kMaxRank) return reader.Error(absl::StrCat("tensor '", quoted, "' has rank ", *rank));
    TensorType type{static_cast<DType>(*dtype), {}};
    for (uint32_t axis = 0; axis < *rank; ++axis) {
      absl::StatusOr<int64_t> extent = reader.Get<int64_t>("an extent");
      if (!extent.ok()) return extent.status();
      if (*extent < 0 || *extent > (int64_t{1} << 40)) {
        return reader.Error(absl::StrCat("tensor '", quoted, "' has extent ", *extent));
      }
      type.shape.push_back(*extent);
    }
    // The shape is checked before anything is sized by it: its product must
    // not overflow, and its bytes must be in the file.
    absl::StatusOr<int64_t> bytes = CheckedNumBytes(type);
    if (!bytes.ok()) return reader.Error(absl::StrCat("tensor '", quoted, "': ", bytes.status().message()));
    absl::StatusOr<uint64_t> size = reader.Get<uint64_t>("a byte count");
    if (!size.ok()) return size.status();
    if (*size != static_cast<uint64_t>(*bytes)) {
      return reader.Error(absl::StrCat("tensor '", quoted, "' of type ", TypeToString(type), " has ", *size,
                                       " bytes"));
    }
    if (*size > reader.remaining()) {
      return reader.Error(absl::StrCat("tensor '", quoted, "' of type ", TypeToString(type), " needs ", *size,
                                       " bytes, but only ", reader.remaining(), " are left in the file"));
    }
    absl::StatusOr<absl::string_view> data = reader.Take(*size, absl::StrCat("the bytes of '", quoted, "'"));
    if (!data.ok()) return data.status();
    absl::StatusOr<HostTensor> tensor = HostTensor::Allocate(type);
    if (!tensor.ok()) {
      return absl::Status(tensor.status().code(),
                          absl::StrCat(what, ": tensor '", quoted, "': ", tensor.status().message()));
    }
    std::memcpy(tensor->data(), data->data(), data->size());
    if (!tensors.emplace(tensor_name, *std::move(tensor)).second) {
      return reader.Error(absl::StrCat("tensor '", quoted, "' appears twice"));
    }
  }
  if (reader.remaining() != 0) return reader.Error(absl::StrCat(reader.remaining(), " trailing bytes"));
  return tensors;
}

std::string StateChecksum(absl::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes a uInt length: feed large buffers in pieces.
  constexpr size_t kPiece = size_t{1} << 30;
  for (size_t offset = 0; offset < bytes.size(); offset += kPiece) {
    const size_t size = std::min(kPiece, bytes.size() - offset);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + offset), static_cast<uInt>(size));
  }
  return absl::StrFormat("%08x", static_cast<uint32_t>(crc));
}

absl::Status SyncDirectory(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open the directory", path);
  const int result = fsync(fd);
  const int saved = errno;
  close(fd);
  errno = saved;
  if (result != 0) return Errno("fsync the directory", path);
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes) {
  const size_t slash = path.rfind('/');
  const std::string directory = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string temporary = absl::StrCat(path, ".tmp.", getpid());
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("create", temporary);
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status status = Errno("write", temporary);
      close(fd);
      unlink(temporary.c_str());
      return status;
    }
    written += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    absl::Status status = Errno("fsync", temporary);
    close(fd);
    unlink(temporary.c_str());
    return status;
  }
  close(fd);
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    absl::Status status = Errno("rename into place", path);
    unlink(temporary.c_str());
    return status;
  }
  return SyncDirectory(directory);
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return Errno("open", path);
  }
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) return Errno("read", path);
  return std::move(contents).str();
}

}  // namespace tandem::ir
