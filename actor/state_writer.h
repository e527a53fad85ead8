// StateWriter: an actor's checkpoint files, written behind its steps. The
// actor hands it a snapshot of its state (host tensors that no step
// changes: the executor binds new tensors to its state at each update, and
// a device's state is downloaded into fresh ones) and goes on computing;
// one thread per write checks that the state holds numbers and writes it
// as one state file (ir::WriteStateFile: temporary file, fsync, rename,
// fsync of the directory). One write at a time: a new one first waits for
// the one before. Thread-safe.
#ifndef TANDEM_ACTOR_STATE_WRITER_H_
#define TANDEM_ACTOR_STATE_WRITER_H_

#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ir/host_tensor.h"
#include "ir/state_file.h"

namespace tandem::actor {

class StateWriter {
 public:
  using Outcome = absl::StatusOr<ir::WrittenFile>;

  // `name` ("actor 2") begins its errors.
  explicit StateWriter(std::string name) : name_(std::move(name)) {}
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;
  // Waits for the write in progress (bounded by the file system).
  ~StateWriter();

  // Waits for the write before, if any, then writes `state` to `path` on a
  // thread of its own. A state that holds a NaN or an infinity is not
  // written (OutOfRange naming the tensor and the element): a checkpoint of
  // it would replace a good one.
  void Write(std::string path, ir::TensorMap state);
  // The outcome of the write to `path`, if it is the latest write: nullopt
  // while it runs; NotFound when no write to `path` was started last.
  std::optional<Outcome> Poll(const std::string& path) const;
  // Calls `done` with that outcome once the write ended: here if it has
  // (or none of `path` was started), else on the writer's thread.
  void WhenWritten(const std::string& path, std::function<void(const Outcome&)> done);

 private:
  Outcome Run(const std::string& path, const ir::TensorMap& state) const;

  const std::string name_;
  std::thread thread_;  // the latest write's; joined by the next Write and the destructor
  mutable absl::Mutex mu_;
  std::string path_ ABSL_GUARDED_BY(mu_);
  std::optional<Outcome> outcome_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(const Outcome&)>> waiting_ ABSL_GUARDED_BY(mu_);
};

// The index of `tensor`'s first element that is a NaN or an infinity, for
// the floating types; nullopt when every one is finite (or it holds ints).
std::optional<int64_t> FirstNonFinite(const ir::HostTensor& tensor);

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_STATE_WRITER_H_
