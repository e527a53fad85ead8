// `tandem sched`: generate, check and convert schedules; `sim` and `draw`
// live in sched_plan_command.cc. LoadSchedule() is shared by all of them.
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "schedules/generators.h"
#include "schedules/placement.h"
#include "schedules/pytorch_csv.h"
#include "schedules/text_format.h"
#include "schedules/validator.h"
#include "tools/cli/arguments.h"
#include "tools/cli/sched_commands.h"

namespace tandem::cli {
namespace {

constexpr char kUsage[] =
    "usage: tandem sched <subcommand> [options]\n"
    "\n"
    "subcommands:\n"
    "  gen NAME --actors P --microbatches M [--virtual V] [--to tandem|pytorch-csv]\n"
    "      print a built-in schedule; NAME is one of gpipe, 1f1b, interleaved,\n"
    "      looped-bfs, zb-h1, zb-v, dualpipev\n"
    "  check FILE [--from tandem|pytorch-csv] [--rendezvous]\n"
    "      validate a schedule (exit 0 valid, 1 invalid)\n"
    "  convert FILE --to tandem|pytorch-csv [--from tandem|pytorch-csv]\n"
    "      print a schedule in another format\n"
    "  sim FILE [--cost F=1,B=2,I=1,W=1] [--link alpha=...,beta=...] [--json]\n"
    "      simulate a schedule with a cost model\n"
    "  draw FILE --format ascii|svg|perfetto [-o OUT]\n"
    "      draw a schedule\n"
    "\n"
    "FILE is a path or '-' for stdin. Files ending in .csv are read as PyTorch's\n"
    "pipelining CSV, everything else (and stdin) as Tandem's .sched text format,\n"
    "unless --from says otherwise. Run `tandem sched <subcommand> --help` for details.\n";

bool WantsHelp(const CommandArgs& args) {
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") return true;
  }
  return false;
}

int UsageError(absl::string_view command, absl::string_view message, std::ostream& err) {
  err << "tandem sched " << command << ": " << message << "\n"
      << "Run `tandem sched " << command << " --help` for usage.\n";
  return 2;
}

// Parses `args` after printing help if asked; returns an exit code to stop
// with, or nullopt to go on.
std::optional<int> ParseOrExit(Arguments& arguments, const CommandArgs& args,
                               absl::string_view command, absl::string_view synopsis,
                               std::ostream& out, std::ostream& err) {
  arguments.AddFlag("help", "print this help");
  if (WantsHelp(args)) {
    out << "usage: tandem sched " << command << " " << synopsis << "\n\noptions:\n"
        << arguments.Usage();
    return 0;
  }
  if (absl::Status status = arguments.Parse(args); !status.ok()) {
    return UsageError(command, status.message(), err);
  }
  return std::nullopt;
}

absl::Status CheckFormatName(const std::optional<std::string>& name, absl::string_view option) {
  if (!name || *name == "tandem" || *name == "pytorch-csv") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", option, " must be tandem or pytorch-csv, got '",
                                                 *name, "'"));
}

std::string Format(const schedules::Schedule& schedule, absl::string_view format) {
  return format == "pytorch-csv" ? schedules::PrintPytorchCsv(schedule)
                                 : schedules::PrintScheduleText(schedule);
}

// Gets exactly one FILE positional.
std::optional<std::string> OneFile(const Arguments& arguments) {
  if (arguments.positionals().size() != 1) return std::nullopt;
  return arguments.positionals()[0];
}

int RunGen(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  Arguments arguments;
  arguments.AddOption("actors", "number of actors P");
  arguments.AddOption("microbatches", "number of microbatches M");
  arguments.AddOption("virtual", "stages per actor V (interleaved, looped-bfs; default 2)");
  arguments.AddOption("to", "output format: tandem or pytorch-csv", "tandem");
  if (std::optional<int> code = ParseOrExit(
          arguments, args, "gen",
          absl::StrCat("<", absl::StrJoin(schedules::GeneratorNames(), "|"),
                       "> --actors P --microbatches M [--virtual V]"),
          out, err)) {
    return *code;
  }
  if (arguments.positionals().size() != 1) {
    return UsageError("gen", "expected one schedule name", err);
  }
  absl::StatusOr<int64_t> actors = arguments.GetInt("actors");
  absl::StatusOr<int64_t> microbatches = arguments.GetInt("microbatches");
  if (!actors.ok()) return UsageError("gen", actors.status().message(), err);
  if (!microbatches.ok()) return UsageError("gen", microbatches.status().message(), err);
  int64_t virtual_stages = 0;
  if (arguments.Has("virtual")) {
    absl::StatusOr<int64_t> v = arguments.GetInt("virtual");
    if (!v.ok()) return UsageError("gen", v.status().message(), err);
    virtual_stages = *v;
  }
  const std::optional<std::string> to = arguments.Get("to");
  if (absl::Status status = CheckFormatName(to, "to"); !status.ok()) {
    return UsageError("gen", status.message(), err);
  }
  constexpr int64_t kLimit = int64_t{1} << 30;
  if (*actors > kLimit || *microbatches > kLimit || virtual_stages > kLimit) {
    return UsageError("gen", "sizes must be below 2^30", err);
  }
  schedules::GeneratorOptions options;
  options.actors = static_cast<int32_t>(*actors);
  options.microbatches = static_cast<int32_t>(*microbatches);
  options.virtual_stages = static_cast<int32_t>(virtual_stages);
  absl::StatusOr<schedules::Schedule> schedule =
      schedules::Generate(arguments.positionals()[0], options);
  if (!schedule.ok()) return UsageError("gen", schedule.status().message(), err);
  out << Format(*schedule, *to);
  return 0;
}

int RunCheck(const CommandArgs& args, std::ostream& out, std::ostream& err, std::istream& in) {
  Arguments arguments;
  arguments.AddOption("from", "input format: tandem or pytorch-csv (default: by extension)");
  arguments.AddFlag("rendezvous",
                    "model transfers as blocking rendezvous send/recv pairs instead of "
                    "buffered sends");
  if (std::optional<int> code = ParseOrExit(arguments, args, "check", "FILE [options]", out, err)) {
    return *code;
  }
  const std::optional<std::string> path = OneFile(arguments);
  if (!path) return UsageError("check", "expected one FILE (or '-' for stdin)", err);
  const std::optional<std::string> from = arguments.Get("from");
  if (absl::Status status = CheckFormatName(from, "from"); !status.ok()) {
    return UsageError("check", status.message(), err);
  }
  absl::StatusOr<schedules::Schedule> schedule = LoadSchedule(*path, from, in);
  if (!schedule.ok()) {
    err << schedule.status().message() << "\n";
    return 1;
  }
  const std::string name = *path == "-" ? "<stdin>" : *path;
  schedules::ValidateOptions options;
  options.rendezvous = arguments.Flag("rendezvous");
  if (absl::Status status = schedules::Validate(*schedule, options); !status.ok()) {
    for (absl::string_view line : absl::StrSplit(status.message(), '\n')) {
      err << name << ": error: " << line << "\n";
    }
    return 1;
  }
  out << name << ": ok: " << (schedule->name.empty() ? "" : absl::StrCat(schedule->name, ", "))
      << schedule->num_actors << " actors, " << schedule->num_stages << " stages (placement "
      << schedules::PlacementName(schedule->stage_to_actor, schedule->num_actors) << "), " << schedule->num_microbatches << " microbatches, "
      << schedule->NumTasks() << " tasks, no deadlock"
      << (options.rendezvous ? " under rendezvous transfers" : "") << "\n";
  return 0;
}

int RunConvert(const CommandArgs& args, std::ostream& out, std::ostream& err, std::istream& in) {
  Arguments arguments;
  arguments.AddOption("to", "output format: tandem or pytorch-csv");
  arguments.AddOption("from", "input format: tandem or pytorch-csv (default: by extension)");
  if (std::optional<int> code =
          ParseOrExit(arguments, args, "convert", "FILE --to tandem|pytorch-csv", out, err)) {
    return *code;
  }
  const std::optional<std::string> path = OneFile(arguments);
  if (!path) return UsageError("convert", "expected one FILE (or '-' for stdin)", err);
  const std::optional<std::string> to = arguments.Get("to");
  if (!to) return UsageError("convert", "missing required option --to", err);
  const std::optional<std::string> from = arguments.Get("from");
  for (absl::Status status : {CheckFormatName(to, "to"), CheckFormatName(from, "from")}) {
    if (!status.ok()) return UsageError("convert", status.message(), err);
  }
  absl::StatusOr<schedules::Schedule> schedule = LoadSchedule(*path, from, in);
  if (!schedule.ok()) {
    err << schedule.status().message() << "\n";
    return 1;
  }
  out << Format(*schedule, *to);
  return 0;
}

}  // namespace

int RunSchedCommandWithStdin(const CommandArgs& args, std::ostream& out, std::ostream& err,
                             std::istream& in) {
  if (args.empty()) {
    err << kUsage;
    return 2;
  }
  const std::string& command = args[0];
  const CommandArgs rest(args.begin() + 1, args.end());
  if (command == "--help" || command == "-h" || command == "help") {
    out << kUsage;
    return 0;
  }
  if (command == "gen") return RunGen(rest, out, err);
  if (command == "check") return RunCheck(rest, out, err, in);
  if (command == "convert") return RunConvert(rest, out, err, in);
  if (command == "sim") return RunSchedSimCommand(rest, out, err);
  if (command == "draw") return RunSchedDrawCommand(rest, out, err);
  err << "tandem sched: unknown subcommand '" << command << "'\n\n" << kUsage;
  return 2;
}

absl::StatusOr<schedules::Schedule> LoadSchedule(const std::string& path,
                                                 const std::optional<std::string>& from,
                                                 std::istream& stdin_stream) {
  if (absl::Status status = CheckFormatName(from, "from"); !status.ok()) return status;
  const bool is_stdin = path == "-";
  const std::string name = is_stdin ? "<stdin>" : path;
  std::ostringstream text;
  if (is_stdin) {
    text << stdin_stream.rdbuf();
  } else {
    std::ifstream file(path, std::ios::binary);
    if (!file) return absl::NotFoundError(absl::StrCat(name, ": error: cannot open file"));
    text << file.rdbuf();
    if (file.bad()) return absl::NotFoundError(absl::StrCat(name, ": error: cannot read file"));
  }
  const bool csv = from ? *from == "pytorch-csv" : !is_stdin && absl::EndsWith(path, ".csv");
  return csv ? schedules::ParsePytorchCsv(text.str(), name)
             : schedules::ParseScheduleText(text.str(), name);
}

int RunSchedCommand(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  return RunSchedCommandWithStdin(args, out, err, std::cin);
}

}  // namespace tandem::cli
