// ActorProgram's printer, hash and verifier on small hand-built programs.
#include "ir/actor_program.h"

#include <functional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_programs.h"

namespace tandem::actor::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ir::ActorProgram Actor0() { return MakeTwoStageForward(2).actor0; }
ir::ActorProgram Actor1() { return MakeTwoStageForward(2).actor1; }

absl::Status Verify(const ir::ActorProgram& program) { return ir::VerifyActorProgram(program); }

TEST(TaskLabel, PrintsKindStageMicrobatchOrUpdate) {
  EXPECT_EQ((ir::TaskLabel{'F', 1, 3}).ToString(), "F1.3");
  EXPECT_EQ((ir::TaskLabel{'W', 0, 7}).ToString(), "W0.7");
  EXPECT_EQ(ir::TaskLabel().ToString(), "update");
}

TEST(VerifyActorProgram, AcceptsWellFormedPrograms) {
  EXPECT_TRUE(Verify(Actor0()).ok()) << Verify(Actor0());
  EXPECT_TRUE(Verify(Actor1()).ok()) << Verify(Actor1());
}

TEST(VerifyActorProgram, RejectsBufferIndexOutOfRange) {
  ir::ActorProgram program = Actor0();
  program.instructions[1].buffers = {42};
  absl::Status status = Verify(program);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("instruction 1 (F0.0 send)"));
  EXPECT_THAT(status.message(), HasSubstr("buffer 42, outside [0, 5)"));
}

TEST(VerifyActorProgram, RejectsRunWithWrongArity) {
  ir::ActorProgram program = Actor0();
  program.instructions[3].inputs = {3};
  absl::Status status = Verify(program);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("instruction 3 (F0.1 run): F0 takes 2 inputs, got 1"));
}

TEST(VerifyActorProgram, RejectsRunWithTooManyOutputs) {
  ir::ActorProgram program = Actor0();
  program.instructions[0].outputs = {2, 4};
  EXPECT_THAT(Verify(program).message(), HasSubstr("F0 has 1 outputs, got 2"));
}

TEST(VerifyActorProgram, RejectsBufferTypeDifferentFromFunctionInput) {
  ir::ActorProgram program = Actor0();
  program.instructions[0].inputs = {0, 1};  // (w0, x@0): swapped
  absl::Status status = Verify(program);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("input 0 of F0 is f32[2,3] but buffer 0 (w0) is f32[3,4]"));
}

TEST(VerifyActorProgram, RejectsOutputBufferOfWrongType) {
  ir::ActorProgram program = Actor1();
  program.buffers[2].type = F32({1});  // loss@0
  EXPECT_THAT(Verify(program).message(), HasSubstr("output 0 (loss) of F1 is f32[] but buffer 2 (loss@0) is f32[1]"));
}

TEST(VerifyActorProgram, RejectsPeerThatIsItself) {
  ir::ActorProgram program = Actor0();
  program.instructions[1].peer = 0;
  absl::Status status = Verify(program);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("instruction 1 (F0.0 send): peer 0 is this actor itself"));
}

TEST(VerifyActorProgram, RejectsPeerOutOfRange) {
  ir::ActorProgram program = Actor1();
  program.instructions[0].peer = 2;
  EXPECT_THAT(Verify(program).message(), HasSubstr("instruction 0 (F1.1 recv): peer 2 is outside [0, 2)"));
}

TEST(VerifyActorProgram, RejectsTagUsedTwiceToOnePeer) {
  ir::ActorProgram program = Actor0();
  program.instructions[4].tag = program.instructions[1].tag;
  EXPECT_THAT(Verify(program).message(), HasSubstr("instruction 4 (F0.1 send): tag 100 is used twice to actor 1"));
}

TEST(VerifyActorProgram, RejectsAccumulateOfDifferentTypes) {
  ir::ActorProgram program = Actor1();
  program.instructions[2] = AccumulateInstruction({'F', 1, 1}, 4, 3);  // loss@1 += h@1
  EXPECT_THAT(Verify(program).message(),
              HasSubstr("instruction 2 (F1.1 acc): accumulator loss@1 is f32[] but h@1 is f32[2,4]"));
}

TEST(VerifyActorProgram, RejectsEmitWithoutResultName) {
  ir::ActorProgram program = Actor1();
  program.instructions[3].result = "";
  EXPECT_THAT(Verify(program).message(), HasSubstr("instruction 3 (F1.1 emit): has no result name"));
}

TEST(VerifyActorProgram, RejectsReadOfEmptyBuffer) {
  ir::ActorProgram program = Actor1();
  program.instructions.erase(program.instructions.begin());  // no receive before the run
  WithPeak(program);
  EXPECT_THAT(Verify(program).message(), HasSubstr("reads buffer 3 (h@1) while it is empty"));
}

TEST(VerifyActorProgram, RejectsTemporaryHeldAtStepEnd) {
  ir::ActorProgram program = Actor1();
  program.instructions.pop_back();  // never frees loss@0
  WithPeak(program);
  EXPECT_THAT(Verify(program).message(), HasSubstr("temporary buffer 2 (loss@0) is still held"));
}

TEST(VerifyActorProgram, RejectsUnsortedTaskStarts) {
  ir::ActorProgram program = Actor0();
  program.task_starts = {3, 0};
  EXPECT_THAT(Verify(program).message(), HasSubstr("task_starts[1] = 0 is not sorted"));
  program.task_starts = {0, 7};
  EXPECT_THAT(Verify(program).message(), HasSubstr("task_starts[1] = 7 is not sorted within [0, 6]"));
}

TEST(VerifyActorProgram, RejectsStaticPeakThatDiffersFromTheStream) {
  ir::ActorProgram program = Actor0();
  program.static_peak_bytes += 4;
  EXPECT_THAT(Verify(program).message(), HasSubstr("static_peak_bytes is 132 but the stream peaks at 128"));
}

TEST(VerifyFill, AcceptsAGuardedPieceAndCountsItsOutputInThePeak) {
  FillPair pair = MakeFillPair();
  EXPECT_TRUE(VerifyActorProgram(pair.filler).ok()) << VerifyActorProgram(pair.filler);
  // Without the piece's output the stream would peak at 12 bytes.
  EXPECT_EQ(pair.filler.static_peak_bytes, 24);
  pair.filler.static_peak_bytes = 12;
  EXPECT_THAT(VerifyActorProgram(pair.filler).message(), HasSubstr("static_peak_bytes is 12 but the stream peaks at 24"));
  EXPECT_EQ(ir::TaskLabel({'X', -1, 3}).ToString(), "fill.3");
  EXPECT_THAT(PrintActorProgram(pair.filler), HasSubstr("fill fill (fill/x@0) -> fill[0] (fill.y@0) unless actor 0 tag 7 arrived, then free (fill/x@0)"));
}

TEST(VerifyFill, RejectsPiecesThatReleaseWhatIsNotTheirsOrWaitOnThemselves) {
  const struct {
    std::function<void(ir::Instruction&, ir::ActorProgram&)> change;
    std::string message;
  } cases[] = {
      {[](ir::Instruction& fill, ir::ActorProgram&) { fill.peer = 1; }, "waits on peer 1"},
      {[](ir::Instruction& fill, ir::ActorProgram&) { fill.peer = 5; }, "waits on peer 5"},
      {[](ir::Instruction& fill, ir::ActorProgram&) { fill.buffers = {2}; }, "not one of its own non-state inputs"},
      {[](ir::Instruction& fill, ir::ActorProgram&) { fill.buffers = {0, 0}; }, "not one of its own non-state inputs"},
      {[](ir::Instruction& fill, ir::ActorProgram&) { fill.result.clear(); }, "has no result name"},
      {[](ir::Instruction& fill, ir::ActorProgram&) { fill.microbatch = -1; }, "fill slot -1 is negative"},
      {[](ir::Instruction& fill, ir::ActorProgram& program) {
         program.buffers[1].kind = ir::BufferKind::kState;
         program.buffers[1].binding = "y";
       },
       "is not an empty temporary"},
  };
  for (const auto& c : cases) {
    FillPair pair = MakeFillPair();
    c.change(pair.filler.instructions[0], pair.filler);
    const absl::Status status = VerifyActorProgram(pair.filler);
    EXPECT_FALSE(status.ok()) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
}

TEST(PrintActorProgram, ShowsHeaderBuffersAndOneLinePerInstruction) {
  const std::string text = ir::PrintActorProgram(Actor1());
  EXPECT_THAT(text, HasSubstr("actor 1 of 2: 1 functions, 5 buffers, 10 instructions, static peak"));
  EXPECT_THAT(text, HasSubstr("  0  w1 : f32[4,1] state \"w1\"\n"));
  EXPECT_THAT(text, HasSubstr("  0  F1.1  recv <- actor 0 tag 101 (h@1)\n"));
  EXPECT_THAT(text, HasSubstr("  1  F1.1  run F1 (h@1, w1) -> (loss@1)\n"));
  EXPECT_THAT(text, HasSubstr("  2  F1.1  free (h@1)\n"));
  EXPECT_THAT(text, HasSubstr("  3  F1.1  emit loss[1] = loss@1\n"));
  EXPECT_THAT(Actor0().instructions.size(), 6);
  EXPECT_THAT(ir::PrintActorProgram(Actor0()), HasSubstr("  1  F0.0  send -> actor 1 tag 100 (h@0)\n"));
  EXPECT_THAT(text, Not(HasSubstr("graph @")));
  EXPECT_THAT(ir::PrintActorProgram(Actor1(), /*with_functions=*/true), HasSubstr("graph @microbatch {"));
}

TEST(PrintActorProgram, ShowsAccumulate) {
  ir::ActorProgram program;
  program.buffers = {TemporaryBuffer("acc.w1.s0", F32({2})), TemporaryBuffer("grad.w1.s0@3", F32({2}))};
  program.instructions = {AccumulateInstruction({'W', 0, 3}, 0, 1)};
  EXPECT_THAT(ir::PrintActorProgram(program), HasSubstr("  0  W0.3  acc acc.w1.s0 += grad.w1.s0@3\n"));
}

TEST(HashActorProgram, EqualForEqualProgramsAndChangesWithAnyField) {
  const uint64_t base = ir::HashActorProgram(Actor1());
  EXPECT_EQ(base, ir::HashActorProgram(Actor1()));
  EXPECT_NE(base, ir::HashActorProgram(Actor0()));

  ir::ActorProgram program = Actor1();
  program.instructions[0].tag = 102;
  EXPECT_NE(base, ir::HashActorProgram(program));
  program = Actor1();
  program.instructions[3].microbatch = 0;
  EXPECT_NE(base, ir::HashActorProgram(program));
  program = Actor1();
  program.instructions[3].task.stage = 2;
  EXPECT_NE(base, ir::HashActorProgram(program));
  program = Actor1();
  program.buffers[1].name = "h@one";
  EXPECT_NE(base, ir::HashActorProgram(program));
  program = Actor1();
  program.functions[0].graph.mutable_node(0).type = F32({2, 5});
  EXPECT_NE(base, ir::HashActorProgram(program));
  program = Actor1();
  program.task_starts.back() += 1;
  EXPECT_NE(base, ir::HashActorProgram(program));
}

TEST(HashActorProgram, IsStableAcrossRunsAndMachines) {
  // XXH3 64-bit over the canonical serialization, which is the bytes
  //   23:tandem.actor_program.v1;0;1;0;0;2;1:a;6:f32[2];2;0:;-1;1:b;6:f32[2];2;0:;-1;
  //   1;3;87;0;3;-1;0;0;2;0;1;-1;0;0:;-1;0;
  // (one line, no newline). The expected value was computed independently:
  // those bytes written to a file, hashed by Debian's `xxhsum -H3`.
  // A change here invalidates every cached program: make it on purpose.
  ir::ActorProgram program;
  program.buffers = {TemporaryBuffer("a", F32({2})), TemporaryBuffer("b", F32({2}))};
  program.instructions = {AccumulateInstruction({'W', 0, 3}, 0, 1)};
  const uint64_t hash = ir::HashActorProgram(program);
  EXPECT_EQ(hash, ir::HashActorProgram(program));
  EXPECT_EQ(hash, 0x976583ba43a97a59ull);
}

}  // namespace
}  // namespace tandem::actor::testing

namespace tandem::actor::testing {
namespace {

// Actor 0 of 2 all-reduces its one state buffer (f32[6]) with actor 1.
ir::ActorProgram Reducing() {
  ir::ActorProgram program;
  program.actor = 0;
  program.num_actors = 1;
  program.num_replicas = 2;
  program.buffers.push_back({"w", {ir::DType::kF32, {6}}, ir::BufferKind::kState, "w", -1});
  ir::Instruction start{.kind = ir::InstructionKind::kAllReduceStart, .buffers = {0}, .tag = 3};
  start.group = {0, 1};
  ir::Instruction wait = start;
  wait.kind = ir::InstructionKind::kAllReduceWait;
  program.instructions = {start, wait};
  // 24 state bytes, then the bucket (6 floats) and 2 copies of a 3-float shard.
  program.static_peak_bytes = 24 + (6 + 2 * 3) * 4;
  return program;
}

TEST(VerifyAllReduce, AcceptsAStartAndItsWaitAndCountsTheStaging) {
  EXPECT_TRUE(Verify(Reducing()).ok()) << Verify(Reducing());
  ir::ActorProgram wrong_peak = Reducing();
  wrong_peak.static_peak_bytes = 24;
  EXPECT_THAT(Verify(wrong_peak).message(), HasSubstr("static_peak_bytes is 24 but the stream peaks at 72"));
  EXPECT_EQ(ir::ReplicaGroupOf(Reducing()), (std::vector<int32_t>{0, 1}));
  EXPECT_THAT(ir::PrintActorProgram(Reducing()), HasSubstr("allreduce.start tag 3 group (0, 1) (w)"));
}

TEST(VerifyAllReduce, RejectsGroupsOtherThanThisPositionsReplicas) {
  ir::ActorProgram program = Reducing();
  program.instructions[0].group = program.instructions[1].group = {1, 1};
  EXPECT_THAT(Verify(program).message(), HasSubstr("group member 0 is actor 1; replica 0 of actor 0 is actor 0"));
  program.instructions[0].group = program.instructions[1].group = {0, 1, 2};
  EXPECT_THAT(Verify(program).message(), HasSubstr("the group has 3 actors but the program runs on 2 replicas"));
  program = Reducing();
  program.instructions[0].group = program.instructions[1].group = {0};
  EXPECT_THAT(Verify(program).message(), HasSubstr("a group of 1 actors reduces nothing"));
  program = Reducing();
  program.num_replicas = 0;
  EXPECT_THAT(Verify(program).message(), HasSubstr("0 replicas of 1 actors is out of range"));
}

TEST(VerifyAllReduce, RejectsTouchingABufferInFlightAndAMissingWait) {
  ir::ActorProgram program = Reducing();
  program.num_actors = 2;
  program.instructions[0].group = program.instructions[1].group = {0, 2};
  program.static_peak_bytes = 72;
  ASSERT_TRUE(Verify(program).ok()) << Verify(program);
  program.instructions.insert(program.instructions.begin() + 1,
                              ir::Instruction{.kind = ir::InstructionKind::kSend, .buffers = {0}, .peer = 1});
  EXPECT_THAT(Verify(program).message(), HasSubstr("touches buffer 0 (w) while all-reduce tag 3 owns it"));
  program = Reducing();
  program.instructions.pop_back();
  EXPECT_THAT(Verify(program).message(), HasSubstr("all-reduce tag 3 is never waited for"));
  program = Reducing();
  program.instructions[1].tag = 4;
  EXPECT_THAT(Verify(program).message(), HasSubstr("waits for all-reduce tag 4, which is not running"));
  program = Reducing();
  program.instructions[0].group = {1};
  program.instructions[0].kind = ir::InstructionKind::kSend;
  program.instructions[0].peer = 1;
  EXPECT_THAT(Verify(program).message(), HasSubstr("only all-reduces have a group"));
}

}  // namespace
}  // namespace tandem::actor::testing
