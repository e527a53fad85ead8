// The CUDA backend's elementwise, conversion, data-movement and lookup
// kernels (backends/cuda/kernels/; the reductions, row and position kernels
// are cuda_row_kernels_on_cpu_test.cc's), run on the CPU on CUDA's
// execution model (backends/cuda/cuda_on_cpu.h) and compared with the CPU
// reference kernels (cpu::RunGraph of the same op), at small and
// awkward shapes: several blocks, rows that are not a multiple of 32,
// ranks 1 to 4, broadcasting, empty tensors. Ops whose result IEEE fixes
// (add, maximum, conversions, copies, the embedding gradient's sums in
// position order) must agree bit for bit; sums the kernels fold in another
// order, and the host's libm against the reference's own routines, within
// a few ulp. Every launch runs twice and must give the same bits both times.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/shape_rules.h"
#include "tests/backends/cuda/kernels_on_cpu_util.h"

namespace tandem::cuda::kernels {
namespace {

TEST(CudaKernelsOnCpu, UnaryOpsMatchTheReferenceWithinAFewUlp) {
  const std::vector<OpKind> ops = OpsOf(ir::OpFamily::kUnary);
  ASSERT_GE(ops.size(), 11u);
  for (OpKind op : ops) {
    // Ops undefined below zero (log, sqrt) are drawn from positive numbers.
    const bool positive = HasNan(Reference(op, {Random({64}, -6.0f, -0.01f, 7)}));
    for (int64_t n : {int64_t{1}, int64_t{1000}}) {  // 1000: four blocks, the last one partial
      const HostTensor x = Random({n}, positive ? 0.01f : -6.0f, 6.0f, 7);
      const HostTensor expected = Reference(op, {x});
      const HostTensor actual = RunTwice(x.type(), [&](HostTensor& out) {
        return LaunchUnary(op, {x.f32()}, {out.f32()}, n, kStream);
      });
      ExpectClose(actual, expected, 4e-7, 1e-7, absl::StrCat(ir::OpName(op), " n=", n));
    }
  }
  // An empty tensor launches nothing.
  EXPECT_EQ(LaunchUnary(OpKind::kExp, {}, {}, 0, kStream), cudaSuccess);
}

TEST(CudaKernelsOnCpu, BinaryOpsBroadcastAndMatchTheReference) {
  const ir::Shape x_shape = {3, 1, 5}, y_shape = {4, 5}, out_shape = {3, 4, 5};
  HostTensor x = Random(x_shape, -2.0f, 2.0f, 1);
  HostTensor y = Random(y_shape, -2.0f, 2.0f, 2);
  y.f32()[3] = x.f32()[3];  // some equal pairs for equal and maximum's ties
  y.f32()[7] = NAN;
  const StridedMap map = Broadcasting(out_shape, {x_shape, y_shape});
  // Ops whose result IEEE fixes; the rest within a few ulp.
  const std::vector<OpKind> exact = {OpKind::kAdd, OpKind::kSub,     OpKind::kMul,
                                     OpKind::kDiv, OpKind::kMaximum, OpKind::kEqual};
  const std::vector<OpKind> ops = OpsOf(ir::OpFamily::kBinary);
  ASSERT_GE(ops.size(), 10u);
  int broadcast = 0;
  for (OpKind op : ops) {
    if (!ir::InferResultType(op, {x.type(), y.type()}, {}).ok()) continue;  // the (x, dy) helpers: below
    ++broadcast;
    HostTensor base = x;
    if (op == OpKind::kPow) {
      for (int64_t i = 0; i < base.num_elements(); ++i) base.f32()[i] = std::fabs(base.f32()[i]) + 0.1f;
    }
    const HostTensor expected = Reference(op, {base, y});
    const HostTensor actual = RunTwice({DType::kF32, out_shape}, [&](HostTensor& out) {
      return LaunchBinary(op, {base.f32()}, {y.f32()}, {out.f32()}, map, kStream);
    });
    if (std::find(exact.begin(), exact.end(), op) != exact.end()) {
      ExpectSameBits(actual, expected, ir::OpName(op));
    } else {
      ExpectClose(actual, expected, 4e-7, 0, ir::OpName(op));
    }
  }
  EXPECT_GE(broadcast, 7);
  // The gradient helpers take (x, dy) of one shape; rank 1 and rank 4.
  for (const ir::Shape& shape : std::vector<ir::Shape>{{300}, {2, 3, 4, 5}}) {
    const HostTensor a = Random(shape, -4.0f, 4.0f, 3), dy = Random(shape, -1.0f, 1.0f, 4);
    const StridedMap same = Broadcasting(shape, {shape, shape});
    for (OpKind op : ops) {
      if (ir::InferResultType(op, {x.type(), y.type()}, {}).ok()) continue;
      const HostTensor expected = Reference(op, {a, dy});
      const HostTensor actual = RunTwice(a.type(), [&](HostTensor& out) {
        return LaunchBinary(op, {a.f32()}, {dy.f32()}, {out.f32()}, same, kStream);
      });
      ExpectClose(actual, expected, 1e-6, 1e-7, absl::StrCat(ir::OpName(op), " rank ", shape.size()));
    }
  }
}

TEST(CudaKernelsOnCpu, WhereBroadcastsItsThreeOperandsExactly) {
  const ir::Shape cond_shape = {3, 1, 1}, x_shape = {4, 5}, y_shape = {3, 4, 5}, out_shape = {3, 4, 5};
  const HostTensor cond = HostTensor::FromFloats(cond_shape, {1.0f, 0.0f, -2.0f});
  const HostTensor x = Random(x_shape, -1, 1, 5), y = Random(y_shape, -1, 1, 6);
  const HostTensor expected = Reference(OpKind::kWhere, {cond, x, y});
  const StridedMap map = Broadcasting(out_shape, {cond_shape, x_shape, y_shape});
  const HostTensor actual = RunTwice({DType::kF32, out_shape}, [&](HostTensor& out) {
    return LaunchWhere({cond.f32()}, {x.f32()}, {y.f32()}, {out.f32()}, map, kStream);
  });
  ExpectSameBits(actual, expected, "where");
}

TEST(CudaKernelsOnCpu, ElementwiseKernelsOnBf16GiveTheBitsOfWideningAndNarrowing) {
  // bf16 operands and results in one kernel against widen, f32 kernel,
  // narrow: every unary op, every broadcasting binary op, and where.
  const ir::Shape x_shape = {3, 1, 5}, y_shape = {4, 5}, out_shape = {3, 4, 5};
  const HostTensor x16 = ToBf16(Random(x_shape, 0.05f, 3.0f, 11)), y16 = ToBf16(Random(y_shape, -3.0f, 3.0f, 12));
  const HostTensor x = ToF32(x16), y = ToF32(y16);
  for (OpKind op : OpsOf(ir::OpFamily::kUnary)) {
    const HostTensor one = RunTwice(x16.type(), [&](HostTensor& out) {
      return LaunchUnary(op, {x16.data(), true}, {out.data(), true}, x.num_elements(), kStream);
    });
    const HostTensor wide = RunTwice(x.type(), [&](HostTensor& out) {
      return LaunchUnary(op, {x.f32()}, {out.f32()}, x.num_elements(), kStream);
    });
    ExpectSameBits(one, ToBf16(wide), ir::OpName(op));
  }
  const StridedMap map = Broadcasting(out_shape, {x_shape, y_shape});
  for (OpKind op : OpsOf(ir::OpFamily::kBinary)) {
    if (!ir::InferResultType(op, {x.type(), y.type()}, {}).ok()) continue;
    const HostTensor one = RunTwice({DType::kBF16, out_shape}, [&](HostTensor& out) {
      return LaunchBinary(op, {x16.data(), true}, {y16.data(), true}, {out.data(), true}, map, kStream);
    });
    const HostTensor wide = RunTwice({DType::kF32, out_shape}, [&](HostTensor& out) {
      return LaunchBinary(op, {x.f32()}, {y.f32()}, {out.f32()}, map, kStream);
    });
    ExpectSameBits(one, ToBf16(wide), ir::OpName(op));
  }
  const HostTensor cond = ToBf16(HostTensor::FromFloats({3, 1, 1}, {1.0f, 0.0f, 1.0f}));
  const StridedMap where_map = Broadcasting(out_shape, {{3, 1, 1}, y_shape, out_shape});
  const HostTensor z16 = ToBf16(Random(out_shape, -1.0f, 1.0f, 13));
  const HostTensor picked = RunTwice({DType::kBF16, out_shape}, [&](HostTensor& out) {
    return LaunchWhere({cond.data(), true}, {y16.data(), true}, {z16.data(), true}, {out.data(), true}, where_map,
                       kStream);
  });
  const HostTensor wide = RunTwice({DType::kF32, out_shape}, [&](HostTensor& out) {
    const HostTensor z = ToF32(z16);
    return LaunchWhere({ToF32(cond).f32()}, {y.f32()}, {z.f32()}, {out.f32()}, where_map, kStream);
  });
  ExpectSameBits(picked, ToBf16(wide), "where");
}

// A fused run (a bias add, GELU, a scale by one value, a residual add)
// in one launch gives the bits of its steps launched one by one, in f32
// and in bf16 (each bf16 step rounded before the next reads it, as a
// bf16 tensor in memory would be); only the steps asked for are stored.
TEST(CudaKernelsOnCpu, AFusedRunGivesTheBitsOfItsStepsLaunchedOneByOne) {
  const ir::Shape shape = {3, 4, 5};
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f32");
    const DType dtype = bf16 ? DType::kBF16 : DType::kF32;
    auto make = [&](ir::Shape s, uint32_t seed) {
      const HostTensor f = Random(std::move(s), -3.0f, 3.0f, seed);
      return bf16 ? ToBf16(f) : f;
    };
    const HostTensor x = make(shape, 21), bias = make({5}, 22), scale = make({}, 23), residual = make(shape, 24);
    const int64_t n = x.num_elements();
    // One by one: h = x + bias, g = gelu(h), t = g * scale, u = t + residual.
    const HostTensor h = RunTwice({dtype, shape}, [&](HostTensor& out) {
      return LaunchBinary(OpKind::kAdd, {x.data(), bf16}, {bias.data(), bf16}, {out.data(), bf16},
                          Broadcasting(shape, {shape, {5}}), kStream);
    });
    const HostTensor g = RunTwice({dtype, shape}, [&](HostTensor& out) {
      return LaunchUnary(OpKind::kGelu, {h.data(), bf16}, {out.data(), bf16}, n, kStream);
    });
    const HostTensor t = RunTwice({dtype, shape}, [&](HostTensor& out) {
      return LaunchBinary(OpKind::kMul, {g.data(), bf16}, {scale.data(), bf16}, {out.data(), bf16},
                          Broadcasting(shape, {shape, {}}), kStream);
    });
    const HostTensor u = RunTwice({dtype, shape}, [&](HostTensor& out) {
      return LaunchBinary(OpKind::kAdd, {t.data(), bf16}, {residual.data(), bf16}, {out.data(), bf16},
                          Broadcasting(shape, {shape, shape}), kStream);
    });

    HostTensor fused_g = Output({dtype, shape}), fused_u = Output({dtype, shape});
    FusedProgram program;
    program.num_inputs = 4;
    program.inputs[0] = {x.data(), bf16, n};
    program.inputs[1] = {bias.data(), bf16, 5};
    program.inputs[2] = {scale.data(), bf16, 1};
    program.inputs[3] = {residual.data(), bf16, n};
    program.num_steps = 4;
    program.steps[0] = {OpKind::kAdd, 2, {-1, -2}, bf16, nullptr};  // h: not stored
    program.steps[1] = {OpKind::kGelu, 1, {0, 0}, bf16, fused_g.data()};
    program.steps[2] = {OpKind::kMul, 2, {1, -3}, bf16, nullptr};
    program.steps[3] = {OpKind::kAdd, 2, {2, -4}, bf16, fused_u.data()};
    ASSERT_EQ(LaunchFused(program, n, kStream), cudaSuccess);
    ExpectSameBits(fused_g, g, "gelu, fused");
    ExpectSameBits(fused_u, u, "the residual add, fused");
    if (bf16) {  // rounding each step matters: the f32 chain on the same inputs differs somewhere
      HostTensor wide_u = Output({DType::kF32, shape});
      FusedProgram wide = program;
      for (int k = 0; k < 4; ++k) wide.inputs[k].bf16 = true;
      for (int s = 0; s < 4; ++s) wide.steps[s].bf16 = false;
      wide.steps[1].out = nullptr;
      wide.steps[3].out = wide_u.data();
      ASSERT_EQ(LaunchFused(wide, n, kStream), cudaSuccess);
      EXPECT_NE(std::memcmp(ToBf16(wide_u).data(), u.data(), static_cast<size_t>(u.num_bytes())), 0);
    }
  }
}

// A tensor's bytes placed `shift` bytes past a 16-byte boundary: the
// elementwise kernels move 4 elements a thread in one access only where the
// storage is aligned for it, element by element elsewhere.
class Placed {
 public:
  Placed(const HostTensor& t, int64_t shift) : type_(t.type()), storage_(t.num_bytes() + 32) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    at_ = storage_.data() + ((16 - base % 16) % 16) + shift;
    std::memcpy(at_, t.data(), static_cast<size_t>(t.num_bytes()));
  }
  void* data() { return at_; }
  ElementsIn In() const { return {at_, type_.dtype == DType::kBF16}; }
  ElementsOut Out() { return {at_, type_.dtype == DType::kBF16}; }
  HostTensor Tensor() const {
    HostTensor t(type_);
    std::memcpy(t.data(), at_, static_cast<size_t>(t.num_bytes()));
    return t;
  }

 private:
  ir::TensorType type_;
  std::vector<uint8_t> storage_;
  uint8_t* at_;
};

// The elementwise kernels take 4 consecutive elements a thread (a run),
// loaded and stored in one access where the storage is aligned and the run
// stays inside its operand's period. Aligned or not, whole runs or a short
// last one, biases whose period runs cross or not, f32 or bf16: a unary
// op, a bias add and a fused bias add + GELU give the same bits, and the
// add the reference's.
TEST(CudaKernelsOnCpu, ElementwiseRunsGiveTheSameBitsAlignedOrNotWholeOrPartial) {
  for (const bool bf16 : {false, true}) {
    const DType dtype = bf16 ? DType::kBF16 : DType::kF32;
    const int64_t element = bf16 ? 2 : 4;
    for (const auto& [rows, period] : {std::pair<int64_t, int64_t>{7, 3}, {5, 8}, {3, 13}}) {
      const ir::Shape shape = {rows, period};
      const int64_t n = rows * period;
      const HostTensor x32 = Random(shape, -3.0f, 3.0f, 31), bias32 = Random({period}, -1.0f, 1.0f, 32);
      const HostTensor x = bf16 ? ToBf16(x32) : x32, bias = bf16 ? ToBf16(bias32) : bias32;
      const HostTensor added = Reference(OpKind::kAdd, {bf16 ? ToF32(x) : x, bf16 ? ToF32(bias) : bias});
      std::vector<HostTensor> gelu, sum, fused;
      for (const int64_t shift : {int64_t{0}, element}) {
        const std::string what =
            absl::StrCat(bf16 ? "bf16" : "f32", ", ", rows, " x ", period, ", ", shift, " bytes past 16");
        Placed px(x, shift), pbias(bias, shift), out(Output({dtype, shape}), shift),
            out2(Output({dtype, shape}), shift);
        ASSERT_EQ(LaunchUnary(OpKind::kGelu, px.In(), out.Out(), n, kStream), cudaSuccess) << what;
        gelu.push_back(out.Tensor());
        ASSERT_EQ(
            LaunchBinary(OpKind::kAdd, px.In(), pbias.In(), out.Out(), Broadcasting(shape, {shape, {period}}), kStream),
            cudaSuccess)
            << what;
        sum.push_back(out.Tensor());
        ExpectSameBits(bf16 ? ToF32(sum.back()) : sum.back(), bf16 ? ToF32(ToBf16(added)) : added, "add, " + what);
        FusedProgram program;
        program.num_inputs = 2;
        program.inputs[0] = {px.data(), bf16, n};
        program.inputs[1] = {pbias.data(), bf16, period};
        program.num_steps = 2;
        program.steps[0] = {OpKind::kAdd, 2, {-1, -2}, bf16, out.data()};
        program.steps[1] = {OpKind::kGelu, 1, {0, 0}, bf16, out2.data()};
        ASSERT_EQ(LaunchFused(program, n, kStream), cudaSuccess) << what;
        ExpectSameBits(out.Tensor(), sum.back(), "fused add, " + what);
        fused.push_back(out2.Tensor());
      }
      const std::string what = absl::StrCat(bf16 ? "bf16" : "f32", ", ", rows, " x ", period);
      ExpectSameBits(gelu[1], gelu[0], "gelu aligned and not, " + what);
      ExpectSameBits(sum[1], sum[0], "add aligned and not, " + what);
      ExpectSameBits(fused[1], fused[0], "fused gelu aligned and not, " + what);
    }
  }
}

TEST(CudaKernelsOnCpu, AFusedProgramOutOfItsBoundsIsRefused) {
  float x[4] = {1, 2, 3, 4}, out[4] = {};
  FusedProgram good;
  good.num_inputs = 1;
  good.inputs[0] = {x, false, 4};
  good.num_steps = 1;
  good.steps[0] = {OpKind::kNeg, 1, {-1, 0}, false, out};
  ASSERT_EQ(LaunchFused(good, 4, kStream), cudaSuccess);
  EXPECT_EQ(out[3], -4.0f);
  auto refused = [&](auto&& spoil) {
    FusedProgram bad = good;
    spoil(bad);
    return LaunchFused(bad, 4, kStream) == cudaErrorInvalidValue;
  };
  EXPECT_TRUE(refused([](FusedProgram& p) { p.num_steps = 0; }));
  EXPECT_TRUE(refused([](FusedProgram& p) { p.num_steps = kMaxFusedSteps + 1; }));
  EXPECT_TRUE(refused([](FusedProgram& p) { p.num_inputs = kMaxFusedInputs + 1; }));
  EXPECT_TRUE(refused([](FusedProgram& p) { p.steps[0].operands[0] = -2; }));  // no second input
  EXPECT_TRUE(refused([](FusedProgram& p) { p.steps[0].operands[0] = 0; }));   // itself, not an earlier step
  EXPECT_TRUE(refused([](FusedProgram& p) { p.steps[0].arity = 3; }));
  EXPECT_TRUE(refused([](FusedProgram& p) { p.inputs[0].period = 0; }));
  EXPECT_EQ(LaunchFused(good, 0, kStream), cudaSuccess);  // nothing to compute
}

TEST(CudaKernelsOnCpu, ConversionsRoundAsTheReferenceDoes) {
  HostTensor f = HostTensor::FromFloats(
      {12}, {0.0f, -0.0f, 1.5f, -1.5f, 2.5f, 1e10f, -1e10f, INFINITY, -INFINITY, 1.00390625f, 1.01171875f, 3.0e38f});
  const HostTensor i = HostTensor::FromInts({6}, {0, 1, -1, 16777217, -2147483647 - 1, 2147483647});
  auto convert = [](const HostTensor& in, DType to) {
    return Reference(OpKind::kConvert, {in}, {{"dtype", std::string(ir::DTypeName(to))}});
  };
  const HostTensor to_i32 = RunTwice({DType::kI32, f.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kF32ToI32, f.data(), out.data(), f.num_elements(), kStream);
  });
  ExpectSameBits(to_i32, convert(f, DType::kI32), "f32 -> i32");
  const HostTensor to_f32 = RunTwice({DType::kF32, i.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kI32ToF32, i.data(), out.data(), i.num_elements(), kStream);
  });
  ExpectSameBits(to_f32, convert(i, DType::kF32), "i32 -> f32");
  const HostTensor to_bf16 = RunTwice({DType::kBF16, f.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kF32ToBf16, f.data(), out.data(), f.num_elements(), kStream);
  });
  ExpectSameBits(to_bf16, convert(f, DType::kBF16), "f32 -> bf16 (ties to even)");
  const HostTensor matmul_operand = RunTwice({DType::kBF16, f.shape()}, [&](HostTensor& out) {
    return LaunchToBf16(f.f32(), out.data(), f.num_elements(), kStream);
  });
  ExpectSameBits(matmul_operand, to_bf16, "LaunchToBf16");
  const HostTensor back = RunTwice({DType::kF32, f.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kBf16ToF32, to_bf16.data(), out.data(), f.num_elements(), kStream);
  });
  ExpectSameBits(back, convert(to_bf16, DType::kF32), "bf16 -> f32");
  const HostTensor bf16_to_i32 = RunTwice({DType::kI32, f.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kBf16ToI32, to_bf16.data(), out.data(), f.num_elements(), kStream);
  });
  ExpectSameBits(bf16_to_i32, convert(to_bf16, DType::kI32), "bf16 -> i32");
  const HostTensor i32_to_bf16 = RunTwice({DType::kBF16, i.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kI32ToBf16, i.data(), out.data(), i.num_elements(), kStream);
  });
  ExpectSameBits(i32_to_bf16, convert(i, DType::kBF16), "i32 -> bf16");

  // A NaN stays a NaN. Its bits do not: the GPU writes bf16's canonical NaN
  // (0x7fff, cuda_bf16.hpp), the reference keeps the sign and payload.
  const HostTensor nan = HostTensor::FromFloats({2}, {NAN, -NAN});
  const HostTensor nan_bf16 = RunTwice({DType::kBF16, nan.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kF32ToBf16, nan.data(), out.data(), 2, kStream);
  });
  const HostTensor nan_back = convert(nan_bf16, DType::kF32);
  EXPECT_TRUE(std::isnan(nan_back.f32()[0]) && std::isnan(nan_back.f32()[1]));
  const HostTensor nan_to_i32 = RunTwice({DType::kI32, nan.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kF32ToI32, nan.data(), out.data(), 2, kStream);
  });
  ExpectSameBits(nan_to_i32, convert(nan, DType::kI32), "NaN -> i32");
}

TEST(CudaKernelsOnCpu, GatherTransposesAndBroadcastsBothElementSizes) {
  // transpose([2,3,5], {2,0,1}) -> [5,2,3]: output axis a reads input axis perm[a].
  const HostTensor x = Random({2, 3, 5}, -1, 1, 8);
  const HostTensor expected = Reference(OpKind::kTranspose, {x}, {{"permutation", std::vector<int64_t>{2, 0, 1}}});
  StridedMap map;
  map.rank = 3;
  map.num_operands = 1;
  const int64_t extents[3] = {5, 2, 3}, strides[3] = {1, 15, 5};
  for (int axis = 0; axis < 3; ++axis) {
    map.extents[axis] = extents[axis];
    map.strides[0][axis] = strides[axis];
  }
  const HostTensor actual = RunTwice(expected.type(), [&](HostTensor& out) {
    return LaunchGather(x.data(), out.data(), 4, map, kStream);
  });
  ExpectSameBits(actual, expected, "transpose f32");
  // broadcast_to(bf16 [1,3] -> [300,3]): 900 elements, several blocks.
  const HostTensor row = Reference(OpKind::kConvert, {Random({1, 3}, -1, 1, 9)}, {{"dtype", std::string("bf16")}});
  const HostTensor wide = Reference(OpKind::kBroadcast, {row}, {{"shape", std::vector<int64_t>{300, 3}}});
  const StridedMap repeat = Broadcasting({300, 3}, {{1, 3}});
  const HostTensor gathered = RunTwice(wide.type(), [&](HostTensor& out) {
    return LaunchGather(row.data(), out.data(), 2, repeat, kStream);
  });
  ExpectSameBits(gathered, wide, "broadcast bf16");
  EXPECT_EQ(LaunchGather(x.data(), nullptr, 8, map, kStream), cudaErrorInvalidValue) << "8-byte elements";
}

TEST(CudaKernelsOnCpu, CopyRowsSlicesAsTheReference) {
  const HostTensor x = Random({70, 10}, -1, 1, 10);
  const HostTensor expected =
      Reference(OpKind::kSlice, {x}, {{"axis", int64_t{1}}, {"start", int64_t{3}}, {"limit", int64_t{8}}});
  const HostTensor actual = RunTwice(expected.type(), [&](HostTensor& out) {
    return LaunchCopyRows(x.f32() + 3, 10, out.data(), 5, 70, 5, 4, kStream);
  });
  ExpectSameBits(actual, expected, "slice");
}

// Where whole 16-byte units move together (aligned pointers, the last axis
// kept, every stride and row a whole number of units), gathers and row
// copies move units: a head split [2, 6, 3, 8] -> [2, 3, 6, 8] in f32 (two
// units a row) and bf16 (one), and slices of 4-element-aligned columns.
// Where they do not (an odd offset), elements: the same bits either way.
TEST(CudaKernelsOnCpu, GatherAndCopyRowsMoveSixteenByteUnitsWhereWholeUnitsMove) {
  const HostTensor x = Random({2, 6, 3, 8}, -1, 1, 12);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(x.f32()) % 16, 0u);
  StridedMap map;
  map.rank = 4;
  map.num_operands = 1;
  const int64_t extents[4] = {2, 3, 6, 8}, strides[4] = {144, 8, 24, 1};
  for (int axis = 0; axis < 4; ++axis) {
    map.extents[axis] = extents[axis];
    map.strides[0][axis] = strides[axis];
  }
  const ir::Attributes split = {{"permutation", std::vector<int64_t>{0, 2, 1, 3}}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const HostTensor in = dtype == DType::kF32 ? x : Reference(OpKind::kConvert, {x}, {{"dtype", std::string("bf16")}});
    const HostTensor expected = Reference(OpKind::kTranspose, {in}, split);
    const int size = static_cast<int>(ir::DTypeSize(dtype));
    ExpectSameBits(RunTwice(expected.type(), [&](HostTensor& out) {
                     return LaunchGather(in.data(), out.data(), size, map, kStream);
                   }),
                   expected, absl::StrCat("head split, ", size, "-byte elements"));
  }
  // Columns 4..11 of [70, 16] rows (whole units), then columns 3..10 (not).
  const HostTensor rows = Random({70, 16}, -1, 1, 13);
  for (int64_t start : {int64_t{4}, int64_t{3}}) {
    const HostTensor expected =
        Reference(OpKind::kSlice, {rows}, {{"axis", int64_t{1}}, {"start", start}, {"limit", start + 8}});
    ExpectSameBits(RunTwice(expected.type(), [&](HostTensor& out) {
                     return LaunchCopyRows(rows.f32() + start, 16, out.data(), 8, 70, 8, 4, kStream);
                   }),
                   expected, absl::StrCat("slice from column ", start));
  }
}

TEST(CudaKernelsOnCpu, TheRangeCheckFindsTheFirstBadIdWhateverTheThreadsFindFirst) {
  std::vector<int32_t> values(1000, 3);
  values[700] = 10;  // found early by its thread's share, later in index order
  values[301] = -1;
  RangeCheckResult result{};
  ASSERT_EQ(LaunchFindFirstOutOfRange(values.data(), 1000, 10, &result, kStream), cudaSuccess);
  EXPECT_EQ(result.position, 301);
  EXPECT_EQ(result.value, -1);
  values[301] = 9;
  ASSERT_EQ(LaunchFindFirstOutOfRange(values.data(), 1000, 10, &result, kStream), cudaSuccess);
  EXPECT_EQ(result.position, 700);
  values[700] = 0;
  ASSERT_EQ(LaunchFindFirstOutOfRange(values.data(), 1000, 10, &result, kStream), cudaSuccess);
  EXPECT_EQ(result.position, -1);
}

// In f32, and in bf16 loaded and stored by the kernels themselves (the
// reference widens, computes in f32 and narrows).
TEST(CudaKernelsOnCpu, EmbeddingAndItsGradientAreTheReferencesBitsInF32AndBf16) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    auto typed = [&](const HostTensor& x) { return dtype == DType::kBF16 ? ToBf16(x) : x; };
    for (int64_t width : {int64_t{6}, int64_t{300}}) {  // 32 and 256 threads a row
      const HostTensor table = typed(Random({10, width}, -1, 1, 23));
      const HostTensor ids = Ids({3, 14}, 10, 24);  // 42 positions, ids repeated
      const std::string what = absl::StrCat(" width ", width, " ", ir::DTypeName(dtype));
      ExpectSameBits(RunTwice({dtype, {3, 14, width}},
                              [&](HostTensor& out) {
                                return LaunchEmbedding(In(table), ids.i32(), Out(out), 42, 10, width, kStream);
                              }),
                     Reference(OpKind::kEmbedding, {table, ids}), "embedding" + what);
      const HostTensor dy = typed(Random({3, 14, width}, -1, 1, 25));
      std::vector<std::byte> scratch(EmbeddingGradScratchBytes(42));
      ExpectSameBits(RunTwice({dtype, {10, width}},
                              [&](HostTensor& out) {
                                return LaunchEmbeddingGrad(ids.i32(), In(dy), Out(out), 42, 10, width,
                                                           scratch.data(), kStream);
                              }),
                     Reference(OpKind::kEmbeddingGrad, {ids, dy}, {{"num_embeddings", int64_t{10}}}),
                     "embedding_grad (sums in position order)" + what);
    }
  }
}

TEST(CudaKernelsOnCpu, FillAndTheOrderedSumOfReplicasAreExact) {
  const HostTensor filled = RunTwice({DType::kF32, {1000}}, [&](HostTensor& out) {
    uint32_t bits;
    const float value = -2.5f;
    std::memcpy(&bits, &value, 4);
    return LaunchFill(bits, 4, out.data(), 1000, kStream);
  });
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(filled.f32()[i], -2.5f) << i;
  // bf16: 2-byte elements, an odd count (a 4-byte fill would write past the end).
  const HostTensor filled16 = RunTwice({DType::kBF16, {1001}}, [&](HostTensor& out) {
    return LaunchFill(ir::FloatToBf16(-2.5f), 2, out.data(), 1001, kStream);
  });
  const auto* bf16 = reinterpret_cast<const uint16_t*>(filled16.data());
  for (int64_t i = 0; i < 1001; ++i) ASSERT_EQ(ir::Bf16ToFloat(bf16[i]), -2.5f) << i;
  HostTensor unused({DType::kF32, {1}});
  EXPECT_EQ(LaunchFill(0, 8, unused.data(), 1, kStream), cudaErrorInvalidValue);
  const HostTensor slots = Random({3, 1000}, -1e3f, 1e3f, 26);
  const HostTensor summed = RunTwice({DType::kF32, {1000}}, [&](HostTensor& out) {
    return LaunchSumInOrder(slots.f32(), 1000, 3, out.f32(), 1000, kStream);
  });
  for (int64_t i = 0; i < 1000; ++i) {
    const float expected = (slots.f32()[i] + slots.f32()[1000 + i]) + slots.f32()[2000 + i];
    ASSERT_EQ(std::memcmp(&summed.f32()[i], &expected, 4), 0) << i;
  }
}

}  // namespace
}  // namespace tandem::cuda::kernels
