#include "rpc/rate_limited_log.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::rpc {

RateLimitedLog::RateLimitedLog(Sink sink, std::string what, int burst, absl::Duration interval, Clock now)
    : sink_(std::move(sink)), what_(std::move(what)), burst_(burst), interval_(interval), now_(std::move(now)) {
  StartInterval(now_());
}

RateLimitedLog::~RateLimitedLog() { Flush(); }

void RateLimitedLog::StartInterval(absl::Time now) {
  interval_start_ = now;
  passed_in_interval_ = 0;
  held_in_interval_ = 0;
}

void RateLimitedLog::Log(absl::string_view line) {
  Tick();
  ++total_;
  if (passed_in_interval_ < burst_) {
    ++passed_in_interval_;
    sink_(line);
    return;
  }
  ++held_in_interval_;
  ++suppressed_;
}

void RateLimitedLog::Tick() {
  if (now_() - interval_start_ >= interval_) Flush();
}

void RateLimitedLog::Flush() {
  const absl::Time now = now_();
  if (held_in_interval_ > 0) {
    sink_(absl::StrCat(what_, ": ", held_in_interval_, " more notices like these in the last ",
                       absl::FormatDuration(now - interval_start_)));
  }
  StartInterval(now);
}

}  // namespace tandem::rpc
