// Where `tandem generate` and `tandem eval` take a trained model's
// parameters from: a checkpoint (or the newest under a --checkpoint-dir),
// or a safetensors file of parameters (`tandem export`'s, `train
// --import`'s).
#ifndef TANDEM_TOOLS_CLI_MODEL_PARAMETERS_H_
#define TANDEM_TOOLS_CLI_MODEL_PARAMETERS_H_

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "examples/example_job.h"
#include "ir/host_tensor.h"
#include "ir/state_source.h"
#include "ir/train_step.h"

namespace tandem::cli {

struct ParameterFile {
  std::string checkpoint;  // a checkpoint or a --checkpoint-dir; or
  std::string import;      // a safetensors file or a Hugging Face model directory
};

// With `import` a Hugging Face model directory (examples/hugging_face.h):
// `options` take the model and its shape from its config.json
// (examples::TakeHuggingFaceConfig), and a --model on `command` that says
// otherwise is InvalidArgument. Nothing for a safetensors file.
absl::Status TakeImportedModel(const CLI::App& command, const std::string& import,
                               examples::ExampleJobOptions& options);

// `step`'s first state with the parameters of `import` (a Hugging Face
// model directory of the model `model`, or a safetensors file named as
// `tandem export` names them) and fresh optimizer state.
absl::StatusOr<ir::StateSources> ImportedSources(const std::string& import, absl::string_view model,
                                                 const ir::TrainStep& step);

// Where each parameter `step` reads (its state of role kParameter) comes
// from, in `step`'s order, out of `sources` (a checkpoint's or a file's,
// named by `from`). FailedPrecondition naming the tensor and asking for the
// options the model was trained with when one is missing there or of
// another type.
absl::StatusOr<std::vector<std::pair<std::string, ir::StateSource>>> ModelParameterSources(
    const ir::StateSources& sources, absl::string_view from, const ir::TrainStep& step);

// Where each parameter `step` reads comes from (ModelParameterSources) in
// `file`: a checkpoint's files, which actors read themselves, or the
// tensors of an imported model. The errors of LoadModelParameters.
absl::StatusOr<std::vector<std::pair<std::string, ir::StateSource>>> ModelParameterFileSources(
    const ParameterFile& file, absl::string_view model, const ir::TrainStep& step, std::ostream& err);

// The parameters `step` reads (its state of role kParameter), each of the
// type the model has, from `file`. FailedPrecondition naming the tensor and
// asking for the options the model was trained with when the checkpoint
// does not fit the model; the errors of ir::SafetensorsParameterSources for
// a file; the loading errors otherwise. Prints on `err` what a checkpoint
// load skipped (controller::SkippedReport).
absl::StatusOr<ir::TensorMap> LoadModelParameters(const ParameterFile& file, absl::string_view model,
                                                  const ir::TrainStep& step, std::ostream& err);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_MODEL_PARAMETERS_H_
