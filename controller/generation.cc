#include "controller/generation.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "backends/cpu/interpreter.h"
#include "ir/layers.h"

namespace tandem::controller {
namespace {

constexpr ir::DType kI32 = ir::DType::kI32;
constexpr ir::DType kF32 = ir::DType::kF32;
// New tokens one Generate call may ask for (each sequence's text grows by
// as many ids).
constexpr int64_t kMaxNewTokens = int64_t{1} << 20;

// The type of `step`'s input `name`, or InvalidArgument.
absl::StatusOr<ir::TensorType> InputType(const ir::TrainStep& step, const char* name) {
  const std::optional<ir::ValueId> input = step.microbatch.FindInput(name);
  if (!input.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("generation: step '", step.name, "' reads no input \"", name, "\""));
  }
  return step.microbatch.type(*input);
}

absl::StatusOr<ir::TensorType> OutputType(const ir::TrainStep& step) {
  const std::optional<ir::ValueId> output = step.microbatch.FindOutput("output");
  if (!output.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("generation: step '", step.name, "' has no output \"output\""));
  }
  return step.microbatch.type(*output);
}

absl::Status Expect(const ir::TrainStep& step, const std::string& what, const ir::TensorType& got,
                    const ir::TensorType& expected) {
  if (got == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("generation: step '", step.name, "' ", what, " is ",
                                                 ir::TypeToString(got), ", expected ", ir::TypeToString(expected)));
}

// The state of a step by name, for comparing two steps'.
std::map<std::string, std::pair<std::string, ir::StateRole>> StateSet(const ir::TrainStep& step) {
  std::map<std::string, std::pair<std::string, ir::StateRole>> set;
  for (const ir::StateSpec& spec : step.state) set[spec.name] = {ir::TypeToString(spec.type), spec.role};
  return set;
}

// The reference: the interpreter over each microbatch, the caches held here.
class ReferenceGenerator final : public Generator {
 public:
  ReferenceGenerator(GenerationShape shape, GenerationSteps steps, ir::TensorMap parameters)
      : Generator(shape), steps_(std::move(steps)), parameters_(std::move(parameters)) {}

 protected:
  absl::StatusOr<std::vector<ir::HostTensor>> RunStep(bool decode,
                                                      const std::vector<ir::TensorMap>& microbatches) override {
    const ir::Graph& graph = decode ? steps_.decode.microbatch : steps_.prefill.microbatch;
    std::vector<ir::HostTensor> logits;
    for (int32_t m = 0; m < static_cast<int32_t>(microbatches.size()); ++m) {
      ir::TensorMap inputs = parameters_;
      for (const auto& [name, tensor] : microbatches[m]) inputs[name] = tensor;
      for (ir::ValueId id : graph.Inputs()) {
        const ir::Node& node = graph.node(id);
        if (!ir::HasRole(node, ir::InputRole::kCache)) continue;
        const std::string& name = node.attributes.GetString("name");
        auto cached = caches_.find(ir::CacheStateName(name, m));
        if (cached != caches_.end()) {
          inputs[name] = cached->second;
          continue;
        }
        absl::StatusOr<ir::HostTensor> zeros = ir::MaterializeState(name, ir::StateSource{node.type, ir::Initializer{}});
        if (!zeros.ok()) return zeros.status();
        inputs[name] = *std::move(zeros);
      }
      absl::StatusOr<ir::TensorMap> outputs = cpu::RunGraph(graph, inputs);
      if (!outputs.ok()) return outputs.status();
      for (auto& [name, tensor] : *outputs) {
        if (name == "output") {
          logits.push_back(tensor);
        } else {
          caches_[ir::CacheStateName(name, m)] = tensor;
        }
      }
    }
    return logits;
  }

 private:
  GenerationSteps steps_;
  ir::TensorMap parameters_;
  ir::TensorMap caches_;  // by ir::CacheStateName
};

// Through a pipeline that holds both steps; the actors keep the caches.
class PipelineGenerator final : public Generator {
 public:
  PipelineGenerator(GenerationShape shape, std::unique_ptr<Pipeline> pipeline, int32_t decode)
      : Generator(shape), pipeline_(std::move(pipeline)), decode_(decode) {}

 protected:
  absl::StatusOr<std::vector<ir::HostTensor>> RunStep(bool decode,
                                                      const std::vector<ir::TensorMap>& microbatches) override {
    if (absl::Status status = pipeline_->UseStep(decode ? decode_ : 0); !status.ok()) return status;
    absl::StatusOr<StepReport> report = pipeline_->Step(microbatches);
    if (!report.ok()) return report.status();
    return std::move(report->outputs);
  }

 private:
  std::unique_ptr<Pipeline> pipeline_;
  int32_t decode_ = 0;  // the decode step's index in the pipeline (the prefill's is 0)
};

}  // namespace

absl::StatusOr<GenerationShape> CheckGenerationSteps(const GenerationSteps& steps) {
  const ir::TrainStep &prefill = steps.prefill, &decode = steps.decode;
  if (!prefill.forward_only() || !decode.forward_only()) {
    return absl::InvalidArgumentError("generation: the prefill and decode steps must be forward steps");
  }
  if (prefill.num_microbatches != decode.num_microbatches || prefill.num_replicas != 1 || decode.num_replicas != 1) {
    return absl::InvalidArgumentError(absl::StrCat("generation: the prefill runs ", prefill.num_microbatches,
                                                   " microbatches, the decode ", decode.num_microbatches,
                                                   "; both must run the same, on one replica"));
  }
  if (StateSet(prefill) != StateSet(decode)) {
    return absl::InvalidArgumentError(
        "generation: the prefill and decode steps must have the same parameters and caches (names and types)");
  }
  absl::StatusOr<ir::TensorType> tokens = InputType(prefill, "tokens");
  if (!tokens.ok()) return tokens.status();
  if (tokens->dtype != kI32 || tokens->rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("generation: the prefill's tokens are ",
                                                   ir::TypeToString(*tokens), ", expected i32 [batch, window]"));
  }
  GenerationShape shape;
  shape.microbatches = prefill.num_microbatches;
  shape.batch = tokens->shape[0];
  shape.window = tokens->shape[1];
  absl::StatusOr<ir::TensorType> logits = OutputType(prefill);
  if (!logits.ok()) return logits.status();
  if (logits->rank() != 3) {
    return absl::InvalidArgumentError(absl::StrCat("generation: the prefill's logits are ", ir::TypeToString(*logits),
                                                   ", expected f32 [batch, window, vocab]"));
  }
  shape.vocab = logits->shape[2];
  if (absl::Status s = Expect(prefill, "output", *logits, {kF32, {shape.batch, shape.window, shape.vocab}}); !s.ok()) {
    return s;
  }
  const std::vector<std::pair<const char*, ir::TensorType>> decode_inputs = {
      {"tokens", {kI32, {shape.batch, 1}}},
      {layers::kPositionsInput, {kI32, {shape.batch, 1}}},
      {layers::kCacheSlotInput, {kF32, {shape.batch, 1, shape.window, 1}}}};
  for (const auto& [name, expected] : decode_inputs) {
    absl::StatusOr<ir::TensorType> type = InputType(decode, name);
    if (!type.ok()) return type.status();
    if (absl::Status s = Expect(decode, absl::StrCat("input \"", name, "\""), *type, expected); !s.ok()) return s;
  }
  absl::StatusOr<ir::TensorType> decoded = OutputType(decode);
  if (!decoded.ok()) return decoded.status();
  if (absl::Status s = Expect(decode, "output", *decoded, {kF32, {shape.batch, 1, shape.vocab}}); !s.ok()) return s;
  bool caches = false;
  for (const ir::StateSpec& spec : decode.state) caches = caches || spec.role == ir::StateRole::kCache;
  if (!caches) return absl::InvalidArgumentError("generation: the decode step keeps no cache");
  return shape;
}

absl::StatusOr<std::unique_ptr<Generator>> Generator::OnReference(GenerationSteps steps, ir::TensorMap parameters) {
  absl::StatusOr<GenerationShape> shape = CheckGenerationSteps(steps);
  if (!shape.ok()) return shape.status();
  for (const ir::StateSpec& spec : steps.prefill.state) {
    if (spec.role != ir::StateRole::kParameter) continue;
    auto it = parameters.find(spec.name);
    if (it == parameters.end() || it->second.type() != spec.type) {
      return absl::InvalidArgumentError(absl::StrCat("generation: no parameter '", spec.name, "' of type ",
                                                     ir::TypeToString(spec.type)));
    }
  }
  return std::unique_ptr<Generator>(new ReferenceGenerator(*shape, std::move(steps), std::move(parameters)));
}

absl::StatusOr<std::unique_ptr<Generator>> Generator::OnPipeline(GenerationSteps steps,
                                                                 const schedules::Schedule& schedule,
                                                                 const ir::StateSources& parameters,
                                                                 std::unique_ptr<Launcher> launcher,
                                                                 const CompileOptions& options) {
  absl::StatusOr<GenerationShape> shape = CheckGenerationSteps(steps);
  if (!shape.ok()) return shape.status();
  ir::StateSources sources = parameters;
  for (const ir::StateSpec& spec : steps.prefill.state) {
    if (spec.role == ir::StateRole::kCache) sources[spec.name] = ir::StateSource{spec.type, spec.init};
  }
  absl::StatusOr<std::unique_ptr<Pipeline>> pipeline =
      Pipeline::Create(std::move(steps.prefill), schedule, sources, std::move(launcher), 0, options);
  if (!pipeline.ok()) return pipeline.status();
  absl::StatusOr<int32_t> decode = (*pipeline)->AddStep(std::move(steps.decode), schedule);
  if (!decode.ok()) return decode.status();
  return std::unique_ptr<Generator>(new PipelineGenerator(*shape, *std::move(pipeline), *decode));
}

absl::StatusOr<GenerationReport> Generator::Generate(const std::vector<std::vector<int32_t>>& prompts, int64_t tokens,
                                                     const TokenPicker& pick) {
  const GenerationShape& s = shape_;
  if (prompts.empty() || static_cast<int64_t>(prompts.size()) > s.sequences()) {
    return absl::InvalidArgumentError(absl::StrCat("generation takes 1 to ", s.sequences(), " prompts (",
                                                   s.microbatches, " microbatches of ", s.batch,
                                                   " sequences), got ", prompts.size()));
  }
  if (tokens < 0 || tokens > kMaxNewTokens) {
    return absl::InvalidArgumentError(absl::StrCat("tokens ", tokens, " is outside [0, ", kMaxNewTokens, "]"));
  }
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (prompts[p].empty()) return absl::InvalidArgumentError(absl::StrCat("prompt ", p, " has no token"));
    for (int32_t id : prompts[p]) {
      if (id < 0 || id >= s.vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("prompt ", p, " holds id ", id, ", outside the vocabulary [0, ", s.vocab, ")"));
      }
    }
  }
  const int64_t real = static_cast<int64_t>(prompts.size());
  std::vector<std::vector<int32_t>> text(static_cast<size_t>(s.sequences()), std::vector<int32_t>{0});
  std::copy(prompts.begin(), prompts.end(), text.begin());
  // Per sequence: how many of its text's first positions its cache holds
  // (-1: none that count, a prefill comes next).
  std::vector<int64_t> cached(text.size(), -1);
  GenerationReport report;
  report.tokens.resize(prompts.size());
  for (int64_t n = 0; n < tokens; ++n) {
    bool decode = true;
    for (size_t q = 0; q < text.size(); ++q) {
      const int64_t last = static_cast<int64_t>(text[q].size()) - 1;  // the newest token's position
      decode = decode && last < s.window && cached[q] == last;
    }
    std::vector<ir::TensorMap> microbatches(static_cast<size_t>(s.microbatches));
    std::vector<int64_t> used(text.size());  // prefill: the context's length
    for (int32_t m = 0; m < s.microbatches; ++m) {
      const int64_t first = m * s.batch;
      if (decode) {
        std::vector<int32_t> ids(static_cast<size_t>(s.batch)), positions(ids.size());
        std::vector<float> slot(static_cast<size_t>(s.batch * s.window), 0.0f);
        for (int64_t b = 0; b < s.batch; ++b) {
          const std::vector<int32_t>& seq = text[first + b];
          ids[b] = seq.back();
          positions[b] = static_cast<int32_t>(seq.size() - 1);
          slot[b * s.window + positions[b]] = 1.0f;
        }
        microbatches[m]["tokens"] = ir::HostTensor::FromInts({s.batch, 1}, ids);
        microbatches[m][layers::kPositionsInput] = ir::HostTensor::FromInts({s.batch, 1}, positions);
        microbatches[m][layers::kCacheSlotInput] = ir::HostTensor::FromFloats({s.batch, 1, s.window, 1}, slot);
      } else {
        std::vector<int32_t> ids(static_cast<size_t>(s.batch * s.window), 0);
        for (int64_t b = 0; b < s.batch; ++b) {
          const std::vector<int32_t>& seq = text[first + b];
          used[first + b] = std::min<int64_t>(s.window, static_cast<int64_t>(seq.size()));
          std::copy(seq.end() - used[first + b], seq.end(), ids.begin() + b * s.window);
        }
        microbatches[m]["tokens"] = ir::HostTensor::FromInts({s.batch, s.window}, ids);
      }
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<std::vector<ir::HostTensor>> logits = RunStep(decode, microbatches);
    if (!logits.ok()) return logits.status();
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    const ir::TensorType expected{kF32, {s.batch, decode ? 1 : s.window, s.vocab}};
    if (static_cast<int32_t>(logits->size()) != s.microbatches) {
      return absl::InternalError(absl::StrCat("generation: ", logits->size(), " microbatches' logits, expected ",
                                              s.microbatches));
    }
    for (size_t q = 0; q < text.size(); ++q) {
      const int64_t m = static_cast<int64_t>(q) / s.batch, b = static_cast<int64_t>(q) % s.batch;
      const ir::HostTensor& rows = (*logits)[m];
      if (rows.type() != expected) {
        return absl::InternalError(absl::StrCat("generation: logits ", ir::TypeToString(rows.type()), ", expected ",
                                                ir::TypeToString(expected)));
      }
      const int64_t row = decode ? b : b * s.window + used[q] - 1;
      const int64_t length = static_cast<int64_t>(text[q].size());
      // What the cache holds now: the context just prefilled, unless it
      // was slid (its positions then belong to no later text).
      cached[q] = decode ? length : (length <= s.window ? length : -1);
      if (static_cast<int64_t>(q) >= real) {
        text[q].push_back(0);
        continue;
      }
      const int32_t next = pick(rows.f32() + row * s.vocab, s.vocab, static_cast<int64_t>(q), n);
      text[q].push_back(next);
      report.tokens[q].push_back(next);
      if (decode) {
        ++report.decode_tokens;
      } else {
        report.prefill_tokens += used[q];
      }
    }
    if (decode) {
      ++report.decode_steps;
      report.decode_seconds += seconds;
    } else {
      ++report.prefill_steps;
      report.prefill_seconds += seconds;
    }
  }
  return report;
}

}  // namespace tandem::controller
