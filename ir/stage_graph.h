// The stages of a pipeline and which stages feed which: a DAG.
//
// A chain (stage s feeds s + 1) is the common case: pipeline_yield alone
// makes one. Branches (Tracer::Branch) make stages that run side by side,
// fed by a common stage and merged by a later one (GraphPipe). Every edge
// goes from a lower stage id to a higher one, so id order is a topological
// order and the graph cannot have a cycle.
//
// Where a graph is stored (TrainStep, Schedule) it is stored as its edge
// list, and an empty list means the chain: a chain model or schedule reads
// and prints exactly as before stage graphs existed.
// Header-only, like ir/ids.h, so that schedules/ (which depends on no other
// part of Tandem) shares it with the tracer and the compiler.
// Value type; not synchronized.
#ifndef TANDEM_IR_STAGE_GRAPH_H_
#define TANDEM_IR_STAGE_GRAPH_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "ir/excerpt.h"

namespace tandem::ir {

// Stage `from` feeds stage `to`: values of from's forward flow into to's
// forward, and gradients flow back from to's backward into from's.
struct StageEdge {
  int32_t from = 0;
  int32_t to = 0;
  friend bool operator==(const StageEdge&, const StageEdge&) = default;
  friend auto operator<=>(const StageEdge&, const StageEdge&) = default;
};

// "1->2".
std::string StageEdgeName(const StageEdge& edge);

// OK when `edges` describe a DAG over `num_stages` stages as stored: every
// edge has 0 <= from < to < num_stages and none appears twice. Otherwise
// InvalidArgument naming the first bad edge.
absl::Status CheckStageEdges(int32_t num_stages, const std::vector<StageEdge>& edges);

// Parses "0->2 1->2" (edges separated by spaces or commas) into edges, in
// the order given. Syntax only: CheckStageEdges checks them against a
// stage count. At most `max_edges` edges.
absl::StatusOr<std::vector<StageEdge>> ParseStageEdges(absl::string_view text, int64_t max_edges);
// "0->2 1->2": the edges in the order given, separated by one space.
std::string FormatStageEdges(const std::vector<StageEdge>& edges);
// What a file holding a stage graph as text reads: ParseStageEdges, then
// CheckStageEdges against `num_stages`, then the stored form (empty for a
// chain written out). Their errors, unchanged.
absl::StatusOr<std::vector<StageEdge>> ParseStoredStageEdges(absl::string_view text, int32_t num_stages,
                                                             int64_t max_edges);

class StageGraph {
 public:
  StageGraph() = default;
  // The chain 0 -> 1 -> ... -> num_stages - 1.
  static StageGraph Chain(int32_t num_stages);
  // The graph of `edges` over `num_stages` stages; the chain when `edges` is
  // empty (the stored form). Edges that CheckStageEdges refuses are left
  // out, so callers check first.
  StageGraph(int32_t num_stages, const std::vector<StageEdge>& edges);
  // The graph where predecessors[s] feed stage s, as a tracer builds it
  // (no edges means no edges here, not the chain). Predecessors outside
  // [0, s) are left out.
  static StageGraph FromPredecessors(std::vector<std::vector<int32_t>> predecessors);

  int32_t num_stages() const { return static_cast<int32_t>(predecessors_.size()); }
  // In increasing stage order.
  const std::vector<int32_t>& predecessors(int32_t stage) const { return predecessors_.at(stage); }
  const std::vector<int32_t>& successors(int32_t stage) const { return successors_.at(stage); }
  // Sorted by (from, to).
  std::vector<StageEdge> Edges() const;
  bool IsChain() const;
  // The edge list to store: empty for a chain, else Edges().
  std::vector<StageEdge> StoredEdges() const;

  // The most stages on a path from `stage` to a sink, `stage` included:
  // num_stages - stage on a chain. Under 1F1B a stage keeps this many
  // microbatches in flight (schedules/SIMULATION.md).
  int32_t StagesToSink(int32_t stage) const { return stages_to_sink_.at(stage); }
  // Whether a path leads from `from` to `to` (a stage reaches itself).
  // O(stages + edges).
  bool Reaches(int32_t from, int32_t to) const;
  // The stages with no successors / no predecessors, in increasing order.
  std::vector<int32_t> Sinks() const;
  std::vector<int32_t> Sources() const;

  friend bool operator==(const StageGraph&, const StageGraph&) = default;

 private:
  void Finish();

  std::vector<std::vector<int32_t>> predecessors_;
  std::vector<std::vector<int32_t>> successors_;
  std::vector<int32_t> stages_to_sink_;
};

// Implementation.

inline std::string StageEdgeName(const StageEdge& edge) { return absl::StrCat(edge.from, "->", edge.to); }

inline absl::Status CheckStageEdges(int32_t num_stages, const std::vector<StageEdge>& edges) {
  std::vector<StageEdge> sorted = edges;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    const StageEdge& edge = sorted[i];
    if (edge.from < 0 || edge.to >= num_stages || edge.from >= num_stages || edge.to < 0) {
      return absl::InvalidArgumentError(absl::StrCat("stage edge ", StageEdgeName(edge), " names a stage outside 0..",
                                                     num_stages - 1));
    }
    if (edge.from >= edge.to) {
      return absl::InvalidArgumentError(absl::StrCat("stage edge ", StageEdgeName(edge),
                                                     " does not go from a lower stage to a higher one "
                                                     "(number stages in dataflow order)"));
    }
    if (i > 0 && sorted[i - 1] == edge) {
      return absl::InvalidArgumentError(absl::StrCat("stage edge ", StageEdgeName(edge), " appears twice"));
    }
  }
  return absl::OkStatus();
}

inline absl::StatusOr<std::vector<StageEdge>> ParseStageEdges(absl::string_view text, int64_t max_edges) {
  std::vector<StageEdge> edges;
  size_t i = 0;
  auto separator = [](char c) { return c == ' ' || c == '\t' || c == ','; };
  while (i < text.size()) {
    if (separator(text[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && !separator(text[end])) ++end;
    const absl::string_view token = text.substr(i, end - i);
    i = end;
    const size_t arrow = token.find("->");
    StageEdge edge;
    const bool ok = arrow != absl::string_view::npos && arrow > 0 && arrow + 2 < token.size() &&
                    std::all_of(token.begin(), token.begin() + arrow, absl::ascii_isdigit) &&
                    std::all_of(token.begin() + arrow + 2, token.end(), absl::ascii_isdigit) &&
                    absl::SimpleAtoi(token.substr(0, arrow), &edge.from) &&
                    absl::SimpleAtoi(token.substr(arrow + 2), &edge.to);
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("'", Excerpt(token),
                                                     "' is not a stage edge: expected FROM->TO, e.g. 0->2"));
    }
    if (static_cast<int64_t>(edges.size()) >= max_edges) {
      return absl::InvalidArgumentError(absl::StrCat("more than ", max_edges, " stage edges"));
    }
    edges.push_back(edge);
  }
  return edges;
}

inline std::string FormatStageEdges(const std::vector<StageEdge>& edges) {
  std::string out;
  for (const StageEdge& edge : edges) absl::StrAppend(&out, out.empty() ? "" : " ", StageEdgeName(edge));
  return out;
}

inline absl::StatusOr<std::vector<StageEdge>> ParseStoredStageEdges(absl::string_view text, int32_t num_stages,
                                                                    int64_t max_edges) {
  absl::StatusOr<std::vector<StageEdge>> edges = ParseStageEdges(text, max_edges);
  if (!edges.ok()) return edges.status();
  if (absl::Status status = CheckStageEdges(num_stages, *edges); !status.ok()) return status;
  return StageGraph(num_stages, *edges).StoredEdges();
}

inline StageGraph StageGraph::Chain(int32_t num_stages) { return StageGraph(num_stages, {}); }

inline StageGraph::StageGraph(int32_t num_stages, const std::vector<StageEdge>& edges) {
  std::vector<std::vector<int32_t>> predecessors(std::max(num_stages, 0));
  for (int32_t s = 1; s < num_stages && edges.empty(); ++s) predecessors[s].push_back(s - 1);
  for (const StageEdge& edge : edges) {
    if (edge.to >= 0 && edge.to < num_stages) predecessors[edge.to].push_back(edge.from);
  }
  *this = FromPredecessors(std::move(predecessors));
}

inline StageGraph StageGraph::FromPredecessors(std::vector<std::vector<int32_t>> predecessors) {
  StageGraph graph;
  graph.predecessors_ = std::move(predecessors);
  graph.successors_.resize(graph.predecessors_.size());
  for (int32_t s = 0; s < graph.num_stages(); ++s) {
    std::vector<int32_t>& list = graph.predecessors_[s];
    // Sorted, a repeated edge kept once, edges against id order left out:
    // O(E log E) however the edges fall.
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    list.erase(std::remove_if(list.begin(), list.end(), [s](int32_t p) { return p < 0 || p >= s; }), list.end());
    for (int32_t p : list) graph.successors_[p].push_back(s);  // in increasing s: sorted
  }
  graph.Finish();
  return graph;
}

inline void StageGraph::Finish() {
  stages_to_sink_.assign(predecessors_.size(), 1);
  for (int32_t s = num_stages() - 1; s >= 0; --s) {
    for (int32_t next : successors_[s]) stages_to_sink_[s] = std::max(stages_to_sink_[s], stages_to_sink_[next] + 1);
  }
}

inline std::vector<StageEdge> StageGraph::Edges() const {
  std::vector<StageEdge> edges;
  for (int32_t s = 0; s < num_stages(); ++s) {
    for (int32_t next : successors_[s]) edges.push_back({s, next});
  }
  return edges;
}

inline bool StageGraph::IsChain() const {
  for (int32_t s = 0; s < num_stages(); ++s) {
    if (predecessors_[s] != (s == 0 ? std::vector<int32_t>{} : std::vector<int32_t>{s - 1})) return false;
  }
  return true;
}

inline std::vector<StageEdge> StageGraph::StoredEdges() const {
  return IsChain() ? std::vector<StageEdge>{} : Edges();
}

inline bool StageGraph::Reaches(int32_t from, int32_t to) const {
  if (from < 0 || to < 0 || from >= num_stages() || to >= num_stages() || from > to) return false;
  if (from == to) return true;
  std::vector<bool> seen(num_stages(), false);
  std::vector<int32_t> stack = {from};
  seen[from] = true;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t next : successors_[s]) {
      if (next == to) return true;
      if (next < to && !seen[next]) {
        seen[next] = true;
        stack.push_back(next);
      }
    }
  }
  return false;
}

inline std::vector<int32_t> StageGraph::Sinks() const {
  std::vector<int32_t> sinks;
  for (int32_t s = 0; s < num_stages(); ++s) {
    if (successors_[s].empty()) sinks.push_back(s);
  }
  return sinks;
}

inline std::vector<int32_t> StageGraph::Sources() const {
  std::vector<int32_t> sources;
  for (int32_t s = 0; s < num_stages(); ++s) {
    if (predecessors_[s].empty()) sources.push_back(s);
  }
  return sources;
}

}  // namespace tandem::ir

#endif  // TANDEM_IR_STAGE_GRAPH_H_
