#include "ir/state_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/errno_status.h"
#include "ir/excerpt.h"
#include "ir/limits.h"
#include "ir/read_file.h"

namespace tandem::ir {
namespace {

constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'S', 'T', 'A', 'T'};
constexpr uint32_t kVersion = 1;
// A record's name; longer ones are refused before they are read.
constexpr uint32_t kMaxNameBytes = 1 << 20;

template <typename T>
void Put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

absl::Status Errno(absl::string_view action, const std::string& path) {
  return ErrnoStatus(absl::StatusCode::kUnavailable, absl::StrCat("cannot ", action, " ", path));
}

absl::Status NotAStateFile(absl::string_view what, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(what, " is not a valid state file: ", problem));
}

// Reads fixed-size fields and byte runs off bytes in memory; every read is
// checked.
class MemorySource {
 public:
  explicit MemorySource(absl::string_view bytes) : bytes_(bytes) {}
  // Copies `size` bytes at the cursor into `out` and moves past them; false
  // when fewer are left.
  absl::StatusOr<bool> Read(void* out, uint64_t size) {
    if (remaining() < size) return false;
    std::memcpy(out, bytes_.data() + offset_, size);
    offset_ += size;
    return true;
  }
  void Skip(uint64_t size) { offset_ += size; }
  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return bytes_.size() - offset_; }

 private:
  absl::string_view bytes_;
  uint64_t offset_ = 0;
};

// The same over a file, read with pread.
class FileSource {
 public:
  FileSource(int fd, uint64_t size, const std::string& path) : fd_(fd), size_(size), path_(path) {}
  absl::StatusOr<bool> Read(void* out, uint64_t size) {
    if (remaining() < size) return false;
    if (absl::Status status = ReadAt(out, size, offset_); !status.ok()) return status;
    offset_ += size;
    return true;
  }
  void Skip(uint64_t size) { offset_ += size; }
  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return size_ - offset_; }

  absl::Status ReadAt(void* out, uint64_t size, uint64_t at) { return ReadExactlyAt(fd_, out, size, at, path_); }

 private:
  int fd_;
  uint64_t size_;
  const std::string& path_;
  uint64_t offset_ = 0;
};

// Walks the records of a state file on `source`, checking each as
// DecodeStateFile promises, and calls on_record(entry) with the cursor at
// the entry's bytes (the callback must not move it); the walk then skips
// them.
template <typename Source, typename OnRecord>
absl::Status WalkStateFile(Source& source, absl::string_view what, OnRecord on_record) {
  auto truncated = [&](absl::string_view field) {
    return NotAStateFile(what, absl::StrCat("truncated at byte ", source.offset(), " (reading ", field, ")"));
  };
  auto get = [&](auto& value, absl::string_view field) -> absl::Status {
    absl::StatusOr<bool> read = source.Read(&value, sizeof(value));
    if (!read.ok()) return read.status();
    return *read ? absl::OkStatus() : truncated(field);
  };
  char magic[sizeof(kMagic)];
  if (absl::Status status = get(magic, "the magic"); !status.ok()) return status;
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) return NotAStateFile(what, "bad magic (not a Tandem state file)");
  uint32_t version = 0;
  if (absl::Status status = get(version, "the version"); !status.ok()) return status;
  if (version != kVersion) {
    return NotAStateFile(what, absl::StrCat("version ", version, ", this build reads version ", kVersion));
  }
  uint32_t count = 0;
  if (absl::Status status = get(count, "the tensor count"); !status.ok()) return status;
  std::set<std::string> names;
  for (uint32_t index = 0; index < count; ++index) {
    uint32_t name_size = 0;
    if (absl::Status status = get(name_size, "a name's length"); !status.ok()) return status;
    if (name_size > kMaxNameBytes || name_size > source.remaining()) {
      return name_size > kMaxNameBytes
                 ? NotAStateFile(what, absl::StrCat("a name of ", name_size, " bytes, above the ", kMaxNameBytes,
                                                    " a name may have"))
                 : truncated("a name");
    }
    std::string name(name_size, '\0');
    absl::StatusOr<bool> read = source.Read(name.data(), name_size);
    if (!read.ok()) return read.status();
    if (!*read) return truncated("a name");
    const std::string quoted = Excerpt(name);
    if (!names.insert(name).second) return NotAStateFile(what, absl::StrCat("tensor '", quoted, "' appears twice"));
    uint8_t dtype = 0;
    if (absl::Status status = get(dtype, "a dtype"); !status.ok()) return status;
    if (dtype > static_cast<uint8_t>(DType::kF16)) {
      return NotAStateFile(what, absl::StrCat("tensor '", quoted, "' has unknown dtype ", dtype));
    }
    uint32_t rank = 0;
    if (absl::Status status = get(rank, "a rank"); !status.ok()) return status;
    if (rank > kMaxRank) return NotAStateFile(what, absl::StrCat("tensor '", quoted, "' has rank ", rank));
    TensorType type{static_cast<DType>(dtype), {}};
    for (uint32_t axis = 0; axis < rank; ++axis) {
      int64_t extent = 0;
      if (absl::Status status = get(extent, "an extent"); !status.ok()) return status;
      if (extent < 0 || extent > (int64_t{1} << 40)) {
        return NotAStateFile(what, absl::StrCat("tensor '", quoted, "' has extent ", extent));
      }
      type.shape.push_back(extent);
    }
    // The shape is checked before anything is sized by it: its product must
    // not overflow, and its bytes must be in the file.
    absl::StatusOr<int64_t> bytes = CheckedNumBytes(type);
    if (!bytes.ok()) return NotAStateFile(what, absl::StrCat("tensor '", quoted, "': ", bytes.status().message()));
    uint64_t size = 0;
    if (absl::Status status = get(size, "a byte count"); !status.ok()) return status;
    if (size != static_cast<uint64_t>(*bytes)) {
      return NotAStateFile(what, absl::StrCat("tensor '", quoted, "' of type ", TypeToString(type), " has ", size,
                                              " bytes"));
    }
    if (size > source.remaining()) {
      return NotAStateFile(what, absl::StrCat("tensor '", quoted, "' of type ", TypeToString(type), " needs ", size,
                                              " bytes, but only ", source.remaining(), " are left in the file"));
    }
    StateFileEntry entry{std::move(name), std::move(type), static_cast<int64_t>(source.offset())};
    if (absl::Status status = on_record(entry); !status.ok()) return status;
    source.Skip(size);
  }
  if (source.remaining() != 0) return NotAStateFile(what, absl::StrCat(source.remaining(), " trailing bytes"));
  return absl::OkStatus();
}

}  // namespace

void Checksum::Update(absl::string_view bytes) {
  if (crc_ == 0) crc_ = crc32(0L, Z_NULL, 0);
  // zlib takes a uInt length: feed large buffers in pieces.
  constexpr size_t kPiece = size_t{1} << 30;
  for (size_t offset = 0; offset < bytes.size(); offset += kPiece) {
    const size_t size = std::min(kPiece, bytes.size() - offset);
    crc_ = crc32(crc_, reinterpret_cast<const Bytef*>(bytes.data() + offset), static_cast<uInt>(size));
  }
}

std::string Checksum::Hex() const { return absl::StrFormat("%08x", static_cast<uint32_t>(crc_)); }

std::string StateChecksum(absl::string_view bytes) {
  Checksum checksum;
  checksum.Update(bytes);
  return checksum.Hex();
}

namespace {

// A record's header: everything before its bytes.
std::string RecordHeader(const std::string& name, const HostTensor& tensor) {
  std::string out;
  Put<uint32_t>(out, static_cast<uint32_t>(name.size()));
  out.append(name);
  Put<uint8_t>(out, static_cast<uint8_t>(tensor.dtype()));
  Put<uint32_t>(out, static_cast<uint32_t>(tensor.shape().size()));
  for (int64_t extent : tensor.shape()) Put<int64_t>(out, extent);
  Put<uint64_t>(out, static_cast<uint64_t>(tensor.num_bytes()));
  return out;
}

std::string FileHeader(const TensorMap& tensors) {
  std::string out(kMagic, sizeof(kMagic));
  Put<uint32_t>(out, kVersion);
  Put<uint32_t>(out, static_cast<uint32_t>(tensors.size()));
  return out;
}

absl::string_view BytesOf(const HostTensor& tensor) {
  return {reinterpret_cast<const char*>(tensor.data()), static_cast<size_t>(tensor.num_bytes())};
}

}  // namespace

std::string EncodeStateFile(const TensorMap& tensors) {
  std::string out = FileHeader(tensors);
  for (const auto& [name, tensor] : tensors) {
    out.append(RecordHeader(name, tensor));
    absl::StrAppend(&out, BytesOf(tensor));
  }
  return out;
}

absl::StatusOr<TensorMap> DecodeStateFile(absl::string_view bytes, absl::string_view what) {
  MemorySource source(bytes);
  TensorMap tensors;
  absl::Status status = WalkStateFile(source, what, [&](const StateFileEntry& entry) -> absl::Status {
    const std::string quoted = Excerpt(entry.name);
    absl::StatusOr<HostTensor> tensor = HostTensor::Allocate(entry.type);
    if (!tensor.ok()) {
      return absl::Status(tensor.status().code(),
                          absl::StrCat(what, ": tensor '", quoted, "': ", tensor.status().message()));
    }
    std::memcpy(tensor->data(), bytes.data() + entry.offset, static_cast<size_t>(tensor->num_bytes()));
    tensors.emplace(entry.name, *std::move(tensor));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return tensors;
}

absl::Status SyncDirectory(const std::string& path) {
  const FileDescriptor directory(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!directory.valid()) return Errno("open the directory", path);
  if (fsync(directory.get()) != 0) return Errno("fsync the directory", path);
  return absl::OkStatus();
}

namespace {

// Where a write to `path` lands: `path` itself, or through its symbolic
// links (each followed, relative ones from their own directory) to the
// file they name, so that the link stays a link. InvalidArgument when that
// is no regular file (a device, a FIFO, a directory): a rename over it
// would replace it.
absl::StatusOr<std::string> OutputTarget(const std::string& path) {
  std::string target = path;
  for (int links = 0; links < 40; ++links) {
    struct stat info {};
    if (lstat(target.c_str(), &info) != 0) {
      if (errno == ENOENT) return target;
      return Errno("stat", target);
    }
    if (S_ISREG(info.st_mode)) return target;
    if (!S_ISLNK(info.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, target == path ? "" : absl::StrCat(" (a link to ", target, ")"), " is ", FileKindName(info.st_mode),
          ", not a regular file: Tandem writes its outputs only to regular files"));
    }
    std::string link(4096, '\0');
    const ssize_t length = readlink(target.c_str(), link.data(), link.size());
    if (length < 0) return Errno("read the link", target);
    link.resize(static_cast<size_t>(length));
    const size_t slash = target.rfind('/');
    target = link.starts_with('/') || slash == std::string::npos ? link : absl::StrCat(target.substr(0, slash + 1), link);
  }
  return absl::InvalidArgumentError(absl::StrCat(path, ": too many levels of symbolic links"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Create(const std::string& requested) {
  absl::StatusOr<std::string> resolved = OutputTarget(requested);
  if (!resolved.ok()) return resolved.status();
  const std::string& path = *resolved;
  std::string temporary = absl::StrCat(path, ".tmp.", getpid());
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("create", temporary);
  return std::unique_ptr<AtomicFileWriter>(new AtomicFileWriter(path, std::move(temporary), fd));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    close(fd_);
    unlink(temporary_.c_str());
  }
}

absl::Status AtomicFileWriter::Append(absl::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " was committed or failed already"));
  checksum_.Update(bytes);
  written_.bytes += bytes.size();
  size_t done = 0;
  while (done < bytes.size()) {
    const size_t piece = std::min(bytes.size() - done, static_cast<size_t>(kStatePieceBytes));
    const ssize_t n = write(fd_, bytes.data() + done, piece);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status status = Errno("write", temporary_);
      close(fd_);
      fd_ = -1;
      unlink(temporary_.c_str());
      return status;
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<WrittenFile> AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " was committed or failed already"));
  const int fd = std::exchange(fd_, -1);
  absl::Status status;
  if (fsync(fd) != 0) status = Errno("fsync", temporary_);
  close(fd);
  if (status.ok() && rename(temporary_.c_str(), path_.c_str()) != 0) status = Errno("rename into place", path_);
  if (!status.ok()) {
    unlink(temporary_.c_str());
    return status;
  }
  const size_t slash = path_.rfind('/');
  const std::string directory = slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
  if (absl::Status synced = SyncDirectory(directory); !synced.ok()) return synced;
  written_.checksum = checksum_.Hex();
  return written_;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes) {
  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  if (absl::Status status = (*writer)->Append(bytes); !status.ok()) return status;
  return (*writer)->Commit().status();
}

absl::StatusOr<WrittenFile> WriteStateFile(const std::string& path, const TensorMap& tensors) {
  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  if (absl::Status status = (*writer)->Append(FileHeader(tensors)); !status.ok()) return status;
  for (const auto& [name, tensor] : tensors) {
    if (absl::Status status = (*writer)->Append(RecordHeader(name, tensor)); !status.ok()) return status;
    if (absl::Status status = (*writer)->Append(BytesOf(tensor)); !status.ok()) return status;
  }
  return (*writer)->Commit();
}

namespace {

// An open file, closed when it goes.
struct OpenFile {
  FileDescriptor descriptor;
  int fd = -1;  // descriptor's
  uint64_t size = 0;
};

absl::Status Open(const std::string& path, OpenFile& file) {
  file.descriptor.Reset(open(path.c_str(), kOpenForReading));
  file.fd = file.descriptor.get();
  if (file.fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return Errno("open", path);
  }
  int64_t size = 0;
  if (absl::Status regular = RequireRegularFile(file.fd, path, &size); !regular.ok()) return regular;
  file.size = static_cast<uint64_t>(size);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WrittenFile> ChecksumFile(const std::string& path) {
  OpenFile file;
  if (absl::Status status = Open(path, file); !status.ok()) return status;
  FileSource source(file.fd, file.size, path);
  std::string piece;
  Checksum checksum;
  for (uint64_t offset = 0; offset < file.size; offset += piece.size()) {
    piece.resize(std::min<uint64_t>(file.size - offset, kStatePieceBytes));
    if (absl::Status status = source.ReadAt(piece.data(), piece.size(), offset); !status.ok()) return status;
    checksum.Update(piece);
  }
  return WrittenFile{file.size, checksum.Hex()};
}

absl::StatusOr<std::vector<StateFileEntry>> IndexStateFile(const std::string& path) {
  OpenFile file;
  if (absl::Status status = Open(path, file); !status.ok()) return status;
  FileSource source(file.fd, file.size, path);
  std::vector<StateFileEntry> entries;
  absl::Status status = WalkStateFile(source, path, [&](const StateFileEntry& entry) {
    entries.push_back(entry);
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return entries;
}

absl::StatusOr<HostTensor> ReadStateTensor(const std::string& path, int64_t offset, const TensorType& type) {
  OpenFile file;
  if (absl::Status status = Open(path, file); !status.ok()) return status;
  absl::StatusOr<HostTensor> tensor = HostTensor::Allocate(type);
  if (!tensor.ok()) return tensor.status();
  const auto bytes = static_cast<uint64_t>(tensor->num_bytes());
  if (offset < 0 || static_cast<uint64_t>(offset) > file.size || file.size - offset < bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has ", file.size, " bytes: it ends before the ",
                                                   TypeToString(type), " at byte ", offset));
  }
  FileSource source(file.fd, file.size, path);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t piece = std::min<uint64_t>(bytes - done, kStatePieceBytes);
    if (absl::Status status = source.ReadAt(tensor->data() + done, piece, offset + done); !status.ok()) return status;
    done += piece;
  }
  return tensor;
}

absl::Status ForEachStatePiece(const std::string& path, int64_t offset, int64_t bytes,
                               const std::function<absl::Status(absl::string_view)>& sink) {
  OpenFile file;
  if (absl::Status status = Open(path, file); !status.ok()) return status;
  if (offset < 0 || bytes < 0 || static_cast<uint64_t>(offset) > file.size ||
      file.size - static_cast<uint64_t>(offset) < static_cast<uint64_t>(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has ", file.size, " bytes: it ends before the ", bytes,
                                                   " bytes at byte ", offset));
  }
  FileSource source(file.fd, file.size, path);
  std::string piece;
  for (int64_t done = 0; done < bytes;) {
    piece.resize(static_cast<size_t>(std::min<int64_t>(bytes - done, kStatePieceBytes)));
    if (absl::Status status = source.ReadAt(piece.data(), piece.size(), static_cast<uint64_t>(offset + done));
        !status.ok()) {
      return status;
    }
    if (absl::Status status = sink(piece); !status.ok()) return status;
    done += static_cast<int64_t>(piece.size());
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> StateBytesEqual(const std::string& path_a, int64_t offset_a, const std::string& path_b,
                                     int64_t offset_b, int64_t bytes) {
  OpenFile file_a, file_b;
  if (absl::Status status = Open(path_a, file_a); !status.ok()) return status;
  if (absl::Status status = Open(path_b, file_b); !status.ok()) return status;
  FileSource a(file_a.fd, file_a.size, path_a), b(file_b.fd, file_b.size, path_b);
  std::string piece_a, piece_b;
  for (int64_t done = 0; done < bytes;) {
    const int64_t size = std::min(bytes - done, kStatePieceBytes);
    piece_a.resize(static_cast<size_t>(size));
    piece_b.resize(static_cast<size_t>(size));
    if (absl::Status status = a.ReadAt(piece_a.data(), size, offset_a + done); !status.ok()) return status;
    if (absl::Status status = b.ReadAt(piece_b.data(), size, offset_b + done); !status.ok()) return status;
    if (piece_a != piece_b) return false;
    done += size;
  }
  return true;
}

}  // namespace tandem::ir
