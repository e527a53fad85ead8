#include "controller/launcher.h"

#include "absl/strings/str_cat.h"
#include "ir/state_file.h"

namespace tandem::controller {

absl::StatusOr<std::map<ActorId, ir::StepOutputs>> Launcher::RunRanges(int64_t,
                                                                       const std::map<ActorId, InstructionRange>&,
                                                                       const std::vector<ir::StepInputs>&) {
  return absl::UnimplementedError("this launcher cannot run a step range by range (the debugger needs it)");
}

absl::StatusOr<ir::HostTensor> Launcher::ReadBuffer(ActorId, const std::string&) {
  return absl::UnimplementedError("this launcher cannot read an actor's buffers");
}

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

}  // namespace tandem::controller
