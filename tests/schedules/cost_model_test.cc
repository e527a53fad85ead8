// The one link model of the simulator, the partitioner and the planner: a
// transfer costs alpha + beta * bytes, and a model with a negative, NaN or
// infinite term is refused by each of them with the same words.
#include "schedules/cost_model.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "schedules/simulator.h"

namespace tandem::schedules {
namespace {

using ::testing::HasSubstr;

TEST(LinkModel, ATransferCostsAlphaPlusBetaPerByte) {
  const LinkModel link{.alpha = 0.5, .beta = 0.25};
  EXPECT_DOUBLE_EQ(link.Seconds(0), 0.5);
  EXPECT_DOUBLE_EQ(link.Seconds(8), 2.5);
  EXPECT_TRUE(link.Check("link").ok());
}

TEST(LinkModel, NegativeNanOrInfiniteTermsAreRefused) {
  const double inf = std::numeric_limits<double>::infinity();
  for (const LinkModel& link : {LinkModel{.alpha = -1}, LinkModel{.beta = -0.5}, LinkModel{.alpha = std::nan("")},
                                LinkModel{.beta = inf}}) {
    const absl::Status status = link.Check("the link");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("the link: alpha and beta must be finite and non-negative"));
  }
}

TEST(LinkModel, ANegativeNanOrInfiniteLatencyIsRefused) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double latency : {-1.0, std::nan(""), inf}) {
    const absl::Status status = LinkModel{.latency = latency}.Check("the link");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("the link: latency must be finite and non-negative"));
  }
  EXPECT_TRUE(LinkModel{.latency = 2.5}.Check("the link").ok());
}

TEST(LinkModel, TheSimulatorRefusesABadLinkWithTheSameWords) {
  absl::StatusOr<Schedule> schedule = Generate("1f1b", {.actors = 2, .microbatches = 2});
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  CostModel costs;
  costs.link.beta = -1;
  absl::StatusOr<SimulationResult> result = Simulate(*schedule, costs);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("link costs: alpha and beta must be finite and non-negative"));
}

}  // namespace
}  // namespace tandem::schedules
