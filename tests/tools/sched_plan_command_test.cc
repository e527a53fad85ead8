// `tandem sched sim`, `tandem sched draw` and `tandem bench sched`, driven
// through their entry points with string streams.
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "schedules/text_format.h"
#include "tests/schedules/json_test_parser.h"
#include "tools/cli/commands.h"
#include "tools/cli/sched_commands.h"

namespace tandem::cli {
namespace {

using ::tandem::testing::JsonTestParser;
using ::tandem::testing::JsonValue;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct CommandRun {
  int code = 0;
  std::string out;
  std::string err;
};

CommandRun Sim(const CommandArgs& args) {
  std::ostringstream out, err;
  const int code = RunSchedSimCommand(args, out, err);
  return {code, out.str(), err.str()};
}

CommandRun Draw(const CommandArgs& args) {
  std::ostringstream out, err;
  const int code = RunSchedDrawCommand(args, out, err);
  return {code, out.str(), err.str()};
}

// CTest runs this binary's tests as concurrent processes sharing TempDir():
// each test writes its own files (named after the test), so that one test
// never reads a file another is rewriting.
std::string WriteFile(const std::string& name, const std::string& text) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string owner = test != nullptr ? std::string(test->test_suite_name()) + "." + test->name() + "." : "";
  std::string path = ::testing::TempDir() + owner + name;
  std::replace(path.begin() + static_cast<std::ptrdiff_t>(::testing::TempDir().size()), path.end(), '/', '_');
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// A generated schedule written in the text format; returns its path.
std::string GeneratedFile(const std::string& generator, int p, int m) {
  schedules::GeneratorOptions options;
  options.actors = p;
  options.microbatches = m;
  absl::StatusOr<schedules::Schedule> schedule = schedules::Generate(generator, options);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return WriteFile(generator + "_" + std::to_string(p) + "_" + std::to_string(m) + ".sched",
                   schedules::PrintScheduleText(*schedule));
}

// 1F1B with p=2, m=1, but actor 1 runs its backward before its forward.
std::string DeadlockingFile() {
  schedules::Schedule schedule;
  schedule.name = "broken";
  schedule.num_actors = 2;
  schedule.num_stages = 2;
  schedule.num_microbatches = 1;
  schedule.stage_to_actor = {schedules::ActorId(0), schedules::ActorId(1)};
  const auto task = [](schedules::TaskKind kind, int stage) {
    return schedules::Slot{{{kind, schedules::StageId(stage), schedules::Microbatch(0)}}};
  };
  schedule.programs = {
      {task(schedules::TaskKind::kForward, 0), task(schedules::TaskKind::kBackward, 0)},
      {task(schedules::TaskKind::kBackward, 1), task(schedules::TaskKind::kForward, 1)}};
  return WriteFile("deadlock.sched", schedules::PrintScheduleText(schedule));
}

JsonValue ParseJsonOrFail(const std::string& text) {
  JsonTestParser parser;
  std::optional<JsonValue> value = parser.Parse(text);
  EXPECT_TRUE(value.has_value()) << parser.error() << "\n" << text;
  return value.value_or(JsonValue{});
}

TEST(SchedSim, JsonHasMakespanBubbleAndPerActorStats) {
  const CommandRun run = Sim({GeneratedFile("1f1b", 4, 8), "--json"});
  ASSERT_EQ(run.code, 0) << run.err;
  const JsonValue json = ParseJsonOrFail(run.out);
  ASSERT_NE(json.Find("makespan"), nullptr);
  EXPECT_EQ(json.Find("makespan")->number, (8 + 4 - 1) * 3.0);
  EXPECT_EQ(json.Find("bubble")->number, 3.0 / 11.0);
  const JsonValue* per_actor = json.Find("per_actor");
  ASSERT_NE(per_actor, nullptr);
  ASSERT_EQ(per_actor->array.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    const JsonValue& actor = per_actor->array[r];
    EXPECT_EQ(actor.Find("actor")->number, r);
    EXPECT_EQ(actor.Find("bubble")->number, 3.0 / 11.0);
    EXPECT_EQ(actor.Find("peak_activations")->number, 4 - r);
    EXPECT_NE(actor.Find("busy"), nullptr);
  }
  ASSERT_NE(json.Find("critical_path"), nullptr);
  EXPECT_FALSE(json.Find("critical_path")->array.empty());
  EXPECT_EQ(json.Find("memory_timeline"), nullptr);
}

TEST(SchedSim, CostAndLinkOptionsChangeTheModel) {
  const std::string path = GeneratedFile("gpipe", 2, 1);
  const CommandRun run = Sim({path, "--cost", "F=2,B=3", "--link=alpha=0.5,beta=0.25", "--json",
                       "--timeline"});
  ASSERT_EQ(run.code, 0) << run.err;
  const JsonValue json = ParseJsonOrFail(run.out);
  // F0 F1 B1 B0 plus two transfers of 0.75.
  EXPECT_EQ(json.Find("makespan")->number, 2 + 2 + 3 + 3 + 1.5);
  EXPECT_NE(json.Find("memory_timeline"), nullptr);

  const CommandRun per_stage = Sim({path, "--cost", "B@1=10", "--json"});
  ASSERT_EQ(per_stage.code, 0) << per_stage.err;
  EXPECT_EQ(ParseJsonOrFail(per_stage.out).Find("makespan")->number, 1 + 1 + 10 + 2);
}

TEST(SchedSim, TableForPeople) {
  const CommandRun run = Sim({GeneratedFile("1f1b", 2, 2)});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("makespan 9, bubble 33.33%"));
  EXPECT_THAT(run.out, HasSubstr("peak activations"));
  EXPECT_THAT(run.out, HasSubstr("critical path"));
}

TEST(SchedSim, BadCostOrLinkSyntaxIsAUsageErrorNamingThePiece) {
  const std::string path = GeneratedFile("1f1b", 2, 2);
  CommandRun run = Sim({path, "--cost", "F=1,Q=2"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--cost: 'Q=2'"));
  run = Sim({path, "--cost", "F=fast"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("'F=fast': 'fast' is not a non-negative number"));
  run = Sim({path, "--cost", "F=1,,B=2"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("'' is not of the form NAME=VALUE"));
  run = Sim({path, "--cost", "F=-1"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("'F=-1'"));
  run = Sim({path, "--link", "alpha=1,gamma=2"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--link: 'gamma=2'"));
  run = Sim({path, "--link", "alpha"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--link: 'alpha' is not of the form NAME=VALUE"));
}

TEST(SchedSim, InvalidScheduleExitsOneWithTheValidatorMessage) {
  const CommandRun run = Sim({DeadlockingFile()});
  EXPECT_EQ(run.code, 1);
  EXPECT_THAT(run.err, HasSubstr("deadlock"));
  EXPECT_TRUE(run.out.empty());
}

TEST(SchedSim, MissingFileAndArgumentsAreErrors) {
  EXPECT_EQ(Sim({::testing::TempDir() + "no-such-file.sched"}).code, 1);
  EXPECT_EQ(Sim({}).code, 2);
  EXPECT_EQ(Sim({"a.sched", "b.sched"}).code, 2);
  EXPECT_EQ(Sim({"a.sched", "--bogus"}).code, 2);
}

TEST(SchedDraw, AsciiToStdout) {
  const CommandRun run = Draw({GeneratedFile("1f1b", 2, 2), "--format", "ascii"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("actor 0 F0 F1 .  .  B0 -- .  B1 --\n"));
}

TEST(SchedDraw, SvgWithShortOutputOption) {
  const std::string output = ::testing::TempDir() + "draw.svg";
  const CommandRun run = Draw({GeneratedFile("1f1b", 2, 2), "-o", output, "--format", "svg"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(run.out.empty());
  const std::string svg = ReadFile(output);
  EXPECT_THAT(svg, StartsWith("<svg "));
  EXPECT_THAT(svg, HasSubstr("</svg>"));
}

TEST(SchedDraw, PerfettoWithLongOutputOption) {
  const std::string output = ::testing::TempDir() + "draw.json";
  const CommandRun run =
      Draw({GeneratedFile("zb-h1", 2, 4), "--format=perfetto", "--output", output});
  ASSERT_EQ(run.code, 0) << run.err;
  const JsonValue trace = ParseJsonOrFail(ReadFile(output));
  ASSERT_NE(trace.Find("traceEvents"), nullptr);
  EXPECT_GT(trace.Find("traceEvents")->array.size(), 24u);
}

TEST(SchedDraw, UsageErrors) {
  const std::string path = GeneratedFile("1f1b", 2, 2);
  EXPECT_EQ(Draw({path}).code, 2);
  CommandRun run = Draw({path, "--format", "png"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("got 'png'"));
  EXPECT_EQ(Draw({path, "--format", "ascii", "-o"}).code, 2);
  EXPECT_EQ(Draw({DeadlockingFile(), "--format", "ascii"}).code, 1);
}

TEST(SchedBench, SmallRunPrintsJson) {
  std::ostringstream out, err;
  const int code = RunSchedBench({"--actors", "4", "--virtual", "2", "--microbatches", "8",
                                  "--repeats", "1", "--json"},
                                 out, err);
  ASSERT_EQ(code, 0) << err.str();
  const JsonValue json = ParseJsonOrFail(out.str());
  EXPECT_EQ(json.Find("tasks")->number, 2 * 8 * 8);
  EXPECT_NE(json.Find("validate_and_simulate_ms"), nullptr);
  EXPECT_EQ(json.Find("makespan")->number, 8 * 2 * 3 + 3 * 3);
}

}  // namespace
}  // namespace tandem::cli
