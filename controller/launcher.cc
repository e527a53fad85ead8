#include "controller/launcher.h"

#include "absl/strings/str_cat.h"
#include "ir/state_file.h"

namespace tandem::controller {

absl::StatusOr<std::vector<SavedStateFile>> Launcher::SaveState(const std::vector<std::string>& paths) {
  absl::StatusOr<std::vector<ir::TensorMap>> states = ReadState();
  if (!states.ok()) return states.status();
  if (states->size() != paths.size()) {
    return absl::InvalidArgumentError(absl::StrCat(paths.size(), " state file paths for ", states->size(), " actors"));
  }
  std::vector<SavedStateFile> saved;
  for (size_t actor = 0; actor < paths.size(); ++actor) {
    const std::string bytes = ir::EncodeStateFile((*states)[actor]);
    if (absl::Status status = ir::WriteFileAtomically(paths[actor], bytes); !status.ok()) return status;
    saved.push_back({paths[actor], bytes.size(), ir::StateChecksum(bytes)});
  }
  return saved;
}

absl::StatusOr<std::map<int32_t, ActorStepResult>> Launcher::RunRanges(int64_t,
                                                                       const std::map<int32_t, InstructionRange>&,
                                                                       const std::vector<ActorInputs>&) {
  return absl::UnimplementedError("this launcher cannot run a step task by task (use the local launcher)");
}

absl::StatusOr<ir::HostTensor> Launcher::ReadBuffer(int32_t, const std::string&) {
  return absl::UnimplementedError("this launcher cannot read an actor's buffers (use the local launcher)");
}

}  // namespace tandem::controller
