// `tandem sched sim` and `tandem sched draw`: simulate a schedule under a
// cost model, and draw the simulated step as ASCII, SVG or a Perfetto trace.
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "schedules/drawing.h"
#include "schedules/simulation_report.h"
#include "schedules/simulator.h"
#include "schedules/validator.h"
#include "tools/cli/arguments.h"
#include "tools/cli/sched_commands.h"

namespace tandem::cli {
namespace {

using schedules::CostModel;
using schedules::TaskKind;

int UsageError(const std::string& command, const std::string& message, std::ostream& err) {
  err << "tandem sched " << command << ": " << message << "\n"
      << "Run `tandem sched " << command << " --help` for usage.\n";
  return 2;
}

absl::StatusOr<double> ParseNonNegative(const std::string& text, const std::string& piece) {
  double value = 0.0;
  if (!absl::SimpleAtod(text, &value) || !(value >= 0.0) || value > 1e300) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", piece, "': '", text, "' is not a non-negative number"));
  }
  return value;
}

// Splits "a=1,b=2" into pieces; an empty piece or one without '=' is an error.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> SplitAssignments(
    const std::string& text) {
  std::vector<std::pair<std::string, std::string>> pieces;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    const std::string piece_text(piece);
    const size_t equals = piece_text.find('=');
    if (piece_text.empty() || equals == std::string::npos || equals == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", piece_text, "' is not of the form NAME=VALUE"));
    }
    pieces.emplace_back(piece_text.substr(0, equals), piece_text.substr(equals + 1));
  }
  return pieces;
}

// "F=1,B=2,I=1,W=1"; "B@3=2.5" sets stage 3 only.
absl::Status ParseCostSpec(const std::string& text, CostModel& costs) {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> pieces = SplitAssignments(text);
  if (!pieces.ok()) return pieces.status();
  for (const auto& [name, value_text] : *pieces) {
    const std::string piece = absl::StrCat(name, "=", value_text);
    std::optional<TaskKind> kind;
    if (name[0] == 'F') kind = TaskKind::kForward;
    if (name[0] == 'B') kind = TaskKind::kBackward;
    if (name[0] == 'I') kind = TaskKind::kBackwardInput;
    if (name[0] == 'W') kind = TaskKind::kBackwardWeight;
    int32_t stage = -1;
    const bool has_stage = name.size() > 2 && name[1] == '@' &&
                           absl::SimpleAtoi(name.substr(2), &stage) && stage >= 0;
    if (!kind || (name.size() > 1 && !has_stage)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", piece, "': expected a kind F, B, I or W, optionally with @STAGE (e.g. B@3=2)"));
    }
    absl::StatusOr<double> value = ParseNonNegative(value_text, piece);
    if (!value.ok()) return value.status();
    if (has_stage) {
      costs.stage_cost[{*kind, stage}] = *value;
    } else {
      costs.KindCost(*kind) = *value;
    }
  }
  return absl::OkStatus();
}

// "alpha=0.1,beta=0.01[,activation=BYTES][,gradient=BYTES]".
absl::Status ParseLinkSpec(const std::string& text, CostModel& costs) {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> pieces = SplitAssignments(text);
  if (!pieces.ok()) return pieces.status();
  for (const auto& [name, value_text] : *pieces) {
    const std::string piece = absl::StrCat(name, "=", value_text);
    double* field = nullptr;
    if (name == "alpha") field = &costs.link_alpha;
    if (name == "beta") field = &costs.link_beta;
    if (name == "activation") field = &costs.activation_bytes;
    if (name == "gradient") field = &costs.gradient_bytes;
    if (field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", piece, "': expected alpha, beta, activation (bytes) or gradient (bytes)"));
    }
    absl::StatusOr<double> value = ParseNonNegative(value_text, piece);
    if (!value.ok()) return value.status();
    *field = *value;
  }
  return absl::OkStatus();
}

// The cost-model options shared by sim and draw.
void AddCostOptions(Arguments& arguments) {
  arguments.AddOption("cost", "compute costs per kind, e.g. F=1,B=2,I=1,W=1; B@3=2.5 for stage 3",
                      "F=1,B=2,I=1,W=1");
  arguments.AddOption("link", "transfer cost alpha + beta * bytes: alpha=A,beta=B "
                              "[,activation=BYTES,gradient=BYTES]");
  arguments.AddOption("group", "cost of a fused slot: max (overlapped) or sum", "max");
  arguments.AddOption("i-frees", "fraction of a forward's activations that I frees (W the rest)",
                      "0.5");
  arguments.AddOption("from", "input format: tandem or pytorch-csv (default: by extension)");
}

// Fills `costs` from the options; InvalidArgument naming the option and piece.
absl::Status CostModelFromArguments(const Arguments& arguments, CostModel& costs) {
  if (absl::Status status = ParseCostSpec(*arguments.Get("cost"), costs); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--cost: ", status.message()));
  }
  if (std::optional<std::string> link = arguments.Get("link")) {
    if (absl::Status status = ParseLinkSpec(*link, costs); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--link: ", status.message()));
    }
  }
  const std::string group = *arguments.Get("group");
  if (group != "max" && group != "sum") {
    return absl::InvalidArgumentError(
        absl::StrCat("--group: expected max or sum, got '", group, "'"));
  }
  costs.group_cost = group == "max" ? schedules::GroupCost::kMax : schedules::GroupCost::kSum;
  const std::string frees = *arguments.Get("i-frees");
  if (!absl::SimpleAtod(frees, &costs.input_grad_frees) || !(costs.input_grad_frees >= 0.0) ||
      costs.input_grad_frees > 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--i-frees: expected a fraction between 0 and 1, got '", frees, "'"));
  }
  return absl::OkStatus();
}

// Loads, validates and simulates the schedule named by the one positional.
// Prints the problem and returns an exit code on failure.
struct Simulated {
  schedules::Schedule schedule;
  schedules::SimulationResult result;
};
std::variant<Simulated, int> LoadAndSimulate(const std::string& command, const Arguments& arguments,
                                             std::ostream& err) {
  if (arguments.positionals().size() != 1) {
    return UsageError(command, "expected one FILE (or '-' for stdin)", err);
  }
  CostModel costs;
  if (absl::Status status = CostModelFromArguments(arguments, costs); !status.ok()) {
    return UsageError(command, std::string(status.message()), err);
  }
  const std::string& path = arguments.positionals()[0];
  const std::optional<std::string> from = arguments.Get("from");
  if (from && *from != "tandem" && *from != "pytorch-csv") {
    return UsageError(command, absl::StrCat("--from must be tandem or pytorch-csv, got '", *from, "'"),
                      err);
  }
  absl::StatusOr<schedules::Schedule> schedule = LoadSchedule(path, from, std::cin);
  if (!schedule.ok()) {
    err << schedule.status().message() << "\n";
    return 1;
  }
  const std::string name = path == "-" ? "<stdin>" : path;
  if (absl::Status status = schedules::Validate(*schedule); !status.ok()) {
    for (absl::string_view line : absl::StrSplit(status.message(), '\n')) {
      err << name << ": error: " << line << "\n";
    }
    return 1;
  }
  absl::StatusOr<schedules::SimulationResult> result = schedules::Simulate(*schedule, costs);
  if (!result.ok()) {
    err << name << ": error: " << result.status().message() << "\n";
    return 1;
  }
  return Simulated{*std::move(schedule), *std::move(result)};
}

bool WantsHelp(const CommandArgs& args) {
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") return true;
  }
  return false;
}

}  // namespace

int RunSchedSimCommand(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  Arguments arguments;
  AddCostOptions(arguments);
  arguments.AddFlag("json", "print JSON instead of a table");
  arguments.AddFlag("timeline", "with --json, add each actor's memory timeline");
  arguments.AddFlag("help", "print this help");
  if (WantsHelp(args)) {
    out << "usage: tandem sched sim FILE [--cost F=1,B=2,I=1,W=1] [--link alpha=A,beta=B] "
           "[--json]\n\nSimulates one step (see schedules/SIMULATION.md for the model).\n\n"
           "options:\n"
        << arguments.Usage();
    return 0;
  }
  if (absl::Status status = arguments.Parse(args); !status.ok()) {
    return UsageError("sim", std::string(status.message()), err);
  }
  std::variant<Simulated, int> simulated = LoadAndSimulate("sim", arguments, err);
  if (const int* code = std::get_if<int>(&simulated)) return *code;
  const Simulated& run = std::get<Simulated>(simulated);
  schedules::SimulationReportOptions options;
  options.memory_timeline = arguments.Flag("timeline");
  out << (arguments.Flag("json") ? schedules::SimulationJson(run.schedule, run.result, options)
                                 : schedules::SimulationTable(run.schedule, run.result, options));
  return 0;
}

int RunSchedDrawCommand(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  // The option parser reads "-o" as a positional: spell it --output first.
  CommandArgs rewritten;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-o") {
      if (i + 1 == args.size()) return UsageError("draw", "option -o needs a value", err);
      rewritten.push_back(absl::StrCat("--output=", args[++i]));
    } else {
      rewritten.push_back(args[i]);
    }
  }
  Arguments arguments;
  arguments.AddOption("format", "ascii, svg or perfetto (Chrome trace JSON)");
  arguments.AddOption("output", "write to this file instead of stdout (also -o)");
  AddCostOptions(arguments);
  arguments.AddFlag("help", "print this help");
  if (WantsHelp(rewritten)) {
    out << "usage: tandem sched draw FILE --format ascii|svg|perfetto [-o OUT]\n\n"
           "Draws the simulated step. In Perfetto traces 1 cost unit = 1000 us.\n\noptions:\n"
        << arguments.Usage();
    return 0;
  }
  if (absl::Status status = arguments.Parse(rewritten); !status.ok()) {
    return UsageError("draw", std::string(status.message()), err);
  }
  const std::optional<std::string> format = arguments.Get("format");
  if (!format) return UsageError("draw", "missing required option --format", err);
  if (*format != "ascii" && *format != "svg" && *format != "perfetto") {
    return UsageError("draw",
                      absl::StrCat("--format must be ascii, svg or perfetto, got '", *format, "'"),
                      err);
  }
  std::variant<Simulated, int> simulated = LoadAndSimulate("draw", arguments, err);
  if (const int* code = std::get_if<int>(&simulated)) return *code;
  const Simulated& run = std::get<Simulated>(simulated);
  std::string drawing;
  if (*format == "ascii") drawing = schedules::DrawAscii(run.schedule, run.result);
  if (*format == "svg") drawing = schedules::DrawSvg(run.schedule, run.result);
  if (*format == "perfetto") drawing = schedules::DrawPerfetto(run.schedule, run.result);

  const std::optional<std::string> output = arguments.Get("output");
  if (!output || *output == "-") {
    out << drawing;
    return 0;
  }
  std::ofstream file(*output, std::ios::binary | std::ios::trunc);
  file << drawing;
  file.close();
  if (!file) {
    err << *output << ": error: cannot write file\n";
    return 1;
  }
  return 0;
}

}  // namespace tandem::cli
