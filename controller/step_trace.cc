#include "controller/step_trace.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace tandem::controller {
namespace {

std::string TaskName(const ir::TaskLabel& task) {
  if (task.kind == 'U') return "U";
  return absl::StrCat(std::string(1, task.kind), task.stage, ".", task.microbatch);
}

// The first start and the last end of a step's instructions on the common
// clock; (INT64_MAX, INT64_MIN) for a step with no timings.
std::pair<int64_t, int64_t> StepBounds(const StepReport& report) {
  int64_t first = INT64_MAX;
  int64_t last = INT64_MIN;
  for (size_t actor = 0; actor < report.timings.size(); ++actor) {
    for (const ir::InstructionTiming& time : report.timings[actor]) {
      first = std::min(first, report.origin_ns[actor] + time.start_ns);
      last = std::max(last, report.origin_ns[actor] + time.start_ns + time.duration_ns);
    }
  }
  return {first, last};
}

// One transfer's send and receive on the common clock, in us; a side that
// did not run this step is NaN.
struct TransferTimes {
  double send_start = std::nan(""), send_end = std::nan("");
  double receive_start = std::nan(""), receive_end = std::nan("");
  bool Complete() const { return !std::isnan(send_start) && !std::isnan(receive_start); }
};
// (sender, receiver, tag) -> its times.
using Transfers = std::map<std::tuple<int32_t, int32_t, uint64_t>, TransferTimes>;

// One arrow per transfer whose send and receive both ran: from the send's
// start to just inside the end of the receive's wait.
void AddTransfers(const Transfers& transfers, schedules::TraceBuilder& builder) {
  for (const auto& [key, times] : transfers) {
    if (!times.Complete()) continue;
    const auto& [from, to, tag] = key;
    builder.AddFlow({.name = "transfer",
                     .category = "transfer",
                     .from_process = from,
                     .from_thread = static_cast<int32_t>(schedules::TraceTrack::kSend),
                     .from_us = times.send_start,
                     .to_process = to,
                     .to_thread = static_cast<int32_t>(schedules::TraceTrack::kRecv),
                     .to_us = times.receive_start + (times.receive_end - times.receive_start) * 0.999});
  }
}

}  // namespace

StepTrace::StepTrace(const CompiledStep& compiled)
    : compiled_(compiled), busy_us_(compiled.num_actors, 0.0), update_us_(compiled.num_actors, 0.0) {
  for (int32_t actor = 0; actor < compiled.num_actors; ++actor) {
    builder_.NameActor(actor);
    builder_.NameThread(actor, static_cast<int32_t>(schedules::TraceTrack::kStep), "step");
    if (compiled.num_replicas > 1) {
      builder_.NameProcess(actor, absl::StrCat("actor ", actor, " (replica ", compiled.Replica(actor), ")"));
      builder_.NameThread(actor, static_cast<int32_t>(schedules::TraceTrack::kReduce), "reduce");
    }
    const std::vector<ir::Instruction>& instructions = compiled.ProgramOf(actor).instructions;
    const bool fills = std::any_of(instructions.begin(), instructions.end(), [](const ir::Instruction& instruction) {
      return instruction.kind == ir::InstructionKind::kFill;
    });
    if (fills) builder_.NameThread(actor, static_cast<int32_t>(schedules::TraceTrack::kFill), "fill");
  }
  builder_.SetMetadata("source", "measured");
  builder_.SetMetadata("schedule", compiled.schedule);
  builder_.SetMetadata("model", compiled.model);
}

void StepTrace::AddStep(const StepReport& report) {
  const auto [first, last] = StepBounds(report);
  if (first == INT64_MAX) return;
  if (origin_ns_ < 0) {
    // The first step's inputs are taken in before its first instruction.
    origin_ns_ = first;
    for (size_t a = 0; a < report.inputs_ns.size() && a < report.origin_ns.size(); ++a) {
      origin_ns_ = std::min(origin_ns_, report.origin_ns[a] - report.inputs_ns[a]);
    }
  }
  ++steps_;
  wall_us_ += static_cast<double>(last - first) * 1e-3;
  AddStepEnds(report);

  Transfers transfers;
  for (size_t a = 0; a < report.timings.size(); ++a) {
    const auto actor = static_cast<int32_t>(a);
    const ir::ActorProgram& program = compiled_.ProgramOf(actor);
    const std::vector<ir::Instruction>& instructions = program.instructions;
    std::map<std::tuple<char, int32_t, int32_t>, double> per_task;  // this step's tasks
    for (const ir::InstructionTiming& time : report.timings[a]) {
      if (time.instruction < 0 || time.instruction >= static_cast<int32_t>(instructions.size())) continue;
      const ir::Instruction& instruction = instructions[time.instruction];
      const double start_us = static_cast<double>(report.origin_ns[a] + time.start_ns - origin_ns_) * 1e-3;
      const double duration_us = static_cast<double>(time.duration_ns) * 1e-3;
      // Waits (receives, a reduction's wait) and the reduction itself, which
      // runs beside the compute, are not the task's work.
      // A fill piece is another job's work.
      const bool waits = instruction.kind == ir::InstructionKind::kReceive ||
                         instruction.kind == ir::InstructionKind::kAllReduceStart ||
                         instruction.kind == ir::InstructionKind::kAllReduceWait ||
                         instruction.kind == ir::InstructionKind::kFill;
      if (!waits) {
        if (instruction.task.kind == 'U') {
          update_us_[a] += duration_us;
        } else {
          per_task[{instruction.task.kind, instruction.task.stage, instruction.task.microbatch}] += duration_us;
        }
      }
      schedules::TraceSlice slice;
      slice.process = actor;
      slice.start_us = start_us;
      slice.duration_us = duration_us;
      slice.args.push_back({"step", static_cast<double>(report.step)});
      slice.args.push_back({"instruction", static_cast<double>(time.instruction)});
      switch (instruction.kind) {
        case ir::InstructionKind::kRun:
          slice.thread = static_cast<int32_t>(schedules::TraceTrack::kCompute);
          slice.name = TaskName(instruction.task);
          slice.category = std::string(1, instruction.task.kind);
          slice.args.push_back({"function", program.functions[instruction.function].name});
          busy_us_[a] += duration_us;
          break;
        case ir::InstructionKind::kSend:
          slice.thread = static_cast<int32_t>(schedules::TraceTrack::kSend);
          slice.name = absl::StrCat("send ", TaskName(instruction.task), " to ", instruction.peer);
          slice.category = "send";
          {
            TransferTimes& times = transfers[{actor, instruction.peer, instruction.tag}];
            times.send_start = start_us;
            times.send_end = start_us + duration_us;
          }
          break;
        case ir::InstructionKind::kReceive:
          slice.thread = static_cast<int32_t>(schedules::TraceTrack::kRecv);
          slice.name = absl::StrCat("recv ", TaskName(instruction.task), " from ", instruction.peer);
          slice.category = "recv";
          {
            TransferTimes& times = transfers[{instruction.peer, actor, instruction.tag}];
            times.receive_start = start_us;
            times.receive_end = start_us + duration_us;
          }
          break;
        case ir::InstructionKind::kAllReduceStart:
          // Its timing is the reduction in flight, issued to done (actor/executor.h).
          slice.thread = static_cast<int32_t>(schedules::TraceTrack::kReduce);
          slice.name = absl::StrCat("all-reduce stage ", instruction.tag);
          slice.category = "reduce";
          slice.args.push_back({"replicas", static_cast<double>(instruction.group.size())});
          break;
        case ir::InstructionKind::kFill: {
          const auto& done = report.fill_outputs;
          const bool ran = done.count(instruction.microbatch) > 0;
          slice.thread = static_cast<int32_t>(schedules::TraceTrack::kFill);
          slice.name = ran ? absl::StrCat("fill ", instruction.microbatch)
                           : absl::StrCat("fill ", instruction.microbatch, " (gave way)");
          slice.category = "fill";
          slice.args.push_back({"function", program.functions[instruction.function].name});
          break;
        }
        default:
          continue;  // accumulate, free, emit, the reduction's wait: bookkeeping, not drawn
      }
      builder_.AddSlice(std::move(slice));
    }
    for (const auto& [task, us] : per_task) {
      auto& [total, count] = task_us_[{std::get<0>(task), std::get<1>(task)}];
      total += us;
      ++count;
    }
  }
  AddTransfers(transfers, builder_);
  // The link's latency, where a receive shows it: one that was already
  // waiting when its send ended ends when the message arrives, so the time
  // from the send's end to the receive's is what the transfer took (the
  // receiver's wake-up included). A message that arrived before its receive
  // began shows only an upper bound, and is left out.
  for (const auto& [key, times] : transfers) {
    if (!times.Complete() || times.receive_start > times.send_end) continue;
    latency_us_ += std::max(0.0, times.receive_end - times.send_end);
    ++latencies_;
  }
}

void StepTrace::AddStepEnds(const StepReport& report) {
  for (size_t a = 0; a < report.timings.size(); ++a) {
    if (a >= report.inputs_ns.size() || a >= report.settle_ns.size()) break;
    const auto actor = static_cast<int32_t>(a);
    int64_t last_end = 0;  // the actor's last instruction's end, from its origin
    for (const ir::InstructionTiming& time : report.timings[a]) {
      last_end = std::max(last_end, time.start_ns + time.duration_ns);
    }
    auto add = [&](const char* name, int64_t from_origin_ns, int64_t duration_ns) {
      schedules::TraceSlice slice;
      slice.process = actor;
      slice.thread = static_cast<int32_t>(schedules::TraceTrack::kStep);
      slice.name = name;
      slice.category = "step";
      slice.start_us = static_cast<double>(report.origin_ns[a] + from_origin_ns - origin_ns_) * 1e-3;
      slice.duration_us = static_cast<double>(duration_ns) * 1e-3;
      slice.args.push_back({"step", static_cast<double>(report.step)});
      builder_.AddSlice(std::move(slice));
    };
    add("inputs", -report.inputs_ns[a], report.inputs_ns[a]);
    add("settle", last_end, report.settle_ns[a]);
  }
}

schedules::CostModel StepTrace::CalibratedCosts() const {
  schedules::CostModel costs;
  for (const auto& [key, value] : task_us_) {
    for (schedules::TaskKind kind : {schedules::TaskKind::kForward, schedules::TaskKind::kBackward,
                                     schedules::TaskKind::kBackwardInput, schedules::TaskKind::kBackwardWeight}) {
      if (schedules::TaskKindLetter(kind) == key.first) {
        costs.stage_cost[{kind, key.second}] = value.first / static_cast<double>(value.second);
      }
    }
  }
  if (latencies_ > 0) costs.link.latency = latency_us_ / static_cast<double>(latencies_);
  return costs;
}

std::vector<double> StepTrace::UpdateUs() const {
  std::vector<double> update;
  for (double us : update_us_) update.push_back(steps_ > 0 ? us / static_cast<double>(steps_) : 0.0);
  return update;
}

std::vector<double> StepTrace::MeasuredBubble() const {
  std::vector<double> bubble;
  for (double busy : busy_us_) bubble.push_back(wall_us_ > 0 ? std::max(0.0, 1.0 - busy / wall_us_) : 0.0);
  return bubble;
}

}  // namespace tandem::controller
