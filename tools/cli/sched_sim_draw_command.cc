// `tandem sched sim` and `tandem sched draw`: simulate a schedule under a
// cost model, and draw the simulated step as ASCII, SVG or a Perfetto trace.
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "schedules/bubbles.h"
#include "schedules/drawing.h"
#include "schedules/json_text.h"
#include "schedules/simulation_report.h"
#include "schedules/simulator.h"
#include "schedules/validator.h"
#include "tools/cli/command_line.h"
#include "tools/cli/sched_commands.h"

namespace tandem::cli {
namespace {

using schedules::CostModel;
using schedules::TaskKind;

absl::StatusOr<double> ParseNonNegative(const std::string& text, const std::string& piece) {
  double value = 0.0;
  if (!absl::SimpleAtod(text, &value) || !(value >= 0.0) || value > 1e300) {
    return absl::InvalidArgumentError(absl::StrCat("'", piece, "': '", text, "' is not a non-negative number"));
  }
  return value;
}

// Splits "a=1,b=2" into pieces; an empty piece or one without '=' is an error.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> SplitAssignments(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> pieces;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    const std::string piece_text(piece);
    const size_t equals = piece_text.find('=');
    if (piece_text.empty() || equals == std::string::npos || equals == 0) {
      return absl::InvalidArgumentError(absl::StrCat("'", piece_text, "' is not of the form NAME=VALUE"));
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
    const bool has_stage = name.size() > 2 && name[1] == '@' && absl::SimpleAtoi(name.substr(2), &stage) && stage >= 0;
    if (!kind || (name.size() > 1 && !has_stage)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", piece, "': expected a kind F, B, I or W, optionally with @STAGE (e.g. B@3=2)"));
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

// "alpha=0.1,beta=0.01[,latency=L][,activation=BYTES][,gradient=BYTES]".
absl::Status ParseLinkSpec(const std::string& text, CostModel& costs) {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> pieces = SplitAssignments(text);
  if (!pieces.ok()) return pieces.status();
  for (const auto& [name, value_text] : *pieces) {
    const std::string piece = absl::StrCat(name, "=", value_text);
    double* field = nullptr;
    if (name == "alpha") field = &costs.link.alpha;
    if (name == "beta") field = &costs.link.beta;
    if (name == "latency") field = &costs.link.latency;
    if (name == "activation") field = &costs.activation_bytes;
    if (name == "gradient") field = &costs.gradient_bytes;
    if (field == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", piece, "': expected alpha, beta, latency, activation (bytes) or gradient (bytes)"));
    }
    absl::StatusOr<double> value = ParseNonNegative(value_text, piece);
    if (!value.ok()) return value.status();
    *field = *value;
  }
  return absl::OkStatus();
}

// The cost-model options shared by sim and draw, and the schedule to load.
struct CostOptions {
  std::string path;
  std::optional<std::string> from;
  std::string cost = "F=1,B=2,I=1,W=1";
  std::optional<std::string> link;
  std::string group = "max";
  double i_frees = 0.5;
  int32_t data_parallel = 1;
  double grad_bytes = 1.0;
  std::string remat = "none";
  double remat_kept = 0.0;
};

// A check for a finite, non-negative real option; refuses NaN and infinities,
// which CLI11's Range would let through.
CLI::Validator NonNegativeFinite() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0.0;
        if (absl::SimpleAtod(text, &value) && value >= 0.0 && value <= 1e300) return "";
        return absl::StrCat("Value ", text, " is not a finite non-negative number");
      },
      "NUMBER >= 0");
}

void AddCostOptions(CLI::App& command, CostOptions& options) {
  command.add_option("file", options.path, "the schedule, or - for stdin")->required();
  command.add_option("--cost", options.cost, "compute costs per kind, e.g. F=1,B=2,I=1,W=1; B@3=2.5 for stage 3")
      ->capture_default_str();
  command.add_option("--link", options.link,
                     "transfer cost alpha + beta * bytes on the sender's link, arriving latency after: "
                     "alpha=A,beta=B[,latency=L,activation=BYTES,gradient=BYTES]");
  command.add_option("--group", options.group, "cost of a fused slot: max (overlapped) or sum")
      ->check(CLI::IsMember({"max", "sum"}))
      ->capture_default_str();
  command.add_option("--i-frees", options.i_frees, "fraction of a forward's activations that I frees (W the rest)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  command.add_option("--from", options.from, "input format: tandem or pytorch-csv (default: by extension)")
      ->check(CLI::IsMember({"tandem", "pytorch-csv"}));
  AddIntegerOption(command, "--data-parallel", options.data_parallel,
                   "data-parallel replicas D; D > 1 adds each stage's gradient reduction, "
                   "2(D-1)(alpha + beta * BYTES/D), after its last backward")
      ->check(CLI::Range(1, schedules::kMaxDataParallel));
  command.add_option("--grad-bytes", options.grad_bytes, "gradient bytes of each stage, reduced across the replicas")
      ->check(NonNegativeFinite())
      ->capture_default_str();
  command
      .add_option("--remat", options.remat,
                  "none, or stage: every stage recomputes its forward in its backward (B and I cost F more)")
      ->check(CLI::IsMember({"none", "stage"}))
      ->capture_default_str();
  command
      .add_option("--remat-kept", options.remat_kept,
                  "with --remat stage, the fraction of a forward's activations a stage keeps (its inputs)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
}

// The cost model the options describe; InvalidArgument naming the option and piece.
absl::StatusOr<CostModel> CostModelFrom(const CostOptions& options) {
  CostModel costs;
  if (absl::Status status = ParseCostSpec(options.cost, costs); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--cost: ", status.message()));
  }
  if (options.link.has_value()) {
    if (absl::Status status = ParseLinkSpec(*options.link, costs); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--link: ", status.message()));
    }
  }
  costs.group_cost = options.group == "max" ? schedules::GroupCost::kMax : schedules::GroupCost::kSum;
  costs.input_grad_frees = options.i_frees;
  costs.data_parallel = options.data_parallel;
  costs.stage_gradient_bytes = options.grad_bytes;
  return costs;
}

struct Simulated {
  schedules::Schedule schedule;
  schedules::SimulationResult result;
};

// Loads, validates and simulates the schedule. On failure, prints the
// problem and sets `exit_code`.
std::optional<Simulated> LoadAndSimulate(const CLI::App& command, const CostOptions& options, CommandStreams& streams,
                                         int& exit_code) {
  absl::StatusOr<CostModel> costs = CostModelFrom(options);
  if (!costs.ok()) {
    exit_code = UsageError(streams.err, command, std::string(costs.status().message()));
    return std::nullopt;
  }
  exit_code = 1;
  absl::StatusOr<schedules::Schedule> schedule = LoadSchedule(options.path, options.from, streams.in);
  if (!schedule.ok()) {
    streams.err << schedule.status().message() << "\n";
    return std::nullopt;
  }
  const std::string name = options.path == "-" ? "<stdin>" : options.path;
  if (absl::Status status = schedules::Validate(*schedule); !status.ok()) {
    for (absl::string_view line : absl::StrSplit(status.message(), '\n')) {
      streams.err << name << ": error: " << line << "\n";
    }
    return std::nullopt;
  }
  if (options.remat == "stage") {
    for (int32_t stage = 0; stage < schedule->num_stages; ++stage) costs->remat_stages.insert(stage);
  }
  costs->remat_kept = options.remat_kept;
  absl::StatusOr<schedules::SimulationResult> result = schedules::Simulate(*schedule, *costs);
  if (!result.ok()) {
    streams.err << name << ": error: " << result.status().message() << "\n";
    return std::nullopt;
  }
  exit_code = 0;
  return Simulated{*std::move(schedule), *std::move(result)};
}

}  // namespace

void AddSchedSimCommand(CommandLine& command_line, CLI::App& sched) {
  struct Options {
    CostOptions costs;
    bool json = false;
    bool timeline = false;
    bool bubbles = false;
    std::optional<double> fill_piece;
    double fill_memory = 0.0;
    double fill_share = 1.0;
    std::optional<int64_t> fill_pieces;
  };
  CLI::App* sim = command_line.Add(
      sched, "sim", "simulate a schedule with a cost model",
      "FILE [--cost F=1,B=2,I=1,W=1] [--link alpha=A,beta=B] [--data-parallel D] [--bubbles] [--fill-piece COST] "
      "[--json]",
      "Simulates one step (see schedules/SIMULATION.md for the model). --bubbles lists every actor's bubble slots "
      "with their predicted length and free activation memory; --fill-piece packs a fill job's pieces of that cost "
      "into them (PipeFill's greedy packing) and reports the filled time and the utilisation with and without it.");
  auto options = std::make_shared<Options>();
  AddCostOptions(*sim, options->costs);
  sim->add_flag("--json", options->json, "print JSON instead of a table");
  sim->add_flag("--timeline", options->timeline, "with --json, add each actor's memory timeline");
  sim->add_flag("--bubbles", options->bubbles, "list the bubble slots of every actor");
  sim->add_option("--fill-piece", options->fill_piece, "pack fill pieces of this cost into the bubbles (implies --bubbles)")
      ->check(CLI::PositiveNumber);
  sim->add_option("--fill-memory", options->fill_memory,
                  "activation units a fill piece holds; it goes only where that much is free (default 0)")
      ->check(CLI::NonNegativeNumber);
  sim->add_option("--fill-share", options->fill_share, "the share of each bubble fill may take, in (0, 1] (default 1)")
      ->check(CLI::Range(0.0, 1.0));
  sim->add_option("--fill-pieces", options->fill_pieces, "the fill job's pieces in all (default: as many as fit)")
      ->check(CLI::NonNegativeNumber);
  command_line.OnRun(sim, [sim, options, &streams = command_line.streams()] {
    if (!options->fill_piece.has_value() &&
        (sim->count("--fill-memory") + sim->count("--fill-share") + sim->count("--fill-pieces")) > 0) {
      return UsageError(streams.err, *sim, "--fill-memory, --fill-share and --fill-pieces need --fill-piece COST");
    }
    int exit_code = 0;
    std::optional<Simulated> run = LoadAndSimulate(*sim, options->costs, streams, exit_code);
    if (!run.has_value()) return exit_code;
    schedules::SimulationReportOptions report;
    report.memory_timeline = options->timeline;
    std::string text = options->json ? schedules::SimulationJson(run->schedule, run->result, report)
                                     : schedules::SimulationTable(run->schedule, run->result, report);
    if (options->bubbles || options->fill_piece.has_value()) {
      absl::StatusOr<std::vector<schedules::BubbleSlot>> bubbles = schedules::FindBubbles(run->schedule, run->result);
      if (!bubbles.ok()) return Failure(streams.err, *sim, bubbles.status());
      std::optional<schedules::PackedFill> fill;
      if (options->fill_piece.has_value()) {
        fill.emplace();
        fill->packing = {.piece_cost = *options->fill_piece, .piece_memory = options->fill_memory,
                         .share = options->fill_share, .max_pieces = options->fill_pieces.value_or(-1)};
        absl::StatusOr<std::vector<int64_t>> packed = schedules::PackFill(*bubbles, fill->packing);
        if (!packed.ok()) return UsageError(streams.err, *sim, std::string(packed.status().message()));
        fill->pieces = *std::move(packed);
      }
      const schedules::PackedFill* packed = fill.has_value() ? &*fill : nullptr;
      if (options->json) {
        nlohmann::ordered_json json = nlohmann::ordered_json::parse(text);
        nlohmann::ordered_json extra =
            nlohmann::ordered_json::parse(schedules::BubbleJson(run->schedule, run->result, *bubbles, packed));
        for (auto& [key, value] : extra.items()) json[key] = value;
        text = schedules::JsonText(json) + "\n";
      } else {
        text += schedules::BubbleTable(run->schedule, run->result, *bubbles, packed);
      }
    }
    streams.out << text;
    return 0;
  });
}

void AddSchedDrawCommand(CommandLine& command_line, CLI::App& sched) {
  struct Options {
    CostOptions costs;
    std::string format;
    std::string output = "-";
  };
  CLI::App* draw = command_line.Add(sched, "draw", "draw a schedule", "FILE --format ascii|svg|perfetto [-o OUT]",
                                    "Draws the simulated step. In Perfetto traces 1 cost unit = 1000 us.");
  auto options = std::make_shared<Options>();
  draw->add_option("--format", options->format, "ascii, svg or perfetto (Chrome trace JSON)")
      ->required()
      ->check(CLI::IsMember({"ascii", "svg", "perfetto"}));
  draw->add_option("-o,--output", options->output, "write to this file instead of stdout");
  AddCostOptions(*draw, options->costs);
  command_line.OnRun(draw, [draw, options, &streams = command_line.streams()] {
    int exit_code = 0;
    std::optional<Simulated> run = LoadAndSimulate(*draw, options->costs, streams, exit_code);
    if (!run.has_value()) return exit_code;
    std::string drawing;
    if (options->format == "ascii") drawing = schedules::DrawAscii(run->schedule, run->result);
    if (options->format == "svg") drawing = schedules::DrawSvg(run->schedule, run->result);
    if (options->format == "perfetto") drawing = schedules::DrawPerfetto(run->schedule, run->result);
    if (options->output == "-") {
      streams.out << drawing;
      return 0;
    }
    std::ofstream file(options->output, std::ios::binary | std::ios::trunc);
    file << drawing;
    file.close();
    if (!file) {
      streams.err << options->output << ": error: cannot write file\n";
      return 1;
    }
    return 0;
  });
}

}  // namespace tandem::cli
