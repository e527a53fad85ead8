// State on the control plane: sources round-trip, and tensors of any size
// cross as pieces that assemble to the same bits or to a clear error.
#include "rpc/state_codec.h"

#include <vector>

#include "capnp/message.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/limits.h"
#include "rpc/program_codec.h"

namespace tandem::rpc {
namespace {

using ::testing::HasSubstr;

ir::HostTensor Ramp(int64_t elements) {
  absl::StatusOr<ir::HostTensor> tensor = ir::HostTensor::Allocate({ir::DType::kF32, {elements}});
  for (int64_t i = 0; i < elements; ++i) tensor->f32()[i] = static_cast<float>(i) * 0.25f;
  return *tensor;
}

// Every piece of `tensor` at most `max_bytes`, as a reader asks for them.
std::vector<std::unique_ptr<capnp::MallocMessageBuilder>> Pieces(const ir::HostTensor& tensor, uint64_t max_bytes) {
  std::vector<std::unique_ptr<capnp::MallocMessageBuilder>> pieces;
  uint64_t offset = 0;
  do {
    pieces.push_back(std::make_unique<capnp::MallocMessageBuilder>());
    wire::TensorPiece::Builder piece = pieces.back()->initRoot<wire::TensorPiece>();
    EXPECT_TRUE(EncodeTensorPiece(tensor, offset, max_bytes, piece).ok());
    offset += piece.getData().size();
  } while (offset < static_cast<uint64_t>(tensor.num_bytes()));
  return pieces;
}

wire::TensorPiece::Reader Read(capnp::MallocMessageBuilder& message) {
  return message.getRoot<wire::TensorPiece>().asReader();
}

TEST(TensorPieces, ATensorLargerThanAPieceCrossesInBoundedPiecesBitForBit) {
  const ir::HostTensor tensor = Ramp(ir::kStatePieceBytes / 4 * 2 + 3);  // two pieces and 12 bytes
  auto pieces = Pieces(tensor, UINT64_MAX);
  ASSERT_EQ(pieces.size(), 3u);
  TensorAssembler assembler("w");
  for (auto& piece : pieces) {
    EXPECT_LE(Read(*piece).getData().size(), static_cast<size_t>(ir::kStatePieceBytes));
    ASSERT_TRUE(assembler.Add(Read(*piece)).ok());
  }
  ASSERT_TRUE(assembler.complete());
  absl::StatusOr<ir::HostTensor> whole = assembler.Take();
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE(whole->BitwiseEquals(tensor));
}

TEST(TensorPieces, PiecesOutOfOrderOfAnotherTypeOrPastTheEndAreRefused) {
  const ir::HostTensor tensor = Ramp(10);
  auto pieces = Pieces(tensor, 16);  // 16, 16, 8 bytes
  ASSERT_EQ(pieces.size(), 3u);
  TensorAssembler assembler("state 'w'");
  absl::Status first = assembler.Add(Read(*pieces[1]));
  EXPECT_THAT(first.message(), HasSubstr("state 'w': the first piece is at offset 16, not 0"));
  ASSERT_TRUE(assembler.Add(Read(*pieces[0])).ok());
  absl::Status skipped = assembler.Add(Read(*pieces[2]));
  EXPECT_THAT(skipped.message(), HasSubstr("a piece at offset 32 where 16 bytes have arrived"));
  auto other = Pieces(Ramp(11), 16);
  absl::Status retyped = assembler.Add(Read(*other[1]));
  EXPECT_THAT(retyped.message(), HasSubstr("a piece of a f32[11] continues a f32[10]"));
  absl::StatusOr<ir::HostTensor> early = assembler.Take();
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(early.status().message(), HasSubstr("16 of the 40 bytes of a f32[10] arrived"));

  capnp::MallocMessageBuilder past;
  EXPECT_EQ(EncodeTensorPiece(tensor, 41, 16, past.initRoot<wire::TensorPiece>()).code(),
            absl::StatusCode::kOutOfRange);
  // A piece whose bytes overrun the tensor its type declares.
  capnp::MallocMessageBuilder overrun;
  wire::TensorPiece::Builder piece = overrun.initRoot<wire::TensorPiece>();
  ASSERT_TRUE(EncodeTensorPiece(Ramp(20), 0, 80, piece).ok());
  EncodeTensorType(tensor.type(), piece.initType());
  TensorAssembler small("w");
  EXPECT_THAT(small.Add(piece.asReader()).message(), HasSubstr("a piece of 80 bytes at offset 0 passes the end"));
}

TEST(StateSourceCodec, EveryKindOfSourceRoundTripsAndHeldTensorsBecomeStaged) {
  ir::StateSources sources;
  sources["w"] = {{ir::DType::kF32, {4, 8}}, ir::Initializer{ir::Initializer::Kind::kNormal, 0.5, 0.02, 42}};
  sources["m"] = {{ir::DType::kF32, {4, 8}}, ir::StateFileSlice{"/ck/step-00000002/actor-1.state", 1234}};
  sources["data"] = {{ir::DType::kF32, {3}}, ir::HostTensor::FromFloats({3}, {1, 2, 3})};
  capnp::MallocMessageBuilder message;
  auto list = message.initRoot<wire::Actor::LoadStateParams>().initSources(3);
  EncodeStateSources(sources, list);
  absl::StatusOr<ir::StateSources> decoded = DecodeStateSources(list.asReader(), "state");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), 3u);
  EXPECT_EQ(std::get<ir::Initializer>(decoded->at("w").origin), std::get<ir::Initializer>(sources["w"].origin));
  EXPECT_EQ(std::get<ir::StateFileSlice>(decoded->at("m").origin),
            std::get<ir::StateFileSlice>(sources["m"].origin));
  // A held tensor travels as `staged`: its bytes go by stageState.
  EXPECT_FALSE(std::get<ir::HostTensor>(decoded->at("data").origin).defined());
  for (const auto& [name, source] : sources) EXPECT_EQ(decoded->at(name).type, source.type) << name;

  list[1].setBinding("w");  // a binding twice
  EXPECT_THAT(DecodeStateSources(list.asReader(), "state").status().message(), HasSubstr("state 'w' is given twice"));
}

}  // namespace
}  // namespace tandem::rpc
