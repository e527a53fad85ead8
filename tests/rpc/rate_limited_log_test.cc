// Notices a peer can cause at will are rate-limited: a few lines, then one
// count per interval, and nothing lost from the count.
#include "rpc/rate_limited_log.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::rpc {
namespace {

using ::testing::ElementsAre;

struct Recorder {
  std::vector<std::string> lines;
  absl::Time now = absl::UnixEpoch();
  RateLimitedLog log{[this](absl::string_view line) { lines.emplace_back(line); }, "control plane", 3,
                     absl::Seconds(10), [this] { return now; }};
};

TEST(RateLimitedLog, TwoThousandNoticesMakeAFewLinesAndACount) {
  Recorder recorder;
  for (int i = 0; i < 2000; ++i) recorder.log.Log("refused " + std::to_string(i));
  EXPECT_THAT(recorder.lines, ElementsAre("refused 0", "refused 1", "refused 2"));
  recorder.now += absl::Seconds(10);
  recorder.log.Tick();
  EXPECT_EQ(recorder.lines.back(), "control plane: 1997 more notices like these in the last 10s");
  EXPECT_EQ(recorder.log.total(), 2000);
  EXPECT_EQ(recorder.log.suppressed(), 1997);
}

TEST(RateLimitedLog, EachIntervalPassesItsFirstFewAgain) {
  Recorder recorder;
  for (int i = 0; i < 5; ++i) recorder.log.Log("a");
  recorder.now += absl::Seconds(11);
  recorder.log.Log("b");  // ends the interval first: its summary, then "b"
  EXPECT_THAT(recorder.lines,
              ElementsAre("a", "a", "a", "control plane: 2 more notices like these in the last 11s", "b"));
}

TEST(RateLimitedLog, NothingHeldBackMeansNoSummary) {
  Recorder recorder;
  recorder.log.Log("a");
  recorder.now += absl::Minutes(5);
  recorder.log.Tick();
  recorder.log.Flush();
  EXPECT_THAT(recorder.lines, ElementsAre("a"));
}

TEST(RateLimitedLog, FlushAndTheDestructorReportWhatIsHeldBack) {
  std::vector<std::string> lines;
  {
    RateLimitedLog log([&](absl::string_view line) { lines.emplace_back(line); }, "x", 1, absl::Seconds(10),
                       [] { return absl::UnixEpoch(); });
    log.Log("first");
    log.Log("second");
  }
  EXPECT_THAT(lines, ElementsAre("first", "x: 1 more notices like these in the last 0"));
}

}  // namespace
}  // namespace tandem::rpc
