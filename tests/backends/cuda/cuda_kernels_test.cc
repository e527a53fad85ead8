// The CUDA backend against the CPU reference: every op kind of ir/op.h run
// by CudaGraphRunner and by cpu::RunGraph on the same small graphs (with
// broadcasting, transposes and special values), the GPU run repeated for
// determinism, the reference's errors (missing inputs, ids and labels out
// of range), bf16 matmul, and a whole traced GPT-like training step.
//
// GPU tests skip where no device is visible; the case table itself (every
// op kind covered, every case valid on the CPU) and the no-device behaviour
// are checked everywhere.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "backends/cpu/interpreter.h"
#include "backends/cuda/cuda_graph_runner.h"
#include "backends/cuda/cuda_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/graph_builder.h"
#include "ir/host_tensor.h"
#include "ir/initial_state.h"
#include "ir/op.h"
#include "ir/optimizers.h"
#include "ir/tensor.h"
#include "ir/trace.h"
#include "ir/tracer.h"
#include "tests/backends/cuda/op_cases.h"

namespace tandem::cuda {
namespace {

using ir::Attributes;
using ir::DType;
using ir::HostTensor;
using ir::OpKind;
using ir::Shape;
using ir::TensorType;
using ir::ValueId;
using ::testing::HasSubstr;
using testing::AllCases;
using testing::BuildCase;
using testing::CaseBuilder;
using testing::LargeShapeCases;
using testing::F32;
using testing::Floats;
using testing::Ids;
using testing::kInf;
using testing::kNan;
using testing::OpCase;
using testing::OpCaseSpec;

// ---------------------------------------------------------------- comparison

// Every element of `gpu` within `relative` of `cpu`, or within 1e-6 where
// the reference is near zero; NaN and infinities must match exactly; i32
// must be equal.
void ExpectClose(const HostTensor& cpu, const HostTensor& gpu, double relative,
                 const std::string& what) {
  ASSERT_EQ(cpu.defined(), gpu.defined()) << what;
  if (!cpu.defined()) return;
  ASSERT_EQ(ir::TypeToString(cpu.type()), ir::TypeToString(gpu.type())) << what;
  if (cpu.dtype() == DType::kI32) {
    EXPECT_EQ(std::vector<int32_t>(cpu.ints().begin(), cpu.ints().end()),
              std::vector<int32_t>(gpu.ints().begin(), gpu.ints().end()))
        << what;
    return;
  }
  int failures = 0;
  for (int64_t i = 0; i < cpu.num_elements() && failures < 5; ++i) {
    const float c = cpu.f32()[i];
    const float g = gpu.f32()[i];
    bool ok;
    if (std::isnan(c)) {
      ok = std::isnan(g);
    } else if (std::isinf(c)) {
      ok = g == c;
    } else {
      ok = std::fabs(double{g} - double{c}) <= relative * std::fabs(double{c}) + 1e-6;
    }
    if (!ok) ++failures;
    EXPECT_TRUE(ok) << what << "[" << i << "]: gpu " << g << ", cpu " << c;
  }
}

// max |gpu - cpu| <= relative * max |cpu| over the tensor: for results of
// long chains (a training step), where elementwise relative error is
// meaningless for the elements that cancel to near zero.
void ExpectCloseInNorm(const HostTensor& cpu, const HostTensor& gpu, double relative,
                       const std::string& what) {
  ASSERT_EQ(ir::TypeToString(cpu.type()), ir::TypeToString(gpu.type())) << what;
  double max_diff = 0;
  double max_cpu = 0;
  for (int64_t i = 0; i < cpu.num_elements(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double{gpu.f32()[i]} - double{cpu.f32()[i]}));
    max_cpu = std::max(max_cpu, std::fabs(double{cpu.f32()[i]}));
  }
  EXPECT_LE(max_diff, relative * std::max(max_cpu, 1e-30)) << what << ": max |cpu| " << max_cpu;
}

void ExpectBitwiseEqual(const ir::TensorMap& first, const ir::TensorMap& second) {
  ASSERT_EQ(first.size(), second.size());
  for (const auto& [name, tensor] : first) {
    ASSERT_EQ(second.count(name), 1u) << name;
    EXPECT_TRUE(tensor.BitwiseEquals(second.at(name))) << name << " differs between GPU runs";
  }
}

// ---------------------------------------------------------------- fixtures

// Skips without a device; shares one runner per test suite (creating a
// cuBLAS handle per test would dominate the run time).
class GpuTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { runner_.reset(); }

  void SetUp() override {
    const DeviceProbe probe = ProbeDevices();
    if (probe.count == 0) GTEST_SKIP() << "no CUDA device: " << probe.why;
    if (runner_ == nullptr) {
      absl::StatusOr<std::unique_ptr<CudaGraphRunner>> runner = CudaGraphRunner::Create({.device = 0});
      ASSERT_TRUE(runner.ok()) << runner.status();
      runner_ = *std::move(runner);
    }
  }

  CudaGraphRunner& runner() { return *runner_; }

 private:
  inline static std::unique_ptr<CudaGraphRunner> runner_;
};

class OpKindOnGpu : public GpuTest, public ::testing::WithParamInterface<OpCaseSpec> {};

// ---------------------------------------------------------------- the case table, no GPU needed

TEST(CudaKernelCases, CoverEveryOpKindAndRunOnTheCpu) {
  std::set<OpKind> covered;
  for (const OpCaseSpec& spec : AllCases()) {
    absl::StatusOr<OpCase> c = BuildCase(spec);
    ASSERT_TRUE(c.ok()) << spec.name << ": " << c.status();
    for (const ir::Node& node : c->graph.nodes()) covered.insert(node.op);
    absl::StatusOr<ir::TensorMap> cpu = cpu::RunGraph(c->graph, c->inputs);
    EXPECT_TRUE(cpu.ok()) << spec.name << ": " << cpu.status();
  }
  for (int kind = 0; kind < ir::kNumOpKinds; ++kind) {
    EXPECT_EQ(covered.count(static_cast<OpKind>(kind)), 1u)
        << ir::OpName(static_cast<OpKind>(kind)) << " has no case";
  }
}

// ---------------------------------------------------------------- every op on the GPU

// Runs `spec` on the CPU reference and on the GPU, compares every output
// with `close(cpu, gpu, name)`, and checks that a second GPU run gives the
// same bits.
using Comparison = std::function<void(const HostTensor& cpu, const HostTensor& gpu, const std::string& name)>;
void CompareWithTheCpuAndRepeat(CudaGraphRunner& runner, const OpCaseSpec& spec, const Comparison& close) {
  absl::StatusOr<OpCase> c = BuildCase(spec);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<ir::TensorMap> cpu = cpu::RunGraph(c->graph, c->inputs);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<ir::TensorMap> gpu = runner.RunFromHost(c->graph, c->inputs);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ(gpu->size(), cpu->size());
  for (const auto& [name, tensor] : *cpu) close(tensor, gpu->at(name), name);
  absl::StatusOr<ir::TensorMap> again = runner.RunFromHost(c->graph, c->inputs);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectBitwiseEqual(*gpu, *again);
}

TEST_P(OpKindOnGpu, MatchesTheCpuReferenceAndRepeatsBitwise) {
  CompareWithTheCpuAndRepeat(runner(), GetParam(),
                             [](const HostTensor& cpu, const HostTensor& gpu, const std::string& name) {
                               ExpectClose(cpu, gpu, 1e-4, name);
                             });
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpKindOnGpu, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<OpCaseSpec>& info) { return info.param.name; });

// The kernels' other configurations (folds shared by 128 and 256 threads,
// 32 outputs per block, the sorted embedding gradient): their sums run in
// a tree order, so they agree with the reference's loops in norm (to the
// rounding, where the values sum exactly in any order).
using LargeShapesOnGpu = OpKindOnGpu;

TEST_P(LargeShapesOnGpu, MatchTheCpuReferenceInNormAndRepeatBitwise) {
  const double in_norm = GetParam().in_norm;
  CompareWithTheCpuAndRepeat(runner(), GetParam(),
                             [in_norm](const HostTensor& cpu, const HostTensor& gpu, const std::string& name) {
                               ExpectCloseInNorm(cpu, gpu, in_norm, name);
                             });
}

INSTANTIATE_TEST_SUITE_P(LargeShapes, LargeShapesOnGpu, ::testing::ValuesIn(LargeShapeCases()),
                         [](const ::testing::TestParamInfo<OpCaseSpec>& info) { return info.param.name; });

// ---------------------------------------------------------------- errors

using CudaGraphRunnerErrors = GpuTest;

// A one-op graph over inputs "table" [5, 3] and "ids" [4].
ir::Graph EmbeddingGraph() {
  ir::Graph graph("lookup");
  ir::GraphBuilder b(&graph);
  const ir::SourceLocation here = ir::MakeSourceLocation(__FILE__, __LINE__);
  const ValueId table = b.AddInput("table", "parameter", F32({5, 3}), here);
  const ValueId ids = b.AddInput("ids", "data", {DType::kI32, {4}}, here);
  graph.AddOutput("rows", b.Add(OpKind::kEmbedding, {table, ids}, {}, here));
  return graph;
}

TEST_F(CudaGraphRunnerErrors, EmbeddingIdOutOfRangeNamesTheIdAndPosition) {
  const ir::Graph graph = EmbeddingGraph();
  const ir::TensorMap inputs = {{"table", Floats({5, 3}, 1)}, {"ids", Ids({4}, {1, 4, 7, 9})}};
  absl::StatusOr<ir::TensorMap> gpu = runner().RunFromHost(graph, inputs);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(gpu.status().message(), HasSubstr("embedding: id 7 at position 2 outside [0, 5)"));
  EXPECT_THAT(gpu.status().message(), HasSubstr("%2 = embedding at "));
  // Word for word what the reference says.
  EXPECT_EQ(gpu.status(), cpu::RunGraph(graph, inputs).status());
  // The runner is still usable.
  const ir::TensorMap good = {{"table", Floats({5, 3}, 1)}, {"ids", Ids({4}, {1, 4, 0, 2})}};
  EXPECT_TRUE(runner().RunFromHost(graph, good).ok());
}

TEST_F(CudaGraphRunnerErrors, LabelAndGradientIdsOutOfRangeMatchTheReference) {
  OpCase c{ir::Graph("bad"), {}};
  CaseBuilder b(c);
  const ValueId logits = b.Input("logits", Floats({2, 3, 7}, 1));
  const ValueId labels = b.Input("labels", Ids({2, 3}, {0, 6, 3, -1, 1, 9}));
  const ValueId dy = b.Input("dy", Floats({2, 3}, 2));
  b.Output(b.Op(OpKind::kCrossEntropyGrad, {logits, labels, dy}));
  ASSERT_TRUE(b.status().ok()) << b.status();
  absl::StatusOr<ir::TensorMap> gpu = runner().RunFromHost(c.graph, c.inputs);
  EXPECT_THAT(gpu.status().message(), HasSubstr("label -1 at position 3 outside [0, 7)"));
  EXPECT_EQ(gpu.status(), cpu::RunGraph(c.graph, c.inputs).status());

  OpCase g{ir::Graph("bad_grad"), {}};
  CaseBuilder gb(g);
  const ValueId ids = gb.Input("ids", Ids({2, 2}, {0, 3, 10, 2}));
  gb.Output(gb.Op(OpKind::kEmbeddingGrad, {ids, gb.Input("dy", Floats({2, 2, 3}, 3))},
                  {{"num_embeddings", int64_t{10}}}));
  ASSERT_TRUE(gb.status().ok()) << gb.status();
  absl::StatusOr<ir::TensorMap> grad = runner().RunFromHost(g.graph, g.inputs);
  EXPECT_THAT(grad.status().message(), HasSubstr("id 10 at position 2 outside [0, 10)"));
  EXPECT_EQ(grad.status(), cpu::RunGraph(g.graph, g.inputs).status());
}

TEST_F(CudaGraphRunnerErrors, MissingOrMistypedInputIsTheReferenceError) {
  OpCase c{ir::Graph("sum"), {}};
  CaseBuilder b(c);
  const ValueId x = b.Input("x", Floats({2}, 1));
  const ValueId y = b.Input("y", Floats({2}, 2));
  b.Output(b.Op(OpKind::kAdd, {x, y}));
  ir::TensorMap missing = c.inputs;
  missing.erase("y");
  absl::StatusOr<ir::TensorMap> cpu = cpu::RunGraph(c.graph, missing);
  absl::StatusOr<ir::TensorMap> gpu = runner().RunFromHost(c.graph, missing);
  ASSERT_FALSE(cpu.ok());
  EXPECT_EQ(gpu.status().code(), cpu.status().code());
  EXPECT_EQ(gpu.status(), cpu.status());
  ir::TensorMap mistyped = c.inputs;
  mistyped["y"] = Floats({3}, 2);
  EXPECT_EQ(runner().RunFromHost(c.graph, mistyped).status(), cpu::RunGraph(c.graph, mistyped).status());
}

TEST_F(CudaGraphRunnerErrors, AnEarlierBadIdWinsOverALaterMissingInput) {
  // The reference stops at the embedding; the GPU finds the bad id only on
  // the device, and must still report it rather than the later input.
  OpCase c{ir::Graph("order"), {}};
  CaseBuilder b(c);
  const ValueId table = b.Input("table", Floats({5, 3}, 1));
  const ValueId ids = b.Input("ids", Ids({2}, {0, 5}));
  const ValueId rows = b.Op(OpKind::kEmbedding, {table, ids});
  const ValueId late = b.Input("late", Floats({2, 3}, 2));
  b.Output(b.Op(OpKind::kAdd, {rows, late}));
  ir::TensorMap inputs = c.inputs;
  inputs.erase("late");
  absl::Status cpu = cpu::RunGraph(c.graph, inputs).status();
  EXPECT_THAT(cpu.message(), HasSubstr("id 5 at position 1"));
  EXPECT_EQ(runner().RunFromHost(c.graph, inputs).status(), cpu);
}

// ---------------------------------------------------------------- bf16 matmul

TEST_F(GpuTest, Bf16MatMulIsWithinOnePercent) {
  absl::StatusOr<std::unique_ptr<CudaGraphRunner>> bf16 =
      CudaGraphRunner::Create({.device = 0, .precision = Precision::kBf16});
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  for (const auto& [a_shape, b_shape] : std::vector<std::pair<Shape, Shape>>{
           {{16, 32}, {32, 8}}, {{2, 3, 16, 32}, {2, 3, 32, 8}}, {{4, 16, 32}, {32, 8}}}) {
    OpCase c{ir::Graph("bf16"), {}};
    CaseBuilder b(c);
    // Positive operands: rounding each to bf16 (8 bits) moves every product
    // by at most 2^-8 relative, and nothing cancels.
    const ValueId a = b.Input("a", Floats(a_shape, 1, 0.25f, 1.5f));
    const ValueId w = b.Input("b", Floats(b_shape, 2, 0.25f, 1.5f));
    b.Output(b.Op(OpKind::kMatMul, {a, w}));
    ASSERT_TRUE(b.status().ok()) << b.status();
    absl::StatusOr<ir::TensorMap> cpu = cpu::RunGraph(c.graph, c.inputs);
    absl::StatusOr<ir::TensorMap> gpu = (*bf16)->RunFromHost(c.graph, c.inputs);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ExpectClose(cpu->at("out0"), gpu->at("out0"), 1e-2, "bf16 matmul");
    absl::StatusOr<ir::TensorMap> again = (*bf16)->RunFromHost(c.graph, c.inputs);
    ASSERT_TRUE(again.ok()) << again.status();
    ExpectBitwiseEqual(*gpu, *again);
  }
}

// ---------------------------------------------------------------- bf16 values

// Mixed precision's bf16 tensors: converts round as the reference rounds,
// elementwise ops (IEEE on the widened operands, then one rounding) give
// the reference's bits, and a bf16 matmul is within bf16's rounding of it
// (positive operands: nothing cancels).
TEST_F(GpuTest, Bf16ValuesComputeThroughF32AndRoundLikeTheReference) {
  OpCase c{ir::Graph("bf16 values"), {}};
  CaseBuilder b(c);
  const auto to = [](DType dtype) { return Attributes{{"dtype", std::string(ir::DTypeName(dtype))}}; };
  const ValueId a = b.Op(OpKind::kConvert, {b.Input("a", Floats({16, 32}, 1, 0.25f, 1.5f))}, to(DType::kBF16));
  const ValueId w = b.Op(OpKind::kConvert, {b.Input("w", Floats({32, 8}, 2, 0.25f, 1.5f))}, to(DType::kBF16));
  const ValueId sum = b.Op(OpKind::kAdd, {a, b.Op(OpKind::kMul, {a, a})});
  const ValueId product = b.Op(OpKind::kMatMul, {sum, w});
  b.Output(b.Op(OpKind::kConvert, {a}, to(DType::kF32)));
  b.Output(b.Op(OpKind::kConvert, {sum}, to(DType::kF32)));
  b.Output(b.Op(OpKind::kConvert, {product}, to(DType::kF32)));
  ASSERT_TRUE(b.status().ok()) << b.status();
  absl::StatusOr<ir::TensorMap> cpu = cpu::RunGraph(c.graph, c.inputs);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<ir::TensorMap> gpu = runner().RunFromHost(c.graph, c.inputs);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_TRUE(cpu->at("out0").BitwiseEquals(gpu->at("out0"))) << "convert to bf16";
  EXPECT_TRUE(cpu->at("out1").BitwiseEquals(gpu->at("out1"))) << "bf16 add and mul";
  ExpectClose(cpu->at("out2"), gpu->at("out2"), 2e-2, "bf16 matmul");
  absl::StatusOr<ir::TensorMap> again = runner().RunFromHost(c.graph, c.inputs);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectBitwiseEqual(*gpu, *again);
}

// bf16 attention against f32 attention on the same (widened) values, each
// output pair (bf16, f32 rounded to bf16) for the forward and the gradient:
// at widths 32, 64 and 128 on tensor cores (bf16 products, f32
// accumulation, bf16 weights) within bf16's rounding in norm, and the same
// bits when run again; at width 8 (a thread a row) the bits of the f32
// kernel rounded.
TEST_F(GpuTest, Bf16AttentionOnTensorCoresIsWithinBf16OfF32AndElsewhereItsBitsRounded) {
  OpCase c{ir::Graph("bf16 attention"), {}};
  CaseBuilder b(c);
  const auto to = [](DType dtype) { return Attributes{{"dtype", std::string(ir::DTypeName(dtype))}}; };
  const std::vector<int64_t> widths = {32, 64, 128, 8};
  for (int64_t width : widths) {
    const uint32_t seed = static_cast<uint32_t>(width);
    auto bf16_input = [&](const char* name, ir::Shape shape, uint32_t offset) {
      const ValueId f32 = b.Input(absl::StrCat(name, width), Floats(std::move(shape), seed + offset, -1, 1));
      return b.Op(OpKind::kConvert, {f32}, to(DType::kBF16));
    };
    const ValueId q = bf16_input("q", {2, 4, 100, width}, 0), k = bf16_input("k", {2, 2, 100, width}, 1),
                  v = bf16_input("v", {2, 2, 100, width}, 2), dy = bf16_input("dy", {2, 4, 100, width}, 3);
    auto wide = [&](ValueId x) { return b.Op(OpKind::kConvert, {x}, to(DType::kF32)); };
    const Attributes scale = {{"scale", 1.0 / std::sqrt(static_cast<double>(width))}};
    for (OpKind op : {OpKind::kAttention, OpKind::kAttentionGrad}) {
      std::vector<ValueId> narrow = {q, k, v}, widened = {wide(q), wide(k), wide(v)};
      if (op == OpKind::kAttentionGrad) {
        narrow.push_back(dy);
        widened.push_back(wide(dy));
      }
      b.Output(wide(b.Op(op, narrow, scale)));
      b.Output(wide(b.Op(OpKind::kConvert, {b.Op(op, widened, scale)}, to(DType::kBF16))));
    }
  }
  ASSERT_TRUE(b.status().ok()) << b.status();
  absl::StatusOr<ir::TensorMap> gpu = runner().RunFromHost(c.graph, c.inputs);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  absl::StatusOr<ir::TensorMap> again = runner().RunFromHost(c.graph, c.inputs);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectBitwiseEqual(*gpu, *again);
  for (size_t w = 0; w < widths.size(); ++w) {
    for (int pass = 0; pass < 2; ++pass) {
      const int pair = static_cast<int>(2 * w) + pass;
      const HostTensor& bf16 = gpu->at(absl::StrCat("out", 2 * pair));
      const HostTensor& f32 = gpu->at(absl::StrCat("out", 2 * pair + 1));
      const std::string what = absl::StrCat(pass == 0 ? "attention" : "attention_grad", " width ", widths[w]);
      if (widths[w] == 8) {
        EXPECT_TRUE(bf16.BitwiseEquals(f32)) << what;
      } else {
        ExpectCloseInNorm(f32, bf16, 2e-2, what);
      }
    }
  }
}

// ---------------------------------------------------------------- tf32 matmul

TEST_F(GpuTest, Tf32MatMulIsWithinTf32RoundingAndRepeatsBitwise) {
  absl::StatusOr<std::unique_ptr<CudaGraphRunner>> tf32 =
      CudaGraphRunner::Create({.device = 0, .precision = Precision::kTf32});
  ASSERT_TRUE(tf32.ok()) << tf32.status();
  OpCase c{ir::Graph("tf32"), {}};
  CaseBuilder b(c);
  // Positive operands, as for bf16: TF32 keeps 10 mantissa bits, so each
  // product moves by at most about 2^-10 relative.
  const ValueId a = b.Input("a", Floats({64, 128}, 1, 0.25f, 1.5f));
  const ValueId w = b.Input("b", Floats({128, 96}, 2, 0.25f, 1.5f));
  b.Output(b.Op(OpKind::kMatMul, {a, w}));
  ASSERT_TRUE(b.status().ok()) << b.status();
  absl::StatusOr<ir::TensorMap> cpu = cpu::RunGraph(c.graph, c.inputs);
  absl::StatusOr<ir::TensorMap> gpu = (*tf32)->RunFromHost(c.graph, c.inputs);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ExpectClose(cpu->at("out0"), gpu->at("out0"), 4e-3, "tf32 matmul");
  absl::StatusOr<ir::TensorMap> again = (*tf32)->RunFromHost(c.graph, c.inputs);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectBitwiseEqual(*gpu, *again);
}

// ---------------------------------------------------------------- the bias epilogue

// Linear layers (a matmul whose only reader is a bias add) run as one
// cuBLASLt GEMM with the bias epilogue: within f32 rounding of cuBLAS's
// GEMM and the add kernel (the runner with fusion off), and the same bits
// run after run (the algorithm pinned per shape, no split-K). In f32 and
// TF32 precision.
TEST_F(GpuTest, ALinearLayersBiasEpilogueMatchesTheUnfusedLayerAndRepeatsBitwise) {
  for (const Precision precision : {Precision::kF32, Precision::kTf32}) {
    SCOPED_TRACE(precision == Precision::kF32 ? "f32" : "tf32");
    absl::StatusOr<std::unique_ptr<CudaGraphRunner>> fused =
        CudaGraphRunner::Create({.device = 0, .precision = precision});
    ASSERT_TRUE(fused.ok()) << fused.status();
    absl::StatusOr<std::unique_ptr<CudaGraphRunner>> unfused =
        CudaGraphRunner::Create({.device = 0, .precision = precision, .fuse_elementwise = false});
    ASSERT_TRUE(unfused.ok()) << unfused.status();
    OpCase c{ir::Graph("linear layers"), {}};
    CaseBuilder b(c);
    const ValueId x = b.Input("x", Floats({64, 128}, 1));
    const ValueId x3 = b.Input("x3", Floats({4, 16, 128}, 2));
    const ValueId w = b.Input("w", Floats({128, 96}, 3));
    const ValueId wt = b.Input("wt", Floats({96, 128}, 4));
    const ValueId bias = b.Input("bias", Floats({96}, 5));
    b.Output(b.Op(OpKind::kAdd, {b.Op(OpKind::kMatMul, {x, w}), bias}));
    b.Output(b.Op(OpKind::kAdd, {bias, b.Op(OpKind::kMatMul, {x3, w})}));
    b.Output(b.Op(OpKind::kAdd, {b.Op(OpKind::kMatMul, {x, wt}, {{"transpose_b", int64_t{1}}}), bias}));
    ASSERT_TRUE(b.status().ok()) << b.status();
    absl::StatusOr<ir::TensorMap> reference = (*unfused)->RunFromHost(c.graph, c.inputs);
    ASSERT_TRUE(reference.ok()) << reference.status();
    absl::StatusOr<ir::TensorMap> first = (*fused)->RunFromHost(c.graph, c.inputs);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ((*fused)->bias_epilogue_launches(), 3) << "cuBLASLt declined a shape: it ran unfused";
    const double tolerance = precision == Precision::kF32 ? 1e-5 : 4e-3;
    for (const auto& [name, expected] : *reference) ExpectCloseInNorm(expected, first->at(name), tolerance, name);
    absl::StatusOr<ir::TensorMap> again = (*fused)->RunFromHost(c.graph, c.inputs);
    ASSERT_TRUE(again.ok()) << again.status();
    ExpectBitwiseEqual(*first, *again);
  }
}

// ---------------------------------------------------------------- a training step

// A two-block GPT-like decoder over two pipeline stages: embeddings, pre-norm
// causal attention and a GELU MLP with residuals, a tied head and the mean
// cross-entropy, so the traced step holds the forward ops, their gradients
// (softmax_grad, normalize_grad, gelu_grad, cross_entropy_grad,
// embedding_grad, transposed and batched matmuls) and Adam's update.
constexpr int64_t kBatch = 2;
constexpr int64_t kTime = 8;
constexpr int64_t kVocab = 13;
constexpr int64_t kDim = 16;
constexpr int64_t kHeads = 2;

Tensor Dense(Tracer& t, const std::string& name, const Tensor& x, int64_t in, int64_t out) {
  const Tensor w = t.Parameter(name + ".w", {in, out}, init::Normal(0.2));
  const Tensor bias = t.Parameter(name + ".b", {out}, init::Normal(0.1));
  return matmul(x, w) + bias;
}

Tensor Norm(Tracer& t, const std::string& name, const Tensor& x) {
  const Tensor gamma = t.Parameter(name + ".g", {kDim}, init::Normal(0.1, 1.0));
  const Tensor beta = t.Parameter(name + ".b", {kDim}, init::Normal(0.1));
  return layer_norm(x, gamma, beta);
}

Tensor Heads(const Tensor& x) {
  return transpose(reshape(x, {kBatch, kTime, kHeads, kDim / kHeads}), {0, 2, 1, 3});
}

Tensor TinyGptLoss(Tracer& t) {
  const Tensor tokens = t.Input("tokens", {DType::kI32, {kBatch, kTime}});
  const Tensor wte = t.Parameter("wte", {kVocab, kDim}, init::Normal(0.5));
  const Tensor wpe = t.Parameter("wpe", {kTime, kDim}, init::Normal(0.5));
  Tensor x = embedding(wte, tokens) + wpe;
  for (int layer = 0; layer < 2; ++layer) {
    if (layer == 1) x = pipeline_yield(x);
    const std::string name = absl::StrCat("h", layer);
    const Tensor qkv = Dense(t, name + ".qkv", Norm(t, name + ".ln1", x), kDim, 3 * kDim);
    const Tensor q = Heads(slice(qkv, -1, 0, kDim));
    const Tensor k = Heads(slice(qkv, -1, kDim, 2 * kDim));
    const Tensor v = Heads(slice(qkv, -1, 2 * kDim, 3 * kDim));
    const Tensor scores = causal_mask(matmul(q, k, {.transpose_b = true}) * 0.5);
    const Tensor heads = matmul(softmax(scores), v);
    const Tensor merged = reshape(transpose(heads, {0, 2, 1, 3}), {kBatch, kTime, kDim});
    x = x + Dense(t, name + ".proj", merged, kDim, kDim);
    const Tensor hidden = gelu(Dense(t, name + ".fc", Norm(t, name + ".ln2", x), kDim, 2 * kDim));
    x = x + Dense(t, name + ".out", hidden, 2 * kDim, kDim);
  }
  const Tensor logits = matmul(Norm(t, "lnf", x), wte, {.transpose_b = true});
  const Tensor labels = t.Label("labels", {DType::kI32, {kBatch, kTime}});
  return mean(cross_entropy(logits, labels));
}

TEST_F(GpuTest, TrainStepMatchesTheCpuReference) {
  absl::StatusOr<ir::TrainStep> step =
      TraceTrainStep("tiny_gpt", TinyGptLoss, Adam({}), {.num_microbatches = 1, .seed = 5});
  ASSERT_TRUE(step.ok()) << step.status();
  std::vector<int32_t> tokens(kBatch * kTime);
  std::vector<int32_t> labels(kBatch * kTime);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 5 + 1) % kVocab);
    labels[i] = static_cast<int32_t>((i * 7 + 3) % kVocab);
  }
  const ir::TensorMap state = *ir::InitialState(*step);
  ir::TensorMap inputs = state;
  inputs["tokens"] = Ids({kBatch, kTime}, tokens);
  inputs["labels"] = Ids({kBatch, kTime}, labels);

  absl::StatusOr<ir::TensorMap> cpu = cpu::RunGraph(step->microbatch, inputs);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<ir::TensorMap> gpu = runner().RunFromHost(step->microbatch, inputs);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ(gpu->size(), cpu->size());
  for (const auto& [name, tensor] : *cpu) ExpectCloseInNorm(tensor, gpu->at(name), 1e-4, name);
  absl::StatusOr<ir::TensorMap> again = runner().RunFromHost(step->microbatch, inputs);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectBitwiseEqual(*gpu, *again);

  // The update, from the reference's gradients, as RunReferenceStep feeds it.
  ir::TensorMap update_inputs = state;
  for (const ir::Accumulator& acc : step->accumulators) update_inputs[acc.name] = cpu->at(acc.source);
  update_inputs["step"] = HostTensor::Scalar(1.0f);
  absl::StatusOr<ir::TensorMap> cpu_update = cpu::RunGraph(step->update, update_inputs);
  ASSERT_TRUE(cpu_update.ok()) << cpu_update.status();
  absl::StatusOr<ir::TensorMap> gpu_update = runner().RunFromHost(step->update, update_inputs);
  ASSERT_TRUE(gpu_update.ok()) << gpu_update.status();
  for (const auto& [name, tensor] : *cpu_update) {
    ExpectCloseInNorm(tensor, gpu_update->at(name), 1e-4, name);
  }
}

// ---------------------------------------------------------------- without a GPU

TEST(CudaGraphRunnerWithoutDevice, CreateIsAFailedPrecondition) {
  const DeviceProbe probe = ProbeDevices();
  if (probe.count > 0) GTEST_SKIP() << probe.count << " CUDA devices visible";
  EXPECT_FALSE(probe.why.empty());
  absl::StatusOr<std::unique_ptr<CudaGraphRunner>> runner = CudaGraphRunner::Create({.device = 0});
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(runner.status().message(), HasSubstr("no CUDA device"));
}

TEST(CudaRuntime, CheckDeviceNamesTheVisibleCount) {
  const int count = ProbeDevices().count;
  const absl::Status status = CheckDevice(count);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(count == 0 ? "no CUDA device 0"
                                                     : absl::StrCat(count, " visible")));
  EXPECT_EQ(CheckDevice(-1).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tandem::cuda
