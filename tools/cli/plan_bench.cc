// `tandem bench plan`: how long planning takes as segments and actors grow
// (synthetic cost files, every schedule, M up to 128), and, for an
// unbalanced GPT (a head over a wide vocabulary) planned here, the
// predicted against the measured step of the chosen plan, of hand-picked
// plans (the even split under each plain schedule at --microbatches) and
// of the planner's top candidates, whose predicted and measured orders are
// compared. A model with branches (--model two-tower) adds the fastest plan
// of the other kind: the best chain against the chosen stage DAG, or the
// other way round.
#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/kernels.h"
#include "controller/session.h"
#include "nlohmann/json.hpp"
#include "schedules/json_text.h"
#include "schedules/planner.h"
#include "tools/cli/commands.h"
#include "tools/cli/model_options.h"
#include "tools/cli/plan_options.h"

namespace tandem::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct PlanBenchOptions {
  examples::ExampleJobOptions model;
  LauncherOptions launcher;
  int32_t actors = 2;
  int64_t steps = 6;
  int64_t profile_steps = 3;
  bool no_run = false;
  bool json = false;
};

// n segments of 0.5 to 1.5 ms (seeded), the last four times as heavy.
schedules::CostFile SyntheticCosts(int32_t n) {
  std::mt19937 random(static_cast<uint32_t>(n));
  std::uniform_real_distribution<double> ms(0.5, 1.5);
  schedules::CostFile costs{.model = absl::StrCat("synthetic ", n), .device = "none", .microbatch_size = 1};
  for (int32_t i = 0; i < n; ++i) {
    const double seconds = ms(random) * 1e-3 * (i + 1 == n ? 4 : 1);
    costs.segments.push_back({.name = absl::StrCat("s", i),
                              .forward_s = seconds / 3,
                              .backward_s = 2 * seconds / 3,
                              .backward_input_s = seconds / 3,
                              .backward_weight_s = seconds / 3,
                              .recompute_s = seconds / 3,
                              .activation_bytes = 1 << 16,
                              .stash_bytes = 1 << 20,
                              .remat_stash_bytes = 1 << 16,
                              .parameter_bytes = 1 << 20,
                              .optimizer_bytes = 3 << 20,
                              .working_bytes = 1 << 18});
  }
  return costs;
}

struct MeasuredCandidate {
  std::string label;
  schedules::Candidate candidate;
  double measured_s = 0.0;
};

// The mean step of `candidate` over `steps` steps after one warm-up, run by
// the launcher the options name.
absl::StatusOr<double> MeasureStep(const PlanBenchOptions& options, const schedules::CostFile& costs,
                                   const schedules::PlannerOptions& planner, const schedules::Candidate& candidate) {
  const schedules::Plan plan = candidate.plan;
  examples::ExampleJobOptions model = options.model;
  ScheduleOptions ignored;
  if (absl::Status s = ApplyPlan(plan, model, ignored); !s.ok()) return s;
  absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(model);
  if (!job.ok()) return job.status();
  SessionOptions session_options;
  session_options.launcher = [launcher = options.launcher]() -> std::unique_ptr<controller::Launcher> {
    absl::StatusOr<LauncherChoice> made = MakeLauncher(launcher);
    return made.ok() ? std::move(made->launcher) : nullptr;
  };
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Start(job->step, plan, std::move(session_options));
  if (!session.ok()) return session.status();
  double total = 0.0;
  for (int64_t step = 0; step <= options.steps; ++step) {
    absl::StatusOr<std::vector<ir::TensorMap>> batches = job->train_batch(static_cast<uint64_t>(step));
    if (!batches.ok()) return batches.status();
    const Clock::time_point start = Clock::now();
    if (absl::StatusOr<controller::StepReport> report = (*session)->Step(*batches); !report.ok()) {
      return report.status();
    }
    if (step > 0) total += std::chrono::duration<double>(Clock::now() - start).count();
  }
  return total / static_cast<double>(options.steps);
}

// 0-based ranks of `values`, smallest first.
std::vector<int32_t> Ranks(const std::vector<double>& values) {
  std::vector<int32_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return values[a] < values[b]; });
  std::vector<int32_t> ranks(values.size());
  for (size_t r = 0; r < order.size(); ++r) ranks[order[r]] = static_cast<int32_t>(r) + 1;
  return ranks;
}

// Part 1: how long planning takes on synthetic segment costs, as rows of
// the JSON (and a table unless `json`).
absl::StatusOr<nlohmann::ordered_json> PlanningTimes(bool json, std::ostream& out) {
  nlohmann::ordered_json timing = nlohmann::ordered_json::array();
  if (!json) {
    out << "planning time: synthetic segments, every schedule, global batch 128, M <= 128\n";
    out << absl::StrFormat("%8s %6s %10s %9s %10s\n", "segments", "actors", "candidates", "skipped", "plan ms");
  }
  for (int32_t n : {8, 16, 32, 64}) {
    for (int32_t actors : {2, 4, 8}) {
      if (actors > n) continue;
      const schedules::CostFile costs = SyntheticCosts(n);
      schedules::PlannerOptions planner{.actors = actors, .global_batch = 128, .memory_cap = int64_t{1} << 40};
      const Clock::time_point start = Clock::now();
      absl::StatusOr<schedules::PlanSearch> search = schedules::SearchPlans(costs, planner);
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      if (!search.ok()) return search.status();
      timing.push_back({{"segments", n}, {"actors", actors}, {"candidates", search->candidates.size()},
                        {"skipped", search->skipped.size()}, {"plan_ms", schedules::JsonNumber(ms)}});
      if (!json) {
        out << absl::StrFormat("%8d %6d %10d %9d %10.1f\n", n, actors, search->candidates.size(),
                               search->skipped.size(), ms);
      }
    }
  }
  return timing;
}

// Part 2's runs, in order: the chosen plan; the even split under gpipe,
// 1f1b and zb-h1 (runs 1-3); the even split under the chosen schedule and M
// (run 4); for a model with branches, the best plan of the other kind; then,
// from `first_ranked` on, up to three planner candidates each predicted at
// least 10% slower than the last.
struct PlannedRuns {
  std::vector<MeasuredCandidate> runs;
  size_t first_ranked = 0;
};
absl::StatusOr<PlannedRuns> RunsToMeasure(const std::vector<schedules::CostFile>& measured,
                                          const schedules::PlannerOptions& planner,
                                          const schedules::PlanSearch& search, const schedules::Candidate& chosen,
                                          int32_t model_microbatches) {
  const schedules::CostFile& costs = measured.front();
  PlannedRuns planned;
  std::vector<MeasuredCandidate>& runs = planned.runs;
  runs.push_back({"chosen plan", chosen});
  const int32_t n = static_cast<int32_t>(costs.segments.size());
  std::vector<schedules::PlanStage> even;
  for (int32_t s = 0; s < planner.actors; ++s) {
    even.push_back({.first_segment = s * n / planner.actors, .end_segment = (s + 1) * n / planner.actors});
  }
  for (const char* name : {"gpipe", "1f1b", "zb-h1"}) {
    absl::StatusOr<schedules::Candidate> hand =
        schedules::EvaluateCandidate(measured, planner, name, model_microbatches, even);
    if (!hand.ok()) return hand.status();
    runs.push_back({absl::StrCat("hand-picked: even ", name), *hand});
  }
  absl::StatusOr<schedules::Candidate> uniform =
      schedules::EvaluateCandidate(measured, planner, chosen.plan.schedule, chosen.plan.microbatches, even);
  if (!uniform.ok()) return uniform.status();
  runs.push_back({"even split, chosen schedule and M", *uniform});
  // A model with branches: the fastest plan of the other kind (a chain
  // against a stage DAG), the comparison GraphPipe makes.
  if (!costs.segment_edges.empty()) {
    for (const schedules::Candidate& c : search.candidates) {
      if (c.fits && c.plan.stage_edges.empty() != chosen.plan.stage_edges.empty()) {
        runs.push_back({c.plan.stage_edges.empty() ? "best chain plan" : "best graph plan", c});
        break;
      }
    }
  }
  planned.first_ranked = runs.size();
  double last = 0.0;
  for (const schedules::Candidate& c : search.candidates) {
    if (runs.size() - planned.first_ranked == 3) break;
    if (!c.fits || c.plan.predicted_step_s < last * 1.1) continue;
    runs.push_back({absl::StrCat("planner candidate ", runs.size() - planned.first_ranked + 1), c});
    last = c.plan.predicted_step_s;
  }
  return planned;
}

// Part 2's report: every run predicted against measured, the chosen plan
// against the hand-picked ones, and whether the ranks agree.
void ReportRuns(const PlanBenchOptions& options, const schedules::CostFile& costs, int32_t actors,
                const PlannedRuns& planned, nlohmann::ordered_json& json, std::ostream& out) {
  const std::vector<MeasuredCandidate>& runs = planned.runs;
  std::vector<double> predicted_ranked, measured_ranked;
  for (size_t i = planned.first_ranked; i < runs.size(); ++i) {
    predicted_ranked.push_back(runs[i].candidate.plan.predicted_step_s);
    measured_ranked.push_back(runs[i].measured_s);
  }
  const std::vector<int32_t> predicted_order = Ranks(predicted_ranked);
  const std::vector<int32_t> measured_order = Ranks(measured_ranked);
  const MeasuredCandidate* best_hand = &runs[1];
  for (size_t i = 1; i <= 3; ++i) {
    if (runs[i].measured_s < best_hand->measured_s) best_hand = &runs[i];
  }
  const double vs_best_hand = 1.0 - runs[0].measured_s / best_hand->measured_s;
  const double vs_uniform = 1.0 - runs[0].measured_s / runs[4].measured_s;

  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const MeasuredCandidate& run : runs) {
    rows.push_back({{"run", run.label},
                    {"schedule", run.candidate.plan.schedule},
                    {"microbatches", run.candidate.plan.microbatches},
                    {"stages", run.candidate.Describe(costs)},
                    {"predicted_ms", schedules::JsonNumber(run.candidate.plan.predicted_step_s * 1e3)},
                    {"measured_ms", schedules::JsonNumber(run.measured_s * 1e3)}});
  }
  json["model"] = costs.model;
  json["runs"] = std::move(rows);
  json["predicted_ranks"] = predicted_order;
  json["measured_ranks"] = measured_order;
  json["ranks_agree"] = predicted_order == measured_order;
  json["chosen_vs_best_hand_picked"] = schedules::JsonNumber(vs_best_hand);
  json["chosen_vs_uniform"] = schedules::JsonNumber(vs_uniform);
  if (options.json) {
    out << schedules::JsonText(json) << "\n";
    return;
  }
  out << absl::StrFormat("\npredicted vs measured on %d actors (%s launcher, mean of %d steps after a warm-up)\n",
                         actors, options.launcher.launcher, options.steps);
  out << absl::StrFormat("%-34s %-8s %4s %12s %12s %9s  %s\n", "run", "schedule", "M", "predicted ms", "measured ms",
                         "meas/pred", "stages");
  for (const MeasuredCandidate& run : runs) {
    const schedules::Plan& plan = run.candidate.plan;
    out << absl::StrFormat("%-34s %-8s %4d %12.1f %12.1f %9.2f  %s\n", run.label, plan.schedule, plan.microbatches,
                           plan.predicted_step_s * 1e3, run.measured_s * 1e3, run.measured_s / plan.predicted_step_s,
                           run.candidate.Describe(costs));
  }
  out << absl::StrFormat("chosen plan vs best hand-picked (%s): %.1f%% lower measured step\n", best_hand->label,
                         100 * vs_best_hand);
  out << absl::StrFormat("chosen plan vs even split with its schedule and M: %.1f%% lower measured step\n",
                         100 * vs_uniform);
  out << absl::StrFormat("planner candidates: predicted ranks %s, measured ranks %s (%s)\n",
                         absl::StrJoin(predicted_order, " "), absl::StrJoin(measured_order, " "),
                         predicted_order == measured_order ? "agree" : "DISAGREE");
}

int RunPlanBench(const CLI::App& command, const PlanBenchOptions& options, std::ostream& out, std::ostream& err) {
  cpu::SetBlasThreads(1);
  nlohmann::ordered_json json;
  // 1. Planning time.
  absl::StatusOr<nlohmann::ordered_json> timing = PlanningTimes(options.json, out);
  if (!timing.ok()) return Failure(err, command, timing.status());
  json["planning"] = *std::move(timing);
  if (options.no_run) {
    if (options.json) out << schedules::JsonText(json) << "\n";
    return 0;
  }

  // 2. Predicted against measured, for the GPT planned here.
  schedules::PlannerOptions planner;
  planner.actors = options.actors;
  planner.global_batch = options.model.batch.value_or(8) * options.model.microbatches;
  std::ostringstream log;
  examples::ExampleJobOptions model = options.model;
  model.batch = options.model.batch.value_or(8);
  absl::StatusOr<std::vector<schedules::CostFile>> measured = ProfileModelSegments(
      model, schedules::PlannerMicrobatchSizes(planner), options.profile_steps, log);
  if (!measured.ok()) return Failure(err, command, measured.status());
  if (!options.json) out << log.str();
  const schedules::CostFile& costs = measured->front();
  absl::StatusOr<schedules::PlanSearch> search =
      schedules::SearchPlans(*measured, planner, CompiledPeaksOf(model, costs, planner));
  if (!search.ok()) return Failure(err, command, search.status());
  absl::StatusOr<schedules::Candidate> chosen = schedules::ChosenCandidate(*search, costs, planner);
  if (!chosen.ok()) return Failure(err, command, chosen.status());
  absl::StatusOr<PlannedRuns> planned = RunsToMeasure(*measured, planner, *search, *chosen, options.model.microbatches);
  if (!planned.ok()) return Failure(err, command, planned.status());
  for (MeasuredCandidate& run : planned->runs) {
    absl::StatusOr<double> seconds = MeasureStep(options, costs, planner, run.candidate);
    if (!seconds.ok()) return Failure(err, command, seconds.status());
    run.measured_s = *seconds;
  }
  ReportRuns(options, costs, planner.actors, *planned, json, out);
  return 0;
}

}  // namespace

void AddPlanBench(CommandLine& command_line, CLI::App& bench) {
  CLI::App* plan = command_line.Add(
      bench, "plan", "planning time vs segments and actors; predicted vs measured steps of planned and hand-picked plans",
      "[model options] [--actors P] [--steps N] [--no-run] [launcher options] [--json]");
  auto options = std::make_shared<PlanBenchOptions>();
  options->model.layers = 8;
  options->model.dim = 128;
  options->model.vocab = 8192;
  options->model.microbatches = 8;
  AddModelOptions(*plan, options->model);
  AddLauncherOptions(*plan, options->launcher);
  AddIntegerOption(*plan, "--actors", options->actors, "pipeline actors of the measured runs");
  AddIntegerOption(*plan, "--steps", options->steps, "measured steps per run (after one warm-up step)");
  AddIntegerOption(*plan, "--profile-steps", options->profile_steps, "measured steps per profiled microbatch size");
  plan->add_flag("--no-run", options->no_run, "only the planning time");
  plan->add_flag("--json", options->json, "print JSON");
  command_line.OnRun(plan, [plan, options, &streams = command_line.streams()] {
    return RunPlanBench(*plan, *options, streams.out, streams.err);
  });
}

}  // namespace tandem::cli
