// `tandem plan`: chooses stages, schedule, microbatches and
// rematerialisation for an example model on P actors under a memory cap
// (schedules/planner.h), prints the best candidates and writes the chosen
// plan for `tandem train --plan`.
//
// The costs come from --costs FILE (`tandem profile --out`), or are measured
// here first (every layer a segment). When the command knows the model (no
// --costs, or --model given), the fastest candidates' peaks are those of
// their compiled programs, exactly what the executor reaches.
#include <fstream>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backends/cpu/kernels.h"
#include "nlohmann/json.hpp"
#include "schedules/json_text.h"
#include "schedules/planner.h"
#include "tools/cli/commands.h"
#include "tools/cli/model_options.h"
#include "tools/cli/plan_options.h"

namespace tandem::cli {
namespace {

struct PlanCommandOptions {
  examples::ExampleJobOptions model;
  int32_t actors = 2;
  std::string memory_cap = "0";
  std::vector<std::string> costs;
  std::string schedules = absl::StrJoin(schedules::PlannerSchedules(), ",");
  int32_t max_microbatches = 128;
  bool no_remat = false;
  double task_overhead = 0.0;
  int32_t top = 10;
  int64_t profile_steps = 3;
  std::string out = "plan.json";
  bool json = false;
};

// "8000000", "64MiB", "1.5GB": bytes, at most 2^50.
absl::StatusOr<int64_t> ParseBytes(const std::string& text) {
  static constexpr std::pair<const char*, double> kUnits[] = {
      {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
      {"kb", 1e3},     {"mb", 1e6},        {"gb", 1e9},           {"tb", 1e12},
      {"k", 1e3},      {"m", 1e6},         {"g", 1e9},            {"b", 1.0}};
  const std::string lower = absl::AsciiStrToLower(text);
  double unit = 1.0;
  std::string number = lower;
  for (const auto& [suffix, scale] : kUnits) {
    if (absl::EndsWith(lower, suffix)) {
      number = lower.substr(0, lower.size() - std::string(suffix).size());
      unit = scale;
      break;
    }
  }
  double value = 0.0;
  if (!absl::SimpleAtod(number, &value) || !(value >= 0.0) || value * unit > static_cast<double>(int64_t{1} << 50)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a byte count (e.g. 800000000, 800MB, 1.5GiB; at most 2^50)"));
  }
  return static_cast<int64_t>(value * unit);
}

std::string Peaks(const std::vector<int64_t>& peaks) { return absl::StrJoin(peaks, " "); }

nlohmann::ordered_json CandidateJson(const schedules::Candidate& c, const schedules::CostFile& costs) {
  nlohmann::ordered_json json;
  json["schedule"] = c.plan.schedule;
  json["microbatches"] = c.plan.microbatches;
  json["microbatch_size"] = c.plan.microbatch_size;
  json["stages"] = c.Describe(costs);
  json["step_s"] = schedules::JsonNumber(c.plan.predicted_step_s);
  json["bubble"] = schedules::JsonNumber(c.plan.predicted_bubble);
  json["peak_bytes"] = c.plan.predicted_peak_bytes;
  json["memory"] = std::string(schedules::MemorySourceName(c.plan.memory_source));
  json["fits"] = c.fits;
  return json;
}

int RunPlan(const CLI::App& command, PlanCommandOptions& options, CommandStreams& streams) {
  absl::StatusOr<int64_t> cap = ParseBytes(options.memory_cap);
  if (!cap.ok()) return UsageError(streams.err, command, absl::StrCat("--memory-cap: ", cap.status().message()));
  cpu::SetBlasThreads(1);
  schedules::PlannerOptions planner;
  planner.actors = options.actors;
  planner.data_parallel = options.model.replicas;
  planner.max_microbatches = options.max_microbatches;
  std::vector<schedules::CostFile> measured;
  for (const std::string& path : options.costs) {
    absl::StatusOr<schedules::CostFile> costs = ReadCostFile(path);
    if (!costs.ok()) return Failure(streams.err, command, costs.status());
    measured.push_back(*std::move(costs));
  }
  // The global batch: --batch (else the first cost file's microbatch size,
  // else the model's default) x --microbatches.
  int64_t size = options.model.batch.value_or(measured.empty() ? 0 : measured.front().microbatch_size);
  if (size == 0) {
    absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(options.model);
    if (!job.ok()) return Failure(streams.err, command, job.status());
    size = job->microbatch_size;
  }
  planner.global_batch = size * options.model.microbatches;
  std::ostringstream log;  // progress, shown unless --json
  if (measured.empty()) {
    absl::StatusOr<std::vector<schedules::CostFile>> profiled =
        ProfileModelSegments(options.model, schedules::PlannerMicrobatchSizes(planner), options.profile_steps, log);
    if (!profiled.ok()) return Failure(streams.err, command, profiled.status());
    measured = *std::move(profiled);
  }
  if (!options.json) streams.out << log.str();
  const schedules::CostFile* costs = &measured.front();
  planner.memory_cap = *cap;
  planner.schedules = absl::StrSplit(options.schedules, ',', absl::SkipEmpty());
  planner.allow_remat = !options.no_remat;
  planner.task_overhead_s = options.task_overhead;
  // The model is known when measured here or named: then the fastest
  // candidates are compiled for their exact peaks.
  const bool knows_model = options.costs.empty() || command.count("--model") > 0;
  schedules::CompiledPeaks compiled;
  if (knows_model) compiled = CompiledPeaksOf(options.model, *costs, planner);
  absl::StatusOr<schedules::PlanSearch> search = schedules::SearchPlans(measured, planner, compiled);
  if (!search.ok()) return Failure(streams.err, command, search.status());
  absl::StatusOr<schedules::Candidate> chosen = schedules::ChosenCandidate(*search, *costs, planner);

  const size_t shown = std::min<size_t>(search->candidates.size(), static_cast<size_t>(options.top));
  if (options.json) {
    nlohmann::ordered_json json;
    json["costs"] = {{"model", costs->model}, {"device", costs->device}, {"segments", costs->segments.size()}};
    json["chosen"] = chosen.ok() ? CandidateJson(*chosen, *costs) : nlohmann::ordered_json(nullptr);
    if (!chosen.ok()) json["error"] = std::string(chosen.status().message());
    nlohmann::ordered_json candidates = nlohmann::ordered_json::array();
    for (size_t i = 0; i < shown; ++i) candidates.push_back(CandidateJson(search->candidates[i], *costs));
    json["candidates"] = std::move(candidates);
    json["evaluated"] = search->candidates.size();
    json["compiled"] = search->compiled;
    streams.out << schedules::JsonText(json) << "\n";
  } else {
    streams.out << absl::StrFormat(
        "planning %s (%d segments, measured on %s) on %d actors%s, global batch %d, memory cap %s: %d candidates, "
        "%d compiled\n",
        costs->model, costs->segments.size(), costs->device, planner.actors,
        planner.data_parallel > 1 ? absl::StrCat(" x ", planner.data_parallel, " replicas") : "",
        planner.global_batch, planner.memory_cap > 0 ? absl::StrCat(planner.memory_cap, " bytes") : "none",
        search->candidates.size(), search->compiled);
    streams.out << absl::StrFormat("%4s  %-11s %4s %5s %9s %7s  %-6s  %s  %s\n", "rank", "schedule", "M", "size",
                                   "step ms", "bubble", "fits", "peak bytes per actor (memory)", "stages");
    for (size_t i = 0; i < shown; ++i) {
      const schedules::Candidate& c = search->candidates[i];
      const schedules::Plan& p = c.plan;
      streams.out << absl::StrFormat("%4d  %-11s %4d %5d %9.3f %6.1f%%  %-6s  %s (%s)  %s\n", i + 1, p.schedule,
                                     p.microbatches, p.microbatch_size, p.predicted_step_s * 1e3,
                                     100 * p.predicted_bubble, c.fits ? "yes" : "no", Peaks(p.predicted_peak_bytes),
                                     schedules::MemorySourceName(p.memory_source), c.Describe(*costs));
    }
  }
  if (!chosen.ok()) return Failure(streams.err, command, chosen.status());
  const schedules::Plan& plan = chosen->plan;
  std::ofstream file(options.out, std::ios::binary | std::ios::trunc);
  file << schedules::FormatPlanFile(plan);
  file.close();
  if (!file) return Failure(streams.err, command, absl::UnavailableError(absl::StrCat("cannot write ", options.out)));
  if (!options.json) {
    streams.out << absl::StrFormat("chosen: %s, M=%d of %d, %s, predicted step %.3f ms, bubble %.1f%%, peaks %s (%s)\n",
                                   plan.schedule, plan.microbatches, plan.microbatch_size, chosen->Describe(*costs),
                                   plan.predicted_step_s * 1e3, 100 * plan.predicted_bubble,
                                   Peaks(plan.predicted_peak_bytes), schedules::MemorySourceName(plan.memory_source));
    streams.out << "wrote " << options.out << " (run it: tandem train --plan " << options.out << " ...)\n";
  }
  return 0;
}

}  // namespace

void AddPlanCommand(CommandLine& command_line) {
  CLI::App* plan = command_line.Add(
      command_line.root(), "plan",
      "choose stages, schedule, microbatches and rematerialisation under a memory cap, and write the plan",
      "[--model gpt|mlp|two-tower] [model options] --actors P [--data-parallel D] [--memory-cap BYTES] [--costs FILE] "
      "[--json] [--out FILE]",
      "Cuts the model's segments (from --costs, a `tandem profile --out` file, or measured here with every layer "
      "a segment) into stages with an exact dynamic program minimising the pipeline's step time, for each "
      "schedule (gpipe, 1f1b, interleaved, zb-h1, zb-v) and microbatch count M (the divisors of the global "
      "batch, --batch x --microbatches), rematerialising a stage where that is what fits; simulates every "
      "candidate and finds each actor's peak bytes (for the fastest candidates, from their compiled programs "
      "when the model is known), and keeps those within --memory-cap. Prints the best candidates and writes "
      "the fastest that fits to --out for `tandem train --plan FILE`; when nothing fits, says which actor of "
      "the closest candidate is over, by how much, and what cap would fit.");
  auto options = std::make_shared<PlanCommandOptions>();
  AddModelOptions(*plan, options->model);
  AddIntegerOption(*plan, "--actors", options->actors, "pipeline actors (per replica)");
  plan->add_option("--memory-cap", options->memory_cap, "bytes per actor, e.g. 800000000, 800MB, 1.5GiB (0: none)")
      ->capture_default_str();
  plan->add_option("--costs", options->costs,
                   "cost files from `tandem profile --out`, at one or more microbatch sizes (default: profile here "
                   "at every size searched)");
  plan->add_option("--schedules", options->schedules, "the schedules searched, comma-separated")
      ->capture_default_str();
  AddIntegerOption(*plan, "--max-microbatches", options->max_microbatches, "the largest M searched");
  plan->add_flag("--no-remat", options->no_remat, "never rematerialise");
  plan->add_option("--task-overhead", options->task_overhead, "seconds added to every task's time (dispatch)")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  AddIntegerOption(*plan, "--top", options->top, "candidates shown");
  AddIntegerOption(*plan, "--profile-steps", options->profile_steps, "measured steps when profiling here")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  plan->add_option("--out", options->out, "where the chosen plan is written")->capture_default_str();
  plan->add_flag("--json", options->json, "print the candidates and the choice as JSON");
  command_line.OnRun(plan, [plan, options, &streams = command_line.streams()] {
    return RunPlan(*plan, *options, streams);
  });
}

}  // namespace tandem::cli
