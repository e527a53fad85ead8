// Round trips of ActorPrograms and tensors through their Cap'n Proto wire
// forms, and rejection of malformed input.
#include "rpc/program_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "capnp/any.h"
#include "capnp/message.h"
#include "ir/actor_program.h"
#include "ir/host_tensor.h"
#include "ir/limits.h"
#include "rpc/status_convert.h"
#include "rpc/step_codec.h"
#include "tests/testing/test_programs.h"

namespace tandem::rpc {
namespace {

using ::testing::HasSubstr;

TEST(ProgramCodec, RoundTripsEveryFieldAndTheHash) {
  actor::testing::TwoStageForward programs = actor::testing::MakeTwoStageForward(3);
  actor::testing::FillPair fill = actor::testing::MakeFillPair();
  for (const ir::ActorProgram* original : {&programs.actor0, &programs.actor1, &fill.filler}) {
    capnp::MallocMessageBuilder message;
    EncodeProgram(*original, message.initRoot<wire::ActorProgram>());
    uint64_t hash = ir::HashActorProgram(*original);
    absl::StatusOr<ir::ActorProgram> decoded =
        DecodeProgram(message.getRoot<wire::ActorProgram>().asReader(), hash);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, *original);
    EXPECT_EQ(ir::HashActorProgram(*decoded), hash);
  }
}

TEST(ProgramCodec, RejectsAProgramSentUnderAnotherHash) {
  ir::ActorProgram original = actor::testing::MakeTwoStageForward(2).actor0;
  capnp::MallocMessageBuilder message;
  EncodeProgram(original, message.initRoot<wire::ActorProgram>());
  absl::StatusOr<ir::ActorProgram> decoded = DecodeProgram(
      message.getRoot<wire::ActorProgram>().asReader(), ir::HashActorProgram(original) + 1);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoded.status().message(), HasSubstr("sent under"));
}

TEST(ProgramCodec, RejectsUnparsableGraphTextNamingTheFunction) {
  ir::ActorProgram original = actor::testing::MakeTwoStageForward(2).actor0;
  capnp::MallocMessageBuilder message;
  auto builder = message.initRoot<wire::ActorProgram>();
  EncodeProgram(original, builder);
  builder.getFunctions()[0].setGraphText("this is not IR");
  absl::StatusOr<ir::ActorProgram> decoded = DecodeProgram(builder.asReader());
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoded.status().message(), HasSubstr(original.functions[0].name));
}

TEST(ProgramCodec, RejectsAProgramThatDoesNotVerify) {
  ir::ActorProgram original = actor::testing::MakeTwoStageForward(2).actor0;
  capnp::MallocMessageBuilder message;
  auto builder = message.initRoot<wire::ActorProgram>();
  EncodeProgram(original, builder);
  builder.getInstructions()[0].getInputs().set(0, 9999);  // no such buffer
  absl::StatusOr<ir::ActorProgram> decoded = DecodeProgram(builder.asReader());
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoded.status().message(), HasSubstr("does not verify"));
}

TEST(TensorCodec, RoundTripsFloatsAndInts) {
  for (const ir::HostTensor& original :
       {ir::HostTensor::FromFloats({2, 3}, {0.5f, -1.f, 2.f, 3.25f, 1e-7f, -0.f}),
        ir::HostTensor::FromInts({4}, {1, -2, 3, 1 << 30}), ir::HostTensor::Scalar(7.f)}) {
    capnp::MallocMessageBuilder message;
    EncodeTensor(original, message.initRoot<wire::Tensor>());
    absl::StatusOr<ir::HostTensor> decoded =
        DecodeTensor(message.getRoot<wire::Tensor>().asReader(), "x");
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_TRUE(decoded->BitwiseEquals(original)) << ir::DescribeTensor(*decoded);
  }
}

TEST(StepCodec, RoundTripsInputsAndResultsAndRefusesAnEntryTwice) {
  const ir::StepInputs inputs = {{{"x", 0}, ir::HostTensor::Scalar(1.f)},
                               {{"x", 1}, ir::HostTensor::Scalar(2.f)},
                               {{"step", -1}, ir::HostTensor::Scalar(3.f)}};
  capnp::MallocMessageBuilder message;
  auto params = message.initRoot<wire::Actor::RunStepParams>();
  EncodeStepInputs(inputs, params.initInputs(static_cast<unsigned>(inputs.size())));
  absl::StatusOr<ir::StepInputs> decoded = DecodeStepInputs(params.asReader().getInputs(), "input");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), inputs.size());
  for (const auto& [key, tensor] : inputs) EXPECT_TRUE(decoded->at(key).BitwiseEquals(tensor)) << key.binding;
  params.getInputs()[2].setMicrobatch(0);  // entries in key order: ("x", 1) becomes ("x", 0)
  EXPECT_THAT(DecodeStepInputs(params.asReader().getInputs(), "input").status().message(),
              HasSubstr("input x for microbatch 0 is given twice"));

  const ir::StepResults results = {{"loss", {{0, ir::HostTensor::Scalar(0.5f)}, {3, ir::HostTensor::Scalar(0.25f)}}}};
  capnp::MallocMessageBuilder reply_message;
  auto reply = reply_message.initRoot<wire::Actor::RunStepResults>();
  EncodeStepResults(results, reply.initResults(CountStepResults(results)));
  absl::StatusOr<ir::StepResults> back = DecodeStepResults(reply.asReader().getResults(), "step 1");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->at("loss").at(3).BitwiseEquals(results.at("loss").at(3)));
  reply.getResults()[1].setMicrobatch(0);
  EXPECT_THAT(DecodeStepResults(reply.asReader().getResults(), "step 1").status().message(),
              HasSubstr("result loss for microbatch 0 of step 1 is given twice"));
}

TEST(StepCodec, RoundTripsAStepsOutputsThroughEitherReply) {
  ir::StepOutputs outputs;
  outputs.results["loss"][1] = ir::HostTensor::Scalar(0.75f);
  outputs.peak_live_bytes = 4096;
  outputs.origin_ns = 123456789;
  outputs.inputs_ns = 2500;
  outputs.settle_ns = 3100;
  outputs.timings = {{0, 10, 5}, {1, 20, 7}, {4, 40, 1}};
  outputs.calls = 3;  // the launcher's count: not on the wire
  capnp::MallocMessageBuilder step_message;
  auto step_reply = step_message.initRoot<wire::Actor::RunStepResults>();
  EncodeStepOutputs(outputs, step_reply);
  capnp::MallocMessageBuilder range_message;
  auto range_reply = range_message.initRoot<wire::Actor::RunRangeResults>();
  EncodeStepOutputs(outputs, range_reply);
  for (absl::StatusOr<ir::StepOutputs> back : {DecodeStepOutputs(step_reply.asReader(), "step 1"),
                                               DecodeStepOutputs(range_reply.asReader(), "step 1")}) {
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(back->results.at("loss").at(1).BitwiseEquals(outputs.results.at("loss").at(1)));
    EXPECT_EQ(back->peak_live_bytes, 4096);
    EXPECT_EQ(back->origin_ns, 123456789);
    EXPECT_EQ(back->inputs_ns, 2500);
    EXPECT_EQ(back->settle_ns, 3100);
    EXPECT_EQ(back->timings, outputs.timings);
    EXPECT_EQ(back->calls, 0);
  }
}

// Found by fuzz_tensor_decoder: names that differ only after a NUL byte
// came back as one name, given twice.
TEST(StepCodec, KeepsNamesWholeThroughANulByte) {
  const std::string first("x\0a", 3);
  const std::string second("x\0b", 3);
  const ir::StepInputs inputs = {{{first, 0}, ir::HostTensor::Scalar(1.f)}, {{second, 0}, ir::HostTensor::Scalar(2.f)}};
  capnp::MallocMessageBuilder message;
  auto params = message.initRoot<wire::Actor::RunStepParams>();
  EncodeStepInputs(inputs, params.initInputs(static_cast<unsigned>(inputs.size())));
  absl::StatusOr<ir::StepInputs> decoded = DecodeStepInputs(params.asReader().getInputs(), "input");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->at({second, 0}).BitwiseEquals(inputs.at({second, 0})));

  const ir::StepResults results = {{first, {{0, ir::HostTensor::Scalar(0.5f)}}}};
  capnp::MallocMessageBuilder reply_message;
  auto reply = reply_message.initRoot<wire::Actor::RunStepResults>();
  EncodeStepResults(results, reply.initResults(CountStepResults(results)));
  absl::StatusOr<ir::StepResults> back = DecodeStepResults(reply.asReader().getResults(), "step 1");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->contains(first));
}

TEST(TensorCodec, RejectsAByteCountThatDoesNotMatchTheShape) {
  capnp::MallocMessageBuilder message;
  auto builder = message.initRoot<wire::Tensor>();
  EncodeTensor(ir::HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6}), builder);
  builder.initData(20);  // 5 floats for a [2,3] tensor
  absl::StatusOr<ir::HostTensor> decoded = DecodeTensor(builder.asReader(), "tokens@1");
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoded.status().message(), HasSubstr("tokens@1"));
  EXPECT_THAT(decoded.status().message(), HasSubstr("24 bytes but 20"));
}

TEST(TensorCodec, RejectsNegativeAndHugeShapes) {
  capnp::MallocMessageBuilder message;
  auto builder = message.initRoot<wire::Tensor>();
  auto shape = builder.initType().initShape(2);
  shape.set(0, -1);
  shape.set(1, 4);
  EXPECT_EQ(DecodeTensor(builder.asReader(), "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  shape.set(0, int64_t{1} << 40);
  shape.set(1, int64_t{1} << 40);
  EXPECT_EQ(DecodeTensor(builder.asReader(), "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  shape.set(0, 8192);
  shape.set(1, 8192);  // 256 MiB of f32: data-plane territory
  EXPECT_THAT(DecodeTensor(builder.asReader(), "x").status().message(), HasSubstr("data plane"));
}

// A pointer of the wrong kind is how a corrupted or hostile message looks to
// Cap'n Proto, which throws when it is read; the decoders answer with a status.
TEST(ProgramCodec, RejectsAMalformedMessageWithAStatusInsteadOfThrowing) {
  ir::ActorProgram original = actor::testing::MakeTwoStageForward(2).actor0;
  capnp::MallocMessageBuilder message;
  auto builder = message.initRoot<wire::ActorProgram>();
  EncodeProgram(original, builder);
  // The graph text (pointer 1 of a Function) becomes a struct.
  capnp::AnyStruct::Builder(builder.getFunctions()[0]).getPointerSection()[1].initAs<wire::TensorType>();
  absl::StatusOr<ir::ActorProgram> decoded = DecodeProgram(builder.asReader());
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoded.status().message(), HasSubstr("program: malformed message"));
}

TEST(TensorCodec, RejectsAMalformedMessageWithAStatusInsteadOfThrowing) {
  capnp::MallocMessageBuilder message;
  auto params = message.initRoot<wire::Actor::RunStepParams>();
  EncodeStepInputs(ir::StepInputs{{{"x", 0}, ir::HostTensor::Scalar(1.f)}}, params.initInputs(1));
  // The tensor's bytes (pointer 1 of a Tensor) become a struct.
  capnp::AnyStruct::Builder(params.getInputs()[0].getTensor()).getPointerSection()[1].initAs<wire::TensorType>();
  absl::StatusOr<ir::StepInputs> decoded = DecodeStepInputs(params.asReader().getInputs(), "input");
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoded.status().message(), HasSubstr("tensor input x: malformed message"));

  capnp::MallocMessageBuilder reply_message;
  auto reply = reply_message.initRoot<wire::Actor::RunStepResults>();
  auto results = reply.initResults(1);
  results[0].setName("loss");
  capnp::AnyStruct::Builder(results[0]).getPointerSection()[0].initAs<wire::TensorType>();  // the name
  EXPECT_THAT(DecodeStepResults(reply.asReader().getResults(), "step 1").status().message(),
              HasSubstr("results of step 1: malformed message"));
}

// A list of empty structs costs its sender a few bytes whatever its length:
// found by fuzz_program_decoder and fuzz_tensor_decoder, whose decoders
// allocated an element per entry (hundreds of MiB) before looking at any.
TEST(ProgramCodec, RefusesMoreInstructionsOrBuffersThanAProgramMayHaveBeforeAllocating) {
  for (int pointer : {1, 2}) {  // buffers, instructions
    capnp::MallocMessageBuilder message;
    auto builder = message.initRoot<wire::ActorProgram>();
    EncodeProgram(actor::testing::MakeTwoStageForward(2).actor0, builder);
    capnp::AnyStruct::Builder(wire::ActorProgram::Builder(builder)).getPointerSection()[pointer].initAsListOfAnyStruct(
        0, 0, static_cast<unsigned>(ir::kMaxProgramInstructions + 1));
    absl::StatusOr<ir::ActorProgram> decoded = DecodeProgram(builder.asReader());
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(decoded.status().message(),
                HasSubstr(absl::StrCat(ir::kMaxProgramInstructions + 1, pointer == 1 ? " buffers" : " instructions",
                                       " is more than the ", ir::kMaxProgramInstructions)));
  }
}

TEST(StepCodec, RefusesMoreTimingsThanAProgramHasInstructionsBeforeAllocating) {
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<wire::Actor::RunStepResults>();
  EncodeStepOutputs(ir::StepOutputs{}, reply);
  capnp::AnyStruct::Builder(wire::Actor::RunStepResults::Builder(reply)).getPointerSection()[1].initAsListOfAnyStruct(
      0, 0, static_cast<unsigned>(ir::kMaxProgramInstructions + 1));
  absl::StatusOr<ir::StepOutputs> decoded = DecodeStepOutputs(reply.asReader(), "step 1");
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoded.status().message(),
              HasSubstr(absl::StrCat("step 1: ", ir::kMaxProgramInstructions + 1, " instruction timings")));
}

TEST(StatusConvert, CarriesAbslCodesThroughKjExceptions) {
  absl::Status original = absl::InvalidArgumentError("bad step input");
  kj::Exception exception = ToKjException(original);
  EXPECT_EQ(FromKjException(exception), original);
  // Cap'n Proto prefixes what arrives from a peer; the code survives it.
  kj::Exception remote(kj::Exception::Type::FAILED, "x", 1,
                       kj::str("remote exception: ", exception.getDescription()));
  EXPECT_EQ(FromKjException(remote), original);
  EXPECT_EQ(FromKjException(kj::Exception(kj::Exception::Type::DISCONNECTED, "x", 1,
                                          kj::str("socket closed")))
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(FromKjException(kj::Exception(kj::Exception::Type::OVERLOADED, "x", 1, kj::str("busy")))
                .code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(FromKjException(kj::Exception(kj::Exception::Type::FAILED, "x", 1, kj::str("boom"))),
            absl::InternalError("boom"));
}

}  // namespace
}  // namespace tandem::rpc
