// Bad input to the IR: shapes whose sizes overflow or pass the bounds are
// errors, never wrapped values; allocations that fail are ResourceExhausted
// naming what was being allocated, never an abort (each such case runs in a
// child capped at 1 GiB of address space); state files, IR text and
// optimizer settings from users are checked before anything is built from
// them; and messages quote only a short excerpt of the input.
#include "ir/excerpt.h"
#include "ir/limits.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/cpu/interpreter.h"
#include "backends/cpu/kernels.h"
#include "examples/models/mlp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/host_tensor.h"
#include "ir/initial_state.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/state_file.h"
#include "ir/trace.h"
#include "tests/testing/memory_limit.h"

namespace tandem::ir {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using test::ExpectWithinMemory;

bool Reports(const absl::Status& status, absl::StatusCode code, const std::string& expected) {
  if (status.code() == code && absl::StrContains(status.message(), expected)) return true;
  fprintf(stderr, "expected %s with '%s', got: %s\n", absl::StatusCodeToString(code).c_str(), expected.c_str(),
          status.ToString().c_str());
  return false;
}

TEST(TensorLimits, ElementCountsThatWouldWrapAreErrors) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_EQ(*CheckedNumElements({2, 3}), 6);
  EXPECT_EQ(*CheckedNumElements({}), 1);
  EXPECT_EQ(*CheckedNumElements({5, 0, 7}), 0);
  // A zero extent does not excuse the others: strides and loops over the
  // shape multiply them. (fuzz_state_file: [2^45, 2^22, 0] decoded, then
  // overflowed when its strides were computed.)
  EXPECT_FALSE(CheckedNumElements({big, big, 0}).ok());
  EXPECT_EQ(NumElements({big, big, 0}), 0);
  // 2^40 * 2^40 * 2^40 wraps to 0 in 64 bits; 3 * 2^63 / 2^61 ... to small numbers.
  EXPECT_THAT(CheckedNumElements({big, big, big}).status().message(),
              HasSubstr("shape [1099511627776,1099511627776,1099511627776] has more than"));
  EXPECT_FALSE(CheckedNumElements({int64_t{1} << 62, 4}).ok());
  EXPECT_THAT(CheckedNumElements({3, -1}).status().message(), HasSubstr("negative extent"));
  EXPECT_THAT(CheckedNumElements(Shape(17, 1)).status().message(), HasSubstr("rank 17 is more than the 16"));
  EXPECT_THAT(CheckedNumBytes({DType::kF32, {big}}).status().message(),
              HasSubstr("f32[1099511627776] has 1099511627776 elements of 4 bytes, more than the 1099511627776"));
  EXPECT_EQ(*CheckedNumBytes({DType::kBF16, {big / 2}}), big);
}

TEST(TensorLimits, ExcerptCutsLongTextAndShowsControlCharacters) {
  EXPECT_EQ(Excerpt("short"), "short");
  EXPECT_EQ(Excerpt(std::string(1 << 20, 'a')), std::string(40, 'a') + "...");
  EXPECT_EQ(Excerpt("a\nb\x01"), "a\\x0ab\\x01");
  // Never half a UTF-8 character: "é" is two bytes, the 40th and 41st here.
  EXPECT_EQ(Excerpt(std::string(39, 'a') + "\xc3\xa9zzz"), std::string(39, 'a') + "...");
}

TEST(HostTensorAllocate, AShapeOverTheBoundIsAnErrorNotAnAbort) {
  absl::StatusOr<HostTensor> huge = HostTensor::Allocate({DType::kF32, {int64_t{1} << 40, int64_t{1} << 40}});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<HostTensor> fine = HostTensor::Allocate({DType::kF32, {2, 3}});
  ASSERT_TRUE(fine.ok());
  EXPECT_EQ(fine->floats()[5], 0.0f);
}

TEST(HostTensorAllocate, FailedAllocationIsResourceExhaustedNamingTheTensor) {
  ExpectWithinMemory([] {
    return Reports(HostTensor::Allocate({DType::kF32, {int64_t{1} << 31}}).status(),
                   absl::StatusCode::kResourceExhausted,
                   "cannot allocate a tensor of f32[2147483648] (8589934592 bytes): out of memory");
  });
}

TEST(HostTensorAllocate, KernelsAndTheInterpreterReportFailedAllocations) {
  // A broadcast of a scalar to 8 GiB: the kernel cannot get its result.
  Graph graph("g");
  Node input;
  input.op = OpKind::kInput;
  input.attributes = Attributes{{"name", std::string("x")}, {"role", std::string("data")}};
  input.type = {DType::kF32, {}};
  graph.Append(input);
  Node broadcast;
  broadcast.op = OpKind::kBroadcast;
  broadcast.operands = {0};
  broadcast.attributes = Attributes{{"shape", std::vector<int64_t>{int64_t{1} << 31}}};
  broadcast.type = {DType::kF32, {int64_t{1} << 31}};
  graph.Append(broadcast);
  graph.AddOutput("y", 1);
  ExpectWithinMemory([&] {
    absl::StatusOr<TensorMap> outputs = cpu::RunGraph(graph, {{"x", HostTensor::Scalar(1.0f)}});
    return Reports(outputs.status(), absl::StatusCode::kResourceExhausted,
                   "%1 = broadcast: broadcast: cannot allocate a tensor of f32[2147483648]");
  });
}

TEST(HostTensorAllocate, InitialStateReportsTheTensorItCannotAllocate) {
  TrainStep step;
  step.state.push_back({"small", {DType::kF32, {4}}, StateRole::kParameter, {}, ""});
  step.state.push_back({"huge", {DType::kF32, {int64_t{1} << 31}}, StateRole::kParameter, {}, ""});
  ExpectWithinMemory([&] {
    return Reports(InitialState(step).status(), absl::StatusCode::kResourceExhausted,
                   "state 'huge': cannot allocate a tensor of f32[2147483648] (8589934592 bytes)");
  });
}

// A state file of one tensor with the given header fields and `data`.
std::string StateFileBytes(DType dtype, const Shape& shape, uint64_t byte_count, const std::string& data) {
  std::string out("TNDMSTAT", 8);
  auto put = [&out](auto value) { out.append(reinterpret_cast<const char*>(&value), sizeof(value)); };
  put(uint32_t{1});
  put(uint32_t{1});
  put(uint32_t{1});
  out += "w";
  put(static_cast<uint8_t>(dtype));
  put(static_cast<uint32_t>(shape.size()));
  for (int64_t extent : shape) put(extent);
  put(byte_count);
  return out + data;
}

TEST(StateFileLimits, ExtentsWhoseProductWrapsAreRefusedNamingTheTensor) {
  // 2^40 * 2^40 * 2^40 * 16 bytes wraps to 0 in 64 bits: it used to decode
  // as an empty tensor.
  const int64_t big = int64_t{1} << 40;
  const std::string bytes = StateFileBytes(DType::kF32, {big, big, big, 4}, 0, "");
  absl::StatusOr<TensorMap> decoded = DecodeStateFile(bytes, "wrap.state");
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoded.status().message(),
              AllOf(HasSubstr("wrap.state is not a valid state file: tensor 'w'"), HasSubstr("has more than")));
}

TEST(StateFileLimits, BytesBeyondTheFileAreRefusedBeforeAllocating) {
  ExpectWithinMemory([] {
    const std::string bytes = StateFileBytes(DType::kF32, {int64_t{1} << 30}, uint64_t{4} << 30, "abcd");
    return Reports(DecodeStateFile(bytes, "short.state").status(), absl::StatusCode::kInvalidArgument,
                   "tensor 'w' of type f32[1073741824] needs 4294967296 bytes, but only 4 are left in the file");
  });
}

TEST(StateFileLimits, AMegabyteNameIsQuotedShortly) {
  std::string bytes("TNDMSTAT", 8);
  auto put = [&bytes](auto value) { bytes.append(reinterpret_cast<const char*>(&value), sizeof(value)); };
  put(uint32_t{1});
  put(uint32_t{1});
  put(uint32_t{1} << 20);
  bytes += std::string(1 << 20, 'n');
  put(uint8_t{99});
  absl::StatusOr<TensorMap> decoded = DecodeStateFile(bytes, "name.state");
  EXPECT_THAT(decoded.status().message(), HasSubstr("has unknown dtype 99"));
  EXPECT_LT(decoded.status().message().size(), 200u);
}

TEST(IrTextLimits, HashCommentLinesAreComments) {
  absl::StatusOr<Graph> graph = ParseGraph(
      "# written by hand\n"
      "graph @g {  # the graph\n"
      "  %0 = input {name=\"x\", role=\"data\"} : f32[2]\n"
      "  output \"x\" = %0  // also a comment\n"
      "}\n");
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->size(), 1);
}

TEST(IrTextLimits, ADumpWithItsDescriptionLineParsesBack) {
  examples::MlpConfig config;
  config.num_stages = 2;
  absl::StatusOr<TrainStep> step = TraceTrainStep("mlp", examples::MlpModel(config), Adam({}), {});
  ASSERT_TRUE(step.ok()) << step.status();
  const std::string dump = "# mlp: 4 hidden layers of 64, batch 16 x 1 microbatches\n" + PrintTrainStep(*step);
  absl::StatusOr<TrainStep> parsed = ParseTrainStep(dump, "dump.ir");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, *step);
}

TEST(IrTextLimits, TypesWhoseSizeOverflowsAreRefusedAtTheirToken) {
  absl::StatusOr<Graph> graph = ParseGraph(
      "graph @g {\n"
      "  %0 = input {name=\"x\", role=\"data\"} : f32[4294967296,4294967296,4294967296]\n"
      "}\n",
      "big.ir");
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(graph.status().message(), HasSubstr("big.ir:2:40: error: shape [4294967296,4294967296,4294967296]"));
}

TEST(IrTextLimits, AMegabyteTokenIsQuotedShortly) {
  const std::string token(1 << 20, 'z');
  for (const std::string& text : {token, "graph @" + token + " {", "graph @g { %0 = " + token,
                                  "graph @g { %0 = input : " + token, "graph @g { %0 = input : f32[" + token,
                                  "graph @g { %0 = input : f32[1" + token, "graph @g { %" + std::string(1 << 20, '9'),
                                  "graph @g { %0 = input {\"" + token + "\"=1, \"" + token + "\"=2}"}) {
    absl::StatusOr<Graph> graph = ParseGraph(text, "big.ir");
    ASSERT_FALSE(graph.ok());
    EXPECT_LT(graph.status().message().size(), 300u) << graph.status().message().substr(0, 300);
  }
}

Tensor OneParameterLoss(Tracer& t) {
  Tensor w = t.Parameter("w", {4}, init::Ones());
  return sum(w * w);
}

TEST(OptimizerSettings, LearningRatesThatAreNotNumbersAboveZeroFailTheTrace) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double lr : {nan, inf, -inf, 0.0, -1e-3}) {
    absl::StatusOr<TrainStep> adam = TraceTrainStep("m", OneParameterLoss, Adam({.learning_rate = lr}));
    EXPECT_EQ(adam.status().code(), absl::StatusCode::kInvalidArgument) << lr;
    EXPECT_THAT(adam.status().message(), HasSubstr("adam: learning_rate"));
    absl::StatusOr<TrainStep> sgd = TraceTrainStep("m", OneParameterLoss, Sgd({.learning_rate = lr}));
    EXPECT_EQ(sgd.status().code(), absl::StatusCode::kInvalidArgument) << lr;
    EXPECT_THAT(sgd.status().message(), HasSubstr("sgd: learning_rate"));
  }
  EXPECT_THAT(TraceTrainStep("m", OneParameterLoss, Adam({.learning_rate = nan})).status().message(),
              HasSubstr("learning_rate nan must be a finite number above 0"));
  EXPECT_THAT(TraceTrainStep("m", OneParameterLoss, Adam({.beta1 = 1.0})).status().message(),
              HasSubstr("adam: beta1 1 must be in [0, 1)"));
  EXPECT_THAT(TraceTrainStep("m", OneParameterLoss, Sgd({.momentum = -1})).status().message(),
              HasSubstr("sgd: momentum -1 must be"));
  EXPECT_TRUE(TraceTrainStep("m", OneParameterLoss, Adam({.learning_rate = 1e-3})).ok());
}

TEST(TracedShapes, AParameterWhoseSizeOverflowsFailsTheTraceAtItsLine) {
  absl::StatusOr<TrainStep> step = TraceTrainStep(
      "m",
      [](Tracer& t) {
        Tensor w = t.Parameter("w", {int64_t{1} << 40, int64_t{1} << 40}, init::Ones());
        return sum(w);
      },
      Sgd({}));
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(step.status().message(), AllOf(HasSubstr("ir/limits_test.cc:"), HasSubstr("parameter 'w'")));
}

}  // namespace
}  // namespace tandem::ir
