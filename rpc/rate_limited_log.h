// RateLimitedLog: a log sink for notices a peer can cause at will (refused
// registrations and data-plane connections, malformed hellos, dropped
// connections), so that 2,000 of them make a handful of lines instead of
// 2,000. Both planes use it: the controller's launcher for its control
// socket, each actor's TCP data plane for its listener.
//
// Each interval passes its first `burst` lines through and holds back the
// rest, counting them; the first Log() or Tick() after the interval ends
// writes one summary line with the count ("control plane: 1995 more notices
// like these in the last 10s"), and so does Flush() (and the destructor).
// Nothing is counted twice and nothing is lost from the count.
//
// Owned by whoever owns the sink's source (the launcher's event loop, a
// transport's accepting thread); not thread-safe: one thread calls it.
#ifndef TANDEM_RPC_RATE_LIMITED_LOG_H_
#define TANDEM_RPC_RATE_LIMITED_LOG_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tandem::rpc {

class RateLimitedLog {
 public:
  using Sink = std::function<void(absl::string_view line)>;
  using Clock = std::function<absl::Time()>;

  // `what` names the notices in the summary line ("control plane").
  RateLimitedLog(Sink sink, std::string what, int burst = 5, absl::Duration interval = absl::Seconds(10),
                 Clock now = absl::Now);
  RateLimitedLog(const RateLimitedLog&) = delete;
  RateLimitedLog& operator=(const RateLimitedLog&) = delete;
  ~RateLimitedLog();

  void Log(absl::string_view line);
  // Ends the interval if its time is up (call it now and then, e.g. from a
  // heartbeat, so that the summary comes without a next notice).
  void Tick();
  // Writes the summary of what is held back now, and starts a new interval.
  void Flush();

  // Every line given to Log(), and those of them held back.
  int64_t total() const { return total_; }
  int64_t suppressed() const { return suppressed_; }

 private:
  void StartInterval(absl::Time now);

  Sink sink_;
  std::string what_;
  int burst_;
  absl::Duration interval_;
  Clock now_;
  absl::Time interval_start_;
  int passed_in_interval_ = 0;
  int64_t held_in_interval_ = 0;
  int64_t total_ = 0;
  int64_t suppressed_ = 0;
};

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_RATE_LIMITED_LOG_H_
