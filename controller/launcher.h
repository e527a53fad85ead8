// Launcher: how the driver reaches its actors, whatever they are: threads of
// this process (tools/cli/threads_launcher.h), processes on this host
// (controller/local_launcher.h), processes across hosts. Launchers place
// actors and carry calls to them; they never schedule work: the controller
// (Pipeline, Debugger) owns the step.
//
// The contract every launcher keeps:
//  - Threads. Calls come from one controller thread, one at a time; each
//    returns only when the work it started is done or failed. What threads a
//    launcher runs inside is its own business and ends with it.
//  - Every wait is bounded. A call that would wait on an actor gives up at
//    the launcher's deadline (a step's, a start's) with DeadlineExceeded,
//    naming the actor and what it was doing.
//  - A lost actor (its process died or was killed, its connection dropped,
//    it stopped answering) fails the call in progress, and every later one,
//    with Unavailable (died, disconnected) or DeadlineExceeded (silent,
//    stopped), naming the actor, its stages and the step; the launcher does
//    not restart it. Other actors are then stopped: a job is whole or over.
//    Such an error is marked (MarkActorLost), so that a Session can tell it
//    from the errors a restart would only repeat.
//  - Destroying a launcher stops its actors and leaves no process or file
//    behind.
//  - Capabilities only some launchers have (running a step range by range,
//    reading a buffer, for the debugger) answer Unimplemented by default.
//  - Peers that cannot prove they belong to the job (rpc/auth.h) are
//    refused, logged and counted (Refusals()); the job goes on.
#ifndef TANDEM_CONTROLLER_LAUNCHER_H_
#define TANDEM_CONTROLLER_LAUNCHER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/memory_fit.h"
#include "ir/actor_program.h"
#include "ir/host_tensor.h"
#include "ir/ids.h"
#include "ir/state_source.h"
#include "ir/step_io.h"
#include "ir/train_step.h"

namespace tandem::controller {

// One state file an actor wrote (Launcher::SnapshotState, AwaitState).
struct SavedStateFile {
  std::string path;
  uint64_t bytes = 0;
  std::string checksum;  // ir::StateChecksum of the file
};

// Instructions [begin, end) of an actor's program.
struct InstructionRange {
  int32_t begin = 0;
  int32_t end = 0;
};

// Peers refused since a launcher started because they could not prove they
// belong to the job (rpc/auth.h): registrations on the controller's control
// socket, by reason, and connections to the actors' TCP data planes.
struct RefusalCounts {
  int64_t wrong_proof = 0;         // an answer not made with the job's token
  int64_t replayed_challenge = 0;  // a challenge answered a second time
  int64_t stale_challenge = 0;     // a challenge expired, never issued, or forgotten
  int64_t malformed = 0;           // a challenge or answer of the wrong size
  int64_t rejected = 0;            // a proven registration with a bad or duplicate actor id
  int64_t data_plane = 0;          // strangers on the actors' data planes, all actors together

  int64_t registrations() const {
    return wrong_proof + replayed_challenge + stale_challenge + malformed + rejected;
  }
  int64_t total() const { return registrations() + data_plane; }
  // "2 registrations (1 wrong proof, 1 replayed challenge) and 1 data-plane
  // connection"; "" when there were none.
  std::string Describe() const;
};

// A launcher's error that says an actor was lost (its process died or was
// killed, it stopped answering or was stopped, its node went away): the
// status, Unavailable or DeadlineExceeded, with a payload that marks it.
// What a Session restarts its actors after (SessionOptions::max_restarts);
// every other error (an actor's failed kernel, bad input, a full disk) is
// one a restart would only repeat. Statuses of other codes are returned
// unmarked.
absl::Status MarkActorLost(absl::Status status);
bool IsActorLost(const absl::Status& status);

// How dispatches are cut: the whole step in one call per actor, or one call
// per schedule task (only to measure what fusion saves).
enum class Dispatch : uint8_t { kFused, kPerTask };

// Starts actors and runs steps on them, under the contract above.
class Launcher {
 public:
  virtual ~Launcher() = default;
  // Hands each actor its program (cached under its hash) and where its
  // first state comes from (ir/state_source.h): an actor generates or
  // reads its own state; held tensors move in bounded pieces.
  virtual absl::Status Start(const std::vector<ir::ActorProgram>& programs,
                             const std::vector<ir::StateSources>& states) = 0;
  // Hands each actor another program (cached beside those it has, under
  // its hash) and runs it from the next step on; each actor's state carries
  // over by name (what the last step left), so the programs must bind the
  // state the actors were started with. For several steps over one state:
  // generation's prefill and decode (controller/generation.h). The programs
  // keep the actors' replica groups; the default answers Unimplemented.
  virtual absl::Status UsePrograms(const std::vector<ir::ActorProgram>& programs);
  // Runs one step on every actor; returns when all are done, or the first
  // error naming the actor, the instruction and the step.
  virtual absl::StatusOr<std::vector<ir::StepOutputs>> RunStep(int64_t step, const std::vector<ir::StepInputs>& inputs,
                                                               Dispatch dispatch) = 0;
  // Debugging (controller/debugger.h): runs instructions [begin, end) of
  // each listed actor's program within step `step`, all listed actors at
  // once, and returns when all are done. Ranges of one actor follow each
  // other in program order; its first (begin 0) carries inputs[actor], and
  // the one that ends its program returns its step's results (the others
  // return empty ones).
  // Unimplemented unless the launcher can.
  virtual absl::StatusOr<std::map<ActorId, ir::StepOutputs>> RunRanges(int64_t step,
                                                                       const std::map<ActorId, InstructionRange>& ranges,
                                                                       const std::vector<ir::StepInputs>& inputs);
  // Debugging: the current tensor of buffer `name` (a state binding or any
  // buffer of the program, e.g. "%26@0") on `actor`, between steps or
  // between RunRanges calls. NotFound for no such buffer,
  // FailedPrecondition for one that holds nothing now. Unimplemented unless
  // the launcher can.
  virtual absl::StatusOr<ir::HostTensor> ReadBuffer(ActorId actor, const std::string& name);
  // Where an actor runs, for people: "pid 1234", "thread".
  virtual std::string DescribeActor(ActorId actor) const = 0;
  // How tensors travel between each pair of actors, for people, once
  // started: "0-1 ipc, 0-2 shm, 1-2 tcp" (the medium of every pair a < b).
  // Empty when the launcher has one medium it names elsewhere.
  virtual std::string DescribeDataPlane() const { return ""; }
  // Each actor's state tensors by name: the whole model, for those who need
  // it all (verification against the reference, a script's State()). A
  // launcher over a control plane moves it in bounded pieces.
  virtual absl::StatusOr<std::vector<ir::TensorMap>> ReadState() = 0;
  // Checkpointing (controller/checkpoint.h), in two calls, so that steps
  // go on while the files are written. SnapshotState has each actor take
  // its state as it is now and write it to paths[actor] as a state file
  // (ir/state_file.h), atomically, behind the calls that follow; AwaitState
  // returns the files once every actor's is durable (`wait`), or at once
  // nullopt while some are still being written (!wait). Launchers whose
  // actors can reach the files write them there (no state crosses the
  // control plane); this default reads the state and writes the files from
  // the controller within SnapshotState.
  virtual absl::Status SnapshotState(const std::vector<std::string>& paths);
  virtual absl::StatusOr<std::optional<std::vector<SavedStateFile>>> AwaitState(const std::vector<std::string>& paths,
                                                                                bool wait);
  // The memories the actors draw on, for the check before they start
  // (controller/memory_fit.h): by default this host's available memory,
  // shared by every actor (actors that compute on its CPU). Empty where the
  // launcher cannot tell (actors on other hosts); such actors find out when
  // they allocate.
  virtual std::vector<MemoryPool> MemoryPools(int32_t num_actors) const;
  // Stops every actor now and ends what the launcher runs (processes, an
  // srun step, a run directory), as its destructor would; later calls fail.
  // A session calls it on a broken launcher before starting new actors in
  // their place. Idempotent; by default nothing (the destructor does it).
  virtual absl::Status Shutdown() { return absl::OkStatus(); }
  // The peers refused so far. A launcher whose actors count refusals of
  // their own asks them first (bounded, and skipped once the launcher
  // failed: then it reports what it heard last). None by default (a
  // launcher no stranger can reach).
  virtual RefusalCounts Refusals() { return {}; }

 private:
  std::vector<SavedStateFile> written_;  // the default SnapshotState's files
};

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_LAUNCHER_H_
