#include "controller/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "ir/errno_status.h"
#include "ir/excerpt.h"
#include "ir/fault_point.h"
#include "ir/limits.h"
#include "ir/read_file.h"
#include "ir/state_file.h"
#include "schedules/limits.h"

namespace tandem::controller {
namespace {

namespace fs = std::filesystem;

constexpr char kManifest[] = "MANIFEST";
constexpr char kHeader[] = "tandem-checkpoint\t3";
constexpr char kHeaderVersion2[] = "tandem-checkpoint\t2";  // read, never written
constexpr char kHeaderPrefix[] = "tandem-checkpoint\t";
constexpr char kChecksumKey[] = "checksum\t";
// A manifest holds a line per state tensor: 16 MiB is some 150,000 of them.
constexpr int64_t kMaxManifestBytes = int64_t{16} << 20;

std::string CheckpointName(int64_t step) { return absl::StrFormat("step-%08d", step); }

// A name that would break the manifest's one-record-a-line format.
bool Printable(absl::string_view name) {
  return !name.empty() && std::none_of(name.begin(), name.end(), [](char c) { return c == '\t' || c == '\n'; });
}

absl::Status FilesystemError(absl::string_view action, const fs::path& path, const std::error_code& error) {
  return absl::UnavailableError(absl::StrCat("cannot ", action, " ", path.string(), ": ", error.message()));
}

// The step a checkpoint directory's name says ("step-00000010" -> 10), or
// -1 for another name.
int64_t StepOfName(absl::string_view name) {
  int64_t step = -1;
  if (!absl::ConsumePrefix(&name, "step-") || name.empty() ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(name, &step)) {
    return -1;
  }
  return step;
}

// Whether `path` is a directory holding a manifest.
bool IsCheckpoint(const fs::path& path) {
  std::error_code error;
  return fs::is_regular_file(path / kManifest, error);
}

}  // namespace

std::string PrintCheckpointManifest(const CheckpointManifest& manifest) {
  // As it was read: a version-2 manifest lists no parameters.
  std::string text = absl::StrCat(manifest.version == 2 ? kHeaderVersion2 : kHeader, "\n");
  absl::StrAppend(&text, "model\t", manifest.model, "\n");
  absl::StrAppend(&text, "step\t", manifest.step, "\n");
  absl::StrAppend(&text, "schedule\t", manifest.schedule, "\n");
  // Informational, and optional when read: none when it was not given.
  if (manifest.actors > 0) absl::StrAppend(&text, "actors\t", manifest.actors, "\n");
  for (const auto& [name, type] : manifest.state) absl::StrAppend(&text, "state\t", name, "\t", type, "\n");
  for (const std::string& name : manifest.parameters) absl::StrAppend(&text, "parameter\t", name, "\n");
  for (const CheckpointManifest::File& file : manifest.files) {
    absl::StrAppend(&text, "file\t", file.name, "\t", file.bytes, "\t", file.checksum, "\n");
  }
  absl::StrAppend(&text, kChecksumKey, ir::StateChecksum(text), "\n");
  return text;
}

absl::StatusOr<CheckpointManifest> ParseCheckpointManifest(absl::string_view text, absl::string_view what) {
  auto error = [what](int line, absl::string_view problem) {
    return absl::DataLossError(absl::StrCat(what, ":", line, ": ", problem, " (the checkpoint is corrupt)"));
  };
  // The checksum line comes last and covers every byte before it.
  absl::string_view body = text;
  if (!body.empty() && body.back() == '\n') body.remove_suffix(1);
  const size_t last_newline = body.rfind('\n');
  const absl::string_view last_line = last_newline == absl::string_view::npos ? body : body.substr(last_newline + 1);
  const int lines = static_cast<int>(std::count(body.begin(), body.end(), '\n')) + 1;
  const absl::string_view header = text.substr(0, text.find('\n'));
  if (!absl::StartsWith(header, kHeaderPrefix)) return error(1, "not a Tandem checkpoint manifest");
  if (header != kHeader && header != kHeaderVersion2) {
    return error(1, absl::StrCat("manifest version '", ir::Excerpt(header.substr(strlen(kHeaderPrefix))),
                                 "': this build reads versions 2 and 3 (a version 1 manifest has no checksum of its "
                                 "own, so it cannot be trusted: save a new checkpoint)"));
  }
  if (!absl::StartsWith(last_line, kChecksumKey) || last_newline == absl::string_view::npos) {
    return error(lines, "the last line must be the manifest's checksum (the manifest is cut short)");
  }
  const std::string expected(last_line.substr(sizeof(kChecksumKey) - 1));
  const std::string actual = ir::StateChecksum(text.substr(0, last_newline + 1));
  if (expected != actual) {
    return error(lines, absl::StrCat("checksum ", ir::Excerpt(expected), " does not match the manifest's contents (",
                                     actual, "): the manifest was changed"));
  }
  CheckpointManifest manifest;
  manifest.step = -1;
  manifest.version = header == kHeader ? 3 : 2;
  int line_number = 1;
  for (absl::string_view line : absl::StrSplit(body.substr(0, last_newline), '\n')) {
    if (line_number++ == 1) continue;  // the header
    std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
    const absl::string_view key = fields[0];
    auto want = [&](size_t count) { return fields.size() == count; };
    const int at = line_number - 1;
    if (key == "model" && want(2)) {
      manifest.model = std::string(fields[1]);
    } else if (key == "step" && want(2)) {
      if (!absl::SimpleAtoi(fields[1], &manifest.step) || manifest.step < 0) return error(at, "bad step");
    } else if (key == "schedule" && want(2)) {
      manifest.schedule = std::string(fields[1]);
    } else if (key == "actors" && want(2)) {
      if (!absl::SimpleAtoi(fields[1], &manifest.actors) || manifest.actors < 1 ||
          manifest.actors > schedules::kMaxActors) {
        return error(at, "bad actors");
      }
    } else if (key == "state" && want(3)) {
      if (!manifest.state.emplace(std::string(fields[1]), std::string(fields[2])).second) {
        return error(at, absl::StrCat("state '", ir::Excerpt(fields[1]), "' listed twice"));
      }
    } else if (key == "parameter" && want(2) && manifest.version >= 3) {
      if (!manifest.state.contains(std::string(fields[1]))) {
        return error(at, absl::StrCat("parameter '", ir::Excerpt(fields[1]), "' is no state listed before it"));
      }
      manifest.parameters.insert(std::string(fields[1]));
    } else if (key == "file" && want(4)) {
      CheckpointManifest::File file{std::string(fields[1]), 0, std::string(fields[3])};
      if (!absl::SimpleAtoi(fields[2], &file.bytes)) return error(at, "bad byte count");
      if (file.name.empty() || file.name.find('/') != std::string::npos || file.name == "." || file.name == "..") {
        return error(at, absl::StrCat("file name '", ir::Excerpt(file.name), "' leaves the checkpoint"));
      }
      if (manifest.files.size() >= static_cast<size_t>(schedules::kMaxActors)) {
        return error(at, absl::StrCat("more than ", schedules::kMaxActors, " files"));
      }
      manifest.files.push_back(std::move(file));
    } else {
      return error(at, absl::StrCat("unexpected record '", ir::Excerpt(line), "'"));
    }
  }
  if (manifest.model.empty() || manifest.step < 0 || manifest.files.empty()) {
    return error(lines, "incomplete manifest (model, step or files missing)");
  }
  if (manifest.actors != 0 && static_cast<size_t>(manifest.actors) != manifest.files.size()) {
    return error(lines, absl::StrCat("the manifest lists ", manifest.files.size(), " actor files for ",
                                     manifest.actors, " actors"));
  }
  return manifest;
}

absl::Status PrepareCheckpointRoot(const std::string& root) {
  auto failed = [&root](absl::string_view action, int error) {
    return ir::ErrnoStatus(absl::StatusCode::kFailedPrecondition,
                           absl::StrCat("cannot write checkpoints under ", root, ": ", action), error);
  };
  std::error_code error;
  fs::create_directories(root, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write checkpoints under ", root, ": cannot create it: ", error.message()));
  }
  const std::string probe = (fs::path(root) / absl::StrCat(".tandem-write-test.", getpid())).string();
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return failed("cannot create a file there", errno);
  const bool written = write(fd, "x", 1) == 1;
  const int write_error = errno;
  close(fd);
  unlink(probe.c_str());
  if (!written) return failed("cannot write a file there", write_error);
  return absl::OkStatus();
}

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

absl::StatusOr<PendingCheckpoint> BeginCheckpoint(Pipeline& pipeline, const std::string& root) {
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

  PendingCheckpoint pending{.root = root,
                            .step = pipeline.steps_done(),
                            .partial = partial.string(),
                            .final_path = final_path.string()};
  for (int32_t actor = 0; actor < compiled.num_actors; ++actor) {
    pending.paths.push_back((partial / absl::StrCat("actor-", actor, ".state")).string());
  }
  pending.manifest = CheckpointManifest{.model = step.name,
                                        .step = pipeline.steps_done(),
                                        .schedule = compiled.schedule,
                                        .actors = compiled.num_actors};
  for (const ir::StateSpec& spec : step.state) {
    pending.manifest.state[spec.name] = ir::TypeToString(spec.type);
    if (spec.role == ir::StateRole::kParameter) pending.manifest.parameters.insert(spec.name);
  }
  if (absl::Status status = pipeline.SnapshotState(pending.paths); !status.ok()) return status;
  return pending;
}

absl::StatusOr<std::optional<std::string>> FinishCheckpoint(Pipeline& pipeline, const PendingCheckpoint& pending,
                                                            bool wait) {
  absl::StatusOr<std::optional<std::vector<SavedStateFile>>> saved = pipeline.AwaitState(pending.paths, wait);
  if (!saved.ok()) return saved.status();
  if (!saved->has_value()) return std::optional<std::string>();
  // TANDEM_FAULT=checkpoint-before-manifest: a crash at the worst moment,
  // the actors' files written and no manifest yet (the crash tests).
  ir::CrashIfFaultAt("checkpoint-before-manifest");

  CheckpointManifest manifest = pending.manifest;
  for (const SavedStateFile& file : **saved) {
    manifest.files.push_back({fs::path(file.path).filename().string(), file.bytes, file.checksum});
  }
  const std::string text = PrintCheckpointManifest(manifest);
  if (absl::Status status = ir::WriteFileAtomically((fs::path(pending.partial) / kManifest).string(), text);
      !status.ok()) {
    return status;
  }
  std::error_code error;
  fs::rename(pending.partial, pending.final_path, error);
  if (error) return FilesystemError("rename into place", pending.final_path, error);
  if (absl::Status status = ir::SyncDirectory(pending.root); !status.ok()) return status;
  return std::optional<std::string>(pending.final_path);
}

absl::StatusOr<std::string> SaveCheckpoint(Pipeline& pipeline, const std::string& root) {
  absl::StatusOr<PendingCheckpoint> pending = BeginCheckpoint(pipeline, root);
  if (!pending.ok()) return pending.status();
  absl::StatusOr<std::optional<std::string>> saved = FinishCheckpoint(pipeline, *pending, /*wait=*/true);
  if (!saved.ok()) return saved.status();
  return **saved;
}

namespace {

// The step-* directories under `root` (with a MANIFEST or not), newest
// first; empty when `root` does not exist.
absl::StatusOr<std::vector<fs::path>> StepDirectories(const std::string& root) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code error;
  if (!fs::exists(root, error)) return std::vector<fs::path>();
  fs::directory_iterator it(root, error);
  if (error) return FilesystemError("list", root, error);
  for (const fs::directory_entry& entry : it) {
    const int64_t step = StepOfName(entry.path().filename().string());
    if (step >= 0 && entry.is_directory(error)) found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<fs::path> directories;
  for (auto& [step, path] : found) directories.push_back(std::move(path));
  return directories;
}

// Whether the checkpoint's model and state are `step`'s: FailedPrecondition
// naming the first difference.
absl::Status CheckFit(const std::string& directory, const CheckpointManifest* manifest_pointer,
                      const ir::TrainStep& step) {
  const CheckpointManifest* manifest = manifest_pointer;
  auto mismatch = [&directory](absl::string_view problem) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", directory, " does not fit this job: ", problem));
  };
  if (manifest->model != step.name) {
    return mismatch(absl::StrCat("it is of model '", ir::Excerpt(manifest->model), "', this job's model is '",
                                 step.name, "'"));
  }
  for (const ir::StateSpec& spec : step.state) {
    auto it = manifest->state.find(spec.name);
    if (it == manifest->state.end()) return mismatch(absl::StrCat("it has no state '", spec.name, "'"));
    if (it->second != ir::TypeToString(spec.type)) {
      return mismatch(absl::StrCat("state '", spec.name, "' is ", ir::Excerpt(it->second), " there and ",
                                   ir::TypeToString(spec.type), " in this job"));
    }
  }
  for (const auto& [name, type] : manifest->state) {
    if (step.FindState(name) == nullptr) {
      return mismatch(absl::StrCat("it holds state '", ir::Excerpt(name), "' (", ir::Excerpt(type),
                                   "), which this job does not have"));
    }
  }

  return absl::OkStatus();
}

// Loads the checkpoint in `directory` (see LoadCheckpoint); checks it
// against `step` unless null.
absl::StatusOr<LoadedCheckpoint> LoadOne(const std::string& directory, const ir::TrainStep* step) {
  const std::string manifest_path = (fs::path(directory) / kManifest).string();
  std::error_code size_error;
  const uintmax_t manifest_size = fs::file_size(manifest_path, size_error);
  if (size_error) {
    return absl::DataLossError(absl::StrCat("cannot read ", manifest_path, ": ", size_error.message(),
                                            " (the checkpoint is incomplete)"));
  }
  if (manifest_size > static_cast<uintmax_t>(kMaxManifestBytes)) {
    return absl::DataLossError(absl::StrCat(manifest_path, " has ", manifest_size, " bytes, more than the ",
                                            kMaxManifestBytes, " a manifest may have (the checkpoint is corrupt)"));
  }
  absl::StatusOr<std::string> text = ir::ReadFileUpTo(manifest_path, kMaxManifestBytes, manifest_path);
  if (!text.ok()) return absl::DataLossError(absl::StrCat(text.status().message(), " (the checkpoint is incomplete)"));
  absl::StatusOr<CheckpointManifest> manifest = ParseCheckpointManifest(*text, manifest_path);
  if (!manifest.ok()) return manifest.status();
  const int64_t named_step = StepOfName(fs::path(directory).lexically_normal().filename().string());
  if (named_step >= 0 && named_step != manifest->step) {
    return absl::DataLossError(absl::StrCat(manifest_path, " says step ", manifest->step, " but its directory is ",
                                            CheckpointName(named_step), " (the checkpoint is corrupt)"));
  }

  // Is it this job's model? Names and types first, before reading tensors.
  if (absl::Status fits = step == nullptr ? absl::OkStatus() : CheckFit(directory, &*manifest, *step); !fits.ok()) {
    return fits;
  }

  LoadedCheckpoint loaded{directory, manifest->model, manifest->step, manifest->schedule, manifest->actors, {},
                          manifest->parameters, manifest->version >= 3, {}};
  for (const CheckpointManifest::File& file : manifest->files) {
    const std::string file_path = (fs::path(directory) / file.name).string();
    // The size first: a file of another size is not read at all.
    std::error_code error;
    const uintmax_t size = fs::file_size(file_path, error);
    if (error) {
      return absl::DataLossError(absl::StrCat("cannot read ", file_path, ": ", error.message(),
                                              " (the checkpoint is incomplete)"));
    }
    if (size != file.bytes) {
      return absl::DataLossError(absl::StrCat(file_path, " has ", size, " bytes, the manifest says ", file.bytes,
                                              ": it does not belong to this checkpoint, changed or copied from "
                                              "another one (the checkpoint is corrupt)"));
    }
    absl::StatusOr<ir::WrittenFile> read = ir::ChecksumFile(file_path);
    if (!read.ok()) {
      return absl::DataLossError(absl::StrCat(read.status().message(), " (the checkpoint is incomplete)"));
    }
    if (read->bytes != file.bytes) {
      return absl::DataLossError(absl::StrCat(file_path, " has ", read->bytes, " bytes, the manifest says ",
                                              file.bytes, " (the checkpoint is corrupt)"));
    }
    if (read->checksum != file.checksum) {
      return absl::DataLossError(absl::StrCat(file_path, " has CRC-32 ", read->checksum, ", the manifest says ",
                                              ir::Excerpt(file.checksum),
                                              ": it does not belong to this checkpoint, changed or copied from "
                                              "another one (the checkpoint is corrupt)"));
    }
    absl::StatusOr<std::vector<ir::StateFileEntry>> index = ir::IndexStateFile(file_path);
    if (!index.ok()) {
      if (absl::IsInvalidArgument(index.status())) return absl::DataLossError(index.status().message());
      return absl::DataLossError(absl::StrCat(index.status().message(), " (the checkpoint is incomplete)"));
    }
    for (const ir::StateFileEntry& entry : *index) {
      auto listed = manifest->state.find(entry.name);
      if (listed == manifest->state.end() || listed->second != ir::TypeToString(entry.type)) {
        return absl::DataLossError(absl::StrCat(file_path, " holds ", ir::Excerpt(entry.name), " ",
                                                ir::TypeToString(entry.type), ", which the manifest does not list"));
      }
      ir::StateSource source{entry.type, ir::StateFileSlice{file_path, entry.offset}};
      auto [it, inserted] = loaded.state.emplace(entry.name, source);
      if (inserted) continue;
      const auto& first = std::get<ir::StateFileSlice>(it->second.origin);
      absl::StatusOr<bool> same =
          ir::StateBytesEqual(first.path, first.offset, file_path, entry.offset, entry.type.num_bytes());
      if (!same.ok()) return absl::DataLossError(absl::StrCat(same.status().message(), " (the checkpoint is incomplete)"));
      if (!*same) {
        return absl::DataLossError(absl::StrCat("state '", entry.name, "' differs between the actor files of ", directory));
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

absl::StatusOr<LoadedCheckpoint> LoadCheckpointOf(const std::string& path, const ir::TrainStep* step) {
  if (IsCheckpoint(path)) return LoadOne(path, step);
  absl::StatusOr<std::vector<fs::path>> directories = StepDirectories(path);
  if (!directories.ok()) return directories.status();
  if (directories->empty()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint at ", path, " (neither a ", kManifest,
                                            " nor step-* checkpoints under it)"));
  }
  std::vector<SkippedCheckpoint> skipped;
  for (const fs::path& directory : *directories) {
    absl::StatusOr<LoadedCheckpoint> loaded =
        IsCheckpoint(directory)
            ? LoadOne(directory.string(), step)
            : absl::DataLossError(absl::StrCat(directory.string(), " has no ", kManifest,
                                               " (the checkpoint is incomplete)"));
    if (loaded.ok()) {
      loaded->skipped = std::move(skipped);
      return loaded;
    }
    if (!absl::IsDataLoss(loaded.status())) return loaded.status();
    skipped.push_back({directory.string(), loaded.status()});
  }
  const absl::Status& newest = skipped.front().reason;
  return absl::DataLossError(absl::StrCat(
      newest.message(),
      skipped.size() > 1 ? absl::StrCat("; the ", skipped.size() - 1, " older checkpoints under ", path,
                                        " cannot be loaded either")
                         : ""));
}

}  // namespace

absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path, const ir::TrainStep& step) {
  return LoadCheckpointOf(path, &step);
}

absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path) { return LoadCheckpointOf(path, nullptr); }

std::string SkippedReport(const LoadedCheckpoint& loaded) {
  std::string report;
  for (const SkippedCheckpoint& skipped : loaded.skipped) {
    absl::StrAppend(&report, "skipping checkpoint ", skipped.path, ": ", skipped.reason.message(), "\n");
  }
  return report;
}

}  // namespace tandem::controller
