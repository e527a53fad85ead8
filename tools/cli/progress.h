// How `tandem train` shows its progress: a live status line on a terminal,
// plain lines when the output is piped; and the measured bubble of a step.
#ifndef TANDEM_TOOLS_CLI_PROGRESS_H_
#define TANDEM_TOOLS_CLI_PROGRESS_H_

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tandem::cli {

// Not thread-safe; borrows `out`.
class Progress {
 public:
  Progress(std::ostream& out, bool live) : out_(out), live_(live) {}
  // Shows `line`; `keep` also leaves it in the log.
  void Show(const std::string& line, bool keep) {
    if (live_) {
      out_ << "\r\033[K" << line << (keep ? "\n" : "");
      out_.flush();
    } else if (keep) {
      out_ << line << "\n";
      out_.flush();
    }
  }
  // Erases the live line before something else is printed.
  void Clear() {
    if (live_) out_ << "\r\033[K";
  }

 private:
  std::ostream& out_;
  bool live_;
};

// The fraction of actor-time not spent computing in a step of
// `wall_seconds`: 1 - sum(busy) / (P * wall).
inline double Bubble(const std::vector<int64_t>& busy_ns, double wall_seconds) {
  if (busy_ns.empty() || wall_seconds <= 0) return 0;
  double busy = 0;
  for (int64_t ns : busy_ns) busy += static_cast<double>(ns) * 1e-9;
  return std::max(0.0, 1.0 - busy / (static_cast<double>(busy_ns.size()) * wall_seconds));
}

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_PROGRESS_H_
