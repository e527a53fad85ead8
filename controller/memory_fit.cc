#include "controller/memory_fit.h"

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "ir/host_tensor.h"

namespace tandem::controller {

absl::Status CheckMemoryFit(const std::vector<ir::ActorProgram>& programs, const std::vector<MemoryPool>& pools) {
  for (const MemoryPool& pool : pools) {
    int64_t total = 0;
    int32_t largest = -1;
    for (int32_t actor : pool.actors) {
      if (actor < 0 || actor >= static_cast<int32_t>(programs.size())) continue;
      const int64_t peak = programs[actor].static_peak_bytes;
      total += peak;
      if (largest < 0 || peak > programs[largest].static_peak_bytes) largest = actor;
    }
    if (largest < 0 || total <= pool.free_bytes) continue;
    const int64_t peak = programs[largest].static_peak_bytes;
    return absl::ResourceExhaustedError(absl::StrCat(
        "the step does not fit: its ", pool.actors.size(), pool.actors.size() == 1 ? " actor needs " : " actors need ",
        ir::FormatBytes(total), " at their static peaks (state included), and ", pool.name, " is ",
        ir::FormatBytes(pool.free_bytes), "; actor ", largest, " needs the most, ", ir::FormatBytes(peak),
        ". To fit, use more actors (each holds less of the model), fewer microbatches in flight (--microbatches, "
        "or a schedule that keeps fewer: 1f1b over gpipe), --remat stage (keep no activations), or let "
        "`tandem plan --memory-cap ", pool.free_bytes / std::max<int64_t>(1, static_cast<int64_t>(pool.actors.size())),
        "` (bytes per actor) choose a plan"));
  }
  return absl::OkStatus();
}

absl::Status CheckWholeModelFits(const ir::TrainStep& step, const MemoryPool& pool, WholeModel use) {
  int64_t parameter_bytes = 0;
  int64_t state_bytes = 0;
  for (const ir::StateSpec& spec : step.state) {
    state_bytes += spec.type.num_bytes();
    if (spec.role == ir::StateRole::kParameter) parameter_bytes += spec.type.num_bytes();
  }
  const int64_t gradient_bytes = step.forward_only() ? 0 : parameter_bytes;
  switch (use) {
    case WholeModel::kTraining: {
      const int64_t needed = state_bytes + 2 * gradient_bytes;
      if (needed <= pool.free_bytes) return absl::OkStatus();
      return absl::ResourceExhaustedError(absl::StrCat(
          "the reference interpreter holds the whole model in this process: its state (",
          ir::FormatBytes(state_bytes), ") and two sums of its gradients (", ir::FormatBytes(2 * gradient_bytes),
          ") need at least ", ir::FormatBytes(needed), ", more than ", pool.name, " (",
          ir::FormatBytes(pool.free_bytes),
          "). Train it pipelined over actors (--launcher local), whose memory is checked per actor, or on a larger "
          "machine"));
    }
    case WholeModel::kState:
    case WholeModel::kParameters: {
      const bool state = use == WholeModel::kState;
      const int64_t needed = state ? state_bytes : parameter_bytes;
      if (needed <= pool.free_bytes) return absl::OkStatus();
      return absl::ResourceExhaustedError(absl::StrCat(
          "this process would hold the whole model's ", state ? "state (parameters and optimizer slots)" : "parameters",
          ": ", ir::FormatBytes(needed), ", more than ", pool.name, " (", ir::FormatBytes(pool.free_bytes),
          "); a model of this size runs only pipelined over actors, each holding its stages"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckWholeModelFitsThisHost(const ir::TrainStep& step, WholeModel use) {
  const std::optional<int64_t> available = HostAvailableBytes();
  if (!available.has_value()) return absl::OkStatus();
  return CheckWholeModelFits(step, {.name = "this host's available memory (MemAvailable)", .free_bytes = *available},
                             use);
}

namespace {

// The "Key:   N kB" line of a /proc file, in bytes.
std::optional<int64_t> ProcKilobytes(const char* path, absl::string_view key) {
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, key) || !absl::ConsumePrefix(&rest, ":")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    if (!absl::ConsumeSuffix(&rest, "kB")) return std::nullopt;
    int64_t kilobytes = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kilobytes)) return std::nullopt;
    return kilobytes * 1024;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> HostAvailableBytes() { return ProcKilobytes("/proc/meminfo", "MemAvailable"); }

std::optional<int64_t> PeakResidentBytes() { return ProcKilobytes("/proc/self/status", "VmHWM"); }

bool ResetPeakResidentBytes() {
  // Linux 4.0 and later: "5" resets the high-water mark to the current RSS.
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

}  // namespace tandem::controller
