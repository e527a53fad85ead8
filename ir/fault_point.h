// Test-only fault injection, all of it through one environment variable,
// TANDEM_FAULT, read here and nowhere else:
//   - a crash point: TANDEM_FAULT=checkpoint-before-manifest kills the
//     process that reaches CrashIfFaultAt("checkpoint-before-manifest");
//   - faults with arguments, parsed by their owner from FaultSetting()
//     (backends/fake/fake_cuda_device.h: fake-cuda-poison:A:N,
//     fake-cuda-die:A:N, fake-cuda-free:A:BYTES), which crash through
//     InjectedCrash().
// Unset (as in every real run), nothing happens. Header-only, for every
// folder.
#ifndef TANDEM_IR_FAULT_POINT_H_
#define TANDEM_IR_FAULT_POINT_H_

#include <signal.h>

#include <cstdlib>
#include <string>

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

}  // namespace tandem::ir

#endif  // TANDEM_IR_FAULT_POINT_H_
