#include "schedules/happens_before.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "schedules/dataflow.h"

namespace tandem::schedules::internal {
namespace {

constexpr int32_t kNone = -1;

// A cross-actor dataflow edge modelled as a rendezvous node.
struct Transfer {
  Task producer;
  Task consumer;
  int32_t from_actor = 0;
  int32_t to_actor = 0;
};

// The task that produces the input gradient of stage `stage`: its B, or its
// I when the backward is split. The schedule is complete, so one exists.
Task GradientProducer(const SlotTable& table, int32_t stage, int32_t mb) {
  const TaskKind kind = table.NodeOf(TaskKind::kBackward, stage, mb) != kNone
                            ? TaskKind::kBackward
                            : TaskKind::kBackwardInput;
  return Task{kind, StageId(stage), Microbatch(mb)};
}

int32_t NodeOf(const SlotTable& table, const Task& task) {
  return table.NodeOf(task.kind, task.stage.value, task.microbatch.value);
}

// Nodes are slots [0, num_slots) and, with rendezvous, transfers after them.
// Each actor's program order is a sequence of nodes; a transfer node sits in
// two sequences (sender's and receiver's). Other dataflow edges are "direct".
class Graph {
 public:
  Graph(const Schedule& schedule, const SlotTable& table, bool rendezvous)
      : schedule_(schedule),
        table_(table),
        stages_(schedule.stage_graph()),
        num_slots_(table.first_node.back()) {
    if (rendezvous) {
      BuildRendezvous();
    } else {
      BuildBuffered();
    }
    num_nodes_ = num_slots_ + static_cast<int32_t>(transfers_.size());
    position_[0].assign(num_nodes_, kNone);
    position_[1].assign(num_nodes_, kNone);
    for (int32_t q = 0; q < static_cast<int32_t>(sequence_.size()); ++q) {
      const int32_t node = sequence_[q];
      (position_[0][node] == kNone ? position_[0][node] : position_[1][node]) = q;
    }
    out_begin_.assign(num_nodes_ + 1, 0);
    for (const auto& [from, to] : direct_) ++out_begin_[from + 1];
    for (int32_t i = 0; i < num_nodes_; ++i) out_begin_[i + 1] += out_begin_[i];
    out_target_.resize(direct_.size());
    std::vector<int32_t> fill(out_begin_.begin(), out_begin_.end() - 1);
    for (const auto& [from, to] : direct_) out_target_[fill[from]++] = to;
  }

  // Kahn's algorithm: runs every node whose predecessors have all run.
  // Returns whether some node can never run (a deadlock).
  bool FindBlocked() {
    in_degree_.assign(num_nodes_, 0);
    for (int32_t a = 0; a < num_actors(); ++a) {
      for (int32_t q = sequence_begin_[a] + 1; q < sequence_begin_[a + 1]; ++q) {
        ++in_degree_[sequence_[q]];
      }
    }
    for (const auto& edge : direct_) ++in_degree_[edge.second];
    std::vector<int32_t> ready;
    for (int32_t n = 0; n < num_nodes_; ++n) {
      if (in_degree_[n] == 0) ready.push_back(n);
    }
    int32_t done = 0;
    while (!ready.empty()) {
      const int32_t node = ready.back();
      ready.pop_back();
      ++done;
      auto release = [&](int32_t next) {
        if (--in_degree_[next] == 0) ready.push_back(next);
      };
      for (const std::vector<int32_t>& positions : position_) {
        const int32_t q = positions[node];
        if (q != kNone && q + 1 < sequence_begin_[sequence_actor_[q] + 1]) {
          release(sequence_[q + 1]);
        }
      }
      for (int32_t e = out_begin_[node]; e < out_begin_[node + 1]; ++e) release(out_target_[e]);
    }
    return done < num_nodes_;
  }

  // After FindBlocked() returned true: a slot waiting for a later slot of its
  // own actor if there is one, else the state the actors are stuck in.
  // Each stuck actor stops at its first node that never runs (its head),
  // which waits for a node of another (or the same) actor that never runs
  // either, at or after that actor's head. Following these waits must loop;
  // the witness is a shortest such loop over actors, as text.
  std::string Witness() {
    // The smallest loops first: a slot that needs the output of a later (or
    // the same) slot of its own actor.
    for (const auto& [from, to] : direct_) {
      if (from < num_slots_ && to < num_slots_ && from >= to) {
        const int32_t actor = table_.ActorOfNode(to);
        if (table_.ActorOfNode(from) != actor) continue;
        std::string text = absl::StrCat("deadlock: ", Describe(to, actor));
        if (from != to) absl::StrAppend(&text, " waits for ", Describe(from, actor));
        absl::StrAppend(&text, " waits for ", Describe(to, actor));
        return text;
      }
    }
    const int32_t actors = num_actors();
    std::vector<int32_t> head(actors, kNone);
    for (int32_t a = 0; a < actors; ++a) {
      for (int32_t q = sequence_begin_[a]; q < sequence_begin_[a + 1]; ++q) {
        if (in_degree_[sequence_[q]] > 0) {
          head[a] = sequence_[q];
          break;
        }
      }
    }
    std::vector<std::pair<int32_t, int32_t>> in_edges;  // (to, from), blocked heads only
    for (const auto& [from, to] : direct_) {
      if (in_degree_[from] > 0 && in_degree_[to] > 0) in_edges.emplace_back(to, from);
    }
    std::sort(in_edges.begin(), in_edges.end());
    // waits[a]: (actor b, node on b) that a's head waits for.
    std::vector<std::vector<std::pair<int32_t, int32_t>>> waits(actors);
    for (int32_t a = 0; a < actors; ++a) {
      const int32_t node = head[a];
      if (node == kNone) continue;
      for (const std::vector<int32_t>& positions : position_) {
        const int32_t q = positions[node];
        if (q != kNone && sequence_actor_[q] != a) waits[a].emplace_back(sequence_actor_[q], node);
      }
      auto it = std::lower_bound(in_edges.begin(), in_edges.end(), std::make_pair(node, kNone));
      for (; it != in_edges.end() && it->first == node; ++it) {
        waits[a].emplace_back(table_.ActorOfNode(it->second), it->second);
      }
    }
    // Shortest loop: breadth-first from each stuck actor (bounded work).
    std::vector<std::pair<int32_t, int32_t>> best;  // (actor, node it waits for) per step
    std::vector<int32_t> parent(actors), via(actors);
    int32_t starts = 0;
    for (int32_t start = 0; start < actors && starts < 256; ++start) {
      if (head[start] == kNone) continue;
      ++starts;
      std::fill(parent.begin(), parent.end(), kUnvisited);
      std::vector<int32_t> queue = {start};
      parent[start] = kNone;
      int32_t closing = kNone, closing_via = kNone;
      for (size_t i = 0; i < queue.size() && closing == kNone; ++i) {
        const int32_t a = queue[i];
        for (const auto& [b, node] : waits[a]) {
          if (b == start) {
            closing = a;
            closing_via = node;
            break;
          }
          if (parent[b] == kUnvisited) {
            parent[b] = a;
            via[b] = node;
            queue.push_back(b);
          }
        }
      }
      if (closing == kNone) continue;
      std::vector<std::pair<int32_t, int32_t>> loop = {{closing, closing_via}};
      for (int32_t a = closing; parent[a] != kNone; a = parent[a]) loop.emplace_back(parent[a], via[a]);
      std::reverse(loop.begin(), loop.end());
      if (best.empty() || loop.size() < best.size()) best = std::move(loop);
      if (best.size() == 1) break;
    }
    if (best.empty()) return "deadlock: no witness found (a bug in the validator)";
    // best[i] = (actor a_i, node y_i on a_{i+1} that a_i's head waits for).
    std::string text = absl::StrCat("deadlock: ", Describe(head[best[0].first], best[0].first));
    for (size_t i = 0; i < best.size(); ++i) {
      const int32_t next = best[(i + 1) % best.size()].first;
      const int32_t waited = best[i].second;
      if (waited != head[next] && waited != head[best[i].first]) {
        absl::StrAppend(&text, " waits for ", Describe(waited, next), EdgeNote(waited, head[best[i].first]));
        absl::StrAppend(&text, " waits for ", Describe(head[next], next));
      } else {
        absl::StrAppend(&text, " waits for ", Describe(head[next], next), EdgeNote(waited, head[best[i].first]));
      }
    }
    return text;
  }

  // Resolves a stage's input gradient to its B or I, for schedules/dataflow.h.
  struct GradientOf {
    const SlotTable* table;
    Task operator()(int32_t stage, int32_t microbatch) const { return GradientProducer(*table, stage, microbatch); }
  };
  GradientOf gradient_producer() const { return GradientOf{&table_}; }

  // On a stage graph that is not a chain, the stage edge along which slot
  // node `to` reads an output of slot node `from`: " (stage edge 1->2)", or
  // "" when the wait is not a cross-stage read.
  std::string EdgeNote(int32_t from, int32_t to) const {
    if (schedule_.stage_edges.empty() || from >= num_slots_ || to >= num_slots_) return "";
    const int32_t actor = table_.ActorOfNode(to);
    const Slot& slot = schedule_.programs[actor][to - table_.first_node[actor]];
    std::string note;
    for (const Task& task : slot.tasks) {
      ForEachProducer(stages_, task, gradient_producer(), [&](const Task& producer, bool) {
        if (note.empty() && NodeOf(table_, producer) == from && producer.stage != task.stage) {
          note = absl::StrCat(" (stage edge ", ir::StageEdgeName(DataflowEdge(producer, task)), ")");
        }
      });
    }
    return note;
  }

  // A node as seen from `actor`'s program.
  std::string Describe(int32_t node, int32_t actor) const {
    if (node < num_slots_) {
      const int32_t slot = node - table_.first_node[actor];
      return absl::StrCat("actor ", actor, ": ", SlotName(schedule_.programs[actor][slot]),
                          " (slot ", slot, ")");
    }
    const Transfer& t = transfers_[node - num_slots_];
    const std::string what = absl::StrCat(TaskName(t.producer), " -> ", TaskName(t.consumer));
    if (actor == t.from_actor) {
      return absl::StrCat("actor ", actor, ": send ", what, " to actor ", t.to_actor);
    }
    return absl::StrCat("actor ", actor, ": receive ", what, " from actor ", t.from_actor);
  }

 private:
  static constexpr int32_t kUnvisited = -2;

  int32_t num_actors() const { return schedule_.num_actors; }

  void BuildBuffered() {
    sequence_.resize(num_slots_);
    sequence_actor_.resize(num_slots_);
    sequence_begin_ = table_.first_node;
    for (int32_t a = 0; a < num_actors(); ++a) {
      for (int32_t n = table_.first_node[a]; n < table_.first_node[a + 1]; ++n) {
        sequence_[n] = n;
        sequence_actor_[n] = a;
      }
    }
    for (int32_t a = 0; a < num_actors(); ++a) {
      const std::vector<Slot>& program = schedule_.programs[a];
      for (int32_t i = 0; i < static_cast<int32_t>(program.size()); ++i) {
        const int32_t node = table_.first_node[a] + i;
        for (const Task& task : program[i].tasks) {
          ForEachProducer(stages_, task, gradient_producer(), [&](const Task& producer, bool) {
            direct_.emplace_back(NodeOf(table_, producer), node);
          });
        }
      }
    }
  }

  void BuildRendezvous() {
    // Transfers in the producers' slot order, so that each slot's sends
    // follow it in its tasks' order. Each is found again by its
    // (consumer, producer) task indices.
    std::vector<std::tuple<int64_t, int64_t, int32_t>> transfer_of_edge;
    std::vector<int32_t> sends_begin(num_slots_ + 1, 0);
    std::vector<int32_t> sends;
    auto index = [&](const Task& t) { return table_.Index(t.kind, t.stage.value, t.microbatch.value); };
    for (int32_t a = 0; a < num_actors(); ++a) {
      const std::vector<Slot>& program = schedule_.programs[a];
      for (int32_t i = 0; i < static_cast<int32_t>(program.size()); ++i) {
        const int32_t node = table_.first_node[a] + i;
        for (const Task& task : program[i].tasks) {
          ForEachConsumer(stages_, task, gradient_producer(), [&](const Task& consumer) {
            if (consumer.stage == task.stage) return;
            const int32_t to = schedule_.stage_to_actor[consumer.stage.value].value;
            if (to == a) return;
            const int32_t transfer = num_slots_ + static_cast<int32_t>(transfers_.size());
            transfers_.push_back(Transfer{task, consumer, a, to});
            transfer_of_edge.emplace_back(index(consumer), index(task), transfer);
            sends.push_back(transfer);
          });
        }
        sends_begin[node + 1] = static_cast<int32_t>(sends.size());
      }
    }
    std::sort(transfer_of_edge.begin(), transfer_of_edge.end());
    auto find_transfer = [&](const Task& consumer, const Task& producer) {
      auto it = std::lower_bound(transfer_of_edge.begin(), transfer_of_edge.end(),
                                 std::make_tuple(index(consumer), index(producer), int32_t{-1}));
      return std::get<2>(*it);
    };
    sequence_begin_.assign(num_actors() + 1, 0);
    for (int32_t a = 0; a < num_actors(); ++a) {
      sequence_begin_[a] = static_cast<int32_t>(sequence_.size());
      const std::vector<Slot>& program = schedule_.programs[a];
      for (int32_t i = 0; i < static_cast<int32_t>(program.size()); ++i) {
        const int32_t node = table_.first_node[a] + i;
        for (const Task& task : program[i].tasks) {
          ForEachProducer(stages_, task, gradient_producer(), [&](const Task& producer, bool) {
            if (schedule_.stage_to_actor[producer.stage.value].value == a) {
              direct_.emplace_back(NodeOf(table_, producer), node);
            } else {
              sequence_.push_back(find_transfer(task, producer));
            }
          });
        }
        sequence_.push_back(node);
        sequence_.insert(sequence_.end(), sends.begin() + sends_begin[node],
                         sends.begin() + sends_begin[node + 1]);
      }
    }
    sequence_begin_[num_actors()] = static_cast<int32_t>(sequence_.size());
    sequence_actor_.resize(sequence_.size());
    for (int32_t a = 0; a < num_actors(); ++a) {
      std::fill(sequence_actor_.begin() + sequence_begin_[a],
                sequence_actor_.begin() + sequence_begin_[a + 1], a);
    }
  }

  const Schedule& schedule_;
  const SlotTable& table_;
  const ir::StageGraph stages_;
  const int32_t num_slots_;
  int32_t num_nodes_ = 0;
  std::vector<Transfer> transfers_;
  std::vector<int32_t> sequence_;         // Every actor's program order, concatenated.
  std::vector<int32_t> sequence_begin_;   // num_actors + 1 offsets into sequence_.
  std::vector<int32_t> sequence_actor_;   // The actor of each sequence position.
  std::vector<int32_t> position_[2];      // Each node's sequence positions, or kNone.
  std::vector<std::pair<int32_t, int32_t>> direct_;
  std::vector<int32_t> out_begin_;
  std::vector<int32_t> out_target_;
  std::vector<int32_t> in_degree_;  // After FindBlocked(): > 0 for nodes that never run.
};

}  // namespace

int32_t SlotTable::ActorOfNode(int32_t node) const {
  return static_cast<int32_t>(std::upper_bound(first_node.begin(), first_node.end(), node) -
                              first_node.begin()) -
         1;
}

std::optional<std::string> FindDeadlock(const Schedule& schedule, const SlotTable& table,
                                        bool rendezvous) {
  Graph graph(schedule, table, rendezvous);
  if (!graph.FindBlocked()) return std::nullopt;
  return graph.Witness();
}

}  // namespace tandem::schedules::internal
