// Test-only fault injection, all of it through one environment variable,
// TANDEM_FAULT, read here and nowhere else:
//   - a crash point: TANDEM_FAULT=checkpoint-before-manifest kills the
//     process that reaches CrashIfFaultAt("checkpoint-before-manifest");
//   - faults with arguments, parsed by their owner from FaultSetting()
//     (backends/fake/fake_cuda_device.h: fake-cuda-poison:A:N,
//     fake-cuda-die:A:N, fake-cuda-free:A:BYTES), which crash through
//     InjectedCrash();
//   - a fault that happens once in a run however often its process is
//     started again (a restart's tests): actor-crash-once:A:S:FILE kills
//     actor A as it begins step S, and actor-stop-once:A:S:FILE stops it
//     there (SIGSTOP), unless FILE exists; the fault creates FILE first
//     (FaultOnceAtStep).
// Unset (as in every real run), nothing happens. Header-only, for every
// folder.
#ifndef TANDEM_IR_FAULT_POINT_H_
#define TANDEM_IR_FAULT_POINT_H_

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace tandem::ir {

// TANDEM_FAULT's value as this process started ("" when unset).
inline const std::string& FaultSetting() {
  static const std::string* const setting = [] {
    const char* value = std::getenv("TANDEM_FAULT");
    return new std::string(value != nullptr ? value : "");
  }();
  return *setting;
}

// Dies at once, as a crash would (SIGKILL: no handler, no cleanup).
[[noreturn]] inline void InjectedCrash() {
  raise(SIGKILL);
  std::abort();  // not reached
}

// Dies at once when TANDEM_FAULT names `point`.
inline void CrashIfFaultAt(absl::string_view point) {
  if (FaultSetting() == point) InjectedCrash();
}

// actor-crash-once:A:S:FILE and actor-stop-once:A:S:FILE (above): called by
// actor `actor` as it begins step `step`. The first process to create FILE
// takes the fault; later ones (the restarted actors) run on.
inline void FaultOnceAtStep(int32_t actor, int64_t step) {
  const std::vector<std::string> fields = absl::StrSplit(FaultSetting(), absl::MaxSplits(':', 3));
  if (fields.size() != 4 || (fields[0] != "actor-crash-once" && fields[0] != "actor-stop-once")) return;
  int32_t fault_actor = -1;
  int64_t fault_step = -1;
  if (!absl::SimpleAtoi(fields[1], &fault_actor) || !absl::SimpleAtoi(fields[2], &fault_step)) return;
  if (fault_actor != actor || fault_step != step) return;
  const int fd = open(fields[3].c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;  // taken already (or FILE cannot be made: no fault)
  close(fd);
  if (fields[0] == "actor-crash-once") InjectedCrash();
  raise(SIGSTOP);
}

}  // namespace tandem::ir

#endif  // TANDEM_IR_FAULT_POINT_H_
