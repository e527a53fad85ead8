// A builder of Chrome / Perfetto trace files ("traceEvents" JSON).
//
// Generic timed events on (process, thread) tracks, flows between them and
// counters, written as complete ("X"), flow ("s"/"f", bound to the enclosing
// slice), counter ("C") and metadata ("M") events. Tandem's convention, used
// both for simulated schedules (drawing.h) and for traces the runtime
// measures, so that plan and reality open side by side: process = actor,
// thread = TraceTrack, times in microseconds. Not thread-safe; owns its events.
#ifndef TANDEM_SCHEDULES_TRACE_EVENTS_H_
#define TANDEM_SCHEDULES_TRACE_EVENTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tandem::schedules {

// The threads of an actor's process in a Tandem trace.
enum class TraceTrack : int32_t {
  kCompute = 0,
  kSend = 1,
  kRecv = 2,
  kReduce = 3,  // Gradient reductions across data-parallel replicas.
  kFill = 4,    // A fill job's pieces in the pipeline's bubbles (controller/fill.h).
  kStep = 5,    // A measured step's work outside its instructions (inputs, settling).
};

struct TraceArg {
  std::string key;
  std::variant<std::string, double> value;
};

// A span of time on one track ("X" event).
struct TraceSlice {
  int32_t process = 0;
  int32_t thread = 0;
  std::string name;
  std::string category;
  double start_us = 0.0;
  double duration_us = 0.0;
  std::vector<TraceArg> args;
};

// An arrow from a point inside a slice on one track to a point inside a slice
// on another (a transfer from its send to its receive).
struct TraceFlow {
  std::string name;
  std::string category;
  int32_t from_process = 0;
  int32_t from_thread = 0;
  double from_us = 0.0;
  int32_t to_process = 0;
  int32_t to_thread = 0;
  double to_us = 0.0;
};

// One sample of a per-process counter track ("C" event).
struct TraceCounter {
  int32_t process = 0;
  std::string name;
  double time_us = 0.0;
  double value = 0.0;
};

class TraceBuilder {
 public:
  // Names a process; processes sort by id in the viewer.
  void NameProcess(int32_t process, std::string name);
  void NameThread(int32_t process, int32_t thread, std::string name);
  // Names Tandem's tracks ("compute", "send", "recv") and the process
  // "actor N" for `actor`.
  void NameActor(int32_t actor);
  // A top-level "otherData" entry, e.g. the time unit.
  void SetMetadata(std::string key, std::string value);

  void AddSlice(TraceSlice slice) { slices_.push_back(std::move(slice)); }
  // Returns the id shared by the flow's start and finish events.
  int64_t AddFlow(TraceFlow flow);
  void AddCounter(TraceCounter counter) { counters_.push_back(std::move(counter)); }

  const std::vector<TraceSlice>& slices() const { return slices_; }
  const std::vector<TraceFlow>& flows() const { return flows_; }

  // The whole trace, one event per line.
  std::string ToJson() const;

 private:
  std::map<int32_t, std::string> process_names_;
  std::map<std::pair<int32_t, int32_t>, std::string> thread_names_;
  std::map<std::string, std::string> metadata_;
  std::vector<TraceSlice> slices_;
  std::vector<TraceFlow> flows_;
  std::vector<TraceCounter> counters_;
};

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_TRACE_EVENTS_H_
