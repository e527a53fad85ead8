// Where `tandem generate` and `tandem eval` take a trained model's
// parameters from: a checkpoint (or the newest under a --checkpoint-dir),
// or a safetensors file of parameters (`tandem export`'s, `train
// --import`'s).
#ifndef TANDEM_TOOLS_CLI_MODEL_PARAMETERS_H_
#define TANDEM_TOOLS_CLI_MODEL_PARAMETERS_H_

#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "ir/host_tensor.h"
#include "ir/train_step.h"

namespace tandem::cli {

struct ParameterFile {
  std::string checkpoint;  // a checkpoint or a --checkpoint-dir; or
  std::string import;      // a safetensors file
};

// The parameters `step` reads (its state of role kParameter), each of the
// type the model has, from `file`. FailedPrecondition naming the tensor and
// asking for the options the model was trained with when the checkpoint
// does not fit the model; the errors of ir::SafetensorsParameterSources for
// a file; the loading errors otherwise. Prints on `err` what a checkpoint
// load skipped (controller::SkippedReport).
absl::StatusOr<ir::TensorMap> LoadModelParameters(const ParameterFile& file, const ir::TrainStep& step,
                                                  std::ostream& err);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_MODEL_PARAMETERS_H_
