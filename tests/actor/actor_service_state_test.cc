// ActorService's state calls: state moves in bounded pieces, seeds are
// generated on the actor with the reference's bits, and a tensor that did
// not arrive whole changes nothing.
#include "actor/actor_service.h"

#include <unistd.h>

#include <limits>
#include <string>

#include "ir/initial_state.h"
#include "ir/limits.h"
#include "ir/state_file.h"
#include "ir/state_source.h"
#include "rpc/state_codec.h"
#include "tests/actor/actor_service_fixture.h"

namespace tandem::actor::testing {
namespace {

using ::testing::HasSubstr;

// snapshotState, then awaitState waiting for the file.
absl::Status Snapshot(wire::Actor::Client& actor, const std::string& path, kj::WaitScope& wait_scope) {
  auto request = actor.snapshotStateRequest();
  request.setPath(path);
  return rpc::ToStatus(request.send().ignoreResult()).wait(wait_scope);
}

absl::StatusOr<bool> AwaitState(wire::Actor::Client& actor, const std::string& path, bool wait,
                                kj::WaitScope& wait_scope) {
  auto request = actor.awaitStateRequest();
  request.setPath(path);
  request.setWait(wait);
  bool done = false;
  absl::Status status =
      rpc::ToStatus(request.send().then([&done](auto&& response) { done = response.getDone(); })).wait(wait_scope);
  if (!status.ok()) return status;
  return done;
}

TEST_F(ActorServiceTest, StateMovesInPiecesAndReadsBackBitForBit) {
  // A state tensor of 5 MiB staged and read in pieces of 1 MiB and of the
  // largest size: no control message carries more than one piece.
  TwoStageForward programs = MakeTwoStageForward(1);
  wire::Actor::Client actor = Serve(network_.Endpoint(0));
  ASSERT_TRUE(LoadProgram(actor, programs.actor0).ok());
  ir::TensorMap state = TwoStageState();
  state["big"] = Iota(F32({5, 1 << 18}), -1.0f, 1e-5f);
  ASSERT_TRUE(LoadState(actor, state, /*piece_bytes=*/1 << 20).ok());
  for (uint64_t piece : {uint64_t{1} << 20, static_cast<uint64_t>(ir::kStatePieceBytes), uint64_t{1} << 30}) {
    for (const auto& [name, tensor] : state) {
      absl::StatusOr<ir::HostTensor> read = ReadBuffer(actor, name, piece);
      ASSERT_TRUE(read.ok()) << name << ": " << read.status();
      EXPECT_TRUE(read->BitwiseEquals(tensor)) << name << " in pieces of " << piece;
    }
  }
  // A piece asked for past the end is refused.
  auto request = actor.readBufferRequest();
  request.setName("w0");
  request.setOffset(1 << 20);
  request.setMaxBytes(16);
  absl::Status past = rpc::ToStatus(request.send().ignoreResult()).wait(io_.waitScope);
  EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange) << past;
}

TEST_F(ActorServiceTest, SeedSourcesAreGeneratedOnTheActorWithTheReferenceBits) {
  TwoStageForward programs = MakeTwoStageForward(1);
  wire::Actor::Client actor = Serve(network_.Endpoint(0));
  ASSERT_TRUE(LoadProgram(actor, programs.actor0).ok());
  const ir::TensorType type = F32({3, 4});
  const ir::Initializer normal{ir::Initializer::Kind::kNormal, 0.0, 0.02, 7};
  const ir::Initializer uniform{ir::Initializer::Kind::kUniform, -0.5, 0.5, 9};
  ASSERT_TRUE(LoadSources(actor, {{"w0", {type, normal}}, {"w1", {F32({4, 1}), uniform}}}).ok());
  absl::StatusOr<ir::HostTensor> w0 = ReadBuffer(actor, "w0");
  absl::StatusOr<ir::HostTensor> w1 = ReadBuffer(actor, "w1");
  ASSERT_TRUE(w0.ok() && w1.ok());
  EXPECT_TRUE(w0->BitwiseEquals(*ir::MakeTensor(type, normal)));
  EXPECT_TRUE(w1->BitwiseEquals(*ir::MakeTensor(F32({4, 1}), uniform)));
}

// Issue 41, finding 10: a state that holds a NaN or an infinity is never
// saved, so a non-finite checkpoint never replaces a good one.
TEST_F(ActorServiceTest, AStateThatIsNotFiniteIsNotSaved) {
  TwoStageForward programs = MakeTwoStageForward(1);
  wire::Actor::Client actor = Serve(network_.Endpoint(0));
  ASSERT_TRUE(LoadProgram(actor, programs.actor0).ok());
  ir::TensorMap state = TwoStageState();
  const std::string path = ::testing::TempDir() + "/tandem-nonfinite-" + std::to_string(getpid()) + ".state";
  auto save = [&]() {
    if (absl::Status taken = Snapshot(actor, path, io_.waitScope); !taken.ok()) return taken;
    return AwaitState(actor, path, /*wait=*/true, io_.waitScope).status();
  };
  ASSERT_TRUE(LoadState(actor, state, /*piece_bytes=*/1 << 20).ok());
  ASSERT_TRUE(save().ok());
  ASSERT_EQ(unlink(path.c_str()), 0) << "a finite state is saved";
  state["w0"].f32()[3] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(LoadState(actor, state, /*piece_bytes=*/1 << 20).ok());
  const absl::Status saved = save();
  EXPECT_EQ(saved.code(), absl::StatusCode::kOutOfRange) << saved;
  EXPECT_THAT(saved.message(), HasSubstr("state 'w0' is not finite (element 3)"));
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "a non-finite state was written";
}

// A checkpoint's file holds the state as it was when the snapshot was
// taken, whatever the actor does while it is written; awaitState without
// waiting never blocks, and names a path that is not the latest write.
TEST_F(ActorServiceTest, ASnapshotIsWrittenAsTakenWhileTheStateMovesOn) {
  TwoStageForward programs = MakeTwoStageForward(1);
  wire::Actor::Client actor = Serve(network_.Endpoint(0));
  ASSERT_TRUE(LoadProgram(actor, programs.actor0).ok());
  ir::TensorMap state = TwoStageState();
  state["big"] = Iota(F32({4, 1 << 18}), -1.0f, 1e-5f);  // 4 MiB: a write that takes a moment
  ASSERT_TRUE(LoadState(actor, state, /*piece_bytes=*/1 << 20).ok());
  const std::string path = ::testing::TempDir() + "/tandem-snapshot-" + std::to_string(getpid()) + ".state";
  ASSERT_TRUE(Snapshot(actor, path, io_.waitScope).ok());
  ir::TensorMap later = state;
  later["w0"] = Iota(F32({3, 4}), 100.0f, 1.0f);
  later["big"] = Iota(F32({4, 1 << 18}), 7.0f, 1e-5f);
  ASSERT_TRUE(LoadState(actor, later, /*piece_bytes=*/1 << 20).ok());
  absl::StatusOr<bool> polled = AwaitState(actor, path, /*wait=*/false, io_.waitScope);
  ASSERT_TRUE(polled.ok()) << polled.status();  // done or not, at once
  absl::StatusOr<bool> done = AwaitState(actor, path, /*wait=*/true, io_.waitScope);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(*done);
  absl::StatusOr<std::vector<ir::StateFileEntry>> entries = ir::IndexStateFile(path);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), state.size());
  for (const ir::StateFileEntry& entry : *entries) {
    absl::StatusOr<ir::HostTensor> tensor = ir::ReadStateTensor(path, entry.offset, entry.type);
    ASSERT_TRUE(tensor.ok()) << entry.name;
    EXPECT_TRUE(tensor->BitwiseEquals(state.at(entry.name))) << entry.name << " is not the snapshot's";
  }
  unlink(path.c_str());
  absl::StatusOr<bool> other = AwaitState(actor, path + ".other", /*wait=*/true, io_.waitScope);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound) << other.status();
}

TEST_F(ActorServiceTest, AStagedTensorThatDidNotArriveWholeLeavesTheStateAsItWas) {
  TwoStageForward programs = MakeTwoStageForward(1);
  wire::Actor::Client actor = Serve(network_.Endpoint(0));
  ASSERT_TRUE(LoadProgram(actor, programs.actor0).ok());
  ASSERT_TRUE(LoadState(actor, TwoStageState()).ok());
  const ir::HostTensor replacement = Iota(F32({3, 4}), 5.0f, 1.0f);
  // Half of w0 staged, then loadState naming it staged.
  auto stage = actor.stageStateRequest();
  stage.setBinding("w0");
  ASSERT_TRUE(rpc::EncodeTensorPiece(replacement, 0, 24, stage.initPiece()).ok());
  ASSERT_TRUE(rpc::ToStatus(stage.send().ignoreResult()).wait(io_.waitScope).ok());
  absl::Status half = LoadSources(actor, ir::TensorSources({{"w0", replacement}}));
  EXPECT_EQ(half.code(), absl::StatusCode::kFailedPrecondition) << half;
  EXPECT_THAT(half.message(), HasSubstr("24 of the 48 bytes of a f32[3,4] arrived"));
  // A staged source with no piece at all.
  absl::Status none = LoadSources(actor, ir::TensorSources({{"w0", replacement}}));
  EXPECT_THAT(none.message(), HasSubstr("state 'w0' was to be staged, but no piece of it arrived"));
  // A piece that does not continue its tensor is refused as it arrives.
  auto skip = actor.stageStateRequest();
  skip.setBinding("w0");
  ASSERT_TRUE(rpc::EncodeTensorPiece(replacement, 24, 24, skip.initPiece()).ok());
  absl::Status skipped = rpc::ToStatus(skip.send().ignoreResult()).wait(io_.waitScope);
  EXPECT_EQ(skipped.code(), absl::StatusCode::kInvalidArgument) << skipped;
  EXPECT_THAT(skipped.message(), HasSubstr("the first piece is at offset 24, not 0"));
  absl::StatusOr<ir::HostTensor> w0 = ReadBuffer(actor, "w0");
  ASSERT_TRUE(w0.ok());
  EXPECT_TRUE(w0->BitwiseEquals(TwoStageState().at("w0")));
}

}  // namespace
}  // namespace tandem::actor::testing
