// The data-parallel side of a host actor: the all-reduces of its gradients
// across the replicas of its stage (ir/all_reduce.h says what they compute).
// A device-resident actor reduces on its device instead
// (actor/device_all_reduce.h).
//
// Two layers:
//  - CollectiveGroup: one collective library's blocking, ordered all-reduce
//    among the members of one replica group (the actors' own authenticated
//    TCP, actor/tcp_collective.h). A library only moves bytes; the sum in
//    replica order is ir::SumInReplicaOrder, the same everywhere.
//  - Reducer: runs a group's all-reduces on a thread of its own, one at a
//    time in the order they were started, so that an executor's
//    kAllReduceStart returns at once and the reduction overlaps with the
//    instructions after it; kAllReduceWait collects the result.
//
// Nothing waits forever: every all-reduce has a timeout inside the library
// and every Wait a deadline. A member that dies makes the others' all-reduce
// fail (Unavailable or DeadlineExceeded, naming the group and the tag).
// After a failure the group is not reused: the job ends, as for any lost
// actor.
//
// Ownership and threading: the Reducer owns its group and its worker
// thread; Start, Wait and Abort may be called from any one thread (the
// executor's), Abort from any thread at all. Destruction waits for the
// all-reduce in progress (bounded by its timeout) and drops queued ones.
#ifndef TANDEM_ACTOR_COLLECTIVE_H_
#define TANDEM_ACTOR_COLLECTIVE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem::actor {

class CollectiveGroup {
 public:
  virtual ~CollectiveGroup() = default;
  // This member's place in the group: its replica.
  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;
  // The members' actor ids, in replica order, for messages.
  virtual const std::vector<int32_t>& actors() const = 0;
  // The ordered all-reduce of `bucket` in place: afterwards every member
  // holds the sum of all members' buckets, added in replica order. Blocks
  // until done, at most `timeout`. Every member calls it with the same
  // `tag` and bucket size, in the same order. Errors name the tag; a lost
  // or silent member is Unavailable or DeadlineExceeded.
  virtual absl::Status AllReduce(std::span<float> bucket, uint32_t tag, absl::Duration timeout) = 0;
  // Connections to this member refused so far (strangers), where the
  // library can tell.
  virtual int64_t refused_connections() const { return 0; }
};

class Reducer {
 public:
  explicit Reducer(std::unique_ptr<CollectiveGroup> group);
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;
  ~Reducer();

  const CollectiveGroup& group() const { return *group_; }

  // Queues the all-reduce `tag` of `bucket`, each run bounded by `timeout`;
  // never blocks. InvalidArgument when `tag` is already queued or not
  // collected; the abort status after Abort.
  absl::Status Start(uint64_t tag, std::vector<float> bucket, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  // The reduced bucket of `tag`, and when the reduction was issued (Start),
  // began moving bytes and ended (steady_clock nanoseconds, as
  // ir::StepOutputs::origin_ns).
  struct Result {
    std::vector<float> bucket;
    int64_t issued_ns = 0;
    int64_t start_ns = 0;
    int64_t end_ns = 0;
  };
  // Waits until all-reduce `tag` is done and collects it: its result, its
  // error, DeadlineExceeded when `deadline` passes first, or the abort
  // status. FailedPrecondition for a tag never started.
  absl::StatusOr<Result> Wait(uint64_t tag, absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // Fails every queued and later all-reduce and every Wait with `status`.
  // The first call wins.
  void Abort(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Job {
    uint64_t tag = 0;
    std::vector<float> bucket;
    absl::Duration timeout;
    int64_t issued_ns = 0;
  };
  struct Done {
    bool finished = false;
    absl::Status status;
    Result result;
  };
  void WorkerLoop();

  std::unique_ptr<CollectiveGroup> group_;
  absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Done> done_ ABSL_GUARDED_BY(mu_);  // started and not collected, by tag
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;  // last: starts once everything above exists
};

// "replica group (actors 1, 3, 5)".
std::string DescribeGroup(const std::vector<int32_t>& actors);

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_COLLECTIVE_H_
