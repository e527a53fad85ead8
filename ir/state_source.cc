#include "ir/state_source.h"

#include "absl/strings/str_cat.h"
#include "ir/initial_state.h"
#include "ir/state_file.h"

namespace tandem::ir {

StateSources SeedSources(const TrainStep& step) {
  StateSources sources;
  for (const StateSpec& spec : step.state) sources[spec.name] = StateSource{spec.type, spec.init};
  return sources;
}

StateSources TensorSources(const TensorMap& tensors) {
  StateSources sources;
  for (const auto& [name, tensor] : tensors) sources[name] = StateSource{tensor.type(), tensor};
  return sources;
}

absl::StatusOr<HostTensor> MaterializeState(const std::string& name, const StateSource& source) {
  absl::StatusOr<HostTensor> tensor;
  if (const auto* init = std::get_if<Initializer>(&source.origin)) {
    tensor = MakeTensor(source.type, *init);
  } else if (const auto* slice = std::get_if<StateFileSlice>(&source.origin)) {
    tensor = ReadStateTensor(slice->path, slice->offset, source.type);
  } else {
    const HostTensor& held = std::get<HostTensor>(source.origin);
    if (held.type() != source.type) {
      tensor = absl::InvalidArgumentError(absl::StrCat("is ", TypeToString(held.type()), ", its source says ",
                                                       TypeToString(source.type)));
    } else {
      tensor = held;
    }
  }
  if (!tensor.ok()) {
    return absl::Status(tensor.status().code(), absl::StrCat("state '", name, "': ", tensor.status().message()));
  }
  return tensor;
}

absl::StatusOr<TensorMap> MaterializeStates(const StateSources& sources) {
  TensorMap tensors;
  for (const auto& [name, source] : sources) {
    absl::StatusOr<HostTensor> tensor = MaterializeState(name, source);
    if (!tensor.ok()) return tensor.status();
    tensors[name] = *std::move(tensor);
  }
  return tensors;
}

}  // namespace tandem::ir
