#include "tools/cli/example_job.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tandem::cli {
namespace {

absl::StatusOr<double> GetDouble(const Arguments& arguments, const std::string& name) {
  absl::StatusOr<std::string> text = arguments.Require(name);
  if (!text.ok()) return text.status();
  double value = 0;
  if (!absl::SimpleAtod(*text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("option --", name, " needs a number, got '", *text, "'"));
  }
  return value;
}

// Reads an optional integer option.
absl::Status ReadSize(const Arguments& arguments, const std::string& name, std::optional<int64_t>& field) {
  if (!arguments.Has(name)) return absl::OkStatus();
  absl::StatusOr<int64_t> value = arguments.GetInt(name);
  if (!value.ok()) return value.status();
  field = *value;
  return absl::OkStatus();
}

}  // namespace

void AddExampleOptions(Arguments& arguments) {
  arguments.AddOption("model", "example model: gpt or mlp", "gpt");
  arguments.AddOption("stages", "pipeline stages the model is split into", "1");
  arguments.AddOption("microbatches", "microbatches per step", "4");
  arguments.AddOption("layers", "decoder blocks (gpt) or hidden layers (mlp)");
  arguments.AddOption("dim", "model width (gpt d_model, mlp hidden width)");
  arguments.AddOption("heads", "attention heads (gpt)");
  arguments.AddOption("seq", "sequence length (gpt)");
  arguments.AddOption("batch", "sequences or examples per microbatch");
  arguments.AddFlag("tied", "tie the gpt LM head to the token embedding");
  arguments.AddOption("optimizer", "adam or sgd (momentum 0.9)", "adam");
  arguments.AddOption("lr", "learning rate (default 3e-3 for gpt, 1e-2 for mlp)");
  arguments.AddOption("seed", "seed of parameter initialization and data sampling", "1");
  arguments.AddOption("data", "gpt: a UTF-8 text file or directory (default: /usr/share/common-licenses)");
}

absl::StatusOr<ExampleJob> MakeExampleJob(const Arguments& arguments, std::optional<int32_t> stages_override) {
  absl::StatusOr<examples::ExampleJobOptions> options = ExampleJobOptionsFrom(arguments, stages_override);
  if (!options.ok()) return options.status();
  return examples::MakeExampleJob(*options);
}

absl::StatusOr<examples::ExampleJobOptions> ExampleJobOptionsFrom(const Arguments& arguments,
                                                                  std::optional<int32_t> stages_override) {
  examples::ExampleJobOptions options;
  options.model = arguments.Get("model").value_or("gpt");
  absl::StatusOr<int64_t> microbatches = arguments.GetInt("microbatches");
  absl::StatusOr<int64_t> stages = arguments.GetInt("stages");
  absl::StatusOr<int64_t> seed = arguments.GetInt("seed");
  for (const auto* value : {&microbatches, &stages, &seed}) {
    if (!value->ok()) return value->status();
  }
  if (stages_override) {
    if (arguments.Has("stages") && *stages != *stages_override) {
      return absl::InvalidArgumentError(absl::StrCat("--stages ", *stages, " does not match the schedule's ",
                                                     *stages_override, " stages"));
    }
    stages = *stages_override;
  }
  options.stages = static_cast<int32_t>(*stages);
  options.microbatches = static_cast<int32_t>(*microbatches);
  options.seed = static_cast<uint64_t>(*seed);
  for (auto [name, field] : {std::pair{"layers", &options.layers}, {"dim", &options.dim}, {"heads", &options.heads},
                             {"seq", &options.seq}, {"batch", &options.batch}}) {
    if (absl::Status s = ReadSize(arguments, name, *field); !s.ok()) return s;
  }
  options.tied = arguments.Flag("tied");
  options.optimizer = arguments.Get("optimizer").value_or("adam");
  if (arguments.Has("lr")) {
    absl::StatusOr<double> lr = GetDouble(arguments, "lr");
    if (!lr.ok()) return lr.status();
    options.lr = *lr;
  }
  options.data = arguments.Get("data");
  return options;
}

}  // namespace tandem::cli
