// Whether a GPU test can run, asked without touching CUDA in the test
// process: a process that initialized the CUDA runtime (even through
// cudaGetDeviceCount) cannot use CUDA in the children it forks, and the
// multi-process GPU tests do all their CUDA work in forked children.
#ifndef TANDEM_TESTS_BACKENDS_CUDA_PROBE_IN_CHILD_H_
#define TANDEM_TESTS_BACKENDS_CUDA_PROBE_IN_CHILD_H_

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "backends/cuda/cuda_runtime.h"

namespace tandem::cuda {

// Waits for `pid` until `deadline`, then kills it. Its exit code, or -1.
inline int Reap(pid_t pid, absl::Time deadline) {
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (absl::Now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// ProbeDevices, asked in a forked child so that this process stays free of
// CUDA. Computed once.
inline const DeviceProbe& ProbeInChild() {
  static const DeviceProbe probe = [] {
    DeviceProbe result;
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) {
      result.why = "pipe failed";
      return result;
    }
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      close(pipe_fds[0]);
      const DeviceProbe seen = ProbeDevices();
      const std::string text = absl::StrCat(seen.count, " ", seen.why);
      const ssize_t written = write(pipe_fds[1], text.data(), text.size());
      _exit(written == static_cast<ssize_t>(text.size()) ? 0 : 1);
    }
    close(pipe_fds[1]);
    std::string text;
    char buffer[512];
    const absl::Time deadline = absl::Now() + (absl::Seconds(60));
    while (absl::Now() < deadline) {
      pollfd p{pipe_fds[0], POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = read(pipe_fds[0], buffer, sizeof(buffer));
      if (n <= 0) break;
      text.append(buffer, static_cast<size_t>(n));
    }
    close(pipe_fds[0]);
    Reap(pid, absl::Now() + (absl::Seconds(5)));
    const size_t space = text.find(' ');
    if (space == std::string::npos) {
      result.why = "the probe process did not answer";
      return result;
    }
    result.count = std::atoi(text.substr(0, space).c_str());
    result.why = text.substr(space + 1);
    return result;
  }();
  return probe;
}

}  // namespace tandem::cuda

#endif  // TANDEM_TESTS_BACKENDS_CUDA_PROBE_IN_CHILD_H_
