#include "controller/checkpoint.h"

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "ir/state_file.h"

namespace tandem::controller {
namespace {

namespace fs = std::filesystem;

constexpr char kManifest[] = "MANIFEST";
constexpr char kHeader[] = "tandem-checkpoint\t1";

std::string CheckpointName(int64_t step) { return absl::StrFormat("step-%08d", step); }

// A name that would break the manifest's one-record-a-line format.
bool Printable(absl::string_view name) {
  return !name.empty() && std::none_of(name.begin(), name.end(), [](char c) { return c == '\t' || c == '\n'; });
}

absl::Status FilesystemError(absl::string_view action, const fs::path& path, const std::error_code& error) {
  return absl::UnavailableError(absl::StrCat("cannot ", action, " ", path.string(), ": ", error.message()));
}

// Fault injection for the crash tests: TANDEM_FAULT=checkpoint-before-manifest
// kills this process after the actors wrote their files and before the
// manifest exists, as a crash at the worst moment would.
void MaybeCrash(absl::string_view point) {
  const char* fault = std::getenv("TANDEM_FAULT");
  if (fault != nullptr && point == fault) raise(SIGKILL);
}

struct Manifest {
  std::string model;
  int64_t step = -1;
  std::string schedule;
  int32_t actors = 0;
  std::map<std::string, std::string> state;  // name -> type
  struct File {
    std::string name;
    uint64_t bytes = 0;
    std::string checksum;
  };
  std::vector<File> files;
};

absl::StatusOr<Manifest> ParseManifest(absl::string_view text, const std::string& path) {
  auto error = [&path](int line, absl::string_view problem) {
    return absl::DataLossError(absl::StrCat(path, ":", line, ": ", problem, " (the checkpoint is corrupt)"));
  };
  Manifest manifest;
  int line_number = 0;
  bool header = false;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    ++line_number;
    std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
    if (!header) {
      if (line != kHeader) return error(line_number, "not a Tandem checkpoint manifest (or of another version)");
      header = true;
      continue;
    }
    const absl::string_view key = fields[0];
    auto want = [&](size_t count) { return fields.size() == count; };
    if (key == "model" && want(2)) {
      manifest.model = std::string(fields[1]);
    } else if (key == "step" && want(2)) {
      if (!absl::SimpleAtoi(fields[1], &manifest.step) || manifest.step < 0) return error(line_number, "bad step");
    } else if (key == "schedule" && want(2)) {
      manifest.schedule = std::string(fields[1]);
    } else if (key == "actors" && want(2)) {
      if (!absl::SimpleAtoi(fields[1], &manifest.actors) || manifest.actors < 1) return error(line_number, "bad actors");
    } else if (key == "state" && want(3)) {
      if (!manifest.state.emplace(std::string(fields[1]), std::string(fields[2])).second) {
        return error(line_number, absl::StrCat("state '", fields[1], "' listed twice"));
      }
    } else if (key == "file" && want(4)) {
      Manifest::File file{std::string(fields[1]), 0, std::string(fields[3])};
      if (!absl::SimpleAtoi(fields[2], &file.bytes)) return error(line_number, "bad byte count");
      if (file.name.find('/') != std::string::npos || file.name == "." || file.name == "..") {
        return error(line_number, absl::StrCat("file name '", file.name, "' leaves the checkpoint"));
      }
      manifest.files.push_back(std::move(file));
    } else {
      return error(line_number, absl::StrCat("unexpected record '", line, "'"));
    }
  }
  if (!header) return error(0, "empty manifest");
  if (manifest.model.empty() || manifest.step < 0 || manifest.files.empty()) {
    return error(line_number, "incomplete manifest (model, step or files missing)");
  }
  return manifest;
}

// Whether `path` is a directory holding a manifest.
bool IsCheckpoint(const fs::path& path) {
  std::error_code error;
  return fs::is_regular_file(path / kManifest, error);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& root) {
  std::vector<std::string> found;
  std::error_code error;
  if (!fs::exists(root, error)) return found;
  fs::directory_iterator it(root, error);
  if (error) return FilesystemError("list", root, error);
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    if (!absl::StartsWith(name, "step-") || !absl::SimpleAtoi(name.substr(5), &step)) continue;
    if (IsCheckpoint(entry.path())) found.push_back(entry.path().string());
  }
  // Zero-padded names sort by step.
  std::sort(found.begin(), found.end());
  return found;
}

absl::StatusOr<std::string> SaveCheckpoint(Pipeline& pipeline, const std::string& root) {
  const CompiledStep& compiled = pipeline.compiled();
  const ir::TrainStep& step = pipeline.step();
  if (!Printable(step.name) || !Printable(compiled.schedule)) {
    return absl::InvalidArgumentError("the model's and schedule's names must not hold tabs or newlines");
  }
  for (const ir::StateSpec& spec : step.state) {
    if (!Printable(spec.name)) {
      return absl::InvalidArgumentError(absl::StrCat("state '", spec.name, "' has a tab or newline in its name"));
    }
  }
  std::error_code error;
  fs::create_directories(root, error);
  if (error) return FilesystemError("create", root, error);
  const std::string name = CheckpointName(pipeline.steps_done());
  const fs::path final_path = fs::path(root) / name;
  if (fs::exists(final_path, error)) {
    return absl::AlreadyExistsError(absl::StrCat("checkpoint ", final_path.string(), " exists already"));
  }
  const fs::path partial = fs::path(root) / absl::StrCat(".", name, ".partial");
  fs::remove_all(partial, error);  // what a crashed save left
  if (error) return FilesystemError("remove", partial, error);
  if (!fs::create_directory(partial, error)) return FilesystemError("create", partial, error);

  std::vector<std::string> paths;
  for (int32_t actor = 0; actor < compiled.num_actors; ++actor) {
    paths.push_back((partial / absl::StrCat("actor-", actor, ".state")).string());
  }
  absl::StatusOr<std::vector<SavedStateFile>> saved = pipeline.SaveState(paths);
  if (!saved.ok()) return saved.status();
  MaybeCrash("checkpoint-before-manifest");

  std::string manifest = absl::StrCat(kHeader, "\n");
  absl::StrAppend(&manifest, "model\t", step.name, "\n");
  absl::StrAppend(&manifest, "step\t", pipeline.steps_done(), "\n");
  absl::StrAppend(&manifest, "schedule\t", compiled.schedule, "\n");
  absl::StrAppend(&manifest, "actors\t", compiled.num_actors, "\n");
  for (const ir::StateSpec& spec : step.state) {
    absl::StrAppend(&manifest, "state\t", spec.name, "\t", ir::TypeToString(spec.type), "\n");
  }
  for (const SavedStateFile& file : *saved) {
    absl::StrAppend(&manifest, "file\t", fs::path(file.path).filename().string(), "\t", file.bytes, "\t",
                    file.checksum, "\n");
  }
  if (absl::Status status = ir::WriteFileAtomically((partial / kManifest).string(), manifest); !status.ok()) {
    return status;
  }
  fs::rename(partial, final_path, error);
  if (error) return FilesystemError("rename into place", final_path, error);
  if (absl::Status status = ir::SyncDirectory(root); !status.ok()) return status;
  return final_path.string();
}

absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path, const ir::TrainStep& step) {
  std::string directory = path;
  if (!IsCheckpoint(path)) {
    absl::StatusOr<std::vector<std::string>> found = ListCheckpoints(path);
    if (!found.ok()) return found.status();
    if (found->empty()) {
      return absl::NotFoundError(absl::StrCat("no checkpoint at ", path, " (neither a ", kManifest,
                                              " nor complete step-* checkpoints under it)"));
    }
    directory = found->back();
  }
  const std::string manifest_path = (fs::path(directory) / kManifest).string();
  absl::StatusOr<std::string> text = ir::ReadWholeFile(manifest_path);
  if (!text.ok()) return text.status();
  absl::StatusOr<Manifest> manifest = ParseManifest(*text, manifest_path);
  if (!manifest.ok()) return manifest.status();

  // Is it this job's model? Names and types first, before reading tensors.
  auto mismatch = [&directory](absl::string_view problem) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", directory, " does not fit this job: ", problem));
  };
  if (manifest->model != step.name) {
    return mismatch(absl::StrCat("it is of model '", manifest->model, "', this job's model is '", step.name, "'"));
  }
  for (const ir::StateSpec& spec : step.state) {
    auto it = manifest->state.find(spec.name);
    if (it == manifest->state.end()) return mismatch(absl::StrCat("it has no state '", spec.name, "'"));
    if (it->second != ir::TypeToString(spec.type)) {
      return mismatch(absl::StrCat("state '", spec.name, "' is ", it->second, " there and ",
                                   ir::TypeToString(spec.type), " in this job"));
    }
  }
  for (const auto& [name, type] : manifest->state) {
    if (step.FindState(name) == nullptr) {
      return mismatch(absl::StrCat("it holds state '", name, "' (", type, "), which this job does not have"));
    }
  }

  LoadedCheckpoint loaded{directory, manifest->step, manifest->schedule, manifest->actors, {}};
  for (const Manifest::File& file : manifest->files) {
    const std::string file_path = (fs::path(directory) / file.name).string();
    absl::StatusOr<std::string> bytes = ir::ReadWholeFile(file_path);
    if (!bytes.ok()) {
      return absl::DataLossError(absl::StrCat(bytes.status().message(), " (the checkpoint is incomplete)"));
    }
    if (bytes->size() != file.bytes) {
      return absl::DataLossError(absl::StrCat(file_path, " has ", bytes->size(), " bytes, the manifest says ",
                                              file.bytes, " (the checkpoint is corrupt)"));
    }
    const std::string checksum = ir::StateChecksum(*bytes);
    if (checksum != file.checksum) {
      return absl::DataLossError(absl::StrCat(file_path, " has CRC-32 ", checksum, ", the manifest says ",
                                              file.checksum, " (the checkpoint is corrupt)"));
    }
    absl::StatusOr<ir::TensorMap> tensors = ir::DecodeStateFile(*bytes, file_path);
    if (!tensors.ok()) return absl::DataLossError(tensors.status().message());
    for (auto& [name, tensor] : *tensors) {
      auto listed = manifest->state.find(name);
      if (listed == manifest->state.end() || listed->second != ir::TypeToString(tensor.type())) {
        return absl::DataLossError(absl::StrCat(file_path, " holds ", name, " ", ir::TypeToString(tensor.type()),
                                                ", which the manifest does not list"));
      }
      auto [it, inserted] = loaded.state.emplace(name, tensor);
      if (!inserted && !it->second.BitwiseEquals(tensor)) {
        return absl::DataLossError(absl::StrCat("state '", name, "' differs between the actor files of ", directory));
      }
    }
  }
  for (const auto& [name, type] : manifest->state) {
    if (!loaded.state.contains(name)) {
      return absl::DataLossError(absl::StrCat("no actor file of ", directory, " holds state '", name, "'"));
    }
  }
  return loaded;
}

}  // namespace tandem::controller
