#include "schedules/cost_file.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "schedules/json_fields.h"
#include "schedules/json_text.h"
#include "schedules/limits.h"
#include "schedules/versioned_json.h"

namespace tandem::schedules {
namespace {

using Json = nlohmann::json;

absl::StatusOr<SegmentCost> ReadSegment(const Json& json, int64_t index) {
  const JsonFields fields(json, "cost file", absl::StrCat("segment ", index));
  if (!json.is_object()) return fields.Problem("must be an object");
  SegmentCost segment;
  for (absl::Status status : {
           fields.String("name", segment.name),
           fields.Seconds("forward_s", segment.forward_s),
           fields.Seconds("backward_s", segment.backward_s),
           fields.Seconds("backward_input_s", segment.backward_input_s),
           fields.Seconds("backward_weight_s", segment.backward_weight_s),
           fields.Seconds("recompute_s", segment.recompute_s),
           fields.ByteCount("activation_bytes", segment.activation_bytes),
           fields.ByteCount("stash_bytes", segment.stash_bytes),
           fields.ByteCount("remat_stash_bytes", segment.remat_stash_bytes),
           fields.ByteCount("parameter_bytes", segment.parameter_bytes),
           fields.ByteCount("optimizer_bytes", segment.optimizer_bytes),
           fields.ByteCount("working_bytes", segment.working_bytes),
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
  const JsonFields file(json, "cost file", "the file");
  CostFile costs;
  if (absl::Status status = file.String("model", costs.model); !status.ok()) return status;
  if (absl::Status status = file.String("device", costs.device); !status.ok()) return status;
  if (json.contains("microbatch_size")) {
    if (absl::Status status = file.ByteCount("microbatch_size", costs.microbatch_size); !status.ok()) return status;
    if (costs.microbatch_size < 1) return file.Problem("'microbatch_size' must be at least 1");
  }
  auto segments = json.find("segments");
  if (segments == json.end() || !segments->is_array()) return file.Problem("'segments' must be an array");
  if (segments->empty() || segments->size() > static_cast<size_t>(kMaxSegments)) {
    return file.Problem(absl::StrCat("has ", segments->size(), " segments; it needs 1 to ", kMaxSegments));
  }
  costs.segments.reserve(segments->size());
  for (size_t i = 0; i < segments->size(); ++i) {
    absl::StatusOr<SegmentCost> segment = ReadSegment((*segments)[i], static_cast<int64_t>(i));
    if (!segment.ok()) return segment.status();
    costs.segments.push_back(*std::move(segment));
  }
  if (auto graph = json.find("segment_graph"); graph != json.end()) {
    if (!graph->is_string()) return file.Problem("'segment_graph' must be a string of edges, e.g. \"0->2 1->2\"");
    absl::StatusOr<std::vector<ir::StageEdge>> edges = ir::ParseStoredStageEdges(
        graph->get_ref<const std::string&>(), static_cast<int32_t>(costs.segments.size()), kMaxStageEdges);
    if (!edges.ok()) return FileProblem("cost file", "segment_graph", edges.status().message());
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
