#include "tools/cli/model_parameters.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "controller/checkpoint.h"
#include "examples/hugging_face.h"
#include "ir/safetensors.h"
#include "ir/state_source.h"

namespace tandem::cli {

absl::StatusOr<std::vector<std::pair<std::string, ir::StateSource>>> ModelParameterSources(
    const ir::StateSources& sources, absl::string_view from, const ir::TrainStep& step) {
  std::vector<std::pair<std::string, ir::StateSource>> fitted;
  for (const ir::StateSpec& spec : step.state) {
    if (spec.role != ir::StateRole::kParameter) continue;
    auto found = sources.find(spec.name);
    if (found == sources.end() || found->second.type != spec.type) {
      return absl::FailedPreconditionError(absl::StrCat(
          from, " does not fit this model: ", spec.name, " (", ir::TypeToString(spec.type), ") is ",
          found == sources.end() ? "missing" : ir::TypeToString(found->second.type),
          " there; pass the model options it was trained with"));
    }
    fitted.emplace_back(spec.name, found->second);
  }
  return fitted;
}

absl::Status TakeImportedModel(const CLI::App& command, const std::string& import,
                               examples::ExampleJobOptions& options) {
  if (!examples::IsHuggingFaceDirectory(import)) return absl::OkStatus();
  const std::string given = options.model;
  if (absl::Status status = examples::TakeHuggingFaceConfig(import, options); !status.ok()) return status;
  if (command.count("--model") > 0 && given != options.model) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model ", given, " differs from the ", options.model, " model of ", import, "/config.json"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ir::StateSources> ImportedSources(const std::string& import, absl::string_view model,
                                                 const ir::TrainStep& step) {
  if (examples::IsHuggingFaceDirectory(import)) return examples::HuggingFaceParameterSources(import, model, step);
  return ir::SafetensorsParameterSources(import, step);
}

absl::StatusOr<std::vector<std::pair<std::string, ir::StateSource>>> ModelParameterFileSources(
    const ParameterFile& file, absl::string_view model, const ir::TrainStep& step, std::ostream& err) {
  ir::StateSources sources;
  std::string from;
  if (!file.import.empty()) {
    absl::StatusOr<ir::StateSources> imported = ImportedSources(file.import, model, step);
    if (!imported.ok()) return imported.status();
    sources = *std::move(imported);
    from = file.import;
  } else {
    absl::StatusOr<controller::LoadedCheckpoint> loaded = controller::LoadCheckpoint(file.checkpoint);
    if (!loaded.ok()) return loaded.status();
    err << controller::SkippedReport(*loaded);
    sources = std::move(loaded->state);
    from = absl::StrCat("checkpoint ", loaded->path);
  }
  return ModelParameterSources(sources, from, step);
}

absl::StatusOr<ir::TensorMap> LoadModelParameters(const ParameterFile& file, absl::string_view model,
                                                  const ir::TrainStep& step, std::ostream& err) {
  absl::StatusOr<std::vector<std::pair<std::string, ir::StateSource>>> fitted =
      ModelParameterFileSources(file, model, step, err);
  if (!fitted.ok()) return fitted.status();
  ir::TensorMap parameters;
  for (const auto& [name, source] : *fitted) {
    absl::StatusOr<ir::HostTensor> tensor = ir::MaterializeState(name, source);
    if (!tensor.ok()) return tensor.status();
    parameters[name] = *std::move(tensor);
  }
  return parameters;
}

}  // namespace tandem::cli
