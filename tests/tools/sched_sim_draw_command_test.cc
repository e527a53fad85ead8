// `tandem sched sim`, `tandem sched draw` and `tandem bench sched`, driven
// through their entry points with string streams.
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "schedules/generators.h"
#include "schedules/text_format.h"
#include "tests/tools/command_run.h"
#include "tools/cli/commands.h"
#include "tools/cli/sched_commands.h"

namespace tandem::cli {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// `tandem sched sim args...`.
CommandRun Sim(std::vector<std::string> args) {
  args.insert(args.begin(), {"sched", "sim"});
  return RunCommand(AddSchedCommand, args);
}

// `tandem sched draw args...`.
CommandRun Draw(std::vector<std::string> args) {
  args.insert(args.begin(), {"sched", "draw"});
  return RunCommand(AddSchedCommand, args);
}

// `tandem bench sched args...`.
CommandRun SchedBench(std::vector<std::string> args) {
  args.insert(args.begin(), {"bench", "sched"});
  return RunCommand(
      [](CommandLine& command_line) {
        CLI::App* bench = command_line.Add(command_line.root(), "bench", "benchmarks", "<benchmark>");
        AddSchedBench(command_line, *bench);
      },
      args);
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
  schedule.stage_to_actor = {ActorId(0), ActorId(1)};
  const auto task = [](schedules::TaskKind kind, int stage) {
    return schedules::Slot{{{kind, StageId(stage), Microbatch(0)}}};
  };
  schedule.programs = {
      {task(schedules::TaskKind::kForward, 0), task(schedules::TaskKind::kBackward, 0)},
      {task(schedules::TaskKind::kBackward, 1), task(schedules::TaskKind::kForward, 1)}};
  return WriteFile("deadlock.sched", schedules::PrintScheduleText(schedule));
}

// `text` parsed; on malformed JSON, a failure and a value whose members
// throw when a test reads them.
Json ParseJsonOrFail(const std::string& text) {
  Json value = Json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(value.is_discarded()) << text;
  return value;
}

TEST(SchedSim, JsonHasMakespanBubbleAndPerActorStats) {
  const CommandRun run = Sim({GeneratedFile("1f1b", 4, 8), "--json"});
  ASSERT_EQ(run.code, 0) << run.err;
  const Json json = ParseJsonOrFail(run.out);
  ASSERT_TRUE(json.contains("makespan"));
  EXPECT_EQ(json.at("makespan").get<double>(), (8 + 4 - 1) * 3.0);
  EXPECT_EQ(json.at("bubble").get<double>(), 3.0 / 11.0);
  ASSERT_TRUE(json.contains("per_actor"));
  const Json& per_actor = json.at("per_actor");
  ASSERT_EQ(per_actor.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    const Json& actor = per_actor.at(r);
    EXPECT_EQ(actor.at("actor").get<int>(), r);
    EXPECT_EQ(actor.at("bubble").get<double>(), 3.0 / 11.0);
    EXPECT_EQ(actor.at("peak_activations").get<double>(), 4 - r);
    EXPECT_TRUE(actor.contains("busy"));
  }
  ASSERT_TRUE(json.contains("critical_path"));
  EXPECT_FALSE(json.at("critical_path").empty());
  EXPECT_FALSE(json.contains("memory_timeline"));
}

TEST(SchedSim, BubblesListEachActorsSlotsAndFillPacksThem) {
  const std::string path = GeneratedFile("1f1b", 2, 4);
  const CommandRun table = Sim({path, "--bubbles"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("bubble slots (4):"));
  EXPECT_THAT(table.out, Not(HasSubstr("utilisation")));
  const CommandRun filled = Sim({path, "--fill-piece", "0.5"});
  ASSERT_EQ(filled.code, 0) << filled.err;
  EXPECT_THAT(filled.out, HasSubstr("fill: 12 pieces of cost 0.5"));
  EXPECT_THAT(filled.out, HasSubstr("utilisation: 80.00% without fill, 100.00% with fill"));
  const CommandRun json = Sim({path, "--fill-piece", "1", "--fill-memory", "1", "--json"});
  ASSERT_EQ(json.code, 0) << json.err;
  const Json parsed = ParseJsonOrFail(json.out);
  EXPECT_EQ(parsed.at("makespan").get<double>(), 15.0);
  ASSERT_EQ(parsed.at("bubbles").size(), 4u);
  // Actor 0 holds its peak before B0.0: a piece of one unit does not fit.
  EXPECT_EQ(parsed.at("bubbles").at(0).at("before").get<std::string>(), "B0.0");
  EXPECT_EQ(parsed.at("bubbles").at(0).at("pieces").get<int>(), 0);
  EXPECT_EQ(parsed.at("fill").at("pieces").get<int>(), 4);
}

TEST(SchedSim, FillOptionsWithoutAPieceOrOutOfRangeAreUsageErrors) {
  const std::string path = GeneratedFile("1f1b", 2, 4);
  CommandRun run = Sim({path, "--fill-share", "0.5"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("need --fill-piece COST"));
  run = Sim({path, "--fill-piece", "0"});
  EXPECT_EQ(run.code, 2);
  run = Sim({path, "--fill-piece", "1e-9"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("use larger pieces"));
  run = Sim({path, "--fill-piece", "1", "--fill-share", "2"});
  EXPECT_EQ(run.code, 2);
}

TEST(SchedSim, CostAndLinkOptionsChangeTheModel) {
  const std::string path = GeneratedFile("gpipe", 2, 1);
  const CommandRun run = Sim({path, "--cost", "F=2,B=3", "--link=alpha=0.5,beta=0.25", "--json",
                       "--timeline"});
  ASSERT_EQ(run.code, 0) << run.err;
  const Json json = ParseJsonOrFail(run.out);
  // F0 F1 B1 B0 plus two transfers of 0.75.
  EXPECT_EQ(json.at("makespan").get<double>(), 2 + 2 + 3 + 3 + 1.5);
  EXPECT_TRUE(json.contains("memory_timeline"));

  // A latency of 2 more on each transfer's arrival.
  const CommandRun latent = Sim({path, "--cost", "F=2,B=3", "--link=alpha=0.5,beta=0.25,latency=2", "--json"});
  ASSERT_EQ(latent.code, 0) << latent.err;
  EXPECT_EQ(ParseJsonOrFail(latent.out).at("makespan").get<double>(), 2 + 2 + 3 + 3 + 1.5 + 2 * 2);
  EXPECT_EQ(Sim({path, "--link", "latency=-1"}).code, 2);

  const CommandRun per_stage = Sim({path, "--cost", "B@1=10", "--json"});
  ASSERT_EQ(per_stage.code, 0) << per_stage.err;
  EXPECT_EQ(ParseJsonOrFail(per_stage.out).at("makespan").get<double>(), 1 + 1 + 10 + 2);
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

// --data-parallel D --grad-bytes G: each actor reduces its stage after its
// last backward for 2(D-1)(alpha + beta G/D) = 2 * 3 * (1 + 0.5 * 8/4) = 12.
TEST(SchedSim, DataParallelAddsReductionsToJsonAndTable) {
  const std::string path = GeneratedFile("1f1b", 2, 4);
  const std::vector<std::string> options = {"--data-parallel", "4", "--grad-bytes", "8",
                                            "--link", "alpha=1,beta=0.5"};
  std::vector<std::string> args = {path, "--json"};
  args.insert(args.end(), options.begin(), options.end());
  const CommandRun run = Sim(args);
  ASSERT_EQ(run.code, 0) << run.err;
  const Json json = ParseJsonOrFail(run.out);
  EXPECT_EQ(json.at("data_parallel").get<int>(), 4);
  EXPECT_EQ(json.at("compute_end").get<double>(), 21.0);
  EXPECT_EQ(json.at("makespan").get<double>(), 33.0);
  const Json& reductions = json.at("reductions");
  ASSERT_EQ(reductions.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const Json& reduction = reductions.at(r);
    EXPECT_EQ(reduction.at("actor").get<int>(), r);
    EXPECT_EQ(reduction.at("stage").get<int>(), r);
    EXPECT_EQ(reduction.at("bytes").get<double>(), 12.0);
    EXPECT_EQ(reduction.at("end").get<double>() - reduction.at("start").get<double>(), 12.0);
    EXPECT_EQ(json.at("per_actor").at(r).at("reduce_busy").get<double>(), 12.0);
  }
  EXPECT_EQ(reductions.at(0).at("start").get<double>(), 21.0);
  EXPECT_EQ(json.at("critical_path").back().at("type").get<std::string>(), "reduction");

  args.erase(args.begin() + 1);  // The table.
  const CommandRun table = Sim(args);
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("makespan 33,"));
  EXPECT_THAT(table.out, HasSubstr("data parallel 4 replicas: 2 gradient reductions"));
  EXPECT_THAT(table.out, HasSubstr("reduce busy"));

  // Without --data-parallel, none of it.
  const CommandRun plain = Sim({path, "--json", "--grad-bytes", "8"});
  ASSERT_EQ(plain.code, 0) << plain.err;
  const Json plain_json = ParseJsonOrFail(plain.out);
  EXPECT_FALSE(plain_json.contains("reductions"));
  EXPECT_FALSE(plain_json.contains("data_parallel"));
  const CommandRun plain_table = Sim({path});
  EXPECT_THAT(plain_table.out, Not(HasSubstr("data parallel")));
}

TEST(SchedSim, DataParallelAndGradBytesOutOfRangeAreUsageErrors) {
  const std::string path = GeneratedFile("1f1b", 2, 2);
  CommandRun run = Sim({path, "--data-parallel", "0"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--data-parallel: Value 0 is not an integer from 1 to"));
  run = Sim({path, "--data-parallel", "65537"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--data-parallel"));
  EXPECT_THAT(run.err, HasSubstr("65536"));
  run = Sim({path, "--data-parallel", "two"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--data-parallel: Value two is not an integer"));
  EXPECT_EQ(Sim({path, "--data-parallel", "65536"}).code, 0);
  for (const char* bytes : {"-1", "nan", "inf", "lots"}) {
    run = Sim({path, "--data-parallel", "2", std::string("--grad-bytes=") + bytes});
    EXPECT_EQ(run.code, 2) << bytes;
    EXPECT_THAT(run.err, HasSubstr(std::string("--grad-bytes: Value ") + bytes +
                                   " is not a finite non-negative number"));
  }
}

TEST(SchedDraw, PerfettoPutsReductionsOnAReduceTrack) {
  const CommandRun run =
      Draw({GeneratedFile("1f1b", 2, 2), "--format", "perfetto", "--data-parallel", "2", "--link", "alpha=1"});
  ASSERT_EQ(run.code, 0) << run.err;
  const Json trace = ParseJsonOrFail(run.out);
  int reduce_threads = 0;
  int reduce_slices = 0;
  for (const Json& event : trace.at("traceEvents")) {
    if (event.at("ph") == "M" && event.at("name") == "thread_name" && event.at("args").at("name") == "reduce") {
      ++reduce_threads;
      EXPECT_EQ(event.at("tid").get<int>(), 3);
    }
    if (event.at("ph") == "X" && event.value("cat", "") == "reduction") {
      ++reduce_slices;
      EXPECT_EQ(event.at("tid").get<int>(), 3);
      EXPECT_EQ(event.at("dur").get<double>(), 2000.0);  // 2 * 1 * 1 unit of 1000 us.
    }
  }
  EXPECT_EQ(reduce_threads, 2);
  EXPECT_EQ(reduce_slices, 2);
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
  const Json trace = ParseJsonOrFail(ReadFile(output));
  ASSERT_TRUE(trace.contains("traceEvents"));
  EXPECT_GT(trace.at("traceEvents").size(), 24u);
}

TEST(SchedDraw, UsageErrors) {
  const std::string path = GeneratedFile("1f1b", 2, 2);
  EXPECT_EQ(Draw({path}).code, 2);
  CommandRun run = Draw({path, "--format", "png"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--format: png not in {ascii,svg,perfetto}"));
  EXPECT_EQ(Draw({path, "--format", "ascii", "-o"}).code, 2);
  EXPECT_EQ(Draw({DeadlockingFile(), "--format", "ascii"}).code, 1);
}

TEST(SchedBench, SmallRunPrintsJson) {
  const CommandRun run =
      SchedBench({"--actors", "4", "--virtual", "2", "--microbatches", "8", "--repeats", "1", "--json"});
  ASSERT_EQ(run.code, 0) << run.err;
  const Json json = ParseJsonOrFail(run.out);
  EXPECT_EQ(json.at("tasks").get<int>(), 2 * 8 * 8);
  EXPECT_TRUE(json.contains("validate_and_simulate_ms"));
  EXPECT_EQ(json.at("makespan").get<double>(), 8 * 2 * 3 + 3 * 3);
}

}  // namespace
}  // namespace tandem::cli
