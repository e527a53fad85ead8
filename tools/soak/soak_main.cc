// `tandem-soak`: runs N fault-injection trials against `tandem train` with
// the local launcher (tools/soak/trial.h says what one trial does) and
// reports, per trial and per fault, how fast the failure was detected, what
// the controller said and what was left behind. A measuring program, not a
// test: it prints its findings and exits 0 unless it could not run (2) or a
// trial left processes behind or went undetected (1).
//
// With --restart, each trial is a run with --max-restarts struck by several
// faults (tools/soak/restart_trial.h), which must finish with the
// checkpoints of an uninterrupted run, byte for byte (exit 1 otherwise).
//
//   tandem-soak --trials 100 --seed 1 [--faults actor-kill,actor-stop,actor-drop,controller-kill]
//               [--json FILE] [-- TRAIN_ARGS...]
//   tandem-soak --restart --trials 20 --seed 1 [--faults-per-trial 2] [-- TRAIN_ARGS...]
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ir/statistics.h"
#include "nlohmann/json.hpp"
#include "tools/soak/restart_trial.h"
#include "tools/soak/trial.h"

namespace tandem::soak {
namespace {

// The directory of this executable: tandem-soak is built beside `tandem`.
std::string OwnDirectory() {
  std::string path(4096, '\0');
  const ssize_t length = readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (length <= 0) return ".";
  path.resize(static_cast<size_t>(length));
  return path.substr(0, path.rfind('/'));
}

std::vector<std::string> DefaultTrainArgs(int32_t actors) {
  return {"--model", "mlp",   "--actors",    std::to_string(actors), "--schedule",     "1f1b",
          "--microbatches", "8", "--steps", "100000000", "--log-every", "1", "--eval-batches", "0"};
}

// --restart: the README's main job, 200 steps, a checkpoint every 20.
std::vector<std::string> DefaultRestartArgs(int32_t actors) {
  return {"--model", "gpt", "--actors", std::to_string(actors), "--schedule", "1f1b", "--microbatches", "8",
          "--steps", "200", "--checkpoint-every", "20", "--log-every", "1000", "--eval-batches", "0"};
}

std::string Excerpt(const std::string& text, size_t width) {
  if (text.size() <= width) return text;
  return text.substr(0, width - 3) + "...";
}

std::string DetectText(const TrialResult& trial) {
  return trial.detect_s.has_value() ? absl::StrFormat("%.3f", *trial.detect_s) : "none";
}

void PrintHeader() {
  std::printf("%5s  %-15s  %5s  %7s  %8s  %4s  %5s  %4s  %s\n", "trial", "fault", "actor", "delay_s", "detect_s",
              "exit", "procs", "dirs", "error (or the trial's problem)");
}

void PrintTrial(int index, const TrialResult& trial) {
  const std::string text = trial.problem.empty() ? trial.error : "PROBLEM: " + trial.problem + " | " + trial.error;
  std::printf("%5d  %-15s  %5s  %7.3f  %8s  %4d  %5zu  %4zu  %s\n", index, std::string(FaultName(trial.fault)).c_str(),
              trial.actor >= 0 ? std::to_string(trial.actor).c_str() : "-", trial.delay_s, DetectText(trial).c_str(),
              trial.exit_code, trial.leftover_processes.size(), trial.leftover_directories.size(),
              Excerpt(text, 110).c_str());
  std::fflush(stdout);
}

struct FaultSummary {
  int trials = 0;
  int detected = 0;
  int started_training = 0;
  int problems = 0;
  std::vector<double> detect_s;
  std::map<int, int> exit_codes;
  size_t leftover_processes = 0;
  int trials_with_leftover_directories = 0;
};

std::map<Fault, FaultSummary> Summarize(const std::vector<TrialResult>& trials) {
  std::map<Fault, FaultSummary> summary;
  for (const TrialResult& trial : trials) {
    FaultSummary& s = summary[trial.fault];
    ++s.trials;
    if (trial.detect_s.has_value()) {
      ++s.detected;
      s.detect_s.push_back(*trial.detect_s);
    }
    if (trial.training_started) ++s.started_training;
    if (!trial.problem.empty()) ++s.problems;
    ++s.exit_codes[trial.exit_code];
    s.leftover_processes += trial.leftover_processes.size();
    if (!trial.leftover_directories.empty()) ++s.trials_with_leftover_directories;
  }
  for (auto& [fault, s] : summary) std::sort(s.detect_s.begin(), s.detect_s.end());
  return summary;
}

using ir::Median;

std::string ExitCodes(const FaultSummary& s) {
  std::vector<std::string> parts;
  for (const auto& [code, count] : s.exit_codes) parts.push_back(absl::StrFormat("%d:%d", code, count));
  return absl::StrJoin(parts, " ");
}

void PrintSummary(const std::map<Fault, FaultSummary>& summary) {
  std::printf("\n%-15s  %6s  %8s  %8s  %8s  %8s  %8s  %-12s  %9s  %9s  %8s\n", "fault", "trials", "detected",
              "min_s", "median_s", "max_s", "in_steps", "exit:count", "left_proc", "left_dirs", "problems");
  for (const auto& [fault, s] : summary) {
    const bool any = !s.detect_s.empty();
    std::printf("%-15s  %6d  %8d  %8.3f  %8.3f  %8.3f  %8d  %-12s  %9zu  %9d  %8d\n",
                std::string(FaultName(fault)).c_str(), s.trials, s.detected, any ? s.detect_s.front() : 0.0,
                Median(s.detect_s), any ? s.detect_s.back() : 0.0, s.started_training, ExitCodes(s).c_str(),
                s.leftover_processes, s.trials_with_leftover_directories, s.problems);
  }
}

nlohmann::json ToJson(const std::vector<std::string>& command, uint64_t seed, const std::vector<TrialResult>& trials,
                      const std::map<Fault, FaultSummary>& summary) {
  nlohmann::json out;
  out["command"] = command;
  out["seed"] = seed;
  out["trials"] = nlohmann::json::array();
  for (const TrialResult& trial : trials) {
    nlohmann::json t;
    t["fault"] = std::string(FaultName(trial.fault));
    t["actor"] = trial.actor;
    t["delay_s"] = trial.delay_s;
    t["detect_s"] = trial.detect_s.has_value() ? nlohmann::json(*trial.detect_s) : nlohmann::json(nullptr);
    t["exit_code"] = trial.exit_code;
    t["error"] = trial.error;
    t["training_started"] = trial.training_started;
    t["leftover_processes"] = trial.leftover_processes;
    t["leftover_directories"] = trial.leftover_directories;
    t["problem"] = trial.problem;
    out["trials"].push_back(std::move(t));
  }
  for (const auto& [fault, s] : summary) {
    nlohmann::json f;
    f["trials"] = s.trials;
    f["detected"] = s.detected;
    f["detect_s"] = {{"min", s.detect_s.empty() ? 0.0 : s.detect_s.front()},
                     {"median", Median(s.detect_s)},
                     {"max", s.detect_s.empty() ? 0.0 : s.detect_s.back()}};
    f["exit_codes"] = nlohmann::json::object();
    for (const auto& [code, count] : s.exit_codes) f["exit_codes"][std::to_string(code)] = count;
    f["leftover_processes"] = s.leftover_processes;
    f["trials_with_leftover_directories"] = s.trials_with_leftover_directories;
    f["problems"] = s.problems;
    out["summary"][std::string(FaultName(fault))] = std::move(f);
  }
  return out;
}

std::string FaultsText(const RestartTrialResult& trial) {
  std::vector<std::string> parts;
  for (const RestartFault& fault : trial.faults) {
    parts.push_back(absl::StrFormat("%s:%d@%.1fs%s", FaultName(fault.kind), fault.actor, fault.at_s,
                                    fault.during_checkpoint ? "(ckpt)" : ""));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, " ");
}

void PrintRestartTrial(int index, const RestartTrialResult& trial) {
  std::string verdict = trial.passed() ? "identical" : "FAILED";
  if (!trial.problem.empty()) verdict += ": " + trial.problem;
  if (!trial.difference.empty()) verdict += ": " + trial.difference;
  if (!trial.error.empty()) verdict += ": " + trial.error;
  std::printf("%5d  %4d  %8d  %6d  %6.1f  %6.1f  %5zu  %4zu  %-60s  %s\n", index, trial.exit_code, trial.restarts,
              static_cast<int>(trial.steps_redone), trial.seconds_lost, trial.seconds, trial.leftover_processes.size(),
              trial.leftover_directories.size(), FaultsText(trial).c_str(), Excerpt(verdict, 120).c_str());
  std::fflush(stdout);
}

// --restart: an uninterrupted run, then the trials against its checkpoints.
int RunRestartSoak(RestartTrialOptions options, int trials, uint64_t seed, const std::string& json_path) {
  char root_template[] = "/tmp/tandem-soak-expected-XXXXXX";
  if (mkdtemp(root_template) == nullptr) {
    std::fprintf(stderr, "tandem-soak: cannot make a directory in /tmp\n");
    return 2;
  }
  options.expected_checkpoints = std::string(root_template) + "/ck";
  std::vector<std::string> command = {options.tandem, "train"};
  command.insert(command.end(), options.train_args.begin(), options.train_args.end());
  std::printf("tandem-soak --restart: %d trials, seed %llu, %d faults each (--max-restarts %d)\n  %s\n\n", trials,
              static_cast<unsigned long long>(seed), options.faults, options.max_restarts,
              absl::StrJoin(command, " ").c_str());
  absl::StatusOr<double> straight = RunUninterrupted(options, options.expected_checkpoints);
  if (!straight.ok()) {
    std::fprintf(stderr, "tandem-soak: %s\n", std::string(straight.status().message()).c_str());
    std::filesystem::remove_all(root_template);
    return 2;
  }
  std::printf("uninterrupted run: %.1f s\n\n", *straight);
  std::printf("%5s  %4s  %8s  %6s  %6s  %6s  %5s  %4s  %-60s  %s\n", "trial", "exit", "restarts", "redone", "lost_s",
              "wall_s", "procs", "dirs", "faults (kind:actor@time, (ckpt): during a checkpoint's write)", "checkpoints");
  std::mt19937_64 random(seed);
  std::vector<RestartTrialResult> results;
  for (int i = 0; i < trials; ++i) {
    results.push_back(RunRestartTrial(options, random));
    PrintRestartTrial(i + 1, results.back());
  }
  std::filesystem::remove_all(root_template);

  int passed = 0;
  int64_t faults = 0;
  int64_t during_checkpoint = 0;
  int64_t restarts = 0;
  double lost = 0;
  double wall = 0;
  for (const RestartTrialResult& trial : results) {
    passed += trial.passed() ? 1 : 0;
    faults += static_cast<int64_t>(trial.faults.size());
    for (const RestartFault& fault : trial.faults) during_checkpoint += fault.during_checkpoint ? 1 : 0;
    restarts += std::max(trial.restarts, 0);
    lost += trial.seconds_lost;
    wall += trial.seconds;
  }
  const double per_fault = faults > 0 ? lost / static_cast<double>(faults) : 0;
  const double wall_per_fault = faults > 0 ? (wall - *straight * trials) / static_cast<double>(faults) : 0;
  std::printf("\n%d of %d trials finished with the uninterrupted run's checkpoints, byte for byte; %lld faults "
              "(%lld during a checkpoint's write), %lld restarts\n",
              passed, trials, static_cast<long long>(faults), static_cast<long long>(during_checkpoint),
              static_cast<long long>(restarts));
  std::printf("per fault: %.2f s lost as the controller counts it (detection, restart, steps redone); %.2f s of wall "
              "time against the uninterrupted run's %.1f s\n",
              per_fault, wall_per_fault, *straight);
  if (!json_path.empty()) {
    nlohmann::json out;
    out["command"] = command;
    out["seed"] = seed;
    out["uninterrupted_s"] = *straight;
    out["trials"] = nlohmann::json::array();
    for (const RestartTrialResult& trial : results) {
      nlohmann::json t;
      t["faults"] = nlohmann::json::array();
      for (const RestartFault& fault : trial.faults) {
        t["faults"].push_back({{"kind", std::string(FaultName(fault.kind))},
                               {"actor", fault.actor},
                               {"at_s", fault.at_s},
                               {"during_checkpoint", fault.during_checkpoint}});
      }
      t["exit_code"] = trial.exit_code;
      t["seconds"] = trial.seconds;
      t["restarts"] = trial.restarts;
      t["steps_redone"] = trial.steps_redone;
      t["seconds_lost"] = trial.seconds_lost;
      t["checkpoints_compared"] = trial.checkpoints;
      t["difference"] = trial.difference;
      t["error"] = trial.error;
      t["leftover_processes"] = trial.leftover_processes;
      t["leftover_directories"] = trial.leftover_directories;
      t["problem"] = trial.problem;
      t["passed"] = trial.passed();
      out["trials"].push_back(std::move(t));
    }
    out["summary"] = {{"passed", passed},          {"trials", trials},
                      {"faults", faults},          {"during_checkpoint", during_checkpoint},
                      {"restarts", restarts},      {"seconds_lost_per_fault", per_fault},
                      {"wall_seconds_per_fault", wall_per_fault}};
    std::ofstream file(json_path);
    file << out.dump(2) << "\n";
    if (!file) {
      std::fprintf(stderr, "tandem-soak: cannot write %s\n", json_path.c_str());
      return 2;
    }
  }
  if (faults == 0) {
    std::fprintf(stderr, "tandem-soak: no fault struck: every run ended before its first fault (a longer run, or a "
                         "smaller --max-delay)\n");
    return 1;
  }
  return passed == trials ? 0 : 1;
}

int Run(int argc, char** argv) {
  CLI::App app{"Fault-injection soak of `tandem train` (local launcher): kill -9 or SIGSTOP a random actor, or "
               "kill -9 the controller, at a random moment; report detection time, error text and leftovers."};
  int trials = 10;
  uint64_t seed = 1;
  std::vector<std::string> fault_names;
  bool restart = false;
  RestartTrialOptions restart_options;
  TrialOptions options;
  options.tandem = OwnDirectory() + "/tandem";
  double max_delay_s = 3;
  double detect_timeout_s = 30;
  std::string json_path;
  std::vector<std::string> train_args;
  app.add_option("--trials", trials, "number of trials")->check(CLI::Range(1, 100000));
  app.add_option("--seed", seed, "seed of the fault kinds' victims and moments");
  app.add_option("--faults", fault_names,
                 "faults to cycle through (default actor-kill,actor-stop,controller-kill); with --restart, the kinds "
                 "drawn from (default actor-kill,actor-stop,actor-drop)")
      ->delimiter(',');
  app.add_flag("--restart", restart,
               "trials of runs with --max-restarts, each struck by several faults, which must end with an "
               "uninterrupted run's checkpoints byte for byte (default run: the README's main job, 200 steps, a "
               "checkpoint every 20)");
  app.add_option("--faults-per-trial", restart_options.faults, "--restart: faults in each run")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--max-restarts", restart_options.max_restarts,
                 "--restart: the runs' --max-restarts (a fault during a restart costs one more)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--during-checkpoint", restart_options.during_checkpoint,
                 "--restart: the share of faults timed to land while a checkpoint is written")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--tandem", options.tandem, "the tandem binary")->check(CLI::ExistingFile);
  app.add_option("--actors", options.actors, "actor processes per run")->check(CLI::Range(1, 64));
  app.add_option("--max-delay", max_delay_s, "latest fault, seconds after the actors appeared")
      ->check(CLI::Range(0.0, 600.0));
  app.add_option("--detect-timeout", detect_timeout_s, "seconds to wait for detection")->check(CLI::Range(1.0, 600.0));
  app.add_option("--json", json_path, "also write every trial and the summary as JSON");
  app.add_option("train_args", train_args, "arguments of `tandem train` (after --); default: an MLP on --actors "
                                           "actors, 1F1B, steps until stopped");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }
  if (fault_names.empty()) {
    fault_names = restart ? std::vector<std::string>{"actor-kill", "actor-stop", "actor-drop"}
                          : std::vector<std::string>{"actor-kill", "actor-stop", "controller-kill"};
  }
  std::vector<Fault> faults;
  for (const std::string& name : fault_names) {
    absl::StatusOr<Fault> fault = ParseFault(name);
    if (!fault.ok()) {
      std::fprintf(stderr, "tandem-soak: %s\n", std::string(fault.status().message()).c_str());
      return 2;
    }
    faults.push_back(*fault);
  }
  if (restart) {
    if (std::find(faults.begin(), faults.end(), Fault::kControllerKill) != faults.end()) {
      std::fprintf(stderr, "tandem-soak: --restart strikes actors only (a controller kill ends the run)\n");
      return 2;
    }
    if (absl::Status status = BecomeSubreaper(); !status.ok()) {
      std::fprintf(stderr, "tandem-soak: %s\n", std::string(status.message()).c_str());
      return 2;
    }
    restart_options.tandem = options.tandem;
    restart_options.actors = options.actors;
    restart_options.kinds = faults;
    restart_options.train_args = train_args.empty() ? DefaultRestartArgs(options.actors) : train_args;
    restart_options.max_delay = absl::Seconds(max_delay_s);
    return RunRestartSoak(restart_options, trials, seed, json_path);
  }
  options.train_args = train_args.empty() ? DefaultTrainArgs(options.actors) : train_args;
  options.max_delay = absl::Seconds(max_delay_s);
  options.detect_timeout = absl::Seconds(detect_timeout_s);
  if (absl::Status status = BecomeSubreaper(); !status.ok()) {
    std::fprintf(stderr, "tandem-soak: %s\n", std::string(status.message()).c_str());
    return 2;
  }

  std::vector<std::string> command = {options.tandem, "train"};
  command.insert(command.end(), options.train_args.begin(), options.train_args.end());
  std::printf("tandem-soak: %d trials, seed %llu, faults %s\n  %s\n\n", trials, static_cast<unsigned long long>(seed),
              absl::StrJoin(fault_names, ",").c_str(), absl::StrJoin(command, " ").c_str());
  PrintHeader();
  std::mt19937_64 random(seed);
  std::vector<TrialResult> results;
  for (int i = 0; i < trials; ++i) {
    results.push_back(RunTrial(options, faults[static_cast<size_t>(i) % faults.size()], random));
    PrintTrial(i + 1, results.back());
  }
  const std::map<Fault, FaultSummary> summary = Summarize(results);
  PrintSummary(summary);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << ToJson(command, seed, results, summary).dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "tandem-soak: cannot write %s\n", json_path.c_str());
      return 2;
    }
  }
  bool clean = true;
  for (const TrialResult& trial : results) {
    if (!trial.detect_s.has_value() || !trial.leftover_processes.empty()) clean = false;
  }
  return clean ? 0 : 1;
}

}  // namespace
}  // namespace tandem::soak

int main(int argc, char** argv) { return tandem::soak::Run(argc, argv); }
