// Where an actor's state comes from. State is as large as the model, so a
// controller does not ship it: it tells each actor, per state tensor, where
// to get it, and the actor makes or reads it there.
//
// A StateSource is the tensor's type and one origin:
//  - an Initializer: the actor generates the tensor from its seed (MakeTensor:
//    the bits of the reference's initialisation);
//  - a StateFileSlice: the actor reads the tensor's bytes from a state file
//    (ir/state_file.h) it can reach: a checkpoint's, already checked by the
//    controller against its manifest;
//  - a HostTensor: a tensor the controller holds (a fill job's small state,
//    state handed in by a script), which moves to the actor in pieces
//    (rpc/tandem.capnp: stageState).
// Value types; not synchronized.
#ifndef TANDEM_IR_STATE_SOURCE_H_
#define TANDEM_IR_STATE_SOURCE_H_

#include <cstdint>
#include <map>
#include <string>
#include <variant>

#include "absl/status/statusor.h"
#include "ir/host_tensor.h"
#include "ir/train_step.h"

namespace tandem::ir {

// A tensor's bytes inside a state file: `offset` is where they begin
// (StateFileEntry::offset).
struct StateFileSlice {
  std::string path;
  int64_t offset = 0;
  friend bool operator==(const StateFileSlice&, const StateFileSlice&) = default;
};

struct StateSource {
  TensorType type;
  std::variant<Initializer, StateFileSlice, HostTensor> origin;
};

// State sources by binding (a state tensor's name).
using StateSources = std::map<std::string, StateSource>;

// Every state tensor of `step` from its initializer: a run's first state.
StateSources SeedSources(const TrainStep& step);
// Each tensor as its own source.
StateSources TensorSources(const TensorMap& tensors);

// The tensor `source` names, of its type: generated, read or (a HostTensor)
// checked. InvalidArgument for a held tensor of another type, the errors of
// ReadStateTensor for a file, ResourceExhausted when it cannot be allocated;
// each names `name`.
absl::StatusOr<HostTensor> MaterializeState(const std::string& name, const StateSource& source);
// MaterializeState of each source, by name: the whole state in this process
// (the reference interpreter's, which holds the model by design).
absl::StatusOr<TensorMap> MaterializeStates(const StateSources& sources);

}  // namespace tandem::ir

#endif  // TANDEM_IR_STATE_SOURCE_H_
