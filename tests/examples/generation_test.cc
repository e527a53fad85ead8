// Generation on the reference interpreter: greedy decoding picks the
// argmax of the last prompt position's logits, sampling is seeded, a
// prompt longer than the window slides, and bad options are refused.
#include <algorithm>
#include <vector>

#include "backends/cpu/interpreter.h"
#include "examples/generation.h"
#include "examples/models/llama.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/initial_state.h"
#include "ir/trace.h"

namespace tandem::examples {
namespace {

using ::testing::HasSubstr;

struct TinyModel {
  ir::TrainStep forward;
  ir::TensorMap parameters;
};

TinyModel MakeTinyModel() {
  LlamaConfig config{.vocab_size = 23, .sequence_length = 8, .model_dim = 16, .num_heads = 2, .num_kv_heads = 1,
                     .num_layers = 1, .batch_size = 1, .init_std = 0.5};
  absl::StatusOr<ir::TrainStep> step =
      TraceForwardStep("tiny", [config](Tracer& t) { return LlamaLogits(t, config); }, {.seed = 7});
  EXPECT_TRUE(step.ok()) << step.status();
  return {*step, *ir::InitialState(*step)};
}

TEST(Generate, GreedyPicksTheLastPromptPositionsArgmaxAndRepeats) {
  const TinyModel model = MakeTinyModel();
  const std::vector<int32_t> prompt = {3, 1, 4};
  absl::StatusOr<std::vector<int32_t>> first = Generate(model.forward.microbatch, model.parameters, prompt, {.tokens = 6});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 6u);
  // The first token, recomputed by hand: the argmax at position 2.
  ir::TensorMap inputs = model.parameters;
  inputs["tokens"] = ir::HostTensor::FromInts({1, 8}, {3, 1, 4, 0, 0, 0, 0, 0});
  absl::StatusOr<ir::TensorMap> out = cpu::RunGraph(model.forward.microbatch, inputs);
  ASSERT_TRUE(out.ok());
  const float* logits = out->at("output").f32() + 2 * 23;
  EXPECT_EQ((*first)[0], std::max_element(logits, logits + 23) - logits);
  EXPECT_EQ(*Generate(model.forward.microbatch, model.parameters, prompt, {.tokens = 6}), *first);
  // top-k 1 is greedy whatever the temperature.
  EXPECT_EQ(*Generate(model.forward.microbatch, model.parameters, prompt, {.tokens = 6, .temperature = 2.0, .top_k = 1}),
            *first);
}

TEST(Generate, SamplingIsSeededAndALongPromptSlidesThroughTheWindow) {
  const TinyModel model = MakeTinyModel();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back(i % 23);  // longer than the window of 8
  const SamplingOptions hot{.tokens = 24, .temperature = 5.0, .seed = 11};
  absl::StatusOr<std::vector<int32_t>> a = Generate(model.forward.microbatch, model.parameters, prompt, hot);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*Generate(model.forward.microbatch, model.parameters, prompt, hot), *a);
  SamplingOptions other = hot;
  other.seed = 12;
  EXPECT_NE(*Generate(model.forward.microbatch, model.parameters, prompt, other), *a);
  for (int32_t id : *a) EXPECT_TRUE(id >= 0 && id < 23);
}

TEST(Generate, RefusesAnEmptyPromptAndOptionsOutOfRange) {
  const TinyModel model = MakeTinyModel();
  EXPECT_THAT(Generate(model.forward.microbatch, model.parameters, {}, {}).status().message(),
              HasSubstr("a prompt of at least one token"));
  EXPECT_THAT(Generate(model.forward.microbatch, model.parameters, {1}, {.tokens = -1}).status().message(),
              HasSubstr("tokens -1 is outside"));
  EXPECT_THAT(Generate(model.forward.microbatch, model.parameters, {1}, {.temperature = -1}).status().message(),
              HasSubstr("temperature must be"));
}

}  // namespace
}  // namespace tandem::examples
