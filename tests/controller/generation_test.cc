// Generation with KV caches: a decode step's logits are the whole causal
// forward's at that position bit for bit, cached generation gives the
// uncached generation's tokens (sliding past the window included), and a
// pipeline of actor processes or threads gives the reference's; the errors
// a user can cause are named.
#include "controller/generation.h"

#include <bit>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/interpreter.h"
#include "backends/cpu/kernels.h"
#include "controller/compiler.h"
#include "controller/local_launcher.h"
#include "controller/session.h"
#include "examples/generation.h"
#include "examples/models/gpt.h"
#include "examples/models/llama.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/initial_state.h"
#include "ir/layers.h"
#include "ir/trace.h"
#include "schedules/generators.h"
#include "tests/testing/temporary_directory.h"
#include "tools/cli/threads_launcher.h"

namespace tandem::controller {
namespace {

using ::testing::HasSubstr;
using Mode = layers::KvCache::Mode;

constexpr int64_t kWindow = 10;
constexpr int64_t kVocab = 23;

using Logits = std::function<Tensor(Tracer&, Mode)>;

Logits Gpt(int32_t stages, int64_t batch) {
  examples::GptConfig c;
  c.vocab_size = kVocab;
  c.sequence_length = kWindow;
  c.model_dim = 16;
  c.num_heads = 2;
  c.num_layers = 2;
  c.batch_size = batch;
  c.num_stages = stages;
  c.init_std = 0.3;  // logits far enough apart that greedy choices are not ties
  return [c](Tracer& t, Mode mode) { return examples::GptLogits(t, c, mode); };
}

Logits Llama(int32_t stages, int64_t batch) {
  examples::LlamaConfig c;
  c.vocab_size = kVocab;
  c.sequence_length = kWindow;
  c.model_dim = 16;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.num_layers = 2;
  c.batch_size = batch;
  c.num_stages = stages;
  c.init_std = 0.3;
  return [c](Tracer& t, Mode mode) { return examples::LlamaLogits(t, c, mode); };
}

ir::TrainStep Trace(const Logits& logits, Mode mode, int32_t microbatches) {
  absl::StatusOr<ir::TrainStep> step = TraceForwardStep(
      mode == Mode::kDecode ? "decode" : "prefill", [&](Tracer& t) { return logits(t, mode); },
      {.num_microbatches = microbatches, .seed = 3});
  EXPECT_TRUE(step.ok()) << step.status();
  return step.ok() ? *step : ir::TrainStep{};
}

GenerationSteps Steps(const Logits& logits, int32_t microbatches) {
  return {Trace(logits, Mode::kPrefill, microbatches), Trace(logits, Mode::kDecode, microbatches)};
}

// Every parameter of `step`, from its initializers.
ir::TensorMap Parameters(const ir::TrainStep& step) {
  absl::StatusOr<ir::TensorMap> state = ir::InitialState(step);
  EXPECT_TRUE(state.ok()) << state.status();
  ir::TensorMap parameters;
  for (const ir::StateSpec& spec : step.state) {
    if (spec.role == ir::StateRole::kParameter) parameters[spec.name] = state->at(spec.name);
  }
  return parameters;
}

std::vector<uint32_t> Bits(const float* values, int64_t n) {
  std::vector<uint32_t> bits;
  for (int64_t i = 0; i < n; ++i) bits.push_back(std::bit_cast<uint32_t>(values[i]));
  return bits;
}

int32_t Greedy(const float* logits, int64_t vocab, int64_t, int64_t) {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

// The uncached generation: a whole forward over the last kWindow ids (left-
// aligned, padded with 0) for every token, batch 1.
std::vector<int32_t> Uncached(const Logits& logits, const ir::TensorMap& parameters, std::vector<int32_t> text,
                              int64_t tokens) {
  const ir::TrainStep whole = Trace(logits, Mode::kNone, 1);
  std::vector<int32_t> generated;
  for (int64_t n = 0; n < tokens; ++n) {
    const int64_t used = std::min<int64_t>(kWindow, static_cast<int64_t>(text.size()));
    std::vector<int32_t> context(kWindow, 0);
    std::copy(text.end() - used, text.end(), context.begin());
    ir::TensorMap inputs = parameters;
    inputs["tokens"] = ir::HostTensor::FromInts({1, kWindow}, context);
    absl::StatusOr<ir::TensorMap> out = cpu::RunGraph(whole.microbatch, inputs);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return generated;
    const int32_t next = Greedy(out->at("output").f32() + (used - 1) * kVocab, kVocab, 0, n);
    text.push_back(next);
    generated.push_back(next);
  }
  return generated;
}

class Models : public ::testing::TestWithParam<std::string> {
 protected:
  Logits Model(int32_t stages, int64_t batch) const {
    return GetParam() == "gpt" ? Gpt(stages, batch) : Llama(stages, batch);
  }
};

TEST_P(Models, ADecodedTokensLogitsAreTheWholeForwardsAtItsPositionBitForBit) {
  cpu::SetBlasThreads(1);
  const Logits model = Model(1, 1);
  const GenerationSteps steps = Steps(model, 1);
  const ir::TensorMap parameters = Parameters(steps.prefill);
  const std::vector<int32_t> text = {3, 14, 15, 9, 2, 6, 5};
  // Prefill the first 4 ids, then decode ids 4, 5 and 6 one by one.
  std::vector<int32_t> padded(kWindow, 0);
  std::copy(text.begin(), text.begin() + 4, padded.begin());
  ir::TensorMap inputs = parameters;
  inputs["tokens"] = ir::HostTensor::FromInts({1, kWindow}, padded);
  absl::StatusOr<ir::TensorMap> prefilled = cpu::RunGraph(steps.prefill.microbatch, inputs);
  ASSERT_TRUE(prefilled.ok()) << prefilled.status();
  ir::TensorMap caches = *prefilled;
  caches.erase("output");
  ASSERT_FALSE(caches.empty());
  // The whole forward of all seven ids.
  std::vector<int32_t> all(kWindow, 0);
  std::copy(text.begin(), text.end(), all.begin());
  inputs["tokens"] = ir::HostTensor::FromInts({1, kWindow}, all);
  absl::StatusOr<ir::TensorMap> whole = cpu::RunGraph(steps.prefill.microbatch, inputs);
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (int32_t position = 4; position < 7; ++position) {
    ir::TensorMap decode = parameters;
    for (const auto& [name, cache] : caches) decode[name] = cache;
    decode["tokens"] = ir::HostTensor::FromInts({1, 1}, {text[position]});
    decode[layers::kPositionsInput] = ir::HostTensor::FromInts({1, 1}, {position});
    std::vector<float> slot(kWindow, 0.0f);
    slot[position] = 1.0f;
    decode[layers::kCacheSlotInput] = ir::HostTensor::FromFloats({1, 1, kWindow, 1}, slot);
    absl::StatusOr<ir::TensorMap> decoded = cpu::RunGraph(steps.decode.microbatch, decode);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(Bits(decoded->at("output").f32(), kVocab),
              Bits(whole->at("output").f32() + position * kVocab, kVocab))
        << "position " << position;
    for (auto& [name, tensor] : *decoded) {
      if (name != "output") caches[name] = tensor;
    }
  }
}

TEST_P(Models, CachedGenerationGivesTheUncachedTokensPastTheWindow) {
  cpu::SetBlasThreads(1);
  const Logits model = Model(1, 1);
  GenerationSteps steps = Steps(model, 1);
  const ir::TensorMap parameters = Parameters(steps.prefill);
  absl::StatusOr<std::unique_ptr<Generator>> generator = Generator::OnReference(steps, parameters);
  ASSERT_TRUE(generator.ok()) << generator.status();
  // 3 prompt ids and 12 new ones: the window of 10 fills after 7, and each
  // token after that is a prefill of the last 10.
  const std::vector<int32_t> prompt = {7, 1, 20};
  absl::StatusOr<GenerationReport> report = (*generator)->Generate({prompt}, 12, Greedy);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->tokens[0], Uncached(model, parameters, prompt, 12));
  // A prefill, 7 decodes (positions 3..9), then 4 sliding prefills.
  EXPECT_EQ(report->prefill_steps, 5);
  EXPECT_EQ(report->decode_steps, 7);
  EXPECT_EQ(report->decode_tokens, 7);
  EXPECT_EQ(report->prefill_tokens, 3 + 4 * kWindow);
}

TEST_P(Models, SampledCachedGenerationDrawsTheUncachedGenerationsTokens) {
  cpu::SetBlasThreads(1);
  // Seeded top-k sampling: the first sequence draws what the uncached
  // generation draws; a second sequence draws from a stream of its own.
  const Logits model = Model(1, 2);
  const GenerationSteps steps = Steps(model, 1);
  const ir::TensorMap parameters = Parameters(steps.prefill);
  const examples::SamplingOptions sampling{.tokens = 14, .temperature = 1.5, .top_k = 6, .seed = 11};
  absl::StatusOr<std::unique_ptr<Generator>> generator = Generator::OnReference(steps, parameters);
  ASSERT_TRUE(generator.ok()) << generator.status();
  const std::vector<int32_t> prompt = {5, 9, 2};
  absl::StatusOr<GenerationReport> report =
      (*generator)->Generate({prompt, prompt}, sampling.tokens, examples::TokenPicker(sampling));
  ASSERT_TRUE(report.ok()) << report.status();
  const ir::TrainStep whole = Trace(Model(1, 1), Mode::kNone, 1);
  absl::StatusOr<std::vector<int32_t>> uncached = examples::Generate(whole.microbatch, parameters, prompt, sampling);
  ASSERT_TRUE(uncached.ok()) << uncached.status();
  EXPECT_EQ(report->tokens[0], *uncached);
  EXPECT_NE(report->tokens[1], report->tokens[0]);
}

// Several prompts of different lengths over 2 microbatches of 2 sequences,
// through 2 actors: the reference's tokens, each prompt's own.
std::vector<std::vector<int32_t>> Prompts() { return {{1, 2, 3}, {4}, {5, 6, 7, 8, 9, 10, 11, 12}}; }

void ExpectPipelineGivesTheReference(const Logits& model, std::unique_ptr<Launcher> launcher) {
  const GenerationSteps steps = Steps(model, 2);
  const ir::TensorMap parameters = Parameters(steps.prefill);
  absl::StatusOr<std::unique_ptr<Generator>> reference = Generator::OnReference(steps, parameters);
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<GenerationReport> expected = (*reference)->Generate(Prompts(), 6, Greedy);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<schedules::Schedule> gpipe = schedules::GenerateGPipe({.actors = 2, .microbatches = 2});
  ASSERT_TRUE(gpipe.ok());
  absl::StatusOr<std::unique_ptr<Generator>> pipelined = Generator::OnPipeline(
      steps, ForwardOnly(*gpipe), ir::TensorSources(parameters), std::move(launcher));
  ASSERT_TRUE(pipelined.ok()) << pipelined.status();
  absl::StatusOr<GenerationReport> got = (*pipelined)->Generate(Prompts(), 6, Greedy);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->tokens, expected->tokens);
  EXPECT_EQ(got->prefill_steps, expected->prefill_steps);
  EXPECT_EQ(got->decode_steps, expected->decode_steps);
  // The third prompt reaches the window of 10 after 2 tokens: a prefill,
  // 2 decodes, then prefills.
  EXPECT_EQ(got->decode_steps, 2);
  // Each prompt alone gives the same tokens: sequences do not mix.
  for (size_t p = 0; p < Prompts().size(); ++p) {
    absl::StatusOr<GenerationReport> alone = (*reference)->Generate({Prompts()[p]}, 6, Greedy);
    ASSERT_TRUE(alone.ok()) << alone.status();
    EXPECT_EQ(alone->tokens[0], got->tokens[p]) << "prompt " << p;
  }
}

TEST_P(Models, APipelineOfActorProcessesGivesTheReferenceTokens) {
  cpu::SetBlasThreads(1);
  LocalLauncherOptions options;
  options.actor_binary = TANDEM_ACTOR_BINARY;
  ExpectPipelineGivesTheReference(Model(2, 2), std::make_unique<LocalLauncher>(std::move(options)));
}

TEST_P(Models, APipelineOfThreadsGivesTheReferenceTokens) {
  cpu::SetBlasThreads(1);
  ExpectPipelineGivesTheReference(Model(2, 2), std::make_unique<cli::ThreadsLauncher>());
}

TEST_P(Models, ASessionGeneratesWithItsTrainedParametersWithoutHoldingThem) {
  cpu::SetBlasThreads(1);
  // Two training steps of the model's loss on 2 actors, then generation
  // through a pipeline of their parameters: the reference's tokens on the
  // trained state.
  const Logits model = Model(2, 2);
  absl::StatusOr<ir::TrainStep> train = TraceTrainStep(
      "train",
      [&](Tracer& t) {
        Tensor logits = model(t, Mode::kNone);
        return mean(cross_entropy(logits, t.Label("labels", {ir::DType::kI32, {2, kWindow}})));
      },
      Adam({.learning_rate = 0.05}), {.num_microbatches = 2, .seed = 3});
  ASSERT_TRUE(train.ok()) << train.status();
  SessionOptions options;
  options.actor_binary = TANDEM_ACTOR_BINARY;
  absl::StatusOr<schedules::Schedule> schedule = schedules::GenerateGPipe({.actors = 2, .microbatches = 2});
  ASSERT_TRUE(schedule.ok());
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Start(*train, *schedule, options);
  ASSERT_TRUE(session.ok()) << session.status();
  for (int32_t step = 0; step < 2; ++step) {
    std::vector<ir::TensorMap> batch(2);
    for (int32_t m = 0; m < 2; ++m) {
      std::vector<int32_t> tokens(2 * kWindow), labels(2 * kWindow);
      for (size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = static_cast<int32_t>((i * 7 + m + step) % kVocab);
        labels[i] = static_cast<int32_t>((i * 7 + m + step + 1) % kVocab);
      }
      batch[m]["tokens"] = ir::HostTensor::FromInts({2, kWindow}, tokens);
      batch[m]["labels"] = ir::HostTensor::FromInts({2, kWindow}, labels);
    }
    ASSERT_TRUE((*session)->Step(batch).ok());
  }
  const GenerationSteps steps = Steps(model, 2);
  test::TemporaryDirectory scratch("tandem-generation-test");
  absl::StatusOr<GenerationReport> got = (*session)->Generate(steps, Prompts(), 5, Greedy, scratch.Path("scratch"));
  ASSERT_TRUE(got.ok()) << got.status();
  absl::StatusOr<ir::TensorMap> state = (*session)->State();
  ASSERT_TRUE(state.ok());
  ir::TensorMap trained;
  for (const ir::StateSpec& spec : steps.prefill.state) {
    if (spec.role == ir::StateRole::kParameter) trained[spec.name] = state->at(spec.name);
  }
  absl::StatusOr<std::unique_ptr<Generator>> reference = Generator::OnReference(steps, trained);
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<GenerationReport> expected = (*reference)->Generate(Prompts(), 5, Greedy);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(got->tokens, expected->tokens);
  // The untrained model generates otherwise: the session's state was used.
  absl::StatusOr<std::unique_ptr<Generator>> untrained = Generator::OnReference(steps, Parameters(steps.prefill));
  ASSERT_TRUE(untrained.ok());
  EXPECT_NE((*untrained)->Generate(Prompts(), 5, Greedy)->tokens, got->tokens);
  // The scratch checkpoint is gone.
  EXPECT_TRUE(!std::filesystem::exists(scratch.Path("scratch")) ||
              std::filesystem::is_empty(scratch.Path("scratch")));
}

INSTANTIATE_TEST_SUITE_P(GptAndLlama, Models, ::testing::Values("gpt", "llama"));

TEST(PipelineSteps, AnAddedStepMayBindOnlyTheStateTheActorsStartedWith) {
  cpu::SetBlasThreads(1);
  const GenerationSteps gpt = Steps(Gpt(2, 1), 1), llama = Steps(Llama(2, 1), 1);
  absl::StatusOr<schedules::Schedule> gpipe = schedules::GenerateGPipe({.actors = 2, .microbatches = 1});
  ASSERT_TRUE(gpipe.ok());
  ir::StateSources sources = ir::TensorSources(Parameters(gpt.prefill));
  for (const ir::StateSpec& spec : gpt.prefill.state) {
    if (spec.role == ir::StateRole::kCache) sources[spec.name] = ir::StateSource{spec.type, spec.init};
  }
  absl::StatusOr<std::unique_ptr<Pipeline>> pipeline = Pipeline::Create(
      gpt.prefill, ForwardOnly(*gpipe), sources, std::make_unique<cli::ThreadsLauncher>());
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  EXPECT_THAT((*pipeline)->AddStep(llama.decode, ForwardOnly(*gpipe)).status().message(),
              HasSubstr("the added step 'decode' needs state 'model.embed_tokens.weight' on actor 0, which the actor "
                        "was not started with"));
  EXPECT_THAT((*pipeline)->UseStep(1).message(), HasSubstr("no step 1 (the pipeline has 1)"));
  absl::StatusOr<int32_t> decode = (*pipeline)->AddStep(gpt.decode, ForwardOnly(*gpipe));
  ASSERT_TRUE(decode.ok()) << decode.status();
  EXPECT_EQ(*decode, 1);
  EXPECT_TRUE((*pipeline)->UseStep(1).ok());
}

TEST(PipelineSteps, AProgramThatNeedsBiggerRingsThanTheStartsIsRefusedByName) {
  cpu::SetBlasThreads(1);
  // Started with the decode (a token a sequence), then asked for the
  // prefill, whose activations of [4, 256, 256] f32 (1 MiB a microbatch)
  // do not fit the 1 MiB rings the start sized.
  examples::GptConfig c;
  c.vocab_size = kVocab;
  c.sequence_length = 256;
  c.model_dim = 256;
  c.num_heads = 4;
  c.num_layers = 2;
  c.batch_size = 4;
  c.num_stages = 2;
  const Logits big = [c](Tracer& t, Mode mode) { return examples::GptLogits(t, c, mode); };
  const GenerationSteps steps = Steps(big, 2);
  absl::StatusOr<schedules::Schedule> gpipe = schedules::GenerateGPipe({.actors = 2, .microbatches = 2});
  ASSERT_TRUE(gpipe.ok());
  ir::StateSources sources;
  for (const ir::StateSpec& spec : steps.decode.state) sources[spec.name] = ir::StateSource{spec.type, spec.init};
  LocalLauncherOptions options;
  options.actor_binary = TANDEM_ACTOR_BINARY;
  absl::StatusOr<std::unique_ptr<Pipeline>> pipeline = Pipeline::Create(
      steps.decode, ForwardOnly(*gpipe), sources, std::make_unique<LocalLauncher>(std::move(options)));
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  absl::StatusOr<int32_t> prefill = (*pipeline)->AddStep(steps.prefill, ForwardOnly(*gpipe));
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  const absl::Status refused = (*pipeline)->UseStep(*prefill);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("actor 0 (stage 0): the new program sends up to"));
  EXPECT_THAT(refused.message(), HasSubstr("start with the program that sends the most"));
}

TEST(Generation, PromptsThatDoNotFitAreRefusedByName) {
  const GenerationSteps steps = Steps(Gpt(1, 1), 2);
  absl::StatusOr<std::unique_ptr<Generator>> generator =
      Generator::OnReference(steps, Parameters(steps.prefill));
  ASSERT_TRUE(generator.ok()) << generator.status();
  EXPECT_THAT((*generator)->Generate({{1}, {2}, {3}}, 1, Greedy).status().message(),
              HasSubstr("1 to 2 prompts (2 microbatches of 1 sequences), got 3"));
  EXPECT_THAT((*generator)->Generate({{1}, {}}, 1, Greedy).status().message(), HasSubstr("prompt 1 has no token"));
  EXPECT_THAT((*generator)->Generate({{1, kVocab}}, 1, Greedy).status().message(),
              HasSubstr("prompt 0 holds id 23, outside the vocabulary [0, 23)"));
  EXPECT_THAT((*generator)->Generate({{1}}, -1, Greedy).status().message(), HasSubstr("tokens -1 is outside"));
}

TEST(Generation, StepsThatDoNotMatchAreRefused) {
  GenerationSteps steps = Steps(Gpt(1, 1), 1);
  GenerationSteps other = Steps(Gpt(1, 1), 2);
  steps.decode = other.decode;
  EXPECT_THAT(CheckGenerationSteps(steps).status().message(), HasSubstr("the prefill runs 1 microbatches"));
  steps = Steps(Gpt(1, 1), 1);
  steps.decode = Trace(Gpt(1, 1), Mode::kPrefill, 1);
  EXPECT_THAT(CheckGenerationSteps(steps).status().message(), HasSubstr("input \"tokens\" is i32[1,10], expected"));
  EXPECT_THAT(Generator::OnReference(Steps(Gpt(1, 1), 1), {}).status().message(), HasSubstr("no parameter 'wte'"));
}

TEST(Generation, APositionOutsideTheCacheIsAnErrorNamingIt) {
  const GenerationSteps steps = Steps(Gpt(1, 1), 1);
  ir::TensorMap inputs = Parameters(steps.prefill);
  for (const ir::StateSpec& spec : steps.decode.state) {
    if (spec.role == ir::StateRole::kCache) {
      const std::string name = spec.name.substr(0, spec.name.rfind('@'));
      inputs[name] = *ir::MaterializeState(name, ir::StateSource{spec.type, spec.init});
    }
  }
  inputs["tokens"] = ir::HostTensor::FromInts({1, 1}, {1});
  inputs[layers::kPositionsInput] = ir::HostTensor::FromInts({1, 1}, {kWindow});
  inputs[layers::kCacheSlotInput] = ir::HostTensor::FromFloats({1, 1, kWindow, 1}, std::vector<float>(kWindow, 0));
  // The learned positions' table has kWindow rows: the embedding says so
  // first; the attention's own check is the op test's.
  EXPECT_THAT(cpu::RunGraph(steps.decode.microbatch, inputs).status().message(), HasSubstr("outside [0, 10)"));
}

}  // namespace
}  // namespace tandem::controller
