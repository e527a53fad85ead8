#include "examples/fill_job.h"

#include <map>
#include <memory>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "examples/limits.h"
#include "examples/models/mlp.h"
#include "ir/trace.h"

namespace tandem::examples {

namespace {

constexpr int64_t kFillPoolItems = 256;

}  // namespace

absl::StatusOr<ExampleFillJob> MakeExampleFillJob(const std::string& spec, uint64_t seed) {
  const std::vector<std::string> pieces = absl::StrSplit(spec, ',');
  const std::string& head = pieces.front();
  if (head.rfind("infer:", 0) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("fill job '", spec, "': expected infer:MODEL[,key=value...], e.g. infer:mlp,batch=16"));
  }
  const std::string model = head.substr(6);
  if (model != "mlp") {
    return absl::InvalidArgumentError(absl::StrCat("fill job '", spec, "': unknown model '", model, "' (expected mlp)"));
  }
  std::map<std::string, int64_t> values = {{"batch", 256}, {"items", 0}};
  MlpConfig config;
  values["layers"] = config.num_layers;
  values["dim"] = config.hidden_dim;
  for (size_t i = 1; i < pieces.size(); ++i) {
    const std::vector<std::string> pair = absl::StrSplit(pieces[i], absl::MaxSplits('=', 1));
    int64_t value = 0;
    if (pair.size() != 2 || values.count(pair[0]) == 0 || !absl::SimpleAtoi(pair[1], &value)) {
      return absl::InvalidArgumentError(absl::StrCat("fill job '", spec, "': '", pieces[i],
                                                     "' is not one of batch=N, layers=N, dim=N, items=N"));
    }
    values[pair[0]] = value;
  }
  const auto bounded = [&](const char* key, int64_t low, int64_t high) -> absl::Status {
    if (values[key] < low || values[key] > high) {
      return absl::InvalidArgumentError(absl::StrCat("fill job '", spec, "': ", key, "=", values[key],
                                                     " is outside [", low, ", ", high, "]"));
    }
    return absl::OkStatus();
  };
  for (absl::Status status : {bounded("batch", 1, kMaxBatch), bounded("layers", 1, kMaxLayers),
                              bounded("dim", 1, kMaxDim), bounded("items", 0, int64_t{1} << 40)}) {
    if (!status.ok()) return status;
  }
  config.batch_size = values["batch"];
  config.num_layers = values["layers"];
  config.hidden_dim = values["dim"];
  if (absl::Status status = ValidateMlpConfig(config); !status.ok()) return status;
  absl::StatusOr<ir::TrainStep> step = TraceForwardStep("fill.mlp", MlpInferenceModel(config), {.seed = seed});
  if (!step.ok()) return step.status();
  absl::StatusOr<ir::TensorMap> state = ir::InitialState(*step);
  if (!state.ok()) return state.status();
  ExampleFillJob job;
  job.name = spec;
  job.description = absl::StrCat("mlp inference: ", config.num_layers, " hidden layers of ", config.hidden_dim, ", ",
                                 config.batch_size, " rows per piece");
  job.step = *std::move(step);
  job.state = *std::move(state);
  job.items = values["items"];
  job.rows_per_item = config.batch_size;
  // The requests: a dataset of kFillPoolItems batches held in memory, drawn
  // like the mlp's training inputs (examples/data/synthetic.h) from a seed
  // range training never reaches, and cycled through; inference needs no
  // labels. Drawing them is the dataset's loading, not the fill's work, so
  // it happens once, here.
  auto pool = std::make_shared<std::vector<ir::TensorMap>>();
  for (int64_t item = 0; item < kFillPoolItems; ++item) {
    const uint64_t stream = (uint64_t{1} << 41) + static_cast<uint64_t>(item);
    absl::StatusOr<ir::HostTensor> x = ir::MakeTensor({ir::DType::kF32, {config.batch_size, config.input_dim}},
                                                      {ir::Initializer::Kind::kNormal, 0.0, 1.0, seed * 7919 + stream + 1});
    if (!x.ok()) return x.status();
    pool->push_back({{"x", *std::move(x)}});
  }
  job.input = [pool](int64_t item) { return (*pool)[static_cast<size_t>(item % kFillPoolItems)]; };
  return job;
}

}  // namespace tandem::examples
