#include "tests/backends/cuda/op_cases.h"

#include <cmath>

namespace tandem::cuda::testing {
namespace {

Attributes Axes(std::vector<int64_t> axes, bool keep_dims) {
  return {{"axes", std::move(axes)}, {"keep_dims", int64_t{keep_dims ? 1 : 0}}};
}

void UnaryCase(CaseBuilder& b, OpKind op, float low, float high) {
  const ValueId x = b.Input("x", Floats({3, 5}, 1, low, high));
  b.Output(b.Op(op, {x}));
}

// Same shapes, a two-sided broadcast and a scalar operand.
void BinaryCase(CaseBuilder& b, OpKind op, HostTensor (*make)(const Shape&, uint32_t)) {
  const ValueId x = b.Input("x", make({2, 3, 4}, 1));
  const ValueId y = b.Input("y", make({2, 3, 4}, 2));
  const ValueId row = b.Input("row", make({2, 1, 4}, 3));
  const ValueId column = b.Input("column", make({3, 1}, 4));
  const ValueId scalar = b.Input("scalar", make({}, 5));
  b.Output(b.Op(op, {x, y}));
  b.Output(b.Op(op, {row, column}));
  b.Output(b.Op(op, {column, row}));
  b.Output(b.Op(op, {scalar, x}));
  b.Output(b.Op(op, {x, scalar}));
}

HostTensor Signed(const Shape& shape, uint32_t seed) { return Floats(shape, seed); }
HostTensor Positive(const Shape& shape, uint32_t seed) { return Floats(shape, seed, 0.5f, 2.0f); }
HostTensor Ties(const Shape& shape, uint32_t seed) { return SmallIntegers(shape, seed, 2); }

void MatMulCase(CaseBuilder& b, Shape a_shape, Shape b_shape, bool transpose_a, bool transpose_b) {
  // Positive operands: no cancellation, so each element is within a few ulp.
  const ValueId a = b.Input("a", Floats(a_shape, 1, 0.25f, 1.5f));
  const ValueId w = b.Input("b", Floats(b_shape, 2, 0.25f, 1.5f));
  b.Output(b.Op(OpKind::kMatMul, {a, w},
                {{"transpose_a", int64_t{transpose_a}}, {"transpose_b", int64_t{transpose_b}}}));
}

}  // namespace

std::vector<OpCaseSpec> AllCases() {
  std::vector<OpCaseSpec> cases;
  const auto add = [&](std::string name, std::function<void(CaseBuilder&)> build) {
    cases.push_back({std::move(name), std::move(build)});
  };

  // ---- Sources.
  add("input", [](CaseBuilder& b) {
    b.Output(b.Input("x", Floats({2, 3}, 1)));
    b.Output(b.Input("ids", Ids({4}, {3, -1, 0, 7})));
  });
  add("constant", [](CaseBuilder& b) {
    b.Output(b.Constant(1.5, F32({2, 3})));
    b.Output(b.Constant(7.0, {DType::kI32, {4}}));
    b.Output(b.Constant(-kInf, F32({})));
  });

  // ---- Unary.
  add("neg", [](CaseBuilder& b) { UnaryCase(b, OpKind::kNeg, -3, 3); });
  add("exp", [](CaseBuilder& b) { UnaryCase(b, OpKind::kExp, -10, 10); });
  add("expm1", [](CaseBuilder& b) { UnaryCase(b, OpKind::kExpm1, -1e-3f, 1e-3f); });
  add("log", [](CaseBuilder& b) { UnaryCase(b, OpKind::kLog, 1e-3f, 50); });
  add("tanh", [](CaseBuilder& b) { UnaryCase(b, OpKind::kTanh, -4, 4); });
  add("sqrt", [](CaseBuilder& b) { UnaryCase(b, OpKind::kSqrt, 0, 50); });
  add("rsqrt", [](CaseBuilder& b) { UnaryCase(b, OpKind::kRsqrt, 1e-3f, 50); });
  add("relu", [](CaseBuilder& b) { UnaryCase(b, OpKind::kRelu, -3, 3); });
  add("gelu", [](CaseBuilder& b) { UnaryCase(b, OpKind::kGelu, -4, 4); });
  add("silu", [](CaseBuilder& b) { UnaryCase(b, OpKind::kSilu, -30, 30); });
  add("sin", [](CaseBuilder& b) { UnaryCase(b, OpKind::kSin, -100, 100); });
  add("cos", [](CaseBuilder& b) { UnaryCase(b, OpKind::kCos, -100, 100); });
  add("unary_special_values", [](CaseBuilder& b) {
    const ValueId x = b.Input(
        "x", HostTensor::FromFloats({8}, {kNan, kInf, -kInf, 0.0f, -0.0f, 1e-30f, -1.0f, 100.0f}));
    for (OpKind op : {OpKind::kNeg, OpKind::kExp, OpKind::kExpm1, OpKind::kLog, OpKind::kTanh,
                      OpKind::kSqrt, OpKind::kRsqrt, OpKind::kRelu, OpKind::kGelu, OpKind::kSilu, OpKind::kSin, OpKind::kCos}) {
      b.Output(b.Op(op, {x}));
    }
  });
  add("pipeline_yield", [](CaseBuilder& b) {
    const ValueId x = b.Input("x", Floats({2, 3}, 1));
    const ValueId y = b.Op(OpKind::kPipelineYield, {x});
    b.Output(y);
    b.Output(b.Op(OpKind::kNeg, {y}));
  });
  add("convert", [](CaseBuilder& b) {
    const ValueId x = b.Input(
        "x", HostTensor::FromFloats({7}, {2.9f, -2.9f, 0.0f, 3e9f, -3e9f, kNan, -2147483648.0f}));
    const ValueId ids = b.Input("ids", Ids({3}, {-4, 0, 65}));
    b.Output(b.Op(OpKind::kConvert, {x}, {{"dtype", std::string("i32")}}));
    b.Output(b.Op(OpKind::kConvert, {ids}, {{"dtype", std::string("f32")}}));
    b.Output(b.Op(OpKind::kConvert, {x}, {{"dtype", std::string("f32")}}));
    b.Output(b.Op(OpKind::kConvert, {ids}, {{"dtype", std::string("i32")}}));
  });

  // ---- Binary, broadcasting.
  add("add", [](CaseBuilder& b) { BinaryCase(b, OpKind::kAdd, Signed); });
  add("sub", [](CaseBuilder& b) { BinaryCase(b, OpKind::kSub, Signed); });
  add("mul", [](CaseBuilder& b) { BinaryCase(b, OpKind::kMul, Signed); });
  add("div", [](CaseBuilder& b) { BinaryCase(b, OpKind::kDiv, Positive); });
  add("pow", [](CaseBuilder& b) { BinaryCase(b, OpKind::kPow, Positive); });
  add("maximum", [](CaseBuilder& b) { BinaryCase(b, OpKind::kMaximum, Ties); });
  add("equal", [](CaseBuilder& b) { BinaryCase(b, OpKind::kEqual, Ties); });
  add("maximum_nan", [](CaseBuilder& b) {
    const ValueId x = b.Input("x", HostTensor::FromFloats({4}, {kNan, 1.0f, kNan, -0.0f}));
    const ValueId y = b.Input("y", HostTensor::FromFloats({4}, {1.0f, kNan, kNan, 0.0f}));
    b.Output(b.Op(OpKind::kMaximum, {x, y}));
    b.Output(b.Op(OpKind::kEqual, {x, y}));
  });
  add("where", [](CaseBuilder& b) {
    const ValueId cond = b.Input("cond", Ties({2, 1, 4}, 1));
    const ValueId x = b.Input("x", Floats({3, 4}, 2));
    const ValueId y = b.Input("y", Floats({}, 3));
    const ValueId full_cond = b.Input("full_cond", Ties({3, 4}, 4));
    b.Output(b.Op(OpKind::kWhere, {cond, x, y}));
    b.Output(b.Op(OpKind::kWhere, {full_cond, x, x}));
  });
  add("gelu_grad", [](CaseBuilder& b) {
    const ValueId x = b.Input("x", Floats({4, 6}, 1, -4, 4));
    const ValueId dy = b.Input("dy", Floats({4, 6}, 2));
    b.Output(b.Op(OpKind::kGeluGrad, {x, dy}));
  });
  add("silu_grad", [](CaseBuilder& b) {
    const ValueId x = b.Input("x", Floats({4, 6}, 1, -30, 30));
    const ValueId dy = b.Input("dy", Floats({4, 6}, 2));
    b.Output(b.Op(OpKind::kSiluGrad, {x, dy}));
  });
  add("relu_grad", [](CaseBuilder& b) {
    const ValueId x = b.Input("x", HostTensor::FromFloats({2, 3}, {-1.0f, 0.0f, 2.0f, kNan, 0.5f, -0.0f}));
    const ValueId dy = b.Input("dy", Floats({2, 3}, 2));
    b.Output(b.Op(OpKind::kReluGrad, {x, dy}));
  });

  // ---- Reductions.
  for (OpKind op : {OpKind::kReduceSum, OpKind::kReduceMean, OpKind::kReduceMax}) {
    add(ir::OpName(op), [op](CaseBuilder& b) {
      const ValueId x = b.Input("x", Floats({2, 3, 4, 5}, 1));
      b.Output(b.Op(op, {x}, Axes({1, 3}, false)));
      b.Output(b.Op(op, {x}, Axes({0}, true)));
      b.Output(b.Op(op, {x}, Axes({3}, false)));
      b.Output(b.Op(op, {x}, Axes({0, 2}, true)));
      b.Output(b.Op(op, {x}, Axes({0, 1, 2, 3}, false)));
      b.Output(b.Op(op, {x}, Axes({}, false)));
      const ValueId ones = b.Input("ones", Floats({1, 6, 1}, 2));
      b.Output(b.Op(op, {ones}, Axes({0, 1}, false)));
    });
  }

  // ---- Data movement.
  add("reshape", [](CaseBuilder& b) {
    const ValueId x = b.Input("x", Floats({2, 3, 4}, 1));
    const ValueId ids = b.Input("ids", Ids({2, 2}, {1, 2, 3, 4}));
    const ValueId r = b.Op(OpKind::kReshape, {x}, {{"shape", std::vector<int64_t>{6, 4}}});
    b.Output(r);
    // The alias outlives its operand's last use; the operand is also read after.
    b.Output(b.Op(OpKind::kNeg, {r}));
    b.Output(b.Op(OpKind::kExp, {x}));
    b.Output(b.Op(OpKind::kReshape, {ids}, {{"shape", std::vector<int64_t>{4}}}));
  });
  add("transpose", [](CaseBuilder& b) {
    const ValueId x = b.Input("x", Floats({2, 3, 4, 5}, 1));
    const ValueId m = b.Input("m", Floats({3, 5}, 2));
    const ValueId ids = b.Input("ids", Ids({2, 3}, {0, 1, 2, 3, 4, 5}));
    const auto perm = [](std::vector<int64_t> p) { return Attributes{{"permutation", p}}; };
    b.Output(b.Op(OpKind::kTranspose, {x}, perm({0, 2, 1, 3})));
    b.Output(b.Op(OpKind::kTranspose, {x}, perm({3, 1, 2, 0})));
    b.Output(b.Op(OpKind::kTranspose, {x}, perm({0, 1, 2, 3})));
    b.Output(b.Op(OpKind::kTranspose, {x}, perm({1, 2, 3, 0})));
    b.Output(b.Op(OpKind::kTranspose, {m}, perm({1, 0})));
    b.Output(b.Op(OpKind::kTranspose, {ids}, perm({1, 0})));
  });
  add("broadcast", [](CaseBuilder& b) {
    const ValueId column = b.Input("column", Floats({3, 1}, 1));
    const ValueId scalar = b.Input("scalar", Floats({}, 2));
    const ValueId ids = b.Input("ids", Ids({3}, {7, 8, 9}));
    const auto to = [](std::vector<int64_t> s) { return Attributes{{"shape", s}}; };
    b.Output(b.Op(OpKind::kBroadcast, {column}, to({2, 3, 4})));
    b.Output(b.Op(OpKind::kBroadcast, {scalar}, to({2, 2})));
    b.Output(b.Op(OpKind::kBroadcast, {ids}, to({2, 3})));
  });
  add("slice", [](CaseBuilder& b) {
    const ValueId x = b.Input("x", Floats({2, 4, 3}, 1));
    const ValueId ids = b.Input("ids", Ids({2, 3}, {0, 1, 2, 3, 4, 5}));
    const auto range = [](int64_t axis, int64_t start, int64_t limit) {
      return Attributes{{"axis", axis}, {"start", start}, {"limit", limit}};
    };
    b.Output(b.Op(OpKind::kSlice, {x}, range(1, 1, 3)));
    b.Output(b.Op(OpKind::kSlice, {x}, range(0, 1, 2)));
    b.Output(b.Op(OpKind::kSlice, {x}, range(2, 0, 2)));
    b.Output(b.Op(OpKind::kSlice, {ids}, range(1, 2, 3)));
  });
  add("concat", [](CaseBuilder& b) {
    const ValueId p = b.Input("p", Floats({2, 1, 3}, 1));
    const ValueId q = b.Input("q", Floats({2, 2, 3}, 2));
    const ValueId r = b.Input("r", Floats({2, 3, 3}, 3));
    const ValueId ids = b.Input("ids", Ids({2, 2}, {1, 2, 3, 4}));
    const auto along = [](int64_t axis) { return Attributes{{"axis", axis}}; };
    b.Output(b.Op(OpKind::kConcat, {p, q, r}, along(1)));
    b.Output(b.Op(OpKind::kConcat, {q, q}, along(0)));
    b.Output(b.Op(OpKind::kConcat, {q}, along(2)));
    b.Output(b.Op(OpKind::kConcat, {ids, ids}, along(1)));
  });

  // ---- matmul: every transpose, every batch mode.
  add("matmul", [](CaseBuilder& b) { MatMulCase(b, {4, 5}, {5, 3}, false, false); });
  add("matmul_transpose_a", [](CaseBuilder& b) { MatMulCase(b, {5, 4}, {5, 3}, true, false); });
  add("matmul_transpose_b", [](CaseBuilder& b) { MatMulCase(b, {4, 5}, {3, 5}, false, true); });
  add("matmul_transpose_both", [](CaseBuilder& b) { MatMulCase(b, {5, 4}, {3, 5}, true, true); });
  add("matmul_batched", [](CaseBuilder& b) { MatMulCase(b, {2, 3, 4, 5}, {2, 3, 5, 6}, false, false); });
  add("matmul_batched_transpose_b",
      [](CaseBuilder& b) { MatMulCase(b, {2, 2, 4, 5}, {2, 2, 3, 5}, false, true); });
  add("matmul_batched_transpose_a",
      [](CaseBuilder& b) { MatMulCase(b, {3, 5, 4}, {3, 5, 2}, true, false); });
  add("matmul_rank2_b_folds", [](CaseBuilder& b) { MatMulCase(b, {2, 3, 4}, {4, 5}, false, false); });
  add("matmul_rank2_b_transposed",
      [](CaseBuilder& b) { MatMulCase(b, {2, 3, 4}, {5, 4}, false, true); });
  add("matmul_rank2_b_a_transposed",
      [](CaseBuilder& b) { MatMulCase(b, {2, 4, 3}, {4, 5}, true, false); });
  add("matmul_rank2_a", [](CaseBuilder& b) { MatMulCase(b, {3, 4}, {2, 4, 5}, false, false); });
  add("matmul_rank2_a_transposed",
      [](CaseBuilder& b) { MatMulCase(b, {4, 3}, {2, 5, 4}, true, true); });

  // ---- Rows over the last axis.
  add("softmax", [](CaseBuilder& b) {
    const ValueId x = b.Input("x", Floats({3, 7}, 1, -5, 5));
    const ValueId special = b.Input(
        "special", HostTensor::FromFloats({2, 3}, {1000.0f, 1000.0f, -kInf, 1.0f, 2.0f, 3.0f}));
    b.Output(b.Op(OpKind::kSoftmax, {x}));
    b.Output(b.Op(OpKind::kSoftmax, {special}));
  });
  add("log_softmax", [](CaseBuilder& b) {
    const ValueId x = b.Input("x", Floats({3, 7}, 1, -5, 5));
    const ValueId special = b.Input(
        "special", HostTensor::FromFloats({2, 3}, {1000.0f, 1000.0f, -kInf, 1.0f, 2.0f, 3.0f}));
    b.Output(b.Op(OpKind::kLogSoftmax, {x}));
    b.Output(b.Op(OpKind::kLogSoftmax, {special}));
  });
  add("softmax_grad", [](CaseBuilder& b) {
    const ValueId y = b.Op(OpKind::kSoftmax, {b.Input("x", Floats({3, 5}, 1))});
    b.Output(b.Op(OpKind::kSoftmaxGrad, {y, b.Input("dy", Floats({3, 5}, 2))}));
  });
  add("log_softmax_grad", [](CaseBuilder& b) {
    const ValueId y = b.Op(OpKind::kLogSoftmax, {b.Input("x", Floats({2, 4, 6}, 1))});
    b.Output(b.Op(OpKind::kLogSoftmaxGrad, {y, b.Input("dy", Floats({2, 4, 6}, 2))}));
  });
  add("causal_mask", [](CaseBuilder& b) {
    b.Output(b.Op(OpKind::kCausalMask, {b.Input("x", Floats({2, 4, 4}, 1))}, {{"fill", static_cast<double>(-kInf)}}));
    b.Output(b.Op(OpKind::kCausalMask, {b.Input("y", Floats({3, 3}, 2))}, {{"fill", -1e9}}));
  });
  add("rotary", [](CaseBuilder& b) {
    const ValueId x = b.Input("x", Floats({2, 3, 40, 16}, 1, -2, 2));
    b.Output(b.Op(OpKind::kRotary, {x}, {{"theta", 10000.0}, {"inverse", int64_t{0}}}));
    b.Output(b.Op(OpKind::kRotary, {x}, {{"theta", 500000.0}, {"inverse", int64_t{1}}}));
  });
  add("attention", [](CaseBuilder& b) {
    // Grouped key/value heads: 4 query heads over 2.
    const ValueId q = b.Input("q", Floats({2, 4, 17, 8}, 1, -1, 1));
    const ValueId k = b.Input("k", Floats({2, 2, 17, 8}, 2, -1, 1));
    const ValueId v = b.Input("v", Floats({2, 2, 17, 8}, 3, -1, 1));
    b.Output(b.Op(OpKind::kAttention, {q, k, v}, {{"scale", 0.35}}));
    b.Output(b.Op(OpKind::kAttentionGrad, {q, k, v, b.Input("dy", Floats({2, 4, 17, 8}, 4, -1, 1))},
                  {{"scale", 0.35}}));
  });
  add("layer_norm", [](CaseBuilder& b) {
    const ValueId x = b.Input("x", Floats({2, 3, 8}, 1, -3, 5));
    const ValueId gamma = b.Input("gamma", Floats({8}, 2));
    const ValueId beta = b.Input("beta", Floats({8}, 3));
    b.Output(b.Op(OpKind::kLayerNorm, {x, gamma, beta}, {{"eps", 1e-5}}));
  });
  add("normalize", [](CaseBuilder& b) {
    const ValueId x = b.Input("x", Floats({4, 8}, 1, -3, 5));
    b.Output(b.Op(OpKind::kNormalize, {x}, {{"eps", 1e-5}}));
    b.Output(b.Op(OpKind::kNormalize, {x}, {{"eps", 1.0}}));
  });
  add("normalize_grad", [](CaseBuilder& b) {
    const ValueId x = b.Input("x", Floats({4, 8}, 1, -3, 5));
    const ValueId dy = b.Input("dy", Floats({4, 8}, 2));
    b.Output(b.Op(OpKind::kNormalizeGrad, {x, dy}, {{"eps", 1e-5}}));
  });
  add("cross_entropy", [](CaseBuilder& b) {
    const ValueId logits = b.Input("logits", Floats({2, 3, 7}, 1, -4, 4));
    const ValueId labels = b.Input("labels", Ids({2, 3}, {0, 6, 3, 3, 1, 5}));
    b.Output(b.Op(OpKind::kCrossEntropy, {logits, labels}));
  });
  add("cross_entropy_grad", [](CaseBuilder& b) {
    const ValueId logits = b.Input("logits", Floats({2, 3, 7}, 1, -4, 4));
    const ValueId labels = b.Input("labels", Ids({2, 3}, {0, 6, 3, 3, 1, 5}));
    const ValueId dy = b.Input("dy", Floats({2, 3}, 2));
    b.Output(b.Op(OpKind::kCrossEntropyGrad, {logits, labels, dy}));
  });
  add("embedding", [](CaseBuilder& b) {
    const ValueId table = b.Input("table", Floats({10, 4}, 1));
    const ValueId ids = b.Input("ids", Ids({2, 3}, {9, 0, 3, 3, 7, 0}));
    b.Output(b.Op(OpKind::kEmbedding, {table, ids}));
  });
  add("embedding_grad", [](CaseBuilder& b) {
    const ValueId ids = b.Input("ids", Ids({2, 3}, {9, 0, 3, 3, 7, 0}));
    const ValueId dy = b.Input("dy", Floats({2, 3, 4}, 2));
    b.Output(b.Op(OpKind::kEmbeddingGrad, {ids, dy}, {{"num_embeddings", int64_t{10}}}));
  });
  return cases;
}

absl::StatusOr<OpCase> BuildCase(const OpCaseSpec& spec) {
  OpCase c{ir::Graph(spec.name), {}};
  CaseBuilder builder(c);
  spec.build(builder);
  if (!builder.status().ok()) return builder.status();
  return c;
}

std::vector<OpCaseSpec> LargeShapeCases() {
  std::vector<OpCaseSpec> cases;
  const auto add = [&](std::string name, std::function<void(CaseBuilder&)> build, double in_norm = 1e-5) {
    cases.push_back({std::move(name), std::move(build), in_norm});
  };
  // On values whose sums are exact in any order, so the reference's loops
  // and the kernels' trees agree to the mean's rounding: an element missed
  // or added (at least 0.5 in a sum below 270000) is seen.
  add(
      "large_reductions",
      [](CaseBuilder& b) {
        const ValueId x = b.Input("x", Sixteenths({600, 300}, 1));
        for (OpKind op : {OpKind::kReduceSum, OpKind::kReduceMean, OpKind::kReduceMax}) {
          b.Output(b.Op(op, {x}, Axes({0}, false)));
          b.Output(b.Op(op, {x}, Axes({1}, false)));
          b.Output(b.Op(op, {x}, Axes({0, 1}, false)));
        }
      },
      2.5e-7);
  add("long_rows", [](CaseBuilder& b) {
    for (int64_t length : {300, 3000}) {
      const ValueId x = b.Input(absl::StrCat("x", length), Floats({3, length}, 1, -3, 5));
      const ValueId y = b.Op(OpKind::kSoftmax, {x});
      b.Output(y);
      b.Output(b.Op(OpKind::kLogSoftmax, {x}));
      const ValueId dy = b.Input(absl::StrCat("dy", length), Floats({3, length}, 2));
      b.Output(b.Op(OpKind::kSoftmaxGrad, {y, dy}));
      b.Output(b.Op(OpKind::kNormalize, {x}, {{"eps", 1e-5}}));
      b.Output(b.Op(OpKind::kNormalizeGrad, {x, dy}, {{"eps", 1e-5}}));
      const ValueId labels = b.Input(absl::StrCat("labels", length), Ids({3}, {0, static_cast<int32_t>(length - 1), 7}));
      b.Output(b.Op(OpKind::kCrossEntropy, {x, labels}));
    }
  });
  // The attention kernels of the common head widths (tiled products at 32
  // and 64, a thread group per row at 128) over several query and key tiles
  // (the last partial), grouped heads, the gradient.
  add(
      "attention_common_widths",
      [](CaseBuilder& b) {
        for (int64_t width : {int64_t{32}, int64_t{64}, int64_t{128}}) {
          const uint32_t seed = static_cast<uint32_t>(width);
          const ValueId q = b.Input(absl::StrCat("q", width), Floats({2, 4, 150, width}, seed, -1, 1));
          const ValueId k = b.Input(absl::StrCat("k", width), Floats({2, 2, 150, width}, seed + 1, -1, 1));
          const ValueId v = b.Input(absl::StrCat("v", width), Floats({2, 2, 150, width}, seed + 2, -1, 1));
          const ValueId dy = b.Input(absl::StrCat("dy", width), Floats({2, 4, 150, width}, seed + 3, -1, 1));
          const double scale = 1.0 / std::sqrt(static_cast<double>(width));
          b.Output(b.Op(OpKind::kAttention, {q, k, v}, {{"scale", scale}}));
          b.Output(b.Op(OpKind::kAttentionGrad, {q, k, v, dy}, {{"scale", scale}}));
        }
      },
      1e-4);
  add("embedding_grad_repeated_ids", [](CaseBuilder& b) {
    std::vector<int32_t> ids(2000);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + i / 13) % 50);
    const ValueId id_values = b.Input("ids", Ids({4, 500}, ids));
    const ValueId dy = b.Input("dy", Floats({4, 500, 300}, 2, 0.5f, 1.5f));
    b.Output(b.Op(OpKind::kEmbeddingGrad, {id_values, dy}, {{"num_embeddings", int64_t{64}}}));
  });
  return cases;
}

}  // namespace tandem::cuda::testing
