// Whether a compiled step fits the memory of the actors that will run it,
// checked from the programs' static peaks before any actor starts: a model
// too large for its machine is a clear error in seconds, naming the actor,
// the bytes and what would fit, instead of an actor killed for memory
// minutes into loading its state.
//
// Pure functions, except HostAvailableBytes and PeakResidentBytes (read
// /proc) and ResetPeakResidentBytes;
// thread-safe.
#ifndef TANDEM_CONTROLLER_MEMORY_FIT_H_
#define TANDEM_CONTROLLER_MEMORY_FIT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ir/actor_program.h"
#include "ir/train_step.h"

namespace tandem::controller {

// Memory that some actors share: a host's RAM (the actors of a cpu device
// on it), one GPU's.
struct MemoryPool {
  std::string name;  // "this host's available memory (MemAvailable)"
  int64_t free_bytes = 0;
  std::vector<int32_t> actors;
};

// ResourceExhausted when the static peaks (ir::ActorProgram's
// static_peak_bytes, state included) of a pool's actors add up to more
// than its free bytes: the message names the pool, its bytes, the actor
// with the largest peak and its bytes, and the ways to fit (more actors,
// fewer microbatches in flight, --remat stage, tandem plan --memory-cap).
absl::Status CheckMemoryFit(const std::vector<ir::ActorProgram>& programs, const std::vector<MemoryPool>& pools);

// What a process holding the whole model keeps of it, at least.
enum class WholeModel : uint8_t {
  kTraining,    // the reference interpreter: the state and two sums of the gradients (a replica's and the step's)
  kState,       // the state (parameters and optimizer slots), as a controller reading it for evaluation
  kParameters,  // the parameters, as generation
};

// ResourceExhausted when a process that holds the whole model as `use`
// says cannot fit in `pool`, counted from the traced step before any of it
// is allocated; the message names what it holds, the bytes and the pool.
absl::Status CheckWholeModelFits(const ir::TrainStep& step, const MemoryPool& pool,
                                 WholeModel use = WholeModel::kTraining);

// CheckWholeModelFits against this host's available memory; OK when that
// cannot be read.
absl::Status CheckWholeModelFitsThisHost(const ir::TrainStep& step, WholeModel use);

// This host's available memory (MemAvailable in /proc/meminfo), or nullopt
// when it cannot be read.
std::optional<int64_t> HostAvailableBytes();

// This process's peak resident memory so far (VmHWM in /proc/self/status),
// or nullopt when it cannot be read.
std::optional<int64_t> PeakResidentBytes();
// Resets that peak to the resident memory now, so that the next
// PeakResidentBytes is the peak of what follows; false when the kernel
// does not let it (/proc/self/clear_refs).
bool ResetPeakResidentBytes();

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_MEMORY_FIT_H_
