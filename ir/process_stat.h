// What /proc/PID/stat says about a process (proc(5)): its command name, its
// state letter, its parent and process group. The one reader of that file:
// launchers asking whether an actor is stopped, the fake device whether an
// exporter has exited, the soak tool which processes a trial left.
// Header-only, so every folder may use it.
#ifndef TANDEM_IR_PROCESS_STAT_H_
#define TANDEM_IR_PROCESS_STAT_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "ir/read_file.h"

namespace tandem::ir {

struct ProcessStat {
  std::string name;  // the command, as in "(tandem-actor)"
  char state = '?';  // R, S, D, T (stopped), t (traced), Z (zombie), X (dead), ...
  pid_t parent = 0;
  pid_t group = 0;

  // Stopped by a signal (SIGSTOP, SIGTSTP) or a tracer.
  bool stopped() const { return state == 'T' || state == 't'; }
  // Exited: a zombie not yet reaped, or dead.
  bool exited() const { return state == 'Z' || state == 'X'; }
};

// "PID (NAME) STATE PPID PGRP ...": NAME may hold spaces and parentheses,
// so the fields after it start after the LAST ')'. nullopt for text that
// does not read so.
inline std::optional<ProcessStat> ParseProcessStat(absl::string_view text) {
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  if (open == absl::string_view::npos || close == absl::string_view::npos || close < open ||
      close + 2 >= text.size()) {
    return std::nullopt;
  }
  const std::vector<absl::string_view> fields = absl::StrSplit(text.substr(close + 2), ' ');
  ProcessStat stat;
  stat.name = std::string(text.substr(open + 1, close - open - 1));
  if (fields.size() < 3 || fields[0].size() != 1 || !absl::SimpleAtoi(fields[1], &stat.parent) ||
      !absl::SimpleAtoi(fields[2], &stat.group)) {
    return std::nullopt;
  }
  stat.state = fields[0][0];
  return stat;
}

// Process `pid`'s stat; nullopt once it is gone (or /proc cannot say).
inline std::optional<ProcessStat> ReadProcessStat(pid_t pid) {
  const absl::StatusOr<std::string> text =
      ReadFileUpTo(absl::StrCat("/proc/", pid, "/stat"), 4096, absl::StrCat("/proc/", pid, "/stat"));
  if (!text.ok()) return std::nullopt;
  return ParseProcessStat(*text);
}

}  // namespace tandem::ir

#endif  // TANDEM_IR_PROCESS_STAT_H_
