// The CUDA runner launches each run of elementwise nodes (ir/elementwise_runs.h)
// as one kernel, storing only the members read after the run: the same
// bits as a kernel per node (RunnerOptions::fuse_elementwise off; on the
// CPU also where a bias add is its matmul's epilogue), in f32
// and bf16, for a linear layer's bias add and GELU with a residual add, and
// for a whole training step of a GPT with AdamW (whose update is mostly
// such runs). On the CPU, on CUDA's execution model.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/interpreter.h"
#include "backends/cuda/cuda_graph_runner.h"
#include "examples/example_job.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/graph_builder.h"
#include "ir/op_def.h"
#include "ir/state_source.h"

namespace tandem::cuda {
namespace {

void ExpectSameBits(const ir::TensorMap& actual, const ir::TensorMap& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [name, tensor] : expected) {
    auto it = actual.find(name);
    ASSERT_NE(it, actual.end()) << name;
    EXPECT_TRUE(it->second.BitwiseEquals(tensor)) << name;
  }
}

std::unique_ptr<CudaGraphRunner> Runner(bool fuse) {
  absl::StatusOr<std::unique_ptr<CudaGraphRunner>> runner = CudaGraphRunner::Create({.fuse_elementwise = fuse});
  EXPECT_TRUE(runner.ok()) << runner.status();
  return runner.ok() ? *std::move(runner) : nullptr;
}

ir::HostTensor Values(const ir::TensorType& type, float step) {
  ir::HostTensor f32({ir::DType::kF32, type.shape});
  for (int64_t i = 0; i < f32.num_elements(); ++i) f32.f32()[i] = std::sin(step * static_cast<float>(i + 1)) * 2.5f;
  if (type.dtype == ir::DType::kF32) return f32;
  ir::HostTensor bf16(type);
  auto* bits = reinterpret_cast<uint16_t*>(bf16.data());
  for (int64_t i = 0; i < f32.num_elements(); ++i) {
    uint32_t word;
    std::memcpy(&word, &f32.f32()[i], 4);
    bits[i] = static_cast<uint16_t>(word >> 16);  // truncated: a bf16 value
  }
  return bf16;
}

// y = gelu(x @ w + b) * 0.5 + x, then a reduction (which ends the run) and
// one more elementwise node on its result.
TEST(GraphRunnerFusedOnCpu, ABiasGeluAndResidualRunGivesTheBitsOfAKernelPerNode) {
  for (const ir::DType dtype : {ir::DType::kF32, ir::DType::kBF16}) {
    SCOPED_TRACE(ir::DTypeName(dtype));
    ir::Graph graph("mlp");
    ir::GraphBuilder b(&graph);
    const ir::SourceLocation here = ir::MakeSourceLocation(__FILE__, __LINE__);
    const ir::ValueId x = b.AddInput("x", "data", {dtype, {2, 6, 8}}, here);
    const ir::ValueId w = b.AddInput("w", "parameter", {dtype, {8, 8}}, here);
    const ir::ValueId bias = b.AddInput("b", "parameter", {dtype, {8}}, here);
    const ir::ValueId product = b.Add(ir::OpKind::kMatMul, {x, w}, {}, here);
    const ir::ValueId biased = b.Add(ir::OpKind::kAdd, {product, bias}, {}, here);
    const ir::ValueId activated = b.Add(ir::OpKind::kGelu, {biased}, {}, here);
    const ir::ValueId half = b.AddConstant(0.5, {dtype, {}}, here);
    const ir::ValueId scaled = b.Add(ir::OpKind::kMul, {activated, half}, {}, here);
    const ir::ValueId residual = b.Add(ir::OpKind::kAdd, {scaled, x}, {}, here);
    const ir::ValueId sums = b.Add(ir::OpKind::kReduceSum, {residual}, {{"axes", std::vector<int64_t>{2}}}, here);
    const ir::ValueId out = b.Add(ir::OpKind::kTanh, {sums}, {}, here);
    graph.AddOutput("activated", activated);  // a member read after the run: stored
    graph.AddOutput("out", out);
    ASSERT_TRUE(b.ok()) << b.status();
    const ir::TensorMap inputs = {{"x", Values({dtype, {2, 6, 8}}, 0.7f)},
                                  {"w", Values({dtype, {8, 8}}, 0.31f)},
                                  {"b", Values({dtype, {8}}, 1.3f)}};

    std::unique_ptr<CudaGraphRunner> fused = Runner(true), per_node = Runner(false);
    ASSERT_NE(fused, nullptr);
    ASSERT_NE(per_node, nullptr);
    absl::StatusOr<std::unique_ptr<CudaExecutable>> executable = fused->Compile(graph);
    ASSERT_TRUE(executable.ok()) << executable.status();
    // One run: the bias add, GELU, the scale and the residual add (the
    // scalar constant between them does not break it; the reduction ends
    // it); in f32 the bias add is the matmul's epilogue instead
    // (graph_runner_epilogue_on_cpu_test.cc), and the run starts at GELU.
    const ir::ElementwiseRuns& runs = (*executable)->fused_runs();
    const bool epilogue = dtype == ir::DType::kF32;
    ASSERT_EQ(runs.runs.size(), 1u);
    EXPECT_EQ(runs.runs[0], epilogue ? (std::vector<ir::ValueId>{activated, scaled, residual})
                                     : (std::vector<ir::ValueId>{biased, activated, scaled, residual}));
    EXPECT_EQ(runs.role[biased], epilogue ? ir::ElementwiseRuns::kNotInRun : ir::ElementwiseRuns::kInsideRun);
    EXPECT_EQ((*executable)->bias_epilogues().size(), epilogue ? 1u : 0u);
    EXPECT_EQ(runs.role[residual], 0);
    EXPECT_EQ(runs.role[out], ir::ElementwiseRuns::kNotInRun);
    EXPECT_TRUE((*per_node->Compile(graph))->fused_runs().runs.empty());

    absl::StatusOr<ir::TensorMap> one_launch = fused->RunFromHost(graph, inputs);
    ASSERT_TRUE(one_launch.ok()) << one_launch.status();
    absl::StatusOr<ir::TensorMap> node_by_node = per_node->RunFromHost(graph, inputs);
    ASSERT_TRUE(node_by_node.ok()) << node_by_node.status();
    ExpectSameBits(*one_launch, *node_by_node);
    EXPECT_EQ(one_launch->at("activated").type().dtype, dtype);
  }
}

// A whole training step of a GPT with AdamW on the fused runner gives the
// bits of the runner with a kernel per node: the loss and every state
// tensor (parameters and both moments). The update graph is mostly fused
// runs.
TEST(GraphRunnerFusedOnCpu, AGptStepWithAdamWIsBitIdenticalFusedOrNot) {
  examples::ExampleJobOptions options;
  options.model = "gpt";
  options.layers = 1;
  options.dim = 16;
  options.heads = 2;
  options.seq = 8;
  options.batch = 2;
  options.microbatches = 1;
  options.optimizer = "adam";
  options.weight_decay = 0.1;  // AdamW
  absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(options);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<ir::TensorMap> initial = ir::MaterializeStates(ir::SeedSources(job->step));
  ASSERT_TRUE(initial.ok()) << initial.status();

  auto train = [&](CudaGraphRunner& runner, std::vector<float>& losses) {
    cpu::GraphRunner run = [&](const ir::Graph& graph, const ir::TensorMap& inputs) {
      return runner.RunFromHost(graph, inputs);
    };
    ir::TensorMap state = *initial;
    for (int step = 1; step <= 1; ++step) {
      absl::StatusOr<std::vector<ir::TensorMap>> batch = job->train_batch(static_cast<uint64_t>(step - 1));
      EXPECT_TRUE(batch.ok()) << batch.status();
      if (!batch.ok()) return state;
      absl::StatusOr<cpu::StepResult> result = cpu::RunReferenceStep(job->step, state, *batch, step, run);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) return state;
      losses.insert(losses.end(), result->losses.begin(), result->losses.end());
    }
    return state;
  };
  std::unique_ptr<CudaGraphRunner> fused = Runner(true), per_node = Runner(false);
  ASSERT_NE(fused, nullptr);
  ASSERT_NE(per_node, nullptr);
  std::vector<float> fused_losses, per_node_losses;
  const ir::TensorMap fused_state = train(*fused, fused_losses);
  const ir::TensorMap per_node_state = train(*per_node, per_node_losses);
  ASSERT_EQ(fused_losses.size(), 1u);
  ASSERT_EQ(per_node_losses.size(), 1u);
  EXPECT_EQ(std::memcmp(fused_losses.data(), per_node_losses.data(), sizeof(float)), 0);
  ExpectSameBits(fused_state, per_node_state);
  // Including the linear layers' GEMMs with the bias epilogue (on the CPU
  // the epilogue's bits are the matmul's and the add's).
  EXPECT_GT(fused->bias_epilogue_launches(), 0);
  EXPECT_EQ(per_node->bias_epilogue_launches(), 0);

  // Over 90% of the update's elementwise nodes over tensors are launched
  // inside runs (226 of 243 when written).
  absl::StatusOr<std::unique_ptr<CudaExecutable>> update = fused->Compile(job->step.update);
  ASSERT_TRUE(update.ok()) << update.status();
  const ir::ElementwiseRuns& runs = (*update)->fused_runs();
  int64_t elementwise = 0, fused_members = 0;
  size_t longest = 0;
  for (ir::ValueId id = 0; id < job->step.update.size(); ++id) {
    const ir::Node& node = job->step.update.node(id);
    const ir::OpFamily family = ir::Def(node.op).family;
    if ((family != ir::OpFamily::kUnary && family != ir::OpFamily::kBinary) || node.type.num_elements() == 1) continue;
    ++elementwise;  // over a tensor: the scalars (learning rate, bias corrections) are evaluated beside the runs
    if (runs.role[id] != ir::ElementwiseRuns::kNotInRun) ++fused_members;
  }
  for (const std::vector<ir::ValueId>& run : runs.runs) longest = std::max(longest, run.size());
  // A matrix's whole AdamW update (its decay, m, v, the step over the bias
  // corrections) is one run of 14 nodes: one kernel, where it was 14.
  EXPECT_EQ(longest, 14u);
  EXPECT_GE(fused_members * 10, elementwise * 9) << fused_members << " of " << elementwise;
}

}  // namespace
}  // namespace tandem::cuda
