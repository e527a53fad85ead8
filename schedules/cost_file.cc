#include "schedules/cost_file.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "schedules/json_text.h"
#include "schedules/limits.h"
#include "schedules/versioned_json.h"

namespace tandem::schedules {
namespace {

using Json = nlohmann::json;

// The largest byte count a field may hold (1 PiB): far above any device, far
// below where sums of a few thousand of them could overflow.
constexpr int64_t kMaxBytes = int64_t{1} << 50;
// The longest time a field may hold (one day per microbatch).
constexpr double kMaxSeconds = 86400.0;
constexpr size_t kMaxNameBytes = 256;

absl::Status Problem(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("cost file: ", where, ": ", what));
}

absl::Status ReadString(const Json& object, const char* key, absl::string_view where, std::string& out) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return Problem(where, absl::StrCat("'", key, "' must be a string"));
  const std::string& value = it->get_ref<const std::string&>();
  if (value.size() > kMaxNameBytes) {
    return Problem(where, absl::StrCat("'", key, "' is longer than ", kMaxNameBytes, " bytes"));
  }
  out = value;
  return absl::OkStatus();
}

absl::Status ReadSeconds(const Json& object, const char* key, absl::string_view where, double& out) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return Problem(where, absl::StrCat("'", key, "' must be a number"));
  const double value = it->get<double>();
  if (!(value >= 0.0 && value <= kMaxSeconds)) {
    return Problem(where, absl::StrCat("'", key, "' = ", value, " is not a time in [0, ", kMaxSeconds, "] seconds"));
  }
  out = value;
  return absl::OkStatus();
}

absl::Status ReadBytes(const Json& object, const char* key, absl::string_view where, int64_t& out) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer()) {
    return Problem(where, absl::StrCat("'", key, "' must be an integer"));
  }
  const bool negative = it->is_number_integer() && !it->is_number_unsigned() && it->get<int64_t>() < 0;
  if (negative || it->get<uint64_t>() > static_cast<uint64_t>(kMaxBytes)) {
    return Problem(where, absl::StrCat("'", key, "' is not a byte count in [0, 2^50]"));
  }
  out = it->get<int64_t>();
  return absl::OkStatus();
}

absl::StatusOr<SegmentCost> ReadSegment(const Json& json, int64_t index) {
  const std::string where = absl::StrCat("segment ", index);
  if (!json.is_object()) return Problem(where, "must be an object");
  SegmentCost segment;
  for (absl::Status status : {
           ReadString(json, "name", where, segment.name),
           ReadSeconds(json, "forward_s", where, segment.forward_s),
           ReadSeconds(json, "backward_s", where, segment.backward_s),
           ReadSeconds(json, "backward_input_s", where, segment.backward_input_s),
           ReadSeconds(json, "backward_weight_s", where, segment.backward_weight_s),
           ReadSeconds(json, "recompute_s", where, segment.recompute_s),
           ReadBytes(json, "activation_bytes", where, segment.activation_bytes),
           ReadBytes(json, "stash_bytes", where, segment.stash_bytes),
           ReadBytes(json, "remat_stash_bytes", where, segment.remat_stash_bytes),
           ReadBytes(json, "parameter_bytes", where, segment.parameter_bytes),
           ReadBytes(json, "optimizer_bytes", where, segment.optimizer_bytes),
           ReadBytes(json, "working_bytes", where, segment.working_bytes),
       }) {
    if (!status.ok()) return status;
  }
  return segment;
}

}  // namespace

absl::StatusOr<CostFile> ParseCostFile(absl::string_view text) {
  absl::StatusOr<Json> parsed = ParseVersionedJson(
      text, {.what = "cost file",
             .noun = "a Tandem cost file",
             .format = "tandem-costs",
             .version = kCostFileVersion,
             .max_bytes = kMaxCostFileBytes});
  if (!parsed.ok()) return parsed.status();
  const Json& json = *parsed;
  CostFile costs;
  if (absl::Status status = ReadString(json, "model", "the file", costs.model); !status.ok()) return status;
  if (absl::Status status = ReadString(json, "device", "the file", costs.device); !status.ok()) return status;
  if (json.contains("microbatch_size")) {
    if (absl::Status status = ReadBytes(json, "microbatch_size", "the file", costs.microbatch_size); !status.ok()) {
      return status;
    }
    if (costs.microbatch_size < 1) return Problem("the file", "'microbatch_size' must be at least 1");
  }
  auto segments = json.find("segments");
  if (segments == json.end() || !segments->is_array()) return Problem("the file", "'segments' must be an array");
  if (segments->empty() || segments->size() > static_cast<size_t>(kMaxSegments)) {
    return Problem("the file", absl::StrCat("has ", segments->size(), " segments; it needs 1 to ", kMaxSegments));
  }
  costs.segments.reserve(segments->size());
  for (size_t i = 0; i < segments->size(); ++i) {
    absl::StatusOr<SegmentCost> segment = ReadSegment((*segments)[i], static_cast<int64_t>(i));
    if (!segment.ok()) return segment.status();
    costs.segments.push_back(*std::move(segment));
  }
  if (auto graph = json.find("segment_graph"); graph != json.end()) {
    if (!graph->is_string()) return Problem("the file", "'segment_graph' must be a string of edges, e.g. \"0->2 1->2\"");
    absl::StatusOr<std::vector<ir::StageEdge>> edges = ir::ParseStoredStageEdges(
        graph->get_ref<const std::string&>(), static_cast<int32_t>(costs.segments.size()), kMaxStageEdges);
    if (!edges.ok()) return Problem("segment_graph", edges.status().message());
    costs.segment_edges = *std::move(edges);
  }
  return costs;
}

std::string FormatCostFile(const CostFile& costs) {
  nlohmann::ordered_json json;
  json["format"] = "tandem-costs";
  json["version"] = kCostFileVersion;
  json["model"] = costs.model;
  json["device"] = costs.device;
  json["microbatch_size"] = costs.microbatch_size;
  nlohmann::ordered_json segments = nlohmann::ordered_json::array();
  for (const SegmentCost& segment : costs.segments) {
    nlohmann::ordered_json entry;
    entry["name"] = segment.name;
    entry["forward_s"] = JsonNumber(segment.forward_s);
    entry["backward_s"] = JsonNumber(segment.backward_s);
    entry["backward_input_s"] = JsonNumber(segment.backward_input_s);
    entry["backward_weight_s"] = JsonNumber(segment.backward_weight_s);
    entry["recompute_s"] = JsonNumber(segment.recompute_s);
    entry["activation_bytes"] = segment.activation_bytes;
    entry["stash_bytes"] = segment.stash_bytes;
    entry["remat_stash_bytes"] = segment.remat_stash_bytes;
    entry["parameter_bytes"] = segment.parameter_bytes;
    entry["optimizer_bytes"] = segment.optimizer_bytes;
    entry["working_bytes"] = segment.working_bytes;
    segments.push_back(std::move(entry));
  }
  json["segments"] = std::move(segments);
  if (!costs.segment_edges.empty()) json["segment_graph"] = ir::FormatStageEdges(costs.segment_edges);
  return JsonText(json) + "\n";
}

}  // namespace tandem::schedules
