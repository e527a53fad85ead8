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
#include "backends/cuda/cuda_on_cpu.h"
#include "examples/example_job.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/state_source.h"
#include "tests/backends/cuda/graph_runner_test_util.h"

namespace tandem::cuda {
namespace {

using testing::RelativeError;

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

// A bf16 model's elementwise nodes load and store bf16 in their kernels
// (no widening or narrowing launches): the bits are the reference's, which
// computes in f32 and rounds once per op.
TEST(GraphRunnerOnCpuBf16, ElementwiseNodesOnBf16GiveTheReferencesBits) {
  ir::Graph graph("bf16 elementwise");
  ir::GraphBuilder b(&graph);
  const ir::SourceLocation here = ir::MakeSourceLocation(__FILE__, __LINE__);
  const ir::ValueId x = b.AddInput("x", "data", {ir::DType::kBF16, {4, 8}}, here);
  const ir::ValueId bias = b.AddInput("bias", "parameter", {ir::DType::kBF16, {8}}, here);
  const ir::ValueId cond = b.AddInput("cond", "data", {ir::DType::kBF16, {4, 1}}, here);
  const ir::ValueId sum = b.Add(ir::OpKind::kAdd, {x, bias}, {}, here);
  const ir::ValueId product = b.Add(ir::OpKind::kMul, {sum, x}, {}, here);
  const ir::ValueId negated = b.Add(ir::OpKind::kNeg, {product}, {}, here);
  graph.AddOutput("product", product);
  graph.AddOutput("picked", b.Add(ir::OpKind::kWhere, {cond, negated, x}, {}, here));
  ASSERT_TRUE(b.ok()) << b.status();
  auto bf16 = [](ir::Shape shape, float step) {
    ir::HostTensor t({ir::DType::kBF16, std::move(shape)});
    auto* bits = reinterpret_cast<uint16_t*>(t.data());
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      const float f = std::sin(step * static_cast<float>(i + 1)) * 3.0f;
      uint32_t word;
      std::memcpy(&word, &f, 4);
      bits[i] = static_cast<uint16_t>(word >> 16);  // truncated: a bf16 value
    }
    return t;
  };
  const ir::TensorMap inputs = {{"x", bf16({4, 8}, 0.7f)},
                                {"bias", bf16({8}, 1.3f)},
                                {"cond", bf16({4, 1}, 0.9f)}};
  absl::StatusOr<std::unique_ptr<CudaGraphRunner>> runner = CudaGraphRunner::Create({});
  ASSERT_TRUE(runner.ok()) << runner.status();
  absl::StatusOr<ir::TensorMap> cuda = (*runner)->RunFromHost(graph, inputs);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  absl::StatusOr<ir::TensorMap> reference = cpu::RunGraph(graph, inputs);
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_TRUE(SameBits(*cuda, *reference));
  EXPECT_EQ(cuda->at("picked").type().dtype, ir::DType::kBF16);
}

// Input `name` of `shape` with values bf16 holds exactly, as bf16 into
// `bf16` and as f32 into `f32`.
void AddBf16Values(const char* name, const ir::Shape& shape, float step, ir::TensorMap& bf16, ir::TensorMap& f32) {
  ir::HostTensor narrow({ir::DType::kBF16, shape}), wide({ir::DType::kF32, shape});
  auto* bits = reinterpret_cast<uint16_t*>(narrow.data());
  for (int64_t i = 0; i < wide.num_elements(); ++i) {
    bits[i] = ir::FloatToBf16(std::sin(step * static_cast<float>(i + 1)) * 2.0f);
    wide.f32()[i] = ir::Bf16ToFloat(bits[i]);
  }
  bf16[name] = narrow;
  f32[name] = wide;
}

// A bf16 model's matmuls hand cuBLAS their bf16 operands as they are (no
// f32 copies of weights or activations, no narrowed copies either), sum in
// f32 and round once: the bits of rounding the sum that precision +bf16
// computes from the same values held in f32, and the reference's within
// one bf16 rounding.
TEST(GraphRunnerOnCpuBf16, ABf16MatmulGivesCublasItsOperandsAsTheyAre) {
  auto build = [](ir::Graph& graph, ir::DType dtype) {
    ir::GraphBuilder b(&graph);
    const ir::SourceLocation here = ir::MakeSourceLocation(__FILE__, __LINE__);
    const ir::ValueId x = b.AddInput("x", "data", {dtype, {2, 4, 8}}, here);
    const ir::ValueId w = b.AddInput("w", "parameter", {dtype, {8, 6}}, here);
    const ir::ValueId y = b.Add(ir::OpKind::kMatMul, {x, w}, {}, here);
    graph.AddOutput("y", y);
    graph.AddOutput("scores", b.Add(ir::OpKind::kMatMul, {x, x}, {{"transpose_b", int64_t{1}}}, here));
    return b.status();
  };
  ir::Graph bf16_graph("bf16 matmuls"), f32_graph("f32 matmuls");
  ASSERT_TRUE(build(bf16_graph, ir::DType::kBF16).ok());
  ASSERT_TRUE(build(f32_graph, ir::DType::kF32).ok());
  ir::TensorMap bf16_inputs, f32_inputs;
  AddBf16Values("x", {2, 4, 8}, 0.7f, bf16_inputs, f32_inputs);
  AddBf16Values("w", {8, 6}, 0.37f, bf16_inputs, f32_inputs);
  absl::StatusOr<std::unique_ptr<CudaGraphRunner>> runner = CudaGraphRunner::Create({});
  ASSERT_TRUE(runner.ok()) << runner.status();
  const cuda_on_cpu::GemmCalls before = cuda_on_cpu::GemmCallsSoFar();
  absl::StatusOr<ir::TensorMap> bf16 = (*runner)->RunFromHost(bf16_graph, bf16_inputs);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  const cuda_on_cpu::GemmCalls after = cuda_on_cpu::GemmCallsSoFar();
  EXPECT_EQ(after.bf16_operands - before.bf16_operands, 2);
  EXPECT_EQ(after.f32_operands - before.f32_operands, 0);
  EXPECT_EQ((*runner)->bf16_copies().made, 0);

  absl::StatusOr<std::unique_ptr<CudaGraphRunner>> bf16_precision =
      CudaGraphRunner::Create({.precision = Precision::kBf16});
  ASSERT_TRUE(bf16_precision.ok()) << bf16_precision.status();
  absl::StatusOr<ir::TensorMap> sums = (*bf16_precision)->RunFromHost(f32_graph, f32_inputs);
  ASSERT_TRUE(sums.ok()) << sums.status();
  absl::StatusOr<ir::TensorMap> reference = cpu::RunGraph(bf16_graph, bf16_inputs);
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (const char* name : {"y", "scores"}) {
    const ir::HostTensor& got = bf16->at(name);
    ASSERT_EQ(got.type().dtype, ir::DType::kBF16) << name;
    const auto* bits = reinterpret_cast<const uint16_t*>(got.data());
    const auto* expected = reinterpret_cast<const uint16_t*>(reference->at(name).data());
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      EXPECT_EQ(bits[i], ir::FloatToBf16(sums->at(name).f32()[i])) << name << " element " << i;
      const float a = ir::Bf16ToFloat(bits[i]), e = ir::Bf16ToFloat(expected[i]);
      EXPECT_LE(std::fabs(a - e), std::ldexp(std::fabs(e), -7) + 1e-6f) << name << " element " << i;
    }
  }
}

// Inputs q, k, v and dy of `dtype`, and outputs "attention" and
// "attention_grad" (scale 0.25) of them; and their values, bf16 and the same
// widened.
void AddAttentionAndItsGradient(ir::Graph& graph, ir::GraphBuilder& b, ir::DType dtype, const ir::Shape& q_shape,
                                const ir::Shape& kv_shape) {
  const ir::SourceLocation here = ir::MakeSourceLocation(__FILE__, __LINE__);
  const ir::ValueId q = b.AddInput("q", "data", {dtype, q_shape}, here);
  const ir::ValueId k = b.AddInput("k", "data", {dtype, kv_shape}, here);
  const ir::ValueId v = b.AddInput("v", "data", {dtype, kv_shape}, here);
  const ir::ValueId dy = b.AddInput("dy", "data", {dtype, q_shape}, here);
  graph.AddOutput("attention", b.Add(ir::OpKind::kAttention, {q, k, v}, {{"scale", 0.25}}, here));
  graph.AddOutput("attention_grad", b.Add(ir::OpKind::kAttentionGrad, {q, k, v, dy}, {{"scale", 0.25}}, here));
}
void AddAttentionValues(const ir::Shape& q_shape, const ir::Shape& kv_shape, ir::TensorMap& bf16, ir::TensorMap& f32) {
  AddBf16Values("q", q_shape, 0.3f, bf16, f32);
  AddBf16Values("k", kv_shape, 0.41f, bf16, f32);
  AddBf16Values("v", kv_shape, 0.53f, bf16, f32);
  AddBf16Values("dy", q_shape, 0.61f, bf16, f32);
}

// A bf16 model's ops run as one kernel each on their bf16 tensors (no
// widened copies): softmax, layer norm, rotary, a reduction, the causal
// mask, attention and its gradient (a thread a row at width 8; dq, dk and
// dv one after another in one result), the embedding and its gradient give
// the bits of the same graph in f32 on the widened values, each result
// rounded to bf16. (bf16 attention at widths 32, 64 and 128 runs on tensor
// cores instead, with bf16 weights: cuda_row_kernels_on_cpu_test.cc.)
TEST(GraphRunnerOnCpuBf16, OpsOnBf16GiveTheBitsOfTheF32GraphRounded) {
  const ir::Shape q_shape = {1, 2, 4, 8}, kv_shape = {1, 1, 4, 8};
  auto build = [&](ir::Graph& graph, ir::DType dtype) {
    ir::GraphBuilder b(&graph);
    const ir::SourceLocation here = ir::MakeSourceLocation(__FILE__, __LINE__);
    const ir::ValueId x = b.AddInput("x", "data", {dtype, {2, 4, 8}}, here);
    const ir::ValueId gain = b.AddInput("gain", "parameter", {dtype, {8}}, here);
    const ir::ValueId bias = b.AddInput("bias", "parameter", {dtype, {8}}, here);
    graph.AddOutput("softmax", b.Add(ir::OpKind::kSoftmax, {x}, {}, here));
    graph.AddOutput("norm", b.Add(ir::OpKind::kLayerNorm, {x, gain, bias}, {{"eps", 1e-5}}, here));
    graph.AddOutput("rotary", b.Add(ir::OpKind::kRotary, {x}, {{"theta", 10000.0}, {"inverse", int64_t{0}}}, here));
    graph.AddOutput("sums", b.Add(ir::OpKind::kReduceSum, {x}, {{"axes", std::vector<int64_t>{0, 1}}}, here));
    const ir::ValueId scores = b.AddInput("scores", "data", {dtype, {2, 4, 4}}, here);
    graph.AddOutput("masked", b.Add(ir::OpKind::kCausalMask, {scores}, {{"fill", -1e4}}, here));
    AddAttentionAndItsGradient(graph, b, dtype, q_shape, kv_shape);
    const ir::ValueId table = b.AddInput("table", "parameter", {dtype, {5, 8}}, here);
    const ir::ValueId ids = b.AddInput("ids", "data", {ir::DType::kI32, {6}}, here);
    const ir::ValueId rows_dy = b.AddInput("rows_dy", "data", {dtype, {6, 8}}, here);
    graph.AddOutput("rows", b.Add(ir::OpKind::kEmbedding, {table, ids}, {}, here));
    graph.AddOutput("rows_grad",
                    b.Add(ir::OpKind::kEmbeddingGrad, {ids, rows_dy}, {{"num_embeddings", int64_t{5}}}, here));
    return b.status();
  };
  ir::Graph bf16_graph("bf16 ops"), f32_graph("f32 ops");
  ASSERT_TRUE(build(bf16_graph, ir::DType::kBF16).ok()) << build(bf16_graph, ir::DType::kBF16);
  ASSERT_TRUE(build(f32_graph, ir::DType::kF32).ok());
  ir::TensorMap bf16_inputs, f32_inputs;
  AddBf16Values("x", {2, 4, 8}, 0.7f, bf16_inputs, f32_inputs);
  AddBf16Values("gain", {8}, 0.37f, bf16_inputs, f32_inputs);
  AddBf16Values("bias", {8}, 1.1f, bf16_inputs, f32_inputs);
  AddBf16Values("scores", {2, 4, 4}, 0.9f, bf16_inputs, f32_inputs);
  AddAttentionValues(q_shape, kv_shape, bf16_inputs, f32_inputs);
  AddBf16Values("table", {5, 8}, 0.29f, bf16_inputs, f32_inputs);
  AddBf16Values("rows_dy", {6, 8}, 0.83f, bf16_inputs, f32_inputs);
  bf16_inputs["ids"] = f32_inputs["ids"] = ir::HostTensor::FromInts({6}, {3, 0, 3, 4, 1, 3});
  absl::StatusOr<std::unique_ptr<CudaGraphRunner>> runner = CudaGraphRunner::Create({});
  ASSERT_TRUE(runner.ok()) << runner.status();
  absl::StatusOr<ir::TensorMap> bf16 = (*runner)->RunFromHost(bf16_graph, bf16_inputs);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  absl::StatusOr<ir::TensorMap> f32 = (*runner)->RunFromHost(f32_graph, f32_inputs);
  ASSERT_TRUE(f32.ok()) << f32.status();
  for (const char* name : {"softmax", "norm", "rotary", "sums", "masked", "attention", "attention_grad", "rows",
                           "rows_grad"}) {
    const ir::HostTensor& got = bf16->at(name);
    ASSERT_EQ(got.type().dtype, ir::DType::kBF16) << name;
    const auto* bits = reinterpret_cast<const uint16_t*>(got.data());
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      ASSERT_EQ(bits[i], ir::FloatToBf16(f32->at(name).f32()[i])) << name << " element " << i;
    }
  }
}

// Precision bf16 takes attention's two products as it takes a matmul's: q,
// k, v and dy (f32) rounded to bf16 once each (the forward's copies reused
// by the gradient), on tensor cores, the results f32. Rounded to bf16, those
// results are the bits of the same graph on bf16 values, which runs the
// same kernels and rounds as it stores.
TEST(GraphRunnerOnCpuBf16, PrecisionBf16RunsAttentionOnNarrowedOperandsOnTensorCores) {
  const ir::Shape q_shape = {1, 2, 40, 32}, kv_shape = {1, 1, 40, 32};
  auto build = [&](ir::Graph& graph, ir::DType dtype) {
    ir::GraphBuilder b(&graph);
    const ir::SourceLocation here = ir::MakeSourceLocation(__FILE__, __LINE__);
    AddAttentionAndItsGradient(graph, b, dtype, q_shape, kv_shape);
    return b.status();
  };
  ir::Graph bf16_graph("bf16 attention"), f32_graph("f32 attention");
  ASSERT_TRUE(build(bf16_graph, ir::DType::kBF16).ok());
  ASSERT_TRUE(build(f32_graph, ir::DType::kF32).ok());
  ir::TensorMap bf16_inputs, f32_inputs;
  AddAttentionValues(q_shape, kv_shape, bf16_inputs, f32_inputs);
  absl::StatusOr<std::unique_ptr<CudaGraphRunner>> mixed = CudaGraphRunner::Create({.precision = Precision::kBf16});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  absl::StatusOr<std::unique_ptr<CudaGraphRunner>> plain = CudaGraphRunner::Create({});
  ASSERT_TRUE(plain.ok()) << plain.status();
  const int64_t products = cuda_on_cpu::TensorCoreProductsSoFar();
  absl::StatusOr<ir::TensorMap> narrowed = (*mixed)->RunFromHost(f32_graph, f32_inputs);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status();
  EXPECT_GT(cuda_on_cpu::TensorCoreProductsSoFar(), products);
  EXPECT_EQ((*mixed)->bf16_copies().made, 4) << "q, k, v and dy, once each";
  absl::StatusOr<ir::TensorMap> bf16 = (*plain)->RunFromHost(bf16_graph, bf16_inputs);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  for (const char* name : {"attention", "attention_grad"}) {
    const ir::HostTensor& got = narrowed->at(name);
    ASSERT_EQ(got.type().dtype, ir::DType::kF32) << name;
    const auto* bits = reinterpret_cast<const uint16_t*>(bf16->at(name).data());
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      ASSERT_EQ(ir::FloatToBf16(got.f32()[i]), bits[i]) << name << " element " << i;
    }
  }
}

// With deferred range checks (an executor's), a run on a bad id returns
// without waiting for the device; Settle, once, names the earliest failed
// run since the last Settle with the reference's words.
TEST(GraphRunnerOnCpuDeferred, ABadIdIsReportedAtSettleNamingItsRun) {
  ir::Graph graph("lookup");
  ir::GraphBuilder b(&graph);
  const ir::SourceLocation here = ir::MakeSourceLocation(__FILE__, __LINE__);
  const ir::ValueId table = b.AddInput("table", "parameter", {ir::DType::kF32, {5, 3}}, here);
  const ir::ValueId ids = b.AddInput("ids", "data", {ir::DType::kI32, {4}}, here);
  graph.AddOutput("rows", b.Add(ir::OpKind::kEmbedding, {table, ids}, {}, here));
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<std::unique_ptr<CudaGraphRunner>> runner = CudaGraphRunner::Create({});
  ASSERT_TRUE(runner.ok()) << runner.status();
  CudaDeviceMemory& memory = (*runner)->memory();
  auto upload = [&](const ir::HostTensor& host) {
    return *backends::CopyToDevice(memory, host, absl::Now() + absl::Seconds(10));
  };
  ir::HostTensor table_values({ir::DType::kF32, {5, 3}});
  for (int64_t i = 0; i < 15; ++i) table_values.f32()[i] = static_cast<float>(i);
  const ir::HostTensor good = ir::HostTensor::FromInts({4}, {1, 4, 0, 2});
  const ir::HostTensor bad = ir::HostTensor::FromInts({4}, {1, 4, 7, 9});
  const DeviceTensorMap good_inputs = {{"table", upload(table_values)}, {"ids", upload(good)}};
  const DeviceTensorMap bad_inputs = {{"table", upload(table_values)}, {"ids", upload(bad)}};

  (*runner)->set_defer_range_checks(true);
  for (int repeat = 0; repeat < 2; ++repeat) {  // the staging is reused
    ASSERT_TRUE((*runner)->Run(graph, good_inputs).ok());
    ASSERT_TRUE((*runner)->Run(graph, bad_inputs).ok()) << "a deferred check does not fail its run";
    ASSERT_TRUE((*runner)->Run(graph, bad_inputs).ok());
    absl::StatusOr<std::optional<backends::DeferredFailure>> settled = (*runner)->Settle();
    ASSERT_TRUE(settled.ok()) << settled.status();
    ASSERT_TRUE(settled->has_value());
    EXPECT_EQ((*settled)->run, 1);  // the first bad run of the three
    EXPECT_EQ((*settled)->status, cpu::RunGraph(graph, {{"table", table_values}, {"ids", bad}}).status());
    EXPECT_THAT(std::string((*settled)->status.message()), ::testing::HasSubstr("id 7 at position 2 outside [0, 5)"));
  }
  // Runs that all pass settle to nothing; so does a Settle with no runs.
  ASSERT_TRUE((*runner)->Run(graph, good_inputs).ok());
  EXPECT_FALSE((*runner)->Settle()->has_value());
  EXPECT_FALSE((*runner)->Settle()->has_value());
  // Without deferral the run itself fails, as before.
  (*runner)->set_defer_range_checks(false);
  EXPECT_EQ((*runner)->Run(graph, bad_inputs).status().code(), absl::StatusCode::kInvalidArgument);
}

// Precision +bf16 rounds each matmul operand to bf16 on the device. A
// weight read by several matmuls, in one run and across runs, is rounded
// once for as long as its tensor lives; the products are the same either
// way (the copy is the rounding the matmul would have made).
TEST(GraphRunnerOnCpuBf16, AWeightIsNarrowedOnceForItsLifeNotAtEveryMatmul) {
  ir::Graph graph("two products of one weight");
  ir::GraphBuilder b(&graph);
  const ir::SourceLocation here = ir::MakeSourceLocation(__FILE__, __LINE__);
  const ir::ValueId x = b.AddInput("x", "data", {ir::DType::kF32, {4, 8}}, here);
  const ir::ValueId y = b.AddInput("y", "data", {ir::DType::kF32, {4, 8}}, here);
  const ir::ValueId w = b.AddInput("w", "parameter", {ir::DType::kF32, {8, 6}}, here);
  graph.AddOutput("xw", b.Add(ir::OpKind::kMatMul, {x, w}, {}, here));
  graph.AddOutput("yw", b.Add(ir::OpKind::kMatMul, {y, w}, {}, here));
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<std::unique_ptr<CudaGraphRunner>> runner =
      CudaGraphRunner::Create({.precision = Precision::kBf16});
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto values = [](int64_t n, float step) {
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(step * static_cast<float>(i + 1));
    return v;
  };
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  backends::DeviceMemory& memory = (*runner)->memory();
  absl::StatusOr<backends::DeviceTensor> weight =
      backends::CopyToDevice(memory, ir::HostTensor::FromFloats({8, 6}, values(48, 0.37f)), deadline);
  ASSERT_TRUE(weight.ok()) << weight.status();
  absl::StatusOr<std::unique_ptr<CudaExecutable>> executable = (*runner)->Compile(graph);
  ASSERT_TRUE(executable.ok()) << executable.status();
  std::vector<ir::TensorMap> results;
  for (int run = 0; run < 3; ++run) {
    if (run == 2) {  // a new weight tensor, as after an update: the old one goes
      weight = backends::CopyToDevice(memory, ir::HostTensor::FromFloats({8, 6}, values(48, 0.37f)), deadline);
      ASSERT_TRUE(weight.ok()) << weight.status();
    }
    DeviceTensorMap inputs = {{"w", *weight}};
    for (const char* name : {"x", "y"}) {
      absl::StatusOr<backends::DeviceTensor> data = backends::CopyToDevice(
          memory, ir::HostTensor::FromFloats({4, 8}, values(32, name[0] == 'x' ? 0.11f : 0.23f)), deadline);
      ASSERT_TRUE(data.ok()) << data.status();
      inputs[name] = *data;
    }
    absl::StatusOr<DeviceTensorMap> outputs = (*runner)->Run(**executable, inputs);
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    ir::TensorMap host;
    for (const auto& [name, tensor] : *outputs) host[name] = *backends::CopyToHost(memory, tensor, deadline);
    results.push_back(std::move(host));
    // x, y and w the first run; a new x and y the second, w's copy reused;
    // all three new the third.
    const int64_t made[] = {3, 5, 8};
    EXPECT_EQ((*runner)->bf16_copies().made, made[run]) << "run " << run;
  }
  // The copies of tensors that are gone were released: only the third run's.
  EXPECT_EQ((*runner)->bf16_copies().held_bytes, (32 + 32 + 48) * 2);
  EXPECT_TRUE(SameBits(results[0], results[1]));
  EXPECT_TRUE(SameBits(results[0], results[2]));
  // The products of the bf16-rounded operands, accumulated in f32.
  auto round = [](float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000u;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  const std::vector<float> wv = values(48, 0.37f), xv = values(32, 0.11f);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 6; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < 8; ++k) sum += double{round(xv[i * 8 + k])} * double{round(wv[k * 6 + j])};
      EXPECT_NEAR(results[0].at("xw").f32()[i * 6 + j], sum, 1e-5) << i << ", " << j;
    }
  }
}

}  // namespace
}  // namespace tandem::cuda
