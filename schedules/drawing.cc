#include "schedules/drawing.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "schedules/simulation_report.h"

namespace tandem::schedules {
namespace {

// Whether some actor runs tasks of more than one stage, so that labels must
// name the stage.
bool ActorsHoldSeveralStages(const Schedule& schedule) {
  for (const std::vector<Slot>& program : schedule.programs) {
    int32_t first_stage = -1;
    for (const Slot& slot : program) {
      for (const Task& task : slot.tasks) {
        if (first_stage == -1) first_stage = task.stage.value;
        if (task.stage.value != first_stage) return true;
      }
    }
  }
  return false;
}

std::string TaskLabel(const Task& task, bool show_stage) {
  if (show_stage) return TaskName(task);
  return absl::StrCat(std::string(1, TaskKindLetter(task.kind)), task.microbatch.value);
}

std::string SlotLabel(const Slot& slot, bool show_stage) {
  std::vector<std::string> labels;
  for (const Task& task : slot.tasks) labels.push_back(TaskLabel(task, show_stage));
  return absl::StrJoin(labels, "+");
}

std::string FormatNumber(double value) { return absl::StrFormat("%g", value); }

std::string ReductionLabel(const Reduction& reduction) {
  return absl::StrCat("R", reduction.stage.value);
}

std::string ReductionTitle(const Reduction& reduction) {
  return absl::StrCat("reduction of stage ", reduction.stage.value, " on actor ",
                      reduction.actor.value, ": ", FormatNumber(reduction.start), " to ",
                      FormatNumber(reduction.end));
}

constexpr char kReductionColor[] = "#9c755f";
constexpr char kReductionLegend[] = "R gradient reduction (stage)";

double ColumnUnit(const SimulationResult& result, const AsciiOptions& options) {
  if (options.time_per_column > 0.0) return options.time_per_column;
  bool integral = true;
  double shortest = 0.0;
  auto visit = [&](double start, double end) {
    integral = integral && start == std::floor(start) && end == std::floor(end);
    const double duration = end - start;
    if (duration > 0.0 && (shortest == 0.0 || duration < shortest)) shortest = duration;
  };
  for (const std::vector<SlotTiming>& timings : result.slot_times) {
    for (const SlotTiming& timing : timings) visit(timing.start, timing.end);
  }
  for (const Reduction& reduction : result.reductions) visit(reduction.start, reduction.end);
  double unit = integral || shortest == 0.0 ? 1.0 : shortest;
  const int max_columns = std::max(options.max_columns, 1);
  if (result.makespan / unit > max_columns) unit = result.makespan / max_columns;
  return unit;
}

void StripTrailingSpaces(std::string& line) {
  while (!line.empty() && line.back() == ' ') line.pop_back();
}

std::string XmlEscape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

const char* KindColor(TaskKind kind) {
  switch (kind) {
    case TaskKind::kForward: return "#4e79a7";
    case TaskKind::kBackward: return "#59a14f";
    case TaskKind::kBackwardInput: return "#f28e2b";
    case TaskKind::kBackwardWeight: return "#b07aa1";
  }
  return "#999999";
}

const char* KindDescription(TaskKind kind) {
  switch (kind) {
    case TaskKind::kForward: return "forward";
    case TaskKind::kBackward: return "backward";
    case TaskKind::kBackwardInput: return "input-gradient backward";
    case TaskKind::kBackwardWeight: return "weight-gradient backward";
  }
  return "";
}

constexpr TaskKind kAllKinds[] = {TaskKind::kForward, TaskKind::kBackward,
                                  TaskKind::kBackwardInput, TaskKind::kBackwardWeight};

// A round tick spacing giving about `ticks` ticks over `span`.
double TickStep(double span, int ticks) {
  if (span <= 0.0) return 1.0;
  const double raw = span / ticks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double factor : {1.0, 2.0, 5.0}) {
    if (factor * magnitude >= raw) return factor * magnitude;
  }
  return 10.0 * magnitude;
}

}  // namespace

std::string DrawAscii(const Schedule& schedule, const SimulationResult& result,
                      const AsciiOptions& options) {
  const bool show_stage = ActorsHoldSeveralStages(schedule);
  const double unit = ColumnUnit(result, options);
  const int64_t columns =
      result.makespan > 0.0 ? static_cast<int64_t>(std::ceil(result.makespan / unit - 1e-9)) : 0;

  size_t width = 1;
  std::vector<std::vector<std::string>> labels(schedule.programs.size());
  for (size_t actor = 0; actor < schedule.programs.size(); ++actor) {
    for (const Slot& slot : schedule.programs[actor]) {
      labels[actor].push_back(SlotLabel(slot, show_stage));
      width = std::max(width, labels[actor].back().size());
    }
  }
  const bool reductions = !result.reductions.empty();
  for (const Reduction& reduction : result.reductions) {
    width = std::max(width, ReductionLabel(reduction).size());
  }
  const int actor_digits = static_cast<int>(
      std::to_string(std::max<int32_t>(schedule.num_actors - 1, 0)).size());
  // Rows are named "actor N", and "reduce N" for an actor's reduce track.
  const int name_width = reductions ? 6 : 5;
  const std::string blank_prefix(name_width + 1 + actor_digits + 1, ' ');
  // Marks the columns from `start` to `end`: the label, then '-'.
  auto place = [&](std::vector<std::string>& cells, double start, double end,
                   const std::string& label) {
    int64_t first = std::llround(start / unit);
    int64_t last = std::llround(end / unit);
    if (end > start && last <= first) last = first + 1;
    last = std::min(last, columns);
    if (first >= last) return;
    cells[first] = label;
    for (int64_t column = first + 1; column < last; ++column) cells[column] = std::string(width, '-');
  };
  // One row of the grid, e.g. "actor 0 F0 F1 .".
  auto row = [&](const char* name, size_t actor, const std::vector<std::string>& cells) {
    std::string line =
        absl::StrFormat("%-*s %*d ", name_width, name, actor_digits, static_cast<int>(actor));
    for (int64_t column = 0; column < columns; ++column) {
      std::string cell = cells[column];
      cell.resize(width, ' ');
      absl::StrAppend(&line, column == 0 ? "" : " ", cell);
    }
    StripTrailingSpaces(line);
    return line + "\n";
  };

  std::string out = absl::StrFormat(
      "schedule %s: %d actors, makespan %s, bubble %.2f%%\n",
      schedule.name.empty() ? "(unnamed)" : schedule.name, schedule.num_actors,
      FormatNumber(result.makespan), 100.0 * result.bubble);

  // The header: a time at every `step`-th column where it fits.
  std::string header = "time";
  const size_t widest_time = FormatNumber(static_cast<double>(columns) * unit).size();
  const int64_t step = static_cast<int64_t>((widest_time + 1 + width) / (width + 1));
  for (int64_t column = 0; column < columns; column += std::max<int64_t>(step, 1)) {
    const size_t position = blank_prefix.size() + column * (width + 1);
    if (header.size() < position) header.resize(position, ' ');
    if (header.size() > position) continue;
    header += FormatNumber(static_cast<double>(column) * unit);
  }
  absl::StrAppend(&out, header, "\n");

  size_t next_reduction = 0;  // Reductions are ordered by actor.
  for (size_t actor = 0; actor < schedule.programs.size(); ++actor) {
    std::vector<std::string> cells(columns, ".");
    const std::vector<SlotTiming>& timings = result.slot_times[actor];
    for (size_t slot = 0; slot < timings.size() && slot < labels[actor].size(); ++slot) {
      place(cells, timings[slot].start, timings[slot].end, labels[actor][slot]);
    }
    absl::StrAppend(&out, row("actor", actor, cells));
    bool any = false;
    std::vector<std::string> reduce_cells(columns, ".");
    for (; next_reduction < result.reductions.size() &&
           result.reductions[next_reduction].actor.value == static_cast<int32_t>(actor);
         ++next_reduction) {
      const Reduction& reduction = result.reductions[next_reduction];
      place(reduce_cells, reduction.start, reduction.end, ReductionLabel(reduction));
      any = true;
    }
    if (any) absl::StrAppend(&out, row("reduce", actor, reduce_cells));
  }
  absl::StrAppend(&out, "one column = ", FormatNumber(unit), unit == 1.0 ? " time unit" : " time units",
                  "; a task's label where it starts (kind, ", show_stage ? "stage.microbatch" : "microbatch",
                  "), '-' while it runs, '.' idle\n");
  std::vector<std::string> legend;
  for (const TaskKind kind : kAllKinds) {
    legend.push_back(absl::StrCat(std::string(1, TaskKindLetter(kind)), " ", KindDescription(kind)));
  }
  if (reductions) legend.push_back(kReductionLegend);
  absl::StrAppend(&out, absl::StrJoin(legend, ", "), "\n");
  return out;
}

std::string DrawSvg(const Schedule& schedule, const SimulationResult& result) {
  constexpr double kLeft = 70.0;
  constexpr double kTop = 34.0;
  constexpr double kRowHeight = 26.0;
  constexpr double kRowGap = 6.0;
  constexpr double kCharWidth = 6.6;
  const bool show_stage = ActorsHoldSeveralStages(schedule);
  const double scale = result.makespan > 0.0 ? std::clamp(1000.0 / result.makespan, 0.5, 60.0) : 1.0;
  const int32_t actors = static_cast<int32_t>(schedule.programs.size());
  // With reductions, each actor's row gets a lane for its reduce track.
  const double reduce_lane = result.reductions.empty() ? 0.0 : 12.0;
  const double row_pitch = kRowHeight + reduce_lane + kRowGap;
  const double plot_width = result.makespan * scale;
  const double axis_y = kTop + actors * row_pitch;
  const double width = kLeft + plot_width + 30.0;
  const double height = axis_y + 60.0;
  auto x_of = [&](double time) { return kLeft + time * scale; };

  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"monospace\" font-size=\"11\">\n",
      width, height, width, height);
  absl::StrAppendFormat(&out,
                        "<text x=\"4\" y=\"16\" font-size=\"13\">%s: makespan %s, bubble "
                        "%.2f%%</text>\n",
                        XmlEscape(schedule.name.empty() ? "schedule" : schedule.name),
                        FormatNumber(result.makespan), 100.0 * result.bubble);
  for (int32_t actor = 0; actor < actors; ++actor) {
    const double y = kTop + actor * row_pitch;
    absl::StrAppendFormat(&out, "<text x=\"4\" y=\"%.2f\">actor %d</text>\n",
                          y + kRowHeight / 2 + 4, actor);
    absl::StrAppendFormat(&out,
                          "<rect class=\"lane\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                          "fill=\"#f0f0f0\"/>\n",
                          kLeft, y, plot_width, kRowHeight);
    const std::vector<Slot>& program = schedule.programs[actor];
    for (size_t index = 0; index < program.size() && index < result.slot_times[actor].size();
         ++index) {
      const Slot& slot = program[index];
      const SlotTiming& timing = result.slot_times[actor][index];
      const double band = kRowHeight / static_cast<double>(std::max<size_t>(slot.tasks.size(), 1));
      const double x = x_of(timing.start);
      const double w = (timing.end - timing.start) * scale;
      for (size_t i = 0; i < slot.tasks.size(); ++i) {
        const Task& task = slot.tasks[i];
        const double task_y = y + band * static_cast<double>(i);
        absl::StrAppendFormat(
            &out,
            "<rect class=\"task\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
            "fill=\"%s\" stroke=\"#ffffff\" stroke-width=\"0.5\"><title>%s on actor %d: "
            "%s to %s</title></rect>\n",
            x, task_y, w, band, KindColor(task.kind), TaskName(task), actor,
            FormatNumber(timing.start), FormatNumber(timing.end));
        const std::string label = TaskLabel(task, show_stage);
        if (w >= kCharWidth * static_cast<double>(label.size()) + 2.0 && band >= 10.0) {
          absl::StrAppendFormat(&out,
                                "<text x=\"%.2f\" y=\"%.2f\" fill=\"#ffffff\" "
                                "text-anchor=\"middle\">%s</text>\n",
                                x + w / 2, task_y + band / 2 + 4, label);
        }
      }
    }
  }
  for (const Reduction& reduction : result.reductions) {
    const double y = kTop + reduction.actor.value * row_pitch + kRowHeight + 1.0;
    absl::StrAppendFormat(&out,
                          "<rect class=\"reduction\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                          "height=\"%.2f\" fill=\"%s\" stroke=\"#ffffff\" "
                          "stroke-width=\"0.5\"><title>%s</title></rect>\n",
                          x_of(reduction.start), y, (reduction.end - reduction.start) * scale,
                          reduce_lane - 2.0, kReductionColor, ReductionTitle(reduction));
  }
  absl::StrAppendFormat(&out,
                        "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" "
                        "stroke=\"#000000\"/>\n",
                        kLeft, axis_y, kLeft + plot_width, axis_y);
  const double tick = TickStep(result.makespan, 10);
  for (int64_t i = 0; tick * i <= result.makespan + 1e-9; ++i) {
    const double x = x_of(tick * i);
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" "
                          "stroke=\"#000000\"/>\n<text x=\"%.2f\" y=\"%.2f\" "
                          "text-anchor=\"middle\">%s</text>\n",
                          x, axis_y, x, axis_y + 4, x, axis_y + 16, FormatNumber(tick * i));
  }
  double legend_x = kLeft;
  const double legend_y = axis_y + 30.0;
  for (const TaskKind kind : kAllKinds) {
    const std::string text = absl::StrCat(std::string(1, TaskKindLetter(kind)), " ",
                                          KindDescription(kind));
    absl::StrAppendFormat(&out,
                          "<rect class=\"legend\" x=\"%.2f\" y=\"%.2f\" width=\"12\" height=\"12\" "
                          "fill=\"%s\"/>\n<text x=\"%.2f\" y=\"%.2f\">%s</text>\n",
                          legend_x, legend_y, KindColor(kind), legend_x + 16, legend_y + 10, text);
    legend_x += 16.0 + kCharWidth * static_cast<double>(text.size()) + 14.0;
  }
  if (!result.reductions.empty()) {
    absl::StrAppendFormat(&out,
                          "<rect class=\"legend\" x=\"%.2f\" y=\"%.2f\" width=\"12\" height=\"12\" "
                          "fill=\"%s\"/>\n<text x=\"%.2f\" y=\"%.2f\">%s</text>\n",
                          legend_x, legend_y, kReductionColor, legend_x + 16, legend_y + 10,
                          kReductionLegend);
  }
  absl::StrAppend(&out, "</svg>\n");
  return out;
}

TraceBuilder SimulationTrace(const Schedule& schedule, const SimulationResult& result) {
  constexpr double kUs = kTraceMicrosecondsPerUnit;
  constexpr int32_t kCompute = static_cast<int32_t>(TraceTrack::kCompute);
  constexpr int32_t kSend = static_cast<int32_t>(TraceTrack::kSend);
  constexpr int32_t kRecv = static_cast<int32_t>(TraceTrack::kRecv);
  constexpr int32_t kReduce = static_cast<int32_t>(TraceTrack::kReduce);
  TraceBuilder trace;
  trace.SetMetadata("source", "tandem sched simulation");
  trace.SetMetadata("schedule", schedule.name);
  trace.SetMetadata("time_unit", "1 simulated cost unit = 1000 us");
  const int32_t actors = static_cast<int32_t>(schedule.programs.size());
  for (int32_t actor = 0; actor < actors; ++actor) {
    trace.NameActor(actor);
    const std::vector<Slot>& program = schedule.programs[actor];
    for (size_t index = 0; index < program.size() && index < result.slot_times[actor].size();
         ++index) {
      const Slot& slot = program[index];
      const SlotTiming& timing = result.slot_times[actor][index];
      TraceSlice slice;
      slice.process = actor;
      slice.thread = kCompute;
      slice.name = SlotName(slot);
      std::string category;
      for (const Task& task : slot.tasks) category.push_back(TaskKindLetter(task.kind));
      slice.category = category;
      slice.start_us = timing.start * kUs;
      slice.duration_us = (timing.end - timing.start) * kUs;
      slice.args.push_back({"slot", static_cast<double>(index)});
      if (slot.tasks.size() == 1) {
        slice.args.push_back({"stage", static_cast<double>(slot.tasks[0].stage.value)});
        slice.args.push_back({"microbatch", static_cast<double>(slot.tasks[0].microbatch.value)});
      }
      trace.AddSlice(std::move(slice));
    }
    if (static_cast<size_t>(actor) < result.memory.size()) {
      for (const MemoryPoint& point : result.memory[actor]) {
        trace.AddCounter({actor, "activations", point.time * kUs, point.live});
      }
    }
  }
  for (const Transfer& transfer : result.transfers) {
    const std::string name = TaskName(transfer.producer);
    TraceSlice send;
    send.process = transfer.from.value;
    send.thread = kSend;
    send.name = absl::StrCat(name, " to actor ", transfer.to.value);
    send.category = "transfer";
    send.start_us = transfer.start * kUs;
    send.duration_us = (transfer.end - transfer.start) * kUs;
    send.args = {{"bytes", transfer.bytes}, {"consumer", TaskName(transfer.consumer)}};
    TraceSlice receive = send;
    receive.process = transfer.to.value;
    receive.thread = kRecv;
    receive.name = absl::StrCat(name, " from actor ", transfer.from.value);
    trace.AddSlice(std::move(send));
    trace.AddSlice(std::move(receive));
    trace.AddFlow({name, "transfer", transfer.from.value, kSend, transfer.start * kUs,
                   transfer.to.value, kRecv, transfer.start * kUs});
  }
  for (const Reduction& reduction : result.reductions) {
    trace.NameThread(reduction.actor.value, kReduce, "reduce");
    TraceSlice slice;
    slice.process = reduction.actor.value;
    slice.thread = kReduce;
    slice.name = absl::StrCat("reduce stage ", reduction.stage.value);
    slice.category = "reduction";
    slice.start_us = reduction.start * kUs;
    slice.duration_us = (reduction.end - reduction.start) * kUs;
    slice.args = {{"stage", static_cast<double>(reduction.stage.value)},
                  {"bytes", reduction.bytes},
                  {"replicas", static_cast<double>(result.data_parallel)}};
    trace.AddSlice(std::move(slice));
  }
  return trace;
}

std::string DrawPerfetto(const Schedule& schedule, const SimulationResult& result) {
  return SimulationTrace(schedule, result).ToJson();
}

}  // namespace tandem::schedules
