#include "controller/launcher.h"

#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/state_file.h"

namespace tandem::controller {

std::string RefusalCounts::Describe() const {
  std::vector<std::string> parts;
  if (registrations() > 0) {
    std::vector<std::string> reasons;
    for (const auto& [count, name] : {std::pair{wrong_proof, "wrong proof"},
                                      std::pair{replayed_challenge, "replayed challenge"},
                                      std::pair{stale_challenge, "stale or unknown challenge"},
                                      std::pair{malformed, "malformed"},
                                      std::pair{rejected, "bad or duplicate actor id"}}) {
      if (count > 0) reasons.push_back(absl::StrCat(count, " ", name));
    }
    parts.push_back(absl::StrCat(registrations(), registrations() == 1 ? " registration (" : " registrations (",
                                 absl::StrJoin(reasons, ", "), ")"));
  }
  if (data_plane > 0) {
    parts.push_back(absl::StrCat(data_plane, data_plane == 1 ? " data-plane connection" : " data-plane connections"));
  }
  return absl::StrJoin(parts, " and ");
}

namespace {

constexpr absl::string_view kActorLostPayload = "tandem.dev/actor-lost";

}  // namespace

absl::Status MarkActorLost(absl::Status status) {
  if (status.code() == absl::StatusCode::kUnavailable || status.code() == absl::StatusCode::kDeadlineExceeded) {
    status.SetPayload(kActorLostPayload, absl::Cord("1"));
  }
  return status;
}

bool IsActorLost(const absl::Status& status) { return status.GetPayload(kActorLostPayload).has_value(); }

absl::StatusOr<std::map<ActorId, ir::StepOutputs>> Launcher::RunRanges(int64_t,
                                                                       const std::map<ActorId, InstructionRange>&,
                                                                       const std::vector<ir::StepInputs>&) {
  return absl::UnimplementedError("this launcher cannot run a step range by range (the debugger needs it)");
}

absl::Status Launcher::UsePrograms(const std::vector<ir::ActorProgram>&) {
  return absl::UnimplementedError("this launcher cannot switch its actors' programs");
}

absl::StatusOr<ir::HostTensor> Launcher::ReadBuffer(ActorId, const std::string&) {
  return absl::UnimplementedError("this launcher cannot read an actor's buffers");
}

std::vector<MemoryPool> Launcher::MemoryPools(int32_t num_actors) const {
  std::optional<int64_t> available = HostAvailableBytes();
  if (!available.has_value()) return {};
  MemoryPool pool{"this host's available memory (MemAvailable)", *available, {}};
  for (int32_t actor = 0; actor < num_actors; ++actor) pool.actors.push_back(actor);
  return {pool};
}

absl::Status Launcher::SnapshotState(const std::vector<std::string>& paths) {
  written_.clear();
  absl::StatusOr<std::vector<ir::TensorMap>> states = ReadState();
  if (!states.ok()) return states.status();
  if (states->size() != paths.size()) {
    return absl::InvalidArgumentError(absl::StrCat(paths.size(), " state file paths for ", states->size(), " actors"));
  }
  std::vector<SavedStateFile> written;
  for (size_t actor = 0; actor < paths.size(); ++actor) {
    absl::StatusOr<ir::WrittenFile> file = ir::WriteStateFile(paths[actor], (*states)[actor]);
    if (!file.ok()) return file.status();
    written.push_back({paths[actor], file->bytes, file->checksum});
  }
  written_ = std::move(written);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::vector<SavedStateFile>>> Launcher::AwaitState(const std::vector<std::string>& paths,
                                                                                bool) {
  for (size_t actor = 0; actor < paths.size(); ++actor) {
    if (actor >= written_.size() || written_[actor].path != paths[actor]) {
      return absl::NotFoundError(absl::StrCat("no state file ", paths[actor], " was written by SnapshotState"));
    }
  }
  return std::optional<std::vector<SavedStateFile>>(written_);
}

}  // namespace tandem::controller
