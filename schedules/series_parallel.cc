#include "schedules/series_parallel.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::schedules {
namespace {

using Kind = SeriesParallel::Kind;

SeriesParallel Run(int32_t first, int32_t end) { return {Kind::kRun, first, end, {}}; }

// The parts between consecutive cuts of [first, end), decomposed; a child
// of the same kind is spliced in, and (in series) runs next to each other
// become one run.
SeriesParallel Compose(Kind kind, int32_t first, int32_t end, std::vector<SeriesParallel> parts) {
  SeriesParallel node{kind, first, end, {}};
  for (SeriesParallel& part : parts) {
    std::vector<SeriesParallel> pieces;
    if (part.kind == kind) {
      pieces = std::move(part.children);
    } else {
      pieces.push_back(std::move(part));
    }
    for (SeriesParallel& piece : pieces) {
      if (kind == Kind::kSeries && piece.kind == Kind::kRun && !node.children.empty() &&
          node.children.back().kind == Kind::kRun) {
        node.children.back().end = piece.end;
      } else {
        node.children.push_back(std::move(piece));
      }
    }
  }
  if (node.children.size() == 1) return std::move(node.children.front());
  return node;
}

class Decomposer {
 public:
  explicit Decomposer(const ir::StageGraph& graph) : graph_(graph) {}

  SeriesParallel Decompose(int32_t a, int32_t b, int32_t depth) const {
    if (b - a <= 1 || depth >= kMaxSeriesParallelDepth) return Run(a, b);
    // Per cut k in (a, b), as differences indexed k - a: the edges of
    // [a, b) crossing it, those of them going from a sink of [a, k) to a
    // source of [k, b), and how many sinks and sources there are.
    const size_t width = static_cast<size_t>(b - a) + 2;
    std::vector<int64_t> crossing(width, 0), good(width, 0), sinks(width, 0), sources(width, 0);
    auto add = [a, b](std::vector<int64_t>& diff, int32_t from, int32_t to) {  // +1 on cuts in (from, to]
      const int32_t lo = std::max(from + 1, a + 1);
      const int32_t hi = std::min(to, b - 1);
      if (lo > hi) return;
      ++diff[lo - a];
      --diff[hi + 1 - a];
    };
    for (int32_t u = a; u < b; ++u) {
      // The first successor and the last predecessor inside [a, b).
      const std::vector<int32_t>& next = graph_.successors(u);
      const std::vector<int32_t>& previous = graph_.predecessors(u);
      const int32_t first_next = !next.empty() && next.front() < b ? next.front() : b;
      const int32_t last_previous = !previous.empty() && previous.back() >= a ? previous.back() : a - 1;
      add(sinks, u, first_next);         // u is a sink of [a, k) for u < k <= first_next
      add(sources, last_previous, u);    // u is a source of [k, b) for last_previous < k <= u
      for (int32_t v : next) {
        if (v >= b) break;
        add(crossing, u, v);
        // From a sink (k <= first successor of u) to a source (k > last
        // predecessor of v).
        const std::vector<int32_t>& into = graph_.predecessors(v);
        add(good, into.back(), first_next);
      }
    }
    std::vector<int32_t> parallel_cuts, series_cuts;
    int64_t c = 0, g = 0, si = 0, so = 0;
    for (int32_t k = a; k < b; ++k) {
      c += crossing[k - a];
      g += good[k - a];
      si += sinks[k - a];
      so += sources[k - a];
      if (k == a) continue;
      if (c == 0) parallel_cuts.push_back(k);
      if (c > 0 && g == c && c == si * so) series_cuts.push_back(k);
    }
    const bool parallel = !parallel_cuts.empty();
    const std::vector<int32_t>& cuts = parallel ? parallel_cuts : series_cuts;
    if (cuts.empty()) return Run(a, b);
    std::vector<SeriesParallel> parts;
    int32_t start = a;
    for (int32_t k : cuts) {
      parts.push_back(Decompose(start, k, depth + 1));
      start = k;
    }
    parts.push_back(Decompose(start, b, depth + 1));
    return Compose(parallel ? Kind::kParallel : Kind::kSeries, a, b, std::move(parts));
  }

 private:
  const ir::StageGraph& graph_;
};

void CollectRuns(const SeriesParallel& node, std::vector<const SeriesParallel*>& runs) {
  if (node.kind == Kind::kRun) {
    runs.push_back(&node);
    return;
  }
  for (const SeriesParallel& child : node.children) CollectRuns(child, runs);
}

}  // namespace

std::vector<const SeriesParallel*> SeriesParallel::Runs() const {
  std::vector<const SeriesParallel*> runs;
  CollectRuns(*this, runs);
  return runs;
}

std::string SeriesParallel::Describe() const {
  if (kind == Kind::kRun) return end - first > 1 ? absl::StrCat("R", first, "-", end - 1) : absl::StrCat("R", first);
  std::vector<std::string> parts;
  for (const SeriesParallel& child : children) parts.push_back(child.Describe());
  return absl::StrCat(kind == Kind::kSeries ? "S(" : "P(", absl::StrJoin(parts, " "), ")");
}

SeriesParallel DecomposeSeriesParallel(const ir::StageGraph& graph) {
  return Decomposer(graph).Decompose(0, graph.num_stages(), 0);
}

}  // namespace tandem::schedules
