// The planner (schedules/planner.h) on synthetic cost files with known
// optima, under memory caps, with exact peaks from a callback and with
// costs measured at several microbatch sizes; and the plan files it writes.
#include "schedules/planner.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/cost_file.h"
#include "schedules/plan_file.h"
#include "tests/schedules/test_cost_files.h"

namespace tandem::schedules {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;

using testing::Segments;

std::vector<std::pair<int32_t, int32_t>> Ranges(const Candidate& candidate) {
  std::vector<std::pair<int32_t, int32_t>> ranges;
  for (const PlanStage& stage : candidate.plan.stages) ranges.emplace_back(stage.first_segment, stage.end_segment);
  return ranges;
}

absl::StatusOr<Candidate> Plan1F1B(const CostFile& costs, int32_t actors, int64_t batch) {
  PlannerOptions options{.actors = actors, .global_batch = batch, .schedules = {"1f1b"}};
  absl::StatusOr<PlanSearch> search = SearchPlans(costs, options);
  if (!search.ok()) return search.status();
  return ChosenCandidate(*search, costs, options);
}

TEST(Planner, AHeavyLastSegmentLikeAnLmHeadGetsFewerLayersBesideIt) {
  // Seven blocks of 1 and a head of 5: [0, 6) | [6, 8) balances at 6 and 6.
  absl::StatusOr<Candidate> chosen = Plan1F1B(Segments({1, 1, 1, 1, 1, 1, 1, 5}), 2, 8);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(Ranges(*chosen), (std::vector<std::pair<int32_t, int32_t>>{{0, 6}, {6, 8}}));
}

TEST(Planner, AHeavyFirstSegmentLikeAnEmbeddingGetsFewerLayersBesideIt) {
  absl::StatusOr<Candidate> chosen = Plan1F1B(Segments({5, 1, 1, 1, 1, 1, 1, 1}), 2, 8);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(Ranges(*chosen), (std::vector<std::pair<int32_t, int32_t>>{{0, 2}, {2, 8}}));
}

TEST(Planner, AHandPickedEvenSplitIsEvaluatedLikeTheSearchsOwnAndLoses) {
  const CostFile costs = Segments({1, 1, 1, 1, 1, 1, 1, 5});
  PlannerOptions options{.actors = 2, .global_batch = 8, .schedules = {"1f1b"}};
  absl::StatusOr<Candidate> chosen = Plan1F1B(costs, 2, 8);
  ASSERT_TRUE(chosen.ok());
  absl::StatusOr<Candidate> even = EvaluateCandidate({costs}, options, "1f1b", chosen->plan.microbatches,
                                                     {{.first_segment = 0, .end_segment = 4},
                                                      {.first_segment = 4, .end_segment = 8}});
  ASSERT_TRUE(even.ok()) << even.status();
  // Stages of 4 and 8 units against 6 and 6.
  EXPECT_DOUBLE_EQ(even->plan.stages[1].seconds, 8.0);
  EXPECT_GT(even->plan.predicted_step_s, chosen->plan.predicted_step_s);
  EXPECT_THAT(EvaluateCandidate({costs}, options, "1f1b", 8, {{.first_segment = 0, .end_segment = 8}}).status().message(),
              HasSubstr("1f1b needs 2 stages covering the 8 segments"));
}

TEST(Planner, BalancedLayersSplitEvenlyOverFourActors) {
  absl::StatusOr<Candidate> chosen = Plan1F1B(Segments(std::vector<double>(8, 1.0)), 4, 8);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(Ranges(*chosen), (std::vector<std::pair<int32_t, int32_t>>{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  std::vector<int32_t> actors;
  for (const PlanStage& stage : chosen->plan.stages) actors.push_back(stage.actor);
  EXPECT_EQ(actors, (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(Planner, SearchesEverySchedulesMicrobatchCountsThatDivideTheBatch) {
  const CostFile costs = Segments(std::vector<double>(8, 1.0));
  absl::StatusOr<PlanSearch> search = SearchPlans(costs, {.actors = 2, .global_batch = 8});
  ASSERT_TRUE(search.ok()) << search.status();
  std::set<std::pair<std::string, int32_t>> tried;
  for (const Candidate& c : search->candidates) {
    tried.insert({c.plan.schedule, c.plan.microbatches});
    EXPECT_EQ(c.plan.microbatch_size * c.plan.microbatches, 8);
    EXPECT_EQ(static_cast<int32_t>(c.plan.stages.size()), 2 * c.plan.virtual_stages);
  }
  for (int32_t m : {1, 2, 4, 8}) {
    EXPECT_TRUE(tried.count({"gpipe", m}) && tried.count({"1f1b", m}) && tried.count({"zb-h1", m})) << m;
  }
  EXPECT_TRUE(tried.count({"interleaved", 4}) && tried.count({"zb-v", 8}));
  // ZB-V needs M >= 2P - 1 = 3: M = 1 and 2 are skipped, and say why.
  EXPECT_FALSE(tried.count({"zb-v", 2}));
  EXPECT_THAT(search->skipped, Contains(HasSubstr("zb-v M=2")));
  // Ranked fastest first; more microbatches shrink the bubble here.
  for (size_t i = 1; i < search->candidates.size(); ++i) {
    EXPECT_LE(search->candidates[i - 1].plan.predicted_step_s, search->candidates[i].plan.predicted_step_s);
  }
}

TEST(Planner, TheChosenPlanFitsTheCapOnEveryActorAndTheCapChangesTheChoice) {
  // Large stashes: GPipe keeps all M in flight, 1F1B at most P.
  const CostFile costs = Segments(std::vector<double>(8, 1.0), /*stash=*/1000);
  PlannerOptions free{.actors = 2, .global_batch = 16, .schedules = {"gpipe", "1f1b"}};
  absl::StatusOr<PlanSearch> unbounded = SearchPlans(costs, free);
  ASSERT_TRUE(unbounded.ok());
  absl::StatusOr<Candidate> fastest = ChosenCandidate(*unbounded, costs, free);
  ASSERT_TRUE(fastest.ok());
  PlannerOptions capped = free;
  capped.memory_cap = fastest->LargestPeak() / 2;
  absl::StatusOr<PlanSearch> search = SearchPlans(costs, capped);
  ASSERT_TRUE(search.ok());
  absl::StatusOr<Candidate> chosen = ChosenCandidate(*search, costs, capped);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  for (int64_t peak : chosen->plan.predicted_peak_bytes) EXPECT_LE(peak, capped.memory_cap);
  EXPECT_GT(fastest->LargestPeak(), capped.memory_cap);
  EXPECT_GE(chosen->plan.predicted_step_s, fastest->plan.predicted_step_s);
}

TEST(Planner, UnderATightCapAStageRematerialisesToFit) {
  const CostFile costs = Segments(std::vector<double>(4, 1.0), /*stash=*/1000);
  PlannerOptions options{.actors = 2, .global_batch = 4, .schedules = {"gpipe"}};
  options.max_microbatches = 4;
  // Without remat each actor keeps 4 microbatches x 2 segments x 1000.
  options.memory_cap = 5000;
  absl::StatusOr<PlanSearch> search = SearchPlans(costs, options);
  ASSERT_TRUE(search.ok());
  absl::StatusOr<Candidate> chosen = ChosenCandidate(*search, costs, options);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  bool any_remat = false;
  for (const PlanStage& stage : chosen->plan.stages) any_remat |= stage.remat;
  EXPECT_TRUE(any_remat || chosen->plan.microbatches < 4);
  EXPECT_LE(chosen->LargestPeak(), options.memory_cap);
}

TEST(Planner, ACapTooSmallForAnyPlanNamesTheTightestActorAndWhatWouldFit) {
  const CostFile costs = Segments({1, 1, 1, 5});
  PlannerOptions options{.actors = 2, .global_batch = 4, .memory_cap = 10};
  absl::StatusOr<PlanSearch> search = SearchPlans(costs, options);
  ASSERT_TRUE(search.ok());
  absl::StatusOr<Candidate> chosen = ChosenCandidate(*search, costs, options);
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(chosen.status().message(), AllOf(HasSubstr("no plan fits the memory cap of 10 bytes per actor"),
                                               HasSubstr("bytes on actor "), HasSubstr(" over; it fits with a cap of ")));
}

TEST(Planner, CompiledPeaksReplaceTheCostModelsForTheFastestCandidates) {
  const CostFile costs = Segments(std::vector<double>(4, 1.0));
  PlannerOptions options{.actors = 2, .global_batch = 4, .memory_cap = 1000, .schedules = {"gpipe", "1f1b"}};
  // The "compiled" GPipe programs need more than the cap; 1F1B's fit.
  int32_t calls = 0;
  CompiledPeaks compiled = [&](const Candidate& c, const Schedule& schedule) -> absl::StatusOr<std::vector<int64_t>> {
    ++calls;
    EXPECT_EQ(schedule.num_microbatches, c.plan.microbatches);
    return std::vector<int64_t>(2, c.plan.schedule == "gpipe" ? 5000 : 700);
  };
  absl::StatusOr<PlanSearch> search = SearchPlans(costs, options, compiled);
  ASSERT_TRUE(search.ok());
  EXPECT_GT(calls, 0);
  EXPECT_EQ(search->compiled, calls);
  absl::StatusOr<Candidate> chosen = ChosenCandidate(*search, costs, options);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->plan.schedule, "1f1b");
  EXPECT_EQ(chosen->plan.memory_source, MemorySource::kCompiledProgram);
  EXPECT_EQ(chosen->plan.predicted_peak_bytes, (std::vector<int64_t>{700, 700}));
}

TEST(Planner, EachMicrobatchSizeTakesTheCostsMeasuredAtIt) {
  // Per sequence, microbatches of 1 cost ten times those of 4 (overheads):
  // measured, the planner prefers M = 2 (size 4) to M = 8 (size 1).
  std::vector<CostFile> measured = {Segments({4, 4}, 100, 10, /*microbatch_size=*/4),
                                    Segments({10, 10}, 100, 10, /*microbatch_size=*/1)};
  PlannerOptions options{.actors = 2, .global_batch = 8, .schedules = {"1f1b"}};
  absl::StatusOr<PlanSearch> search = SearchPlans(measured, options);
  ASSERT_TRUE(search.ok()) << search.status();
  for (const Candidate& c : search->candidates) {
    if (c.plan.microbatches == 8) {
      EXPECT_DOUBLE_EQ(c.plan.stages[0].seconds, 10.0);  // measured at size 1
    }
    if (c.plan.microbatches == 2) {
      EXPECT_DOUBLE_EQ(c.plan.stages[0].seconds, 4.0);   // measured at size 4
    }
    if (c.plan.microbatches == 4) {
      EXPECT_DOUBLE_EQ(c.plan.stages[0].seconds, 2.0);   // size 2: size 4's, halved
    }
  }
  absl::StatusOr<Candidate> chosen = ChosenCandidate(*search, measured.front(), options);
  ASSERT_TRUE(chosen.ok());
  EXPECT_NE(chosen->plan.microbatches, 8);
  // Files of different segments do not mix.
  measured.push_back(Segments({1, 1, 1}, 100, 10, 2));
  EXPECT_THAT(SearchPlans(measured, options).status().message(), HasSubstr("must measure the same segments"));
}

TEST(Planner, OptionsOutOfRangeAreErrors) {
  const CostFile costs = Segments({1, 1});
  EXPECT_THAT(SearchPlans(costs, {.actors = 3, .global_batch = 4}).status().message(),
              HasSubstr("2 segments cannot fill 3 actors"));
  EXPECT_THAT(SearchPlans(costs, {.actors = 1, .global_batch = 0}).status().message(),
              HasSubstr("global batch 0"));
  EXPECT_THAT(SearchPlans(costs, {.actors = 1, .global_batch = 2, .schedules = {"dualpipev"}}).status().message(),
              HasSubstr("does not search schedule 'dualpipev'"));
}

TEST(PlanFile, ThePlanOfACandidateRoundTripsAndGeneratesItsSchedule) {
  const CostFile costs = Segments({1, 1, 1, 5});
  PlannerOptions options{.actors = 2, .global_batch = 4, .schedules = {"zb-v"}};
  absl::StatusOr<PlanSearch> search = SearchPlans(costs, options);
  ASSERT_TRUE(search.ok()) << search.status();
  absl::StatusOr<Candidate> chosen = ChosenCandidate(*search, costs, options);
  ASSERT_TRUE(chosen.ok());
  const Plan plan = chosen->plan;
  EXPECT_EQ(plan.virtual_stages, 2);
  EXPECT_EQ(plan.SegmentStages(), (std::vector<int32_t>{0, 1, 2, 3}));
  absl::StatusOr<Plan> read = ParsePlanFile(FormatPlanFile(plan));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->stages, plan.stages);
  EXPECT_EQ(read->predicted_peak_bytes, plan.predicted_peak_bytes);
  EXPECT_EQ(read->schedule, "zb-v");
  absl::StatusOr<Schedule> schedule = PlanSchedule(*read);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  // V placement: stages 0 and 3 on actor 0.
  EXPECT_EQ(schedule->ActorOf(StageId(3)).value, 0);
}

std::string PlanText(const std::string& stages, const std::string& extra = "") {
  return absl::StrCat(R"({"format":"tandem-plan","version":1,"model":"m","device":"cpu","actors":2,)",
                      R"("data_parallel":1,"schedule":"1f1b","virtual_stages":1,"microbatches":4,)",
                      R"("microbatch_size":2,"segments":4,"memory_cap":0,"stages":)", stages, extra, "}");
}

TEST(PlanFile, TheMemorySourceIsOneOfTwoWords) {
  const std::string good = R"([{"segments":[0,3],"remat":false,"actor":0},{"segments":[3,4],"remat":true,"actor":1}])";
  absl::StatusOr<Plan> compiled = ParsePlanFile(PlanText(good, R"(,"predicted":{"memory":"compiled program"})"));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(compiled->memory_source, MemorySource::kCompiledProgram);
  EXPECT_EQ(ParsePlanFile(PlanText(good))->memory_source, MemorySource::kCostModel);
  EXPECT_THAT(ParsePlanFile(FormatPlanFile(*compiled))->memory_source, MemorySource::kCompiledProgram);
  EXPECT_THAT(ParsePlanFile(PlanText(good, R"(,"predicted":{"memory":"a guess"})")).status().message(),
              HasSubstr("'memory' must be \"cost model\" or \"compiled program\""));
}

TEST(PlanFile, BadPlansAreErrorsNamingTheField) {
  const std::string good = R"([{"segments":[0,3],"remat":false,"actor":0},{"segments":[3,4],"remat":true,"actor":1}])";
  absl::StatusOr<Plan> plan = ParsePlanFile(PlanText(good));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->RematByStage(), (std::vector<bool>{false, true}));
  EXPECT_THAT(ParsePlanFile(PlanText(R"([{"segments":[0,3],"remat":false,"actor":0},{"segments":[3,3],"remat":false,"actor":1}])"))
                  .status()
                  .message(),
              HasSubstr("stage 1: holds segments [3, 3)"));
  EXPECT_THAT(ParsePlanFile(PlanText(R"([{"segments":[0,2],"remat":false,"actor":0},{"segments":[2,3],"remat":false,"actor":1}])"))
                  .status()
                  .message(),
              HasSubstr("cover 3 of the 4 segments"));
  EXPECT_THAT(ParsePlanFile(PlanText(R"([{"segments":[0,3],"remat":false,"actor":0},{"segments":[3,4],"remat":false,"actor":7}])"))
                  .status()
                  .message(),
              HasSubstr("'actor' = 7 is outside [0, 1]"));
  EXPECT_THAT(ParsePlanFile(PlanText("[]")).status().message(), HasSubstr("has 0 stages; 2 actors"));
  EXPECT_THAT(ParsePlanFile(R"({"format":"tandem-plan","version":2})").status().message(), HasSubstr("version 2"));
  EXPECT_THAT(ParsePlanFile("{").status().message(), HasSubstr("not JSON"));
  std::string huge = PlanText(good);
  huge.replace(huge.find("\"microbatches\":4"), 16, "\"microbatches\":18446744073709551615");
  EXPECT_THAT(ParsePlanFile(huge).status().message(), HasSubstr("'microbatches'"));
  // A misspelt field is named, not read as absent (issue 41, finding 11).
  EXPECT_THAT(ParsePlanFile(PlanText(R"([{"segments":[0,3],"remat":false,"actor":0,"peak_bypes":5},{"segments":[3,4],"remat":true,"actor":1}])"))
                  .status()
                  .message(),
              HasSubstr("plan file: stage 0: 'peak_bypes' is not a field of it"));
  std::string extra = PlanText(good);
  extra.insert(1, "\"microbatch\":4,");
  EXPECT_THAT(ParsePlanFile(extra).status().message(), HasSubstr("plan file: the file: 'microbatch' is not a field of it"));
  // A placement the generator does not make is refused when the schedule is built.
  Plan moved = *plan;
  moved.stages[1].actor = 0;
  EXPECT_THAT(PlanSchedule(moved).status().message(), HasSubstr("stage 1 is on actor 0"));
}

}  // namespace
}  // namespace tandem::schedules
