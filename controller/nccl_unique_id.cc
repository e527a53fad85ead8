#include "controller/nccl_unique_id.h"

#include <dlfcn.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::controller {
namespace {

// NCCL's ABI for the two calls used here (nccl.h): ncclUniqueId is a struct
// of 128 chars passed by pointer, and results are an int enum with 0 for
// success.
constexpr size_t kUniqueIdBytes = 128;
struct UniqueId {
  char internal[kUniqueIdBytes];
};
using GetUniqueIdFn = int (*)(UniqueId*);
using GetErrorStringFn = const char* (*)(int);

struct NcclLibrary {
  GetUniqueIdFn get_unique_id = nullptr;
  GetErrorStringFn get_error_string = nullptr;
  std::string error;  // why it did not load
};

const NcclLibrary& LoadNccl() {
  static const NcclLibrary* const library = [] {
    auto* loaded = new NcclLibrary;
    const char* const candidates[] = {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"};
    std::vector<std::string> failures;
    for (const char* path : candidates) {
      void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        failures.push_back(dlerror());
        continue;
      }
      loaded->get_unique_id = reinterpret_cast<GetUniqueIdFn>(dlsym(handle, "ncclGetUniqueId"));
      loaded->get_error_string = reinterpret_cast<GetErrorStringFn>(dlsym(handle, "ncclGetErrorString"));
      if (loaded->get_unique_id != nullptr) return loaded;
      failures.push_back(absl::StrCat(path, " has no ncclGetUniqueId"));
    }
    loaded->error = absl::StrJoin(failures, "; ");
    return loaded;
  }();
  return *library;
}

}  // namespace

absl::StatusOr<std::string> NewNcclUniqueId() {
  const NcclLibrary& nccl = LoadNccl();
  if (nccl.get_unique_id == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("cannot load NCCL for a GPU data plane: ", nccl.error));
  }
  UniqueId id{};
  if (const int result = nccl.get_unique_id(&id); result != 0) {
    const char* words = nccl.get_error_string != nullptr ? nccl.get_error_string(result) : nullptr;
    return absl::InternalError(
        absl::StrCat("ncclGetUniqueId: ", words != nullptr ? std::string(words) : absl::StrCat("error ", result)));
  }
  return std::string(id.internal, kUniqueIdBytes);
}

}  // namespace tandem::controller
