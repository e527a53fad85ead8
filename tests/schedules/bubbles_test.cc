// Bubble slots and fill packing (schedules/bubbles.h) on 1F1B with two
// actors and four microbatches, F=1, B=2, worked out by hand:
//   actor 0: F0.0 [0,1] F0.1 [1,2] B0.0 [4,6] F0.2 [6,7] B0.1 [7,9] F0.3 [9,10] B0.2 [10,12] B0.3 [13,15]
//   actor 1: F1.0 [1,2] B1.0 [2,4] F1.1 [4,5] B1.1 [5,7] F1.2 [7,8] B1.2 [8,10] F1.3 [10,11] B1.3 [11,13]
// so actor 0 waits over [2,4] (before B0.0) and [12,13] (before B0.3), and
// actor 1 over [0,1] (before F1.0) and [13,15] (after its last slot).
#include "schedules/bubbles.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "schedules/generators.h"

namespace tandem::schedules {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Simulated {
  Schedule schedule;
  SimulationResult result;
};

Simulated OneFOneB() {
  absl::StatusOr<Schedule> schedule = Generate("1f1b", {.actors = 2, .microbatches = 4});
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  absl::StatusOr<SimulationResult> result = Simulate(*schedule, CostModel{});
  EXPECT_TRUE(result.ok()) << result.status();
  return {*schedule, *result};
}

TEST(Bubbles, OneFOneBHasTheHandWorkedBubbles) {
  const Simulated run = OneFOneB();
  ASSERT_EQ(run.result.makespan, 15.0);
  absl::StatusOr<std::vector<BubbleSlot>> bubbles = FindBubbles(run.schedule, run.result);
  ASSERT_TRUE(bubbles.ok()) << bubbles.status();
  ASSERT_EQ(bubbles->size(), 4u);
  const std::vector<BubbleSlot>& b = *bubbles;
  // Actor 0: before B0.0 (slot 2) with F0.0 and F0.1 live, which is its
  // peak; before B0.3 (slot 7) with F0.3 live.
  EXPECT_EQ(b[0].actor.value, 0);
  EXPECT_EQ(b[0].before_slot, 2);
  EXPECT_EQ(b[0].start, 2.0);
  EXPECT_EQ(b[0].end, 4.0);
  EXPECT_EQ(b[0].live, 2.0);
  EXPECT_EQ(b[0].free, 0.0);
  EXPECT_EQ(b[1].before_slot, 7);
  EXPECT_EQ(b[1].start, 12.0);
  EXPECT_EQ(b[1].end, 13.0);
  EXPECT_EQ(b[1].live, 1.0);
  EXPECT_EQ(b[1].free, 1.0);
  // Actor 1: waiting for the first activation, and the tail.
  EXPECT_EQ(b[2].actor.value, 1);
  EXPECT_EQ(b[2].before_slot, 0);
  EXPECT_EQ(b[2].start, 0.0);
  EXPECT_EQ(b[2].end, 1.0);
  EXPECT_EQ(b[3].before_slot, 8);
  EXPECT_TRUE(b[3].tail(run.schedule));
  EXPECT_EQ(b[3].start, 13.0);
  EXPECT_EQ(b[3].end, 15.0);
  EXPECT_EQ(b[3].live, 0.0);
  // Every idle unit is in some bubble.
  double idle = 0;
  for (const BubbleSlot& bubble : b) idle += bubble.duration();
  EXPECT_EQ(idle, run.result.bubble_time);
}

TEST(Bubbles, ACapacityAboveThePeakLeavesMoreFree) {
  const Simulated run = OneFOneB();
  absl::StatusOr<std::vector<BubbleSlot>> bubbles = FindBubbles(run.schedule, run.result, {.capacity = {5, 3}});
  ASSERT_TRUE(bubbles.ok()) << bubbles.status();
  EXPECT_EQ((*bubbles)[0].free, 3.0);
  EXPECT_EQ((*bubbles)[3].free, 3.0);
}

TEST(Bubbles, ShortGapsAreNotBubbles) {
  const Simulated run = OneFOneB();
  absl::StatusOr<std::vector<BubbleSlot>> bubbles = FindBubbles(run.schedule, run.result, {.min_duration = 1.5});
  ASSERT_TRUE(bubbles.ok()) << bubbles.status();
  ASSERT_EQ(bubbles->size(), 2u);
  EXPECT_EQ((*bubbles)[0].duration(), 2.0);
  EXPECT_EQ((*bubbles)[1].duration(), 2.0);
}

TEST(Bubbles, ABadCapacityIsRefused) {
  const Simulated run = OneFOneB();
  absl::StatusOr<std::vector<BubbleSlot>> bubbles = FindBubbles(run.schedule, run.result, {.capacity = {1}});
  ASSERT_FALSE(bubbles.ok());
  EXPECT_THAT(std::string(bubbles.status().message()), HasSubstr("for each of 2 actors, got 1"));
  bubbles = FindBubbles(run.schedule, run.result, {.capacity = {1, -2}});
  ASSERT_FALSE(bubbles.ok());
  EXPECT_THAT(std::string(bubbles.status().message()), HasSubstr("-2 is not a non-negative number"));
}

TEST(PackFill, WholePiecesFillEachBubble) {
  const Simulated run = OneFOneB();
  const std::vector<BubbleSlot> bubbles = *FindBubbles(run.schedule, run.result);
  absl::StatusOr<std::vector<int64_t>> pieces = PackFill(bubbles, {.piece_cost = 1.0});
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_THAT(*pieces, ElementsAre(2, 1, 1, 2));
  pieces = PackFill(bubbles, {.piece_cost = 0.75});
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_THAT(*pieces, ElementsAre(2, 1, 1, 2));
  pieces = PackFill(bubbles, {.piece_cost = 1.0, .share = 0.5});
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_THAT(*pieces, ElementsAre(1, 0, 0, 1));
}

TEST(PackFill, APieceGoesOnlyWhereItsMemoryIsFree) {
  const Simulated run = OneFOneB();
  const std::vector<BubbleSlot> bubbles = *FindBubbles(run.schedule, run.result);
  absl::StatusOr<std::vector<int64_t>> pieces = PackFill(bubbles, {.piece_cost = 1.0, .piece_memory = 1.0});
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  // Actor 0 holds its peak before B0.0: nothing fits there.
  EXPECT_THAT(*pieces, ElementsAre(0, 1, 1, 2));
}

TEST(PackFill, TheEarliestBubblesTakeALimitedJob) {
  const Simulated run = OneFOneB();
  const std::vector<BubbleSlot> bubbles = *FindBubbles(run.schedule, run.result);
  // Start times 2, 12, 0, 13: actor 1's [0,1] first, then actor 0's [2,4].
  absl::StatusOr<std::vector<int64_t>> pieces = PackFill(bubbles, {.piece_cost = 1.0, .max_pieces = 3});
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_THAT(*pieces, ElementsAre(2, 0, 1, 0));
}

TEST(PackFill, BadPackingsAreRefused) {
  const Simulated run = OneFOneB();
  const std::vector<BubbleSlot> bubbles = *FindBubbles(run.schedule, run.result);
  const struct {
    FillPacking packing;
    std::string message;
  } cases[] = {
      {{.piece_cost = 0.0}, "cost must be above 0"},
      {{.piece_cost = 1.0, .piece_memory = -1.0}, "memory must be a non-negative number"},
      {{.piece_cost = 1.0, .share = 0.0}, "must be in (0, 1]"},
      {{.piece_cost = 1.0, .share = 1.5}, "must be in (0, 1]"},
      {{.piece_cost = 1.0, .max_pieces = -2}, "max_pieces must be -1 or more"},
      {{.piece_cost = 1e-9}, "use larger pieces"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<std::vector<int64_t>> pieces = PackFill(bubbles, c.packing);
    ASSERT_FALSE(pieces.ok()) << c.message;
    EXPECT_THAT(std::string(pieces.status().message()), HasSubstr(c.message));
  }
}

TEST(FillSummary, FillingEveryBubbleReachesFullUtilisation) {
  const Simulated run = OneFOneB();
  const std::vector<BubbleSlot> bubbles = *FindBubbles(run.schedule, run.result);
  const FillPacking packing{.piece_cost = 1.0};
  const std::vector<int64_t> pieces = *PackFill(bubbles, packing);
  const FillSummary summary = SummarizeFill(run.result, bubbles, pieces, packing);
  EXPECT_EQ(summary.pieces, 6);
  EXPECT_THAT(summary.filled, ElementsAre(3.0, 3.0));
  EXPECT_EQ(summary.utilisation_before, 24.0 / 30.0);
  EXPECT_EQ(summary.utilisation_after, 1.0);
}

TEST(BubbleReport, TheTableAndJsonShowSlotsAndFill) {
  const Simulated run = OneFOneB();
  const std::vector<BubbleSlot> bubbles = *FindBubbles(run.schedule, run.result);
  const std::string plain = BubbleTable(run.schedule, run.result, bubbles);
  EXPECT_THAT(plain, HasSubstr("bubble slots (4):"));
  EXPECT_THAT(plain, HasSubstr("B0.0"));
  EXPECT_THAT(plain, HasSubstr("end"));
  EXPECT_THAT(plain, ::testing::Not(HasSubstr("pieces")));
  const PackedFill fill{{.piece_cost = 1.0}, *PackFill(bubbles, {.piece_cost = 1.0})};
  const std::string filled = BubbleTable(run.schedule, run.result, bubbles, &fill);
  EXPECT_THAT(filled, HasSubstr("fill: 6 pieces of cost 1"));
  EXPECT_THAT(filled, HasSubstr("utilisation: 80.00% without fill, 100.00% with fill"));
  const nlohmann::json json = nlohmann::json::parse(BubbleJson(run.schedule, run.result, bubbles, &fill));
  ASSERT_EQ(json["bubbles"].size(), 4u);
  EXPECT_EQ(json["bubbles"][0]["before"], "B0.0");
  EXPECT_EQ(json["bubbles"][3]["before"], "end");
  EXPECT_EQ(json["bubbles"][3]["pieces"], 2);
  EXPECT_EQ(json["fill"]["pieces"], 6);
  EXPECT_EQ(json["fill"]["utilisation_with_fill"], 1.0);
  const nlohmann::json bare = nlohmann::json::parse(BubbleJson(run.schedule, run.result, bubbles));
  EXPECT_FALSE(bare.contains("fill"));
  EXPECT_FALSE(bare["bubbles"][0].contains("pieces"));
}

}  // namespace
}  // namespace tandem::schedules
