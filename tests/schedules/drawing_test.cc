#include "schedules/drawing.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/schedules/test_schedules.h"

namespace tandem::schedules {
namespace {

using testing::B;
using testing::F;
using testing::MakeSchedule;
using testing::TinyOneFOneB;

using Json = nlohmann::json;
using ::testing::HasSubstr;

// Two actors; actor 1 fuses F1.1 with B1.0 into one slot.
Schedule WithFusedSlot() {
  return MakeSchedule(2, {{{{F(0, 0)}}, {{F(0, 1)}}, {{B(0, 0)}}, {{B(0, 1)}}},
                          {{{F(1, 0)}}, {{F(1, 1), B(1, 0)}}, {{B(1, 1)}}}});
}

SimulationResult MustSimulate(const Schedule& schedule) {
  absl::StatusOr<SimulationResult> result = Simulate(schedule, CostModel{});
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : SimulationResult{};
}

int CountOccurrences(const std::string& text, const std::string& needle) {
  int count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

TEST(DrawAscii, TinyOneFOneBIsPinned) {
  const Schedule schedule = TinyOneFOneB();
  EXPECT_EQ(DrawAscii(schedule, MustSimulate(schedule)),
            "schedule 1f1b: 2 actors, makespan 9, bubble 33.33%\n"
            "time    0  1  2  3  4  5  6  7  8\n"
            "actor 0 F0 F1 .  .  B0 -- .  B1 --\n"
            "actor 1 .  F0 B0 -- F1 B1 -- .  .\n"
            "one column = 1 time unit; a task's label where it starts (kind, microbatch), "
            "'-' while it runs, '.' idle\n"
            "F forward, B backward, I input-gradient backward, W weight-gradient backward\n");
}

TEST(DrawAscii, ScalesNonIntegerCosts) {
  const Schedule schedule = TinyOneFOneB();
  CostModel costs;
  costs.KindCost(TaskKind::kForward) = 0.5;
  costs.KindCost(TaskKind::kBackward) = 1.0;
  absl::StatusOr<SimulationResult> result = Simulate(schedule, costs);
  ASSERT_TRUE(result.ok()) << result.status();
  const std::string drawing = DrawAscii(schedule, *result);
  EXPECT_THAT(drawing, HasSubstr("actor 0 F0 F1 .  .  B0 -- .  B1 --\n"));
  EXPECT_THAT(drawing, HasSubstr("one column = 0.5 time units"));
}

TEST(DrawAscii, NamesStagesWhenAnActorHoldsSeveral) {
  // One actor holding both stages.
  Schedule schedule = MakeSchedule(1, {{{{F(0, 0)}}, {{F(1, 0)}}, {{B(1, 0)}}, {{B(0, 0)}}}});
  schedule.num_stages = 2;
  schedule.stage_to_actor = {ActorId(0), ActorId(0)};
  const std::string drawing = DrawAscii(schedule, MustSimulate(schedule));
  EXPECT_THAT(drawing, HasSubstr("actor 0 F0.0 F1.0 B1.0 ---- B0.0 ----\n"));
}

// Every opening tag is closed in order; attribute values are quoted.
bool IsWellFormedXml(const std::string& xml) {
  std::vector<std::string> open;
  for (size_t at = xml.find('<'); at != std::string::npos; at = xml.find('<', at + 1)) {
    const size_t end = xml.find('>', at);
    if (end == std::string::npos) return false;
    std::string tag = xml.substr(at + 1, end - at - 1);
    if (tag.empty()) return false;
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return false;
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find(' ')));
    }
    if (CountOccurrences(tag, "\"") % 2 != 0) return false;
  }
  return open.empty();
}

TEST(DrawSvg, IsWellFormedWithOneRectPerTask) {
  const Schedule schedule = WithFusedSlot();
  const std::string svg = DrawSvg(schedule, MustSimulate(schedule));
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_TRUE(IsWellFormedXml(svg)) << svg;
  EXPECT_EQ(CountOccurrences(svg, "<rect class=\"task\""), schedule.NumTasks());
  EXPECT_EQ(CountOccurrences(svg, "<rect class=\"lane\""), 2);
  EXPECT_EQ(CountOccurrences(svg, "<rect class=\"legend\""), 4);
  EXPECT_THAT(svg, HasSubstr("<title>B1.0 on actor 1: 2 to 4</title>"));
}

TEST(DrawPerfetto, IsValidTraceJsonWithTracksFlowsAndCounters) {
  const Schedule schedule = WithFusedSlot();
  const SimulationResult result = MustSimulate(schedule);
  const std::string text = DrawPerfetto(schedule, result);
  Json trace;
  ASSERT_NO_THROW(trace = Json::parse(text)) << text;
  ASSERT_TRUE(trace.contains("traceEvents"));
  const Json& events = trace["traceEvents"];
  ASSERT_TRUE(events.is_array());

  std::map<int, int> compute_slices;  // pid -> count.
  std::map<int, int> counters;
  std::map<int, std::string> process_names;
  std::map<int64_t, std::pair<int, int>> flow_ends;  // id -> (starts, finishes).
  int sends = 0;
  int receives = 0;
  for (const Json& event : events) {
    const std::string phase = event.at("ph").get<std::string>();
    const int pid = event.at("pid").get<int>();
    const int tid = event.at("tid").get<int>();
    if (phase == "X") {
      ASSERT_TRUE(event.contains("ts"));
      ASSERT_TRUE(event.contains("dur"));
      if (tid == static_cast<int>(TraceTrack::kCompute)) ++compute_slices[pid];
      if (tid == static_cast<int>(TraceTrack::kSend)) ++sends;
      if (tid == static_cast<int>(TraceTrack::kRecv)) ++receives;
    } else if (phase == "s") {
      ++flow_ends[event.at("id").get<int64_t>()].first;
      EXPECT_EQ(tid, static_cast<int>(TraceTrack::kSend));
    } else if (phase == "f") {
      ++flow_ends[event.at("id").get<int64_t>()].second;
      EXPECT_EQ(event.at("bp"), "e");
      EXPECT_EQ(tid, static_cast<int>(TraceTrack::kRecv));
    } else if (phase == "C") {
      ++counters[pid];
      EXPECT_TRUE(event.at("args").contains("activations"));
    } else if (phase == "M" && event.at("name") == "process_name") {
      process_names[pid] = event.at("args").at("name").get<std::string>();
    }
  }
  EXPECT_EQ(compute_slices[0], 4);  // One slice per slot.
  EXPECT_EQ(compute_slices[1], 3);
  EXPECT_EQ(sends, static_cast<int>(result.transfers.size()));
  EXPECT_EQ(receives, static_cast<int>(result.transfers.size()));
  EXPECT_EQ(flow_ends.size(), result.transfers.size());
  for (const auto& [id, ends] : flow_ends) {
    EXPECT_EQ(ends.first, 1) << "flow " << id;
    EXPECT_EQ(ends.second, 1) << "flow " << id;
  }
  EXPECT_GT(counters[0], 0);
  EXPECT_GT(counters[1], 0);
  EXPECT_EQ(process_names[0], "actor 0");
  EXPECT_EQ(process_names[1], "actor 1");
  EXPECT_THAT(text, HasSubstr("1 simulated cost unit = 1000 us"));
}

// Data parallelism: 1F1B, p=2, m=2, D=2, alpha=1 (pipeline transfers cost
// 1), so each actor reduces its stage for 2 * 1 * 1 = 2 after its last B.
SimulationResult WithReductions(const Schedule& schedule) {
  CostModel costs;
  costs.link.alpha = 1.0;
  costs.data_parallel = 2;
  absl::StatusOr<SimulationResult> result = Simulate(schedule, costs);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : SimulationResult{};
}

TEST(DrawAscii, ReductionsGetARowUnderTheirActor) {
  const Schedule schedule = TinyOneFOneB();
  const SimulationResult result = WithReductions(schedule);
  ASSERT_EQ(result.reductions.size(), 2u);
  ASSERT_EQ(result.reductions[0].start, 11.0);
  ASSERT_EQ(result.reductions[1].start, 8.0);
  const std::string drawing = DrawAscii(schedule, result);
  EXPECT_THAT(drawing, HasSubstr("\nactor  0 F0 F1 .  .  .  .  B0 -- .  B1 -- .  .\n"
                                 "reduce 0 .  .  .  .  .  .  .  .  .  .  .  R0 --\n"
                                 "actor  1 .  .  F0 B0 -- F1 B1 -- .  .  .  .  .\n"
                                 "reduce 1 .  .  .  .  .  .  .  .  R1 -- .  .  .\n"));
  EXPECT_THAT(drawing, HasSubstr(", R gradient reduction (stage)\n"));
}

TEST(DrawSvg, ReductionsGetALaneUnderTheirActor) {
  const Schedule schedule = TinyOneFOneB();
  const std::string svg = DrawSvg(schedule, WithReductions(schedule));
  EXPECT_TRUE(IsWellFormedXml(svg)) << svg;
  EXPECT_EQ(CountOccurrences(svg, "<rect class=\"reduction\""), 2);
  EXPECT_EQ(CountOccurrences(svg, "<rect class=\"legend\""), 5);
  EXPECT_THAT(svg, HasSubstr("<title>reduction of stage 0 on actor 0: 11 to 13</title>"));
}

TEST(DrawPerfetto, ReductionsRunOnAReduceTrackPerActor) {
  const Schedule schedule = TinyOneFOneB();
  const SimulationResult result = WithReductions(schedule);
  const Json trace = Json::parse(DrawPerfetto(schedule, result));
  const int reduce = static_cast<int>(TraceTrack::kReduce);
  std::map<int, std::string> thread_names;  // pid -> name of the reduce track.
  std::map<int, std::vector<std::pair<double, double>>> slices;  // pid -> (ts, dur).
  for (const Json& event : trace.at("traceEvents")) {
    if (event.at("tid").get<int>() != reduce) continue;
    const int pid = event.at("pid").get<int>();
    if (event.at("ph") == "M" && event.at("name") == "thread_name") {
      thread_names[pid] = event.at("args").at("name").get<std::string>();
    } else if (event.at("ph") == "X") {
      EXPECT_EQ(event.at("name"), absl::StrCat("reduce stage ", pid));
      EXPECT_EQ(event.at("cat"), "reduction");
      EXPECT_EQ(event.at("args").at("bytes").get<double>(), 1.0);
      slices[pid].emplace_back(event.at("ts").get<double>(), event.at("dur").get<double>());
    }
  }
  EXPECT_EQ(thread_names, (std::map<int, std::string>{{0, "reduce"}, {1, "reduce"}}));
  using Spans = std::vector<std::pair<double, double>>;
  EXPECT_EQ(slices,
            (std::map<int, Spans>{{0, Spans{{11000.0, 2000.0}}}, {1, Spans{{8000.0, 2000.0}}}}));
}

TEST(TraceBuilder, WritesGenericEvents) {
  TraceBuilder trace;
  trace.NameActor(3);
  trace.AddSlice({3, 0, "step \"1\"", "measured", 10.0, 2.5, {{"bytes", 4.0}, {"note", "a\nb"}}});
  trace.AddCounter({3, "memory", 10.0, 7.0});
  EXPECT_EQ(trace.AddFlow({"x", "", 3, 1, 10.0, 4, 2, 11.0}), 1);
  const std::string text = trace.ToJson();
  ASSERT_TRUE(Json::accept(text)) << text;
  EXPECT_THAT(text, HasSubstr("{\"ph\":\"X\",\"name\":\"step \\\"1\\\"\",\"pid\":3,\"tid\":0,"
                              "\"cat\":\"measured\",\"ts\":10,\"dur\":2.5,"
                              "\"args\":{\"bytes\":4,\"note\":\"a\\nb\"}}"));
  EXPECT_THAT(text, HasSubstr("\"name\":\"thread_name\",\"pid\":3,\"tid\":2,"
                              "\"args\":{\"name\":\"recv\"}"));
}

}  // namespace
}  // namespace tandem::schedules
