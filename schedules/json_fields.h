// Reading the fields of one JSON object of a Tandem file (plans, cost
// files), each checked and bounded, with errors that name the file, the
// place in it and the key: "plan file: stage 3: 'actor' = 7 is outside
// [0, 1]". The one home of those checks.
#ifndef TANDEM_SCHEDULES_JSON_FIELDS_H_
#define TANDEM_SCHEDULES_JSON_FIELDS_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tandem::schedules {

// The largest byte count a field may hold (1 PiB): far above any device, far
// below where sums of a few thousand of them could overflow.
inline constexpr int64_t kMaxFieldBytes = int64_t{1} << 50;
// The longest time a field may hold, in seconds (one day).
inline constexpr double kMaxFieldSeconds = 86400.0;
// The longest string a field may hold.
inline constexpr size_t kMaxFieldStringBytes = 256;

// InvalidArgument "FILE: WHERE: WHAT": a problem at `where` ("the file",
// "stage 3") of `file` ("plan file").
absl::Status FileProblem(absl::string_view file, absl::string_view where, absl::string_view what);

// The fields of `object` (which must outlive this), at `where` ("the file",
// "stage 3") of `file` ("plan file").
class JsonFields {
 public:
  JsonFields(const nlohmann::json& object, absl::string_view file, std::string where)
      : object_(object), file_(file), where_(std::move(where)) {}

  // FileProblem at this object.
  absl::Status Problem(absl::string_view what) const { return FileProblem(file_, where_, what); }
  // A problem naming the first key not among `known` (a misspelt field, read
  // as absent otherwise).
  absl::Status OnlyKnownKeys(std::initializer_list<absl::string_view> known) const;
  // A string of at most kMaxFieldStringBytes.
  absl::Status String(const char* key, std::string& out) const;
  // An integer in [low, high].
  absl::Status Integer(const char* key, int64_t low, int64_t high, int64_t& out) const;
  template <typename T>
  absl::Status Integer(const char* key, int64_t low, int64_t high, T& out) const {
    int64_t value = 0;
    absl::Status status = Integer(key, low, high, value);
    if (status.ok()) out = static_cast<T>(value);
    return status;
  }
  // A byte count in [0, kMaxFieldBytes].
  absl::Status ByteCount(const char* key, int64_t& out) const;
  // A time in [0, kMaxFieldSeconds] seconds.
  absl::Status Seconds(const char* key, double& out) const;

 private:
  const nlohmann::json& object_;
  const absl::string_view file_;
  const std::string where_;
};

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_JSON_FIELDS_H_
