// The stage partitioner against cost models with known optima (balanced
// layers, a heavy LM head at the end, a heavy embedding at the start),
// against exhaustive search on random small models (with and without a
// memory cap, with and without remat), and its errors; and the cost file it
// reads.
#include "schedules/partition.h"

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/cost_file.h"
#include "tests/schedules/test_cost_files.h"

namespace tandem::schedules {
namespace {

using ::testing::HasSubstr;

using testing::Segments;

std::vector<std::pair<int32_t, int32_t>> Ranges(const Partition& partition) {
  std::vector<std::pair<int32_t, int32_t>> ranges;
  for (const PlanStage& stage : partition.stages) ranges.emplace_back(stage.first_segment, stage.end_segment);
  return ranges;
}

// The best T over every partition and remat choice, by enumeration; +inf
// if none fits.
double BruteForce(const CostFile& costs, const PartitionOptions& options) {
  const int32_t n = static_cast<int32_t>(costs.segments.size());
  double best = std::numeric_limits<double>::infinity();
  std::vector<PlanStage> stages;
  std::function<void(int32_t, int32_t)> place = [&](int32_t stage, int32_t first) {
    if (stage == options.stages) {
      if (first == n) best = std::min(best, StepSeconds(stages, options.microbatches));
      return;
    }
    for (int32_t end = first + 1; end <= n - (options.stages - 1 - stage); ++end) {
      for (int remat = 0; remat < (options.allow_remat ? 2 : 1); ++remat) {
        PlanStage planned = EvaluateStage(costs, options, stage, first, end, remat != 0);
        if (options.memory_cap > 0 && planned.peak_bytes > options.memory_cap) continue;
        stages.push_back(planned);
        place(stage + 1, end);
        stages.pop_back();
      }
    }
  };
  place(0, 0);
  return best;
}

TEST(PartitionSegments, ATableTooLargeToPlanIsRefusedBeforeItIsAllocated) {
  // 4096 segments over 64 stages would be a table of 64 GiB; it was 2 GiB
  // at the old entry bound. Refused at once, naming the sizes and the bound.
  const CostFile costs = Segments(std::vector<double>(4096, 1.0));
  absl::StatusOr<Partition> partition = PartitionSegments(costs, {.stages = 64, .microbatches = 8});
  EXPECT_EQ(partition.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(partition.status().message(),
              HasSubstr("4096 segments over 64 stages are too many to plan at once: the planner's table would take "
                        "65552 MiB, above its bound of 64 MiB"));
  // 128 segments over 16 stages still plan.
  EXPECT_TRUE(PartitionSegments(Segments(std::vector<double>(128, 1.0)), {.stages = 16, .microbatches = 8}).ok());
}

TEST(PartitionSegments, BalancedLayersSplitEvenly) {
  absl::StatusOr<Partition> partition =
      PartitionSegments(Segments(std::vector<double>(8, 1.0)), {.stages = 4, .microbatches = 8});
  ASSERT_TRUE(partition.ok()) << partition.status();
  EXPECT_THAT(Ranges(*partition), ::testing::ElementsAre(std::make_pair(0, 2), std::make_pair(2, 4),
                                                         std::make_pair(4, 6), std::make_pair(6, 8)));
  EXPECT_DOUBLE_EQ(partition->step_seconds, 4 * 2.0 + 7 * 2.0);
}

// An LM head over a large vocabulary: the last segment costs 5 blocks. The
// last stage then takes it alone; the first stage takes every block.
TEST(PartitionSegments, AHeavyLastSegmentGetsAStageOfItsOwn) {
  absl::StatusOr<Partition> partition =
      PartitionSegments(Segments({1, 1, 1, 1, 1, 5}), {.stages = 2, .microbatches = 8});
  ASSERT_TRUE(partition.ok()) << partition.status();
  EXPECT_THAT(Ranges(*partition), ::testing::ElementsAre(std::make_pair(0, 5), std::make_pair(5, 6)));
  EXPECT_DOUBLE_EQ(partition->step_seconds, 10.0 + 7 * 5.0);
  // The uniform split (3 + 3 segments: 3 and 7 seconds) is slower.
  const PartitionOptions options{.stages = 2, .microbatches = 8};
  const double uniform = StepSeconds({EvaluateStage(Segments({1, 1, 1, 1, 1, 5}), options, 0, 0, 3, false),
                                      EvaluateStage(Segments({1, 1, 1, 1, 1, 5}), options, 1, 3, 6, false)},
                                     8);
  EXPECT_DOUBLE_EQ(uniform, 10.0 + 7 * 7.0);
}

// Minimising the slowest stage alone is not the objective: with one
// microbatch, T is the sum, and any cut is as good; with many, the
// bottleneck dominates.
TEST(PartitionSegments, TheObjectiveIsTheStepNotTheSlowestStage) {
  const CostFile costs = Segments({4, 1, 1, 1, 1});
  absl::StatusOr<Partition> many = PartitionSegments(costs, {.stages = 2, .microbatches = 16});
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_THAT(Ranges(*many), ::testing::ElementsAre(std::make_pair(0, 1), std::make_pair(1, 5)));
  EXPECT_DOUBLE_EQ(many->step_seconds, 8.0 + 15 * 4.0);
}

// A cap that the stash of 1F1B's first stage (P in flight) breaks unless it
// rematerialises; without remat, the first stage must shrink.
TEST(PartitionSegments, UnderACapAStageRematerialisesOrShrinks) {
  const CostFile costs = Segments(std::vector<double>(4, 1.0), /*stash=*/100, /*state=*/10);
  // Stage 0 of 2 with two segments, 2 in flight: 40 + 2 * 200 + 5 = 445.
  EXPECT_EQ(EvaluateStage(costs, {.stages = 2, .microbatches = 8}, 0, 0, 2, false).peak_bytes, 445);
  absl::StatusOr<Partition> remat =
      PartitionSegments(costs, {.stages = 2, .microbatches = 8, .memory_cap = 400});
  ASSERT_TRUE(remat.ok()) << remat.status();
  for (const PlanStage& stage : remat->stages) EXPECT_LE(stage.peak_bytes, 400);
  // The even split, its first stage rematerialised: its state, two kept
  // inputs, the working set and the recomputed rest of its stash
  // (40 + 2 * 8 + 5 + (200 - 8)).
  EXPECT_THAT(Ranges(*remat), ::testing::ElementsAre(std::make_pair(0, 2), std::make_pair(2, 4)));
  EXPECT_TRUE(remat->stages[0].remat);
  EXPECT_FALSE(remat->stages[1].remat);
  EXPECT_EQ(remat->stages[0].peak_bytes, 253);
  // Without remat only a one-segment first stage fits (20 + 2 * 100 + 5; the
  // second then holds 60 + 1 * 300 + 5).
  absl::StatusOr<Partition> shrunk =
      PartitionSegments(costs, {.stages = 2, .microbatches = 8, .memory_cap = 400, .allow_remat = false});
  ASSERT_TRUE(shrunk.ok()) << shrunk.status();
  EXPECT_THAT(Ranges(*shrunk), ::testing::ElementsAre(std::make_pair(0, 1), std::make_pair(1, 4)));
}

TEST(PartitionSegments, MatchesExhaustiveSearchOnRandomModels) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> seconds(0.1, 3.0);
  std::uniform_int_distribution<int64_t> bytes(1, 200);
  int fitted = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t n = 2 + trial % 7;
    CostFile costs{.model = "random", .device = "cpu"};
    for (int32_t i = 0; i < n; ++i) {
      const double f = seconds(random);
      costs.segments.push_back({.name = absl::StrCat("s", i),
                                .forward_s = f,
                                .backward_s = 2 * f,
                                .recompute_s = f,
                                .activation_bytes = bytes(random),
                                .stash_bytes = bytes(random),
                                .remat_stash_bytes = bytes(random) / 4,
                                .parameter_bytes = bytes(random),
                                .optimizer_bytes = bytes(random),
                                .working_bytes = bytes(random)});
    }
    PartitionOptions options{.stages = 1 + trial % std::min(n, 4),
                             .microbatches = 1 + trial % 9,
                             .in_flight = trial % 2 ? InFlight::kOneFOneB : InFlight::kAllMicrobatches,
                             .memory_cap = trial % 3 == 0 ? 0 : 300 + 40 * (trial % 20),
                             .allow_remat = trial % 4 != 1,
                             .link = {.beta = (trial % 5) * 0.001}};
    const double expected = BruteForce(costs, options);
    absl::StatusOr<Partition> partition = PartitionSegments(costs, options);
    if (std::isinf(expected)) {
      EXPECT_EQ(partition.status().code(), absl::StatusCode::kResourceExhausted) << "trial " << trial;
      continue;
    }
    ++fitted;
    ASSERT_TRUE(partition.ok()) << "trial " << trial << ": " << partition.status();
    EXPECT_NEAR(partition->step_seconds, expected, 1e-9) << "trial " << trial;
    EXPECT_NEAR(StepSeconds(partition->stages, options.microbatches), partition->step_seconds, 1e-12);
    ASSERT_EQ(partition->stages.size(), static_cast<size_t>(options.stages));
    int32_t next = 0;
    for (const PlanStage& stage : partition->stages) {
      EXPECT_EQ(stage.first_segment, next);
      EXPECT_GT(stage.end_segment, stage.first_segment);
      if (options.memory_cap > 0) {
        EXPECT_LE(stage.peak_bytes, options.memory_cap);
      }
      next = stage.end_segment;
    }
    EXPECT_EQ(next, n);
  }
  EXPECT_GT(fitted, 150);  // most trials had a fitting partition to compare
}

TEST(PartitionSegments, NothingFittingNamesTheTightestActorAndByHowMuch) {
  absl::StatusOr<Partition> partition = PartitionSegments(
      Segments(std::vector<double>(4, 1.0)), {.stages = 2, .microbatches = 8, .memory_cap = 50});
  EXPECT_EQ(partition.status().code(), absl::StatusCode::kResourceExhausted);
  // The closest: remat everywhere, stage 0 holds 2 in flight of 8 bytes.
  EXPECT_THAT(std::string(partition.status().message()),
              HasSubstr("no partition of 4 segments into 2 stages fits 50 bytes per actor: the closest needs"));
  EXPECT_THAT(std::string(partition.status().message()), HasSubstr("on actor "));
  EXPECT_THAT(std::string(partition.status().message()), HasSubstr(" over; it fits with a cap of "));
}

TEST(PartitionSegments, OptionsOutOfRangeAreInvalidArguments) {
  const CostFile costs = Segments({1, 1});
  EXPECT_THAT(std::string(PartitionSegments(costs, {.stages = 3}).status().message()),
              HasSubstr("cannot cut 2 segments into 3 stages"));
  EXPECT_EQ(PartitionSegments(costs, {.stages = 1, .microbatches = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionSegments(CostFile{}, {.stages = 1}).status().code(), absl::StatusCode::kInvalidArgument);
}

// 64 segments on 8 stages, as the planner's search meets them.
TEST(PartitionSegments, SixtyFourSegmentsOnEightStagesArePlanned) {
  std::vector<double> seconds(64, 1.0);
  seconds[0] = 3.0;   // embedding
  seconds[63] = 6.0;  // head
  absl::StatusOr<Partition> partition = PartitionSegments(Segments(seconds), {.stages = 8, .microbatches = 32});
  ASSERT_TRUE(partition.ok()) << partition.status();
  EXPECT_EQ(partition->stages.size(), 8u);
  EXPECT_EQ(partition->stages.back().end_segment - partition->stages.back().first_segment, 4);  // head + 3 blocks
}

TEST(CostFile, RoundTripsExactly) {
  CostFile costs = Segments({0.1, 1.0 / 3.0, 7});
  costs.model = "gpt: 4 layers";
  absl::StatusOr<CostFile> parsed = ParseCostFile(FormatCostFile(costs));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, costs);
}

TEST(CostFile, BadFilesAreErrorsNamingWhereAndWhat) {
  const std::string good = FormatCostFile(Segments({1}));
  auto error = [](const std::string& text) { return std::string(ParseCostFile(text).status().message()); };
  EXPECT_THAT(error("not json"), HasSubstr("is not JSON"));
  EXPECT_THAT(error("{\"format\":\"other\"}"), HasSubstr("is not a Tandem cost file"));
  EXPECT_THAT(error("{\"format\":\"tandem-costs\",\"version\":2}"), HasSubstr("has version 2; this Tandem reads version 1"));
  std::string negative = good;
  negative.replace(negative.find("\"stash_bytes\":100"), 17, "\"stash_bytes\":-1");
  EXPECT_THAT(error(negative), HasSubstr("segment 0: 'stash_bytes' is not a byte count"));
  std::string slow = good;
  slow.replace(slow.find("\"backward_weight_s\""), 19, "\"backward_weight_x\"");
  EXPECT_THAT(error(slow), HasSubstr("segment 0: 'backward_weight_s' must be a number"));
  std::string many = "{\"format\":\"tandem-costs\",\"version\":1,\"model\":\"m\",\"device\":\"d\",\"segments\":[";
  for (int i = 0; i <= kMaxSegments; ++i) absl::StrAppend(&many, i ? "," : "", "{}");
  EXPECT_THAT(error(many + "]}"), HasSubstr("has 4097 segments; it needs 1 to 4096"));
  EXPECT_THAT(error(std::string(kMaxCostFileBytes + 1, ' ')), HasSubstr("at most"));
}

}  // namespace
}  // namespace tandem::schedules
