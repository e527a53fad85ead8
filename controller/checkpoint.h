// Checkpoints of a training run: every actor's parameters and optimizer
// state after some step, and a manifest that says what they are.
//
// On disk, under a checkpoint root DIR:
//   DIR/step-00000006/MANIFEST         what the checkpoint holds (below)
//   DIR/step-00000006/actor-0.state    actor 0's state tensors (ir/state_file.h)
//   ...
// A checkpoint is written into DIR/.step-00000006.partial/: each actor
// takes a snapshot of its state and writes its own file there behind the
// steps that follow (Launcher::SnapshotState; atomically); once every file
// is durable (Launcher::AwaitState), the controller writes the MANIFEST
// (atomically) and renames the directory into place. A crash at any point
// leaves either the complete checkpoint or a .partial directory that
// nothing loads (the next save removes it), so the previous checkpoint
// stays the newest one that loads.
//
// MANIFEST is tab-separated text, one record a line:
//   tandem-checkpoint  3
//   model      <the TrainStep's name>
//   step       <steps done when it was written>
//   schedule   <name>         (informational: a checkpoint resumes under any
//   actors     <count>         schedule and actor count)
//   state      <name>  <type, e.g. f32[64,64]>    one per state tensor
//   parameter  <name>       one per state tensor that is a parameter (the
//                           rest is optimizer state); version 3 on
//   file       <file name>  <bytes>  <crc32>       one per actor file
//   checksum   <crc32 of every byte before this line>
// The last line protects the others: one flipped bit anywhere (a step that
// reads 0 instead of 10, a file's CRC) fails the load instead of resuming
// from the wrong place. The file records bind each actor file to this
// checkpoint: a file copied in from another checkpoint, or changed, fails
// its size or CRC-32 check, and a manifest edited to match fails its
// checksum.
//
// Loading checks, before any tensor is used: the manifest's format and
// checksum, and that its step is its directory's (step-00000010 must say
// step 10); that the model and every state tensor's name and type match
// the job's TrainStep (FailedPrecondition naming the difference); every
// file's size and CRC-32 (DataLoss naming the file); that the files decode
// and hold exactly the manifest's state; and that a tensor held by several
// actors (a tied parameter) is bit-identical in all of them. The files are
// read in pieces, never held: the loader's memory does not grow with the
// model. The actors then read their own tensors from the files.
#ifndef TANDEM_CONTROLLER_CHECKPOINT_H_
#define TANDEM_CONTROLLER_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "controller/pipeline.h"
#include "ir/host_tensor.h"
#include "ir/state_source.h"
#include "ir/train_step.h"

namespace tandem::controller {

// A parsed MANIFEST (see above).
struct CheckpointManifest {
  std::string model;
  int64_t step = 0;
  std::string schedule;
  int32_t actors = 0;  // 0: not given (the record is optional)
  std::map<std::string, std::string> state;  // name -> type, e.g. "f32[64,64]"
  std::set<std::string> parameters;          // the state that is parameters
  int version = 3;                           // 2: written before parameters were listed
  struct File {
    std::string name;  // within the checkpoint's directory
    uint64_t bytes = 0;
    std::string checksum;  // CRC-32, 8 hex digits
    friend bool operator==(const File&, const File&) = default;
  };
  std::vector<File> files;  // one per actor, in actor order
  friend bool operator==(const CheckpointManifest&, const CheckpointManifest&) = default;
};

// A MANIFEST's text, ending in its checksum line. The fields must hold no
// tab or newline (SaveCheckpoint checks the names it writes).
std::string PrintCheckpointManifest(const CheckpointManifest& manifest);

// Parses a MANIFEST's text; `what` names it in errors (its path). DataLoss
// "<what>:<line>: <problem> (the checkpoint is corrupt)" for anything but a
// complete, well-formed manifest of this version whose checksum matches.
// Messages quote at most a short excerpt of the text. Pure; thread-safe.
absl::StatusOr<CheckpointManifest> ParseCheckpointManifest(absl::string_view text, absl::string_view what);

// A checkpoint that LoadCheckpoint passed over for an older one.
struct SkippedCheckpoint {
  std::string path;
  absl::Status reason;
};

struct LoadedCheckpoint {
  std::string path;  // the checkpoint's directory
  std::string model;  // the TrainStep's name
  int64_t step = 0;  // steps done when it was written
  std::string schedule;
  int32_t actors = 0;
  // Every state tensor of the model, as a slice of the actor file that
  // holds it (checked; read by whoever starts from it, piece by piece).
  ir::StateSources state;
  // Which of `state` are parameters; empty for a version-2 checkpoint,
  // which did not say (parameters_known false).
  std::set<std::string> parameters;
  bool parameters_known = true;
  // Newer checkpoints under the root that could not be loaded (corrupt or
  // incomplete), newest first, with why: resuming from an older checkpoint
  // than the newest is never silent.
  std::vector<SkippedCheckpoint> skipped;
};

// Creates `root` if missing and proves it writable by creating, writing and
// removing a temporary file in it, so that a checkpoint directory that
// cannot be written is found out before the first step instead of after
// the last. FailedPrecondition naming the path and the OS's reason.
absl::Status PrepareCheckpointRoot(const std::string& root);

// A checkpoint whose actors are writing their files (BeginCheckpoint).
struct PendingCheckpoint {
  std::string root;
  int64_t step = 0;        // the steps done in the state it holds
  std::string partial;     // root/.step-N.partial, where the files go
  std::string final_path;  // root/step-N, once complete
  std::vector<std::string> paths;  // by actor
  CheckpointManifest manifest;     // all but its files
};

// Begins the checkpoint of `pipeline` after its steps_done() steps under
// `root` (created if missing): the actors take their state and write it
// behind the next steps. AlreadyExists if that step's checkpoint is there
// already.
absl::StatusOr<PendingCheckpoint> BeginCheckpoint(Pipeline& pipeline, const std::string& root);
// Once every actor's file is durable (waiting for them with `wait`; else
// nullopt at once while some are still being written), writes the manifest
// and puts the checkpoint in place: its directory.
absl::StatusOr<std::optional<std::string>> FinishCheckpoint(Pipeline& pipeline, const PendingCheckpoint& pending,
                                                            bool wait);
// Both, waiting: the checkpoint's directory.
absl::StatusOr<std::string> SaveCheckpoint(Pipeline& pipeline, const std::string& root);

// The complete checkpoints under `root`, oldest first (their directories);
// empty when `root` does not exist or holds none.
absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& root);

// Loads `path`: a checkpoint directory (one with a MANIFEST) or a root, whose
// newest checkpoint that loads is loaded; checked against `step` as above.
// Under a root, a newer checkpoint that is corrupt or incomplete (DataLoss,
// or a step-* directory without a MANIFEST) is passed over and listed in
// `skipped`; one that does not fit the job (FailedPrecondition) stops the
// load. NotFound when there is no checkpoint there; when none loads, the
// newest one's error.
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path, const ir::TrainStep& step);
// A line "skipping checkpoint <path>: <why>" for each checkpoint the load
// passed over, newest first: what a command prints before using it.
std::string SkippedReport(const LoadedCheckpoint& loaded);

// The same without a job to fit: every check but the model's (what `tandem
// export` reads).
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path);

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_CHECKPOINT_H_
