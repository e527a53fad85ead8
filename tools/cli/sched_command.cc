// `tandem sched`: generate, check and convert schedules; `sim` and `draw`
// live in sched_sim_draw_command.cc. LoadSchedule() is shared by all of them.
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "schedules/generators.h"
#include "schedules/limits.h"
#include "schedules/placement.h"
#include "schedules/pytorch_csv.h"
#include "schedules/resolve.h"
#include "schedules/text_format.h"
#include "schedules/validator.h"
#include "tools/cli/commands.h"
#include "tools/cli/sched_commands.h"

namespace tandem::cli {
namespace {

const std::vector<std::string> kFormats = {"tandem", "pytorch-csv"};

std::string Format(const schedules::Schedule& schedule, absl::string_view format) {
  return format == "pytorch-csv" ? schedules::PrintPytorchCsv(schedule) : schedules::PrintScheduleText(schedule);
}

// PyTorch's CSV has no stage graph: a DAG schedule would come back a chain.
absl::Status CheckFormatHolds(const schedules::Schedule& schedule, absl::string_view format) {
  if (format != "pytorch-csv" || schedule.stage_edges.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("PyTorch's pipelining CSV has no stage graph: this schedule's (",
                                                 ir::FormatStageEdges(schedule.stage_edges),
                                                 ") would be lost; keep it in the tandem format"));
}

// Prints a validation failure, one "NAME: error: ..." line per line.
int PrintInvalid(std::ostream& err, const std::string& name, const absl::Status& status) {
  for (absl::string_view line : absl::StrSplit(status.message(), '\n')) err << name << ": error: " << line << "\n";
  return 1;
}

void AddGen(CommandLine& command_line, CLI::App& sched) {
  struct Options {
    std::string name;
    int32_t actors = 0;
    int32_t microbatches = 0;
    int32_t virtual_stages = 0;
    std::string stage_graph;
    std::vector<int32_t> placement;
    std::string to = "tandem";
  };
  const std::string names = absl::StrJoin(schedules::GeneratorNames(), "|");
  CLI::App* gen = command_line.Add(
      sched, "gen", "print a built-in schedule",
      absl::StrCat("<", names,
                   "> --actors P --microbatches M [--virtual V] [--stage-graph EDGES] [--placement A,B,...] "
                   "[--to FORMAT]"));
  auto options = std::make_shared<Options>();
  gen->add_option("name", options->name, "the generator")
      ->required()
      ->check(CLI::IsMember(schedules::GeneratorNames()));
  gen->add_option("--actors", options->actors, "number of actors P")->required()->check(AtLeast(options->actors, 1));
  gen->add_option("--microbatches", options->microbatches, "number of microbatches M")
      ->required()
      ->check(AtLeast(options->microbatches, 1));
  gen->add_option("--virtual", options->virtual_stages,
                  "stages per actor V (interleaved, looped-bfs, zb-v; 0: the generator's default)")
      ->check(AtLeast(options->virtual_stages, 0));
  gen->add_option("--stage-graph", options->stage_graph,
                  "graph-*: the stage DAG as edges FROM->TO, e.g. \"0->2 1->2\" (default: a chain)");
  gen->add_option("--placement", options->placement,
                  "graph-*: the actor of each stage, e.g. 0,1,2,2 (default: stage s on actor s)")
      ->delimiter(',');
  gen->add_option("--to", options->to, "output format")->check(CLI::IsMember(kFormats))->capture_default_str();
  command_line.OnRun(gen, [gen, options, &streams = command_line.streams()] {
    absl::StatusOr<std::vector<ir::StageEdge>> edges =
        ir::ParseStageEdges(options->stage_graph, schedules::kMaxStageEdges);
    if (!edges.ok()) return UsageError(streams.err, *gen, absl::StrCat("--stage-graph: ", edges.status().message()));
    if (static_cast<int64_t>(options->placement.size()) > schedules::kMaxStages) {
      return UsageError(streams.err, *gen, absl::StrCat("--placement lists more than the ", schedules::kMaxStages,
                                                        " stages a schedule may have"));
    }
    if (!schedules::TakesStageGraph(options->name) && (!edges->empty() || !options->placement.empty())) {
      return UsageError(streams.err, *gen,
                        absl::StrCat(options->name, " makes a chain with its own placement: --stage-graph and "
                                                    "--placement are for graph-gpipe and graph-1f1b"));
    }
    absl::StatusOr<schedules::Schedule> schedule = schedules::Generate(
        options->name, {.actors = options->actors,
                        .microbatches = options->microbatches,
                        .virtual_stages = options->virtual_stages,
                        .stage_edges = *edges,
                        .stage_actors = options->placement});
    if (!schedule.ok()) return UsageError(streams.err, *gen, std::string(schedule.status().message()));
    if (absl::Status status = CheckFormatHolds(*schedule, options->to); !status.ok()) {
      return UsageError(streams.err, *gen, std::string(status.message()));
    }
    streams.out << Format(*schedule, options->to);
    return 0;
  });
}

void AddCheck(CommandLine& command_line, CLI::App& sched) {
  struct Options {
    std::string path;
    std::optional<std::string> from;
    bool rendezvous = false;
  };
  CLI::App* check = command_line.Add(sched, "check", "validate a schedule (exit 0 valid, 1 invalid)",
                                     "FILE [--from tandem|pytorch-csv] [--rendezvous]");
  auto options = std::make_shared<Options>();
  check->add_option("file", options->path, "the schedule, or - for stdin")->required();
  check->add_option("--from", options->from, "input format (default: by extension)")->check(CLI::IsMember(kFormats));
  check->add_flag("--rendezvous", options->rendezvous,
                  "model transfers as blocking rendezvous send/recv pairs instead of buffered sends");
  command_line.OnRun(check, [options, &streams = command_line.streams()] {
    absl::StatusOr<schedules::Schedule> schedule = LoadSchedule(options->path, options->from, streams.in);
    if (!schedule.ok()) {
      streams.err << schedule.status().message() << "\n";
      return 1;
    }
    const std::string name = options->path == "-" ? "<stdin>" : options->path;
    if (absl::Status status = schedules::Validate(*schedule, {.rendezvous = options->rendezvous}); !status.ok()) {
      return PrintInvalid(streams.err, name, status);
    }
    streams.out << name << ": ok: " << (schedule->name.empty() ? "" : absl::StrCat(schedule->name, ", "))
                << schedule->num_actors << " actors, " << schedule->num_stages << " stages (placement "
                << schedules::PlacementName(schedule->stage_to_actor, schedule->num_actors)
                << (schedule->stage_edges.empty()
                        ? ""
                        : absl::StrCat(", stage graph ", ir::FormatStageEdges(schedule->stage_edges)))
                << "), "
                << schedule->num_microbatches << " microbatches, " << schedule->NumTasks() << " tasks, no deadlock"
                << (options->rendezvous ? " under rendezvous transfers" : "") << "\n";
    return 0;
  });
}

void AddConvert(CommandLine& command_line, CLI::App& sched) {
  struct Options {
    std::string path;
    std::string to;
    std::optional<std::string> from;
  };
  CLI::App* convert = command_line.Add(sched, "convert", "print a schedule in another format",
                                       "FILE --to tandem|pytorch-csv [--from tandem|pytorch-csv]");
  auto options = std::make_shared<Options>();
  convert->add_option("file", options->path, "the schedule, or - for stdin")->required();
  convert->add_option("--to", options->to, "output format")->required()->check(CLI::IsMember(kFormats));
  convert->add_option("--from", options->from, "input format (default: by extension)")->check(CLI::IsMember(kFormats));
  command_line.OnRun(convert, [options, &streams = command_line.streams()] {
    absl::StatusOr<schedules::Schedule> schedule = LoadSchedule(options->path, options->from, streams.in);
    if (!schedule.ok()) {
      streams.err << schedule.status().message() << "\n";
      return 1;
    }
    if (absl::Status status = CheckFormatHolds(*schedule, options->to); !status.ok()) {
      streams.err << options->path << ": error: " << status.message() << "\n";
      return 1;
    }
    streams.out << Format(*schedule, options->to);
    return 0;
  });
}

}  // namespace

void AddSchedCommand(CommandLine& command_line) {
  CLI::App* sched = command_line.AddGroup(
      command_line.root(), "sched", "generate, check, simulate, draw and convert pipeline schedules",
      "FILE is a path or '-' for stdin. Files ending in .csv are read as PyTorch's pipelining CSV, everything else "
      "(and stdin) as Tandem's .sched text format (schedules/FORMAT.md), unless --from says otherwise.");
  AddGen(command_line, *sched);
  AddCheck(command_line, *sched);
  AddConvert(command_line, *sched);
  AddSchedSimCommand(command_line, *sched);
  AddSchedDrawCommand(command_line, *sched);
}

absl::StatusOr<schedules::Schedule> LoadSchedule(const std::string& path, const std::optional<std::string>& from,
                                                 std::istream& stdin_stream) {
  if (from.has_value() && *from != "tandem" && *from != "pytorch-csv") {
    return absl::InvalidArgumentError(absl::StrCat("--from must be tandem or pytorch-csv, got '", *from, "'"));
  }
  const bool is_stdin = path == "-";
  const std::string name = is_stdin ? "<stdin>" : path;
  std::ostringstream text;
  if (is_stdin) {
    text << stdin_stream.rdbuf();
  } else {
    absl::StatusOr<std::string> contents = schedules::ReadScheduleFileText(path);
    if (!contents.ok()) return contents.status();
    text << *contents;
  }
  const bool csv = from ? *from == "pytorch-csv" : !is_stdin && absl::EndsWith(path, ".csv");
  return csv ? schedules::ParsePytorchCsv(text.str(), name) : schedules::ParseScheduleText(text.str(), name);
}

}  // namespace tandem::cli
