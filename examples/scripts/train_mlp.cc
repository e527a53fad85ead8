// A Tandem controller script: a two-stage MLP classifier, pipelined over two
// actor processes with 1F1B, trained with Adam on a toy task.
//   cmake -S . -B build -DCMAKE_PREFIX_PATH=<where Tandem is installed>
//   cmake --build build && build/train_mlp
#include <cstdio>
#include <vector>

#include <tandem/tandem.h>

using tandem::Tensor;
using tandem::ir::DType;

constexpr int64_t kBatch = 32, kInputs = 16, kHidden = 64, kClasses = 4;
constexpr int32_t kActors = 2, kMicrobatches = 4;

// Stage 0 is the hidden layer; pipeline_yield hands its output to stage 1,
// the classifier and the loss.
Tensor Model(tandem::Tracer& t) {
  Tensor x = t.Input("x", {DType::kF32, {kBatch, kInputs}});
  Tensor w1 = t.Parameter("w1", {kInputs, kHidden}, tandem::init::Normal(0.35));
  Tensor b1 = t.Parameter("b1", {kHidden}, tandem::init::Zeros());
  Tensor h = pipeline_yield(relu(matmul(x, w1) + b1));
  Tensor w2 = t.Parameter("w2", {kHidden, kClasses}, tandem::init::Normal(0.12));
  Tensor b2 = t.Parameter("b2", {kClasses}, tandem::init::Zeros());
  Tensor labels = t.Label("y", {DType::kI32, {kBatch}});
  return mean(cross_entropy(matmul(h, w2) + b2, labels));
}

// The task: which quarter of an example's inputs has the largest sum.
tandem::ir::TensorMap Microbatch(uint64_t seed) {
  std::vector<float> x(kBatch * kInputs);
  std::vector<int32_t> y(kBatch);
  for (float& value : x) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    value = static_cast<float>(seed >> 40) / (1 << 24) - 0.5f;
  }
  for (int64_t i = 0; i < kBatch; ++i) {
    float best = -1e9f;
    for (int32_t c = 0; c < kClasses; ++c) {
      float sum = 0;
      for (int64_t j = 0; j < kInputs / kClasses; ++j) sum += x[i * kInputs + c * kInputs / kClasses + j];
      if (sum > best) {
        best = sum;
        y[i] = c;
      }
    }
  }
  return {{"x", tandem::ir::HostTensor::FromFloats({kBatch, kInputs}, x)},
          {"y", tandem::ir::HostTensor::FromInts({kBatch}, y)}};
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "train_mlp: %s\n", status.ToString().c_str());
  return 1;
}

int main() {
  auto step = tandem::TraceTrainStep("toy-mlp", Model, tandem::Adam({.learning_rate = 1e-2}),
                                     {.num_microbatches = kMicrobatches});
  if (!step.ok()) return Fail(step.status());
  auto schedule = tandem::schedules::ResolveSchedule("1f1b", kActors, kMicrobatches);
  if (!schedule.ok()) return Fail(schedule.status());
  auto session = tandem::Session::Start(*step, *schedule);
  if (!session.ok()) return Fail(session.status());
  for (int s = 1; s <= 60; ++s) {
    std::vector<tandem::ir::TensorMap> batch;
    for (int m = 0; m < kMicrobatches; ++m) batch.push_back(Microbatch(s * kMicrobatches + m));
    auto report = (*session)->Step(batch);
    if (!report.ok()) return Fail(report.status());
    float loss = 0;
    for (float l : report->losses) loss += l / kMicrobatches;
    if (s == 1 || s % 20 == 0) std::printf("step %d loss %.4f\n", s, loss);
  }
  return 0;
}
