#include "schedules/trace_events.h"

#include "absl/strings/str_cat.h"
#include "schedules/json_writer.h"

namespace tandem::schedules {
namespace {

void WriteArgs(JsonWriter& json, const std::vector<TraceArg>& args) {
  json.Key("args").BeginObject();
  for (const TraceArg& arg : args) {
    json.Key(arg.key);
    if (const auto* text = std::get_if<std::string>(&arg.value)) {
      json.String(*text);
    } else {
      json.Number(std::get<double>(arg.value));
    }
  }
  json.EndObject();
}

void WriteTrackHeader(JsonWriter& json, const char* phase, const std::string& name,
                      int32_t process, int32_t thread) {
  json.NewLine().BeginObject();
  json.Key("ph").String(phase);
  json.Key("name").String(name);
  json.Key("pid").Int(process);
  json.Key("tid").Int(thread);
}

}  // namespace

void TraceBuilder::NameProcess(int32_t process, std::string name) {
  process_names_[process] = std::move(name);
}

void TraceBuilder::NameThread(int32_t process, int32_t thread, std::string name) {
  thread_names_[{process, thread}] = std::move(name);
}

void TraceBuilder::NameActor(int32_t actor) {
  NameProcess(actor, absl::StrCat("actor ", actor));
  NameThread(actor, static_cast<int32_t>(TraceTrack::kCompute), "compute");
  NameThread(actor, static_cast<int32_t>(TraceTrack::kSend), "send");
  NameThread(actor, static_cast<int32_t>(TraceTrack::kRecv), "recv");
}

void TraceBuilder::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

int64_t TraceBuilder::AddFlow(TraceFlow flow) {
  flows_.push_back(std::move(flow));
  return static_cast<int64_t>(flows_.size());
}

std::string TraceBuilder::ToJson() const {
  JsonWriter json;
  json.BeginObject();
  json.Key("displayTimeUnit").String("ms");
  json.Key("otherData").BeginObject();
  for (const auto& [key, value] : metadata_) json.Key(key).String(value);
  json.EndObject();
  json.Key("traceEvents").BeginArray();
  for (const auto& [process, name] : process_names_) {
    WriteTrackHeader(json, "M", "process_name", process, 0);
    json.Key("args").BeginObject().Key("name").String(name).EndObject();
    json.EndObject();
    WriteTrackHeader(json, "M", "process_sort_index", process, 0);
    json.Key("args").BeginObject().Key("sort_index").Int(process).EndObject();
    json.EndObject();
  }
  for (const auto& [track, name] : thread_names_) {
    WriteTrackHeader(json, "M", "thread_name", track.first, track.second);
    json.Key("args").BeginObject().Key("name").String(name).EndObject();
    json.EndObject();
    WriteTrackHeader(json, "M", "thread_sort_index", track.first, track.second);
    json.Key("args").BeginObject().Key("sort_index").Int(track.second).EndObject();
    json.EndObject();
  }
  for (const TraceSlice& slice : slices_) {
    WriteTrackHeader(json, "X", slice.name, slice.process, slice.thread);
    if (!slice.category.empty()) json.Key("cat").String(slice.category);
    json.Key("ts").Number(slice.start_us);
    json.Key("dur").Number(slice.duration_us);
    if (!slice.args.empty()) WriteArgs(json, slice.args);
    json.EndObject();
  }
  for (size_t i = 0; i < flows_.size(); ++i) {
    const TraceFlow& flow = flows_[i];
    const int64_t id = static_cast<int64_t>(i) + 1;
    WriteTrackHeader(json, "s", flow.name, flow.from_process, flow.from_thread);
    if (!flow.category.empty()) json.Key("cat").String(flow.category);
    json.Key("id").Int(id);
    json.Key("ts").Number(flow.from_us);
    json.EndObject();
    WriteTrackHeader(json, "f", flow.name, flow.to_process, flow.to_thread);
    if (!flow.category.empty()) json.Key("cat").String(flow.category);
    json.Key("id").Int(id);
    json.Key("bp").String("e");
    json.Key("ts").Number(flow.to_us);
    json.EndObject();
  }
  for (const TraceCounter& counter : counters_) {
    WriteTrackHeader(json, "C", counter.name, counter.process, 0);
    json.Key("ts").Number(counter.time_us);
    json.Key("args").BeginObject().Key(counter.name).Number(counter.value).EndObject();
    json.EndObject();
  }
  json.NewLine().EndArray();
  json.EndObject().NewLine();
  return json.Take();
}

}  // namespace tandem::schedules
