#include "schedules/graph_partition.h"

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::schedules {
namespace {

using Kind = SeriesParallel::Kind;

// The fewest and the most stages a part can take.
int32_t FewestStages(const SeriesParallel& node) {
  if (node.kind == Kind::kRun) return 1;
  int32_t total = 0;
  for (const SeriesParallel& child : node.children) total += FewestStages(child);
  return total;
}

int32_t MostStages(const SeriesParallel& node) { return node.size(); }

// Enumerates every allocation of stages to the runs of a tree, calling
// `visit` with the stages of each run (indexed by run, in segment order)
// until it returns false.
class Allocator {
 public:
  using Visit = std::function<bool(const std::vector<int32_t>&)>;

  Allocator(const SeriesParallel& root, Visit visit) : visit_(std::move(visit)) {
    for (const SeriesParallel* run : root.Runs()) run_index_[run->first] = static_cast<int32_t>(run_index_.size());
    stages_.assign(run_index_.size(), 0);
  }

  // Gives `k` stages to `root`; false when `visit` stopped it.
  bool Allocate(const SeriesParallel& root, int32_t k) { return Expand({{&root, k}}); }

 private:
  using Pending = std::vector<std::pair<const SeriesParallel*, int32_t>>;

  bool Expand(Pending pending) {
    if (pending.empty()) return visit_(stages_);
    const auto [node, k] = pending.back();
    pending.pop_back();
    if (node->kind == Kind::kRun) {
      stages_[run_index_.at(node->first)] = k;
      return Expand(std::move(pending));
    }
    return Distribute(*node, 0, k, pending);
  }

  // Gives children [i, end) of `node` `k` stages between them.
  bool Distribute(const SeriesParallel& node, size_t i, int32_t k, Pending& pending) {
    if (i == node.children.size()) return k == 0 ? Expand(pending) : true;
    const SeriesParallel& child = node.children[i];
    int32_t rest_fewest = 0, rest_most = 0;
    for (size_t j = i + 1; j < node.children.size(); ++j) {
      rest_fewest += FewestStages(node.children[j]);
      rest_most += MostStages(node.children[j]);
    }
    for (int32_t take = FewestStages(child); take <= std::min(MostStages(child), k - rest_fewest); ++take) {
      if (k - take > rest_most) continue;
      pending.push_back({&child, take});
      const bool go_on = Distribute(node, i + 1, k - take, pending);
      pending.pop_back();
      if (!go_on) return false;
    }
    return true;
  }

  Visit visit_;
  std::map<int32_t, int32_t> run_index_;  // a run's first segment -> its index
  std::vector<int32_t> stages_;
};

// Each run's stages after it on the longest path to the last stage.
int32_t Longest(const SeriesParallel& node, const std::map<int32_t, int32_t>& stages_of_run) {
  if (node.kind == Kind::kRun) return stages_of_run.at(node.first);
  int32_t longest = 0;
  for (const SeriesParallel& child : node.children) {
    const int32_t l = Longest(child, stages_of_run);
    longest = node.kind == Kind::kSeries ? longest + l : std::max(longest, l);
  }
  return longest;
}

void AssignAfter(const SeriesParallel& node, int32_t after, const std::map<int32_t, int32_t>& stages_of_run,
                 std::map<int32_t, int32_t>& after_of_run) {
  if (node.kind == Kind::kRun) {
    after_of_run[node.first] = after;
    return;
  }
  if (node.kind == Kind::kParallel) {
    for (const SeriesParallel& child : node.children) AssignAfter(child, after, stages_of_run, after_of_run);
    return;
  }
  for (auto child = node.children.rbegin(); child != node.children.rend(); ++child) {
    AssignAfter(*child, after, stages_of_run, after_of_run);
    after += Longest(*child, stages_of_run);
  }
}

}  // namespace

std::vector<ir::StageEdge> StageEdgesOf(const ir::StageGraph& segments, const std::vector<int32_t>& segment_stage) {
  std::vector<ir::StageEdge> edges;
  for (const ir::StageEdge& edge : segments.Edges()) {
    const int32_t from = segment_stage[edge.from];
    const int32_t to = segment_stage[edge.to];
    if (from != to) edges.push_back({from, to});
  }
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  return edges;
}

absl::StatusOr<GraphPartitions> PartitionSegmentGraph(const CostFile& costs, const PartitionOptions& options) {
  const int32_t n = static_cast<int32_t>(costs.segments.size());
  if (n < 1 || n > kMaxSegments) {
    return absl::InvalidArgumentError(absl::StrCat("a partition needs 1 to ", kMaxSegments, " segments, not ", n));
  }
  const ir::StageGraph graph = costs.segment_graph();
  const SeriesParallel tree = DecomposeSeriesParallel(graph);
  const int32_t fewest = FewestStages(tree);
  if (options.stages < fewest || options.stages > n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the segment graph ", tree.Describe(), " takes ", fewest, " to ", n, " stages (a stage per branch at least, ",
        "a segment per stage at most), not ", options.stages));
  }
  const std::vector<const SeriesParallel*> runs = tree.Runs();

  // Each run cut into k stages with `after` stages after it, once.
  std::map<std::tuple<int32_t, int32_t, int32_t>, std::pair<Partition, bool>> cuts;
  auto cut_run = [&](int32_t run, int32_t k, int32_t after) -> absl::StatusOr<const std::pair<Partition, bool>*> {
    auto key = std::make_tuple(run, k, after);
    if (auto found = cuts.find(key); found != cuts.end()) return &found->second;
    CostFile part;
    part.segments.assign(costs.segments.begin() + runs[run]->first, costs.segments.begin() + runs[run]->end);
    PartitionOptions cut = options;
    cut.stages = k;
    cut.stages_after = after;
    absl::StatusOr<Partition> partition = PartitionSegments(part, cut);
    bool over_cap = false;
    if (!partition.ok() && partition.status().code() == absl::StatusCode::kResourceExhausted) {
      over_cap = true;
      cut.memory_cap = 0;
      partition = PartitionSegments(part, cut);
    }
    if (!partition.ok()) return partition.status();
    for (PlanStage& stage : partition->stages) {
      stage.first_segment += runs[run]->first;
      stage.end_segment += runs[run]->first;
    }
    return &cuts.emplace(key, std::make_pair(*std::move(partition), over_cap)).first->second;
  };

  GraphPartitions result;
  absl::Status failure;
  Allocator allocator(tree, [&](const std::vector<int32_t>& run_stages) {
    if (result.partitions.size() >= static_cast<size_t>(kMaxGraphAllocations)) {
      result.truncated = true;
      return false;
    }
    std::map<int32_t, int32_t> stages_of_run, after_of_run;
    for (size_t r = 0; r < runs.size(); ++r) stages_of_run[runs[r]->first] = run_stages[r];
    AssignAfter(tree, 0, stages_of_run, after_of_run);
    GraphPartition partition;
    partition.run_stages = run_stages;
    std::vector<int32_t> segment_stage(n, 0);
    for (size_t r = 0; r < runs.size(); ++r) {
      absl::StatusOr<const std::pair<Partition, bool>*> cut =
          cut_run(static_cast<int32_t>(r), run_stages[r], after_of_run.at(runs[r]->first));
      if (!cut.ok()) {
        failure = cut.status();
        return false;
      }
      partition.over_cap = partition.over_cap || (*cut)->second;
      for (const PlanStage& stage : (*cut)->first.stages) {
        for (int32_t segment = stage.first_segment; segment < stage.end_segment; ++segment) {
          segment_stage[segment] = static_cast<int32_t>(partition.stages.size());
        }
        partition.stages.push_back(stage);
      }
    }
    partition.stage_edges = StageEdgesOf(graph, segment_stage);
    result.partitions.push_back(std::move(partition));
    return true;
  });
  allocator.Allocate(tree, options.stages);
  if (!failure.ok()) return failure;
  return result;
}

}  // namespace tandem::schedules
