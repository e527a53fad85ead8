// `tandem-soak`: runs N fault-injection trials against `tandem train` with
// the local launcher (tools/soak/trial.h says what one trial does) and
// reports, per trial and per fault, how fast the failure was detected, what
// the controller said and what was left behind. A measuring program, not a
// test: it prints its findings and exits 0 unless it could not run (2) or a
// trial left processes behind or went undetected (1).
//
//   tandem-soak --trials 100 --seed 1 [--faults actor-kill,actor-stop,controller-kill]
//               [--json FILE] [-- TRAIN_ARGS...]
#include <unistd.h>

#include <algorithm>
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

int Run(int argc, char** argv) {
  CLI::App app{"Fault-injection soak of `tandem train` (local launcher): kill -9 or SIGSTOP a random actor, or "
               "kill -9 the controller, at a random moment; report detection time, error text and leftovers."};
  int trials = 10;
  uint64_t seed = 1;
  std::vector<std::string> fault_names = {"actor-kill", "actor-stop", "controller-kill"};
  TrialOptions options;
  options.tandem = OwnDirectory() + "/tandem";
  double max_delay_s = 3;
  double detect_timeout_s = 30;
  std::string json_path;
  std::vector<std::string> train_args;
  app.add_option("--trials", trials, "number of trials")->check(CLI::Range(1, 100000));
  app.add_option("--seed", seed, "seed of the fault kinds' victims and moments");
  app.add_option("--faults", fault_names, "faults to cycle through")->delimiter(',');
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
  std::vector<Fault> faults;
  for (const std::string& name : fault_names) {
    absl::StatusOr<Fault> fault = ParseFault(name);
    if (!fault.ok()) {
      std::fprintf(stderr, "tandem-soak: %s\n", std::string(fault.status().message()).c_str());
      return 2;
    }
    faults.push_back(*fault);
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
