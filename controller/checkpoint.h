// Checkpoints of a training run: every actor's parameters and optimizer
// state after some step, and a manifest that says what they are.
//
// On disk, under a checkpoint root DIR:
//   DIR/step-00000006/MANIFEST         what the checkpoint holds (below)
//   DIR/step-00000006/actor-0.state    actor 0's state tensors (ir/state_file.h)
//   ...
// A checkpoint is written into DIR/.step-00000006.partial/: each actor
// writes its own file there (Launcher::SaveState; atomically), then the
// controller writes the MANIFEST (atomically) and renames the directory
// into place. A crash at any point leaves either the complete checkpoint or
// a .partial directory that nothing loads (the next save removes it), so
// the previous checkpoint stays the newest one that loads.
//
// MANIFEST is tab-separated text, one record a line:
//   tandem-checkpoint  1
//   model      <the TrainStep's name>
//   step       <steps done when it was written>
//   schedule   <name>         (informational: a checkpoint resumes under any
//   actors     <count>         schedule and actor count)
//   state      <name>  <type, e.g. f32[64,64]>    one per state tensor
//   file       <file name>  <bytes>  <crc32>       one per actor file
//
// Loading checks, before any tensor is used: the manifest's format; that
// the model and every state tensor's name and type match the job's
// TrainStep (FailedPrecondition naming the difference); every file's size
// and CRC-32 (DataLoss: the checkpoint is corrupt); that the files decode
// and hold exactly the manifest's state; and that a tensor held by several
// actors (a tied parameter) is bit-identical in all of them.
#ifndef TANDEM_CONTROLLER_CHECKPOINT_H_
#define TANDEM_CONTROLLER_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/pipeline.h"
#include "ir/interpreter.h"
#include "ir/train_step.h"

namespace tandem::controller {

struct LoadedCheckpoint {
  std::string path;  // the checkpoint's directory
  int64_t step = 0;  // steps done when it was written
  std::string schedule;
  int32_t actors = 0;
  ir::TensorMap state;  // every state tensor of the model
};

// Writes the checkpoint of `pipeline` after its steps_done() steps under
// `root` (created if missing) and returns its directory. AlreadyExists if
// that step's checkpoint is there already.
absl::StatusOr<std::string> SaveCheckpoint(Pipeline& pipeline, const std::string& root);

// The complete checkpoints under `root`, oldest first (their directories);
// empty when `root` does not exist or holds none.
absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& root);

// Loads `path`: a checkpoint directory (one with a MANIFEST) or a root, whose
// newest complete checkpoint is loaded; checked against `step` as above.
// NotFound when there is no checkpoint there.
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path, const ir::TrainStep& step);

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_CHECKPOINT_H_
