#include "examples/fill_job.h"

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "examples/data/synthetic.h"
#include "examples/example_job.h"
#include "examples/limits.h"
#include "examples/models/mlp.h"
#include "ir/initial_state.h"
#include "ir/single_update.h"
#include "ir/trace.h"

namespace tandem::examples {

namespace {

// The dataset: up to 256 batches, and at most 64 MiB of them.
constexpr int64_t kDatasetBatches = 256;
constexpr int64_t kDatasetBytes = int64_t{64} << 20;

}  // namespace

absl::StatusOr<ExampleFillJob> MakeExampleFillJob(const std::string& spec, uint64_t seed) {
  const std::vector<std::string> pieces = absl::StrSplit(spec, ',');
  const std::string& head = pieces.front();
  const bool trains = head.rfind("train:", 0) == 0;
  if (!trains && head.rfind("infer:", 0) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fill job '", spec, "': expected infer:MODEL or train:MODEL, then ,key=value..., e.g. infer:mlp,batch=16"));
  }
  const std::string model = head.substr(6);
  if (model != "mlp") {
    return absl::InvalidArgumentError(absl::StrCat("fill job '", spec, "': unknown model '", model, "' (expected mlp)"));
  }
  std::map<std::string, int64_t> values = {{"batch", 256}, {"items", 0}};
  MlpConfig config;
  values["layers"] = config.num_layers;
  values["dim"] = config.hidden_dim;
  double learning_rate = 1e-3;
  for (size_t i = 1; i < pieces.size(); ++i) {
    const std::vector<std::string> pair = absl::StrSplit(pieces[i], absl::MaxSplits('=', 1));
    int64_t value = 0;
    const bool ok = pair.size() == 2 && (trains && pair[0] == "lr"
                                             ? absl::SimpleAtod(pair[1], &learning_rate) && learning_rate > 0 &&
                                                   learning_rate <= 1
                                             : values.count(pair[0]) > 0 && absl::SimpleAtoi(pair[1], &value));
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("fill job '", spec, "': '", pieces[i],
                                                     "' is not one of batch=N, layers=N, dim=N, items=N",
                                                     trains ? ", lr=X (in (0, 1])" : ""));
    }
    if (pair[0] != "lr") values[pair[0]] = value;
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
  if (trains && values["items"] != 0) {
    return absl::InvalidArgumentError(absl::StrCat("fill job '", spec,
                                                   "': a training fill job trains as long as the pipeline runs; "
                                                   "items= is for infer:"));
  }
  config.batch_size = values["batch"];
  config.num_layers = values["layers"];
  config.hidden_dim = values["dim"];
  if (absl::Status status = ValidateMlpConfig(config); !status.ok()) return status;
  const int64_t batch_bytes = config.batch_size * config.input_dim * static_cast<int64_t>(sizeof(float));
  const int64_t batches = std::clamp<int64_t>(kDatasetBytes / batch_bytes, 1, kDatasetBatches);
  // The dataset is state of the job, so it goes to the filling actors once,
  // with the parameters, and stays there: a piece's input is the index of
  // its batch, not the batch (PipeFill's fill jobs load their own data).
  absl::StatusOr<ir::TrainStep> step =
      trains ? TraceTrainStep("fill.mlp", MlpDatasetModel(config, batches), Adam({.learning_rate = learning_rate}),
                              {.seed = seed})
             : TraceForwardStep("fill.mlp", MlpDatasetInferenceModel(config, batches), {.seed = seed});
  if (!step.ok()) return step.status();
  const std::string sizes = absl::StrCat("fill mlp: ", config.num_layers, " layers, dim ", config.hidden_dim,
                                         ", batch ", config.batch_size);
  if (absl::Status status = CheckFootprint(*step, sizes); !status.ok()) return status;
  absl::StatusOr<ir::Graph> piece = trains ? ir::SingleUpdateGraph(*step) : step->microbatch;
  if (!piece.ok()) return piece.status();
  absl::StatusOr<ir::TensorMap> state = ir::InitialState(*step);
  if (!state.ok()) return state.status();
  ir::TensorMap dataset = ClassificationDataset(config, seed, batches);
  (*state)["data"] = dataset.at("data");
  if (trains) {
    (*state)["targets"] = dataset.at("targets");
    (*state)[ir::kSingleUpdateStep] = ir::HostTensor::Scalar(0.0f);
  }

  ExampleFillJob job;
  job.name = spec;
  job.description =
      absl::StrCat("mlp ", trains ? absl::StrCat("training (Adam, lr ", learning_rate, ")") : "inference", ": ",
                   config.num_layers, " hidden layers of ", config.hidden_dim, ", ", config.batch_size,
                   " rows per piece, a dataset of ", batches, " batches on the actors",
                   trains ? ", a copy of the model per actor" : "");
  job.piece = *std::move(piece);
  job.state = *std::move(state);
  job.items = values["items"];
  job.rows_per_item = config.batch_size;
  job.input = [batches](int64_t item) {
    return ir::TensorMap{{"item", ir::HostTensor::FromInts({1}, {static_cast<int32_t>(item % batches)})}};
  };
  return job;
}

}  // namespace tandem::examples
