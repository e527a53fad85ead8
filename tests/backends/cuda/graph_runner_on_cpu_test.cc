// The CUDA backend's whole executable on the CPU: CudaGraphRunner, its
// graph walk, device memory, kernels and cuBLAS calls, built on CUDA's
// execution model (backends/cuda/cuda_on_cpu.h), runs a training step of a
// 2-layer GPT (two microbatches accumulated, then the update) as the
// reference interpreter drives it. Its losses and every state tensor agree
// with the CPU reference kernels within 1e-5 relative (f32), and two runs
// give the same bits.
//
// The optimizer is SGD with momentum: Adam divides each gradient by its own
// magnitude, so where a gradient is 0 in exact arithmetic and only rounding
// noise in both backends (the key projection's bias: softmax ignores a
// shift common to a row's scores), Adam turns noise of either sign into a
// full step of that sign, and the two backends' parameters differ by 2 lr
// there however close their gradients are.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/interpreter.h"
#include "backends/cuda/cuda_graph_runner.h"
#include "examples/example_job.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/state_source.h"

namespace tandem::cuda {
namespace {

// ||actual - expected|| / ||expected|| over the tensor's elements (f32);
// the elementwise quotient is meaningless where a gradient cancels to
// nearly 0, the norm's is not.
double RelativeError(const ir::HostTensor& actual, const ir::HostTensor& expected) {
  double difference = 0, magnitude = 0;
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const double e = expected.f32()[i], a = actual.f32()[i];
    difference += (a - e) * (a - e);
    magnitude += e * e;
  }
  return magnitude == 0 ? std::sqrt(difference) : std::sqrt(difference / magnitude);
}

bool SameBits(const ir::TensorMap& a, const ir::TensorMap& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, tensor] : a) {
    auto it = b.find(name);
    if (it == b.end() || !it->second.BitwiseEquals(tensor)) return false;
  }
  return true;
}

class GraphRunnerOnCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    examples::ExampleJobOptions options;
    options.model = "gpt";
    options.layers = 2;
    options.dim = 32;
    options.heads = 2;
    options.seq = 16;
    options.batch = 2;
    options.microbatches = 2;
    options.optimizer = "sgd";
    absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(options);
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = std::make_unique<examples::ExampleJob>(*std::move(job));
    absl::StatusOr<ir::TensorMap> initial = ir::MaterializeStates(ir::SeedSources(job_->step));
    ASSERT_TRUE(initial.ok()) << initial.status();
    initial_ = *std::move(initial);
    absl::StatusOr<std::unique_ptr<CudaGraphRunner>> runner = CudaGraphRunner::Create({});
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = *std::move(runner);
  }

  // `steps` training steps from the initial state, every graph on the CUDA
  // runner (or on the reference kernels); the state after them, each
  // step's losses appended to `losses`.
  ir::TensorMap Train(int steps, bool on_cuda, std::vector<float>& losses) {
    cpu::GraphRunner cuda = [this](const ir::Graph& graph, const ir::TensorMap& inputs) {
      return runner_->RunFromHost(graph, inputs);
    };
    ir::TensorMap state = initial_;
    for (int step = 1; step <= steps; ++step) {
      absl::StatusOr<std::vector<ir::TensorMap>> batch = job_->train_batch(static_cast<uint64_t>(step - 1));
      EXPECT_TRUE(batch.ok()) << batch.status();
      if (!batch.ok()) return state;
      absl::StatusOr<cpu::StepResult> result =
          cpu::RunReferenceStep(job_->step, state, *batch, step, on_cuda ? cuda : cpu::GraphRunner());
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) return state;
      losses.insert(losses.end(), result->losses.begin(), result->losses.end());
    }
    return state;
  }

  std::unique_ptr<examples::ExampleJob> job_;
  ir::TensorMap initial_;
  std::unique_ptr<CudaGraphRunner> runner_;
};

TEST_F(GraphRunnerOnCpu, AGptTrainingStepAgreesWithTheReferenceAndRepeatsBitForBit) {
  std::vector<float> reference_losses, cuda_losses, again_losses;
  const ir::TensorMap reference = Train(1, /*on_cuda=*/false, reference_losses);
  const ir::TensorMap cuda = Train(1, /*on_cuda=*/true, cuda_losses);
  ASSERT_EQ(cuda_losses.size(), reference_losses.size());
  for (size_t i = 0; i < reference_losses.size(); ++i) {
    EXPECT_NEAR(cuda_losses[i], reference_losses[i], 1e-5 * std::fabs(reference_losses[i])) << "loss " << i;
  }
  ASSERT_EQ(cuda.size(), reference.size());
  for (const auto& [name, expected] : reference) {
    auto found = cuda.find(name);
    ASSERT_NE(found, cuda.end()) << name;
    EXPECT_LE(RelativeError(found->second, expected), 1e-5) << name;
  }
  const ir::TensorMap again = Train(1, /*on_cuda=*/true, again_losses);
  EXPECT_TRUE(SameBits(again, cuda)) << "two runs of the CUDA executable differ";
  EXPECT_EQ(std::memcmp(again_losses.data(), cuda_losses.data(), cuda_losses.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace tandem::cuda
