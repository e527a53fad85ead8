// Round trips of ActorPrograms and tensors through their Cap'n Proto wire
// forms, and rejection of malformed input.
#include "rpc/program_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "capnp/message.h"
#include "ir/actor_program.h"
#include "ir/host_tensor.h"
#include "rpc/status_convert.h"
#include "tests/actor/test_programs.h"

namespace tandem::rpc {
namespace {

using ::testing::HasSubstr;

TEST(ProgramCodec, RoundTripsEveryFieldAndTheHash) {
  actor::testing::TwoStageForward programs = actor::testing::MakeTwoStageForward(3);
  for (const ir::ActorProgram* original : {&programs.actor0, &programs.actor1}) {
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
