#include "actor/collective.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::actor {
namespace {

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string DescribeGroup(const std::vector<int32_t>& actors) {
  return absl::StrCat("replica group (actors ", absl::StrJoin(actors, ", "), ")");
}

Reducer::Reducer(std::unique_ptr<CollectiveGroup> group)
    : group_(std::move(group)), worker_([this] { WorkerLoop(); }) {}

Reducer::~Reducer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  worker_.join();
}

absl::Status Reducer::Start(uint64_t tag, std::vector<float> bucket, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (!aborted_.ok()) return aborted_;
  if (done_.count(tag)) {
    return absl::InvalidArgumentError(absl::StrCat("all-reduce tag ", tag, " of ", DescribeGroup(group_->actors()),
                                                   " is started again before it was collected"));
  }
  done_[tag];
  queue_.push_back(Job{tag, std::move(bucket), timeout, SteadyNs()});
  return absl::OkStatus();
}

absl::StatusOr<Reducer::Result> Reducer::Wait(uint64_t tag, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto it = done_.find(tag);
  if (it == done_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("all-reduce tag ", tag, " of ",
                                                      DescribeGroup(group_->actors()), " was never started"));
  }
  auto ready = [this, tag]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_.at(tag).finished || !aborted_.ok(); };
  if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat("all-reduce tag ", tag, " of ", DescribeGroup(group_->actors()),
                                                    " did not finish in time"));
  }
  if (!aborted_.ok()) return aborted_;
  Done done = std::move(done_.at(tag));
  done_.erase(tag);
  if (!done.status.ok()) return done.status;
  return std::move(done.result);
}

void Reducer::Abort(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (aborted_.ok()) aborted_ = std::move(status);
  queue_.clear();
}

void Reducer::WorkerLoop() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Reducer* self) ABSL_SHARED_LOCKS_REQUIRED(self->mu_) { return self->stop_ || !self->queue_.empty(); },
          this));
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    Done done;
    done.result.issued_ns = job.issued_ns;
    done.result.start_ns = SteadyNs();
    done.status = group_->AllReduce(job.bucket, static_cast<uint32_t>(job.tag), job.timeout);
    done.result.end_ns = SteadyNs();
    done.result.bucket = std::move(job.bucket);
    done.finished = true;
    absl::MutexLock lock(&mu_);
    auto it = done_.find(job.tag);
    if (it != done_.end()) it->second = std::move(done);
  }
}

}  // namespace tandem::actor
