// A Tandem controller script: a character-level GPT, four decoder blocks on
// four actor processes (one block each) with 1F1B over 8 microbatches,
// trained on the text under /usr/share/common-licenses. Checkpoints into
// gpt-checkpoints/ and resumes from there when run again.
//   cmake -S . -B build -DCMAKE_PREFIX_PATH=<where Tandem is installed>
//   cmake --build build && build/train_gpt [steps]
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>

#include <tandem/examples.h>  // the character corpus
#include <tandem/tandem.h>

using tandem::Tensor;
using tandem::ir::DType;

constexpr int64_t kBatch = 8, kSeq = 32, kDim = 64, kHeads = 4, kLayers = 4;
constexpr int32_t kActors = 4, kMicrobatches = 8;

// The model, written on Tandem's layers (ir/layers.h): each block opens the
// name scope "h<layer>", so its parameters are "h0.attn.qkv.w", "h0.ln1.g", ...
Tensor Gpt(tandem::Tracer& t, int64_t vocab) {
  namespace layers = tandem::layers;
  const tandem::ir::Initializer weights = tandem::init::Normal(0.02);
  Tensor x = embedding(t.Parameter("wte", {vocab, kDim}, weights), t.Input("tokens", {DType::kI32, {kBatch, kSeq}})) +
             t.Parameter("wpe", {kSeq, kDim}, weights);
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    if (layer > 0) x = pipeline_yield(x);  // one block per stage
    auto block = t.Scope("h" + std::to_string(layer));
    x = x + layers::CausalSelfAttention(t, "attn", layers::LayerNorm(t, "ln1", x, kDim), kHeads, weights);
    x = x + layers::GeluMlp(t, "mlp", layers::LayerNorm(t, "ln2", x, kDim), 4 * kDim, weights);
  }
  Tensor logits = layers::Linear(t, "head", layers::LayerNorm(t, "lnf", x, kDim), kDim, vocab, weights);
  return mean(cross_entropy(logits, t.Label("labels", {DType::kI32, {kBatch, kSeq}})));
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "train_gpt: %s\n", status.ToString().c_str());
  return 1;
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
  auto corpus = tandem::examples::CharCorpus::LoadDefault(std::nullopt);
  if (!corpus.ok()) return Fail(corpus.status());
  auto model = [vocab = corpus->vocab_size()](tandem::Tracer& t) { return Gpt(t, vocab); };
  auto step = tandem::TraceTrainStep("char-gpt", model, tandem::Adam({.learning_rate = 3e-3}),
                                     {.num_microbatches = kMicrobatches});
  if (!step.ok()) return Fail(step.status());
  auto schedule = tandem::schedules::ResolveSchedule("1f1b", kActors, kMicrobatches);
  if (!schedule.ok()) return Fail(schedule.status());
  auto session = tandem::Session::Resume(*step, *schedule, "gpt-checkpoints");  // a previous run's
  if (absl::IsNotFound(session.status())) session = tandem::Session::Start(*step, *schedule);
  if (!session.ok()) return Fail(session.status());
  for (int s = (*session)->steps_done() + 1; s <= steps; ++s) {
    std::vector<tandem::ir::TensorMap> batch;
    for (int m = 0; m < kMicrobatches; ++m) {
      auto microbatch = corpus->Batch(tandem::examples::CharCorpus::Split::kTrain, kBatch, kSeq, 1, s * kMicrobatches + m);
      if (!microbatch.ok()) return Fail(microbatch.status());
      batch.push_back(*std::move(microbatch));
    }
    auto report = (*session)->Step(batch);
    if (!report.ok()) return Fail(report.status());
    const float loss = std::accumulate(report->losses.begin(), report->losses.end(), 0.0f) / kMicrobatches;
    if (s % 25 == 0 || s == steps) std::printf("step %d loss %.4f\n", s, loss);
  }
  auto saved = (*session)->SaveCheckpoint("gpt-checkpoints");
  if (!saved.ok() && !absl::IsAlreadyExists(saved.status())) return Fail(saved.status());
  return 0;
}
