#include "schedules/trace_events.h"

#include "absl/strings/str_cat.h"
#include "schedules/json_text.h"

namespace tandem::schedules {
namespace {

using Json = nlohmann::ordered_json;

// The members every event starts with, in the order viewers' files use.
Json TrackEvent(const char* phase, const std::string& name, int32_t process, int32_t thread) {
  Json event;
  event["ph"] = phase;
  event["name"] = name;
  event["pid"] = process;
  event["tid"] = thread;
  return event;
}

Json Args(const std::vector<TraceArg>& args) {
  Json json = Json::object();
  for (const TraceArg& arg : args) {
    if (const auto* text = std::get_if<std::string>(&arg.value)) {
      json[arg.key] = *text;
    } else {
      json[arg.key] = JsonNumber(std::get<double>(arg.value));
    }
  }
  return json;
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
  Json head;
  head["displayTimeUnit"] = "ms";
  Json& other_data = head["otherData"] = Json::object();
  for (const auto& [key, value] : metadata_) other_data[key] = value;
  head["traceEvents"] = Json::array();
  // Each event is printed as soon as it is built, one per line, inside the
  // empty "traceEvents" array of `head`'s text: a trace of a million events
  // never exists as one DOM (several times the size of its text).
  std::string text = JsonText(head);
  text.resize(text.size() - 2);  // Reopens "[]}" after its '['.
  bool first = true;
  auto emit = [&](const Json& event) {
    text += first ? "\n" : ",\n";
    first = false;
    text += JsonText(event);
  };
  for (const auto& [process, name] : process_names_) {
    Json event = TrackEvent("M", "process_name", process, 0);
    event["args"]["name"] = name;
    emit(event);
    event = TrackEvent("M", "process_sort_index", process, 0);
    event["args"]["sort_index"] = process;
    emit(event);
  }
  for (const auto& [track, name] : thread_names_) {
    Json event = TrackEvent("M", "thread_name", track.first, track.second);
    event["args"]["name"] = name;
    emit(event);
    event = TrackEvent("M", "thread_sort_index", track.first, track.second);
    event["args"]["sort_index"] = track.second;
    emit(event);
  }
  for (const TraceSlice& slice : slices_) {
    Json event = TrackEvent("X", slice.name, slice.process, slice.thread);
    if (!slice.category.empty()) event["cat"] = slice.category;
    event["ts"] = JsonNumber(slice.start_us);
    event["dur"] = JsonNumber(slice.duration_us);
    if (!slice.args.empty()) event["args"] = Args(slice.args);
    emit(event);
  }
  for (size_t i = 0; i < flows_.size(); ++i) {
    const TraceFlow& flow = flows_[i];
    const int64_t id = static_cast<int64_t>(i) + 1;
    Json start = TrackEvent("s", flow.name, flow.from_process, flow.from_thread);
    if (!flow.category.empty()) start["cat"] = flow.category;
    start["id"] = id;
    start["ts"] = JsonNumber(flow.from_us);
    emit(start);
    Json finish = TrackEvent("f", flow.name, flow.to_process, flow.to_thread);
    if (!flow.category.empty()) finish["cat"] = flow.category;
    finish["id"] = id;
    finish["bp"] = "e";
    finish["ts"] = JsonNumber(flow.to_us);
    emit(finish);
  }
  for (const TraceCounter& counter : counters_) {
    Json event = TrackEvent("C", counter.name, counter.process, 0);
    event["ts"] = JsonNumber(counter.time_us);
    event["args"][counter.name] = JsonNumber(counter.value);
    emit(event);
  }
  text += "\n]}\n";
  return text;
}

}  // namespace tandem::schedules
