// `tandem profile`: measures an example model's segments (every stage of
// the traced model is one; --cut-every-layer makes every block one) and
// writes the cost file the planner reads (schedules/cost_file.h).
#include <fstream>
#include <memory>
#include <ostream>
#include <string>

#include "absl/strings/str_format.h"
#include "backends/cpu/kernels.h"
#include "controller/profile.h"
#include "ir/device_spec.h"
#include "tools/cli/commands.h"
#include "tools/cli/model_options.h"
#include "tools/cli/pipeline_options.h"
#include "tools/cli/plan_options.h"
#include "tools/cli/threads_launcher.h"

namespace tandem::cli {
namespace {

struct ProfileCommandOptions {
  examples::ExampleJobOptions model;
  bool cut_every_layer = false;
  int64_t steps = 3;
  std::string device = "cpu";
  std::string out;
};

int RunProfile(const CLI::App& command, ProfileCommandOptions& options, CommandStreams& streams) {
  if (options.cut_every_layer) {
    if (absl::Status s = CutEveryLayer(options.model); !s.ok()) return UsageError(streams.err, command, std::string(s.message()));
  }
  absl::StatusOr<ir::DeviceSpec> device = ir::ParseDeviceSpec(options.device);
  if (!device.ok()) return UsageError(streams.err, command, absl::StrCat("--device: ", device.status().message()));
  absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(options.model);
  if (!job.ok()) return Failure(streams.err, command, job.status());
  cpu::SetBlasThreads(1);
  controller::ProfileOptions profile{.steps = static_cast<int32_t>(options.steps),
                                     .model = job->description,
                                     .device = ir::DeviceSpecName(*device),
                                     .microbatch_size = job->microbatch_size};
  absl::StatusOr<schedules::CostFile> costs = controller::ProfileSegments(
      job->step, std::make_unique<ThreadsLauncher>(absl::Seconds(60), *device),
      [&](int64_t index) { return job->train_batch(static_cast<uint64_t>(index)); }, profile);
  if (!costs.ok()) return Failure(streams.err, command, costs.status());

  streams.out << "# " << job->description << "; " << costs->segments.size() << " segments on "
              << profile.device << ", medians of " << options.steps << " steps\n";
  streams.out << absl::StrFormat("%-10s %9s %9s %9s %12s %12s %12s %12s %12s\n", "segment", "F ms", "I ms", "W ms",
                                 "activation", "stash", "remat stash", "state", "working");
  for (const schedules::SegmentCost& s : costs->segments) {
    streams.out << absl::StrFormat("%-10s %9.3f %9.3f %9.3f %12d %12d %12d %12d %12d\n", s.name, s.forward_s * 1e3,
                                   s.backward_input_s * 1e3, s.backward_weight_s * 1e3, s.activation_bytes,
                                   s.stash_bytes, s.remat_stash_bytes, s.parameter_bytes + s.optimizer_bytes,
                                   s.working_bytes);
  }
  if (!options.out.empty()) {
    std::ofstream file(options.out, std::ios::binary | std::ios::trunc);
    file << schedules::FormatCostFile(*costs);
    file.close();
    if (!file) {
      return Failure(streams.err, command, absl::UnavailableError(absl::StrCat("cannot write ", options.out)));
    }
    streams.out << "wrote " << options.out << "\n";
  }
  return 0;
}

}  // namespace

void AddProfileCommand(CommandLine& command_line) {
  CLI::App* profile = command_line.Add(
      command_line.root(), "profile", "measure an example model's segments and write the planner's cost file",
      "[--model gpt|mlp|two-tower] [--layers L] [--stages S | --cut-every-layer] [--microbatches M] [--steps N] "
      "[--device cpu|cuda[:N]] [--out FILE]",
      "Runs every segment (a stage of the traced model; with --cut-every-layer, every block) on one actor with "
      "a split backward and prints, per segment, the medians of its F, I and W times and its bytes: the "
      "activation it hands on, what its backward keeps (with and without rematerialisation), its parameters "
      "and optimizer state, and its working set. --out writes them as a cost file (JSON) for `tandem plan`.");
  auto options = std::make_shared<ProfileCommandOptions>();
  AddModelOptions(*profile, options->model);
  profile->add_flag("--cut-every-layer", options->cut_every_layer, "every layer is a segment (a two-tower's towers and head too)");
  AddIntegerOption(*profile, "--steps", options->steps, "measured steps, after one warm-up step")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  profile->add_option("--device", options->device, "where the segments compute: cpu, cuda, cuda:N (+tf32 or +bf16)")
      ->capture_default_str();
  profile->add_option("--out", options->out, "write the cost file (JSON) here");
  command_line.OnRun(profile, [profile, options, &streams = command_line.streams()] {
    return RunProfile(*profile, *options, streams);
  });
}

}  // namespace tandem::cli
