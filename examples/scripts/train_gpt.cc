// A Tandem controller script: a character-level GPT, four decoder blocks on
// four actor processes (one block each) with 1F1B over 8 microbatches,
// trained on the text under /usr/share/common-licenses. Checkpoints into
// gpt-checkpoints/ and resumes from there when run again.
//   cmake -S . -B build -DCMAKE_PREFIX_PATH=<where Tandem is installed>
//   cmake --build build && build/train_gpt [steps]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>

#include <tandem/tandem.h>

using tandem::Tensor;
using tandem::ir::DType;

constexpr int64_t kBatch = 8, kSeq = 32, kDim = 64, kHeads = 4, kLayers = 4;
constexpr int32_t kActors = 4, kMicrobatches = 8;

Tensor Linear(tandem::Tracer& t, const std::string& name, const Tensor& x, int64_t in, int64_t out) {
  return matmul(x, t.Parameter(name + ".w", {in, out}, tandem::init::Normal(0.02))) +
         t.Parameter(name + ".b", {out}, tandem::init::Zeros());
}
Tensor Norm(tandem::Tracer& t, const std::string& name, const Tensor& x) {
  return layer_norm(x, t.Parameter(name + ".g", {kDim}, tandem::init::Ones()),
                    t.Parameter(name + ".b", {kDim}, tandem::init::Zeros()));
}
Tensor Heads(const Tensor& x) { return transpose(reshape(x, {kBatch, kSeq, kHeads, kDim / kHeads}), {0, 2, 1, 3}); }

Tensor Gpt(tandem::Tracer& t, int64_t vocab) {
  Tensor x = embedding(t.Parameter("wte", {vocab, kDim}, tandem::init::Normal(0.02)),
                       t.Input("tokens", {DType::kI32, {kBatch, kSeq}})) +
             t.Parameter("wpe", {kSeq, kDim}, tandem::init::Normal(0.02));
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    if (layer > 0) x = pipeline_yield(x);  // one block per stage
    const std::string n = "h" + std::to_string(layer);
    Tensor qkv = Linear(t, n + ".qkv", Norm(t, n + ".ln1", x), kDim, 3 * kDim);
    Tensor q = Heads(slice(qkv, -1, 0, kDim)), k = Heads(slice(qkv, -1, kDim, 2 * kDim));
    Tensor scores = causal_mask(matmul(q, k, {.transpose_b = true}) * (1.0 / std::sqrt(kDim / kHeads)));
    Tensor heads = matmul(softmax(scores), Heads(slice(qkv, -1, 2 * kDim, 3 * kDim)));
    x = x + Linear(t, n + ".proj", reshape(transpose(heads, {0, 2, 1, 3}), {kBatch, kSeq, kDim}), kDim, kDim);
    x = x + Linear(t, n + ".fc2", gelu(Linear(t, n + ".fc1", Norm(t, n + ".ln2", x), kDim, 4 * kDim)), 4 * kDim, kDim);
  }
  Tensor logits = Linear(t, "head", Norm(t, "lnf", x), kDim, vocab);
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
      batch.push_back(corpus->Batch(tandem::examples::CharCorpus::Split::kTrain, kBatch, kSeq, 1, s * kMicrobatches + m));
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
