// A probe for tools/ci/tsan_preload.cc, built only in the TSan build
// (tests/tools/tsan_preload_test.sh runs it): two threads share a counter
// under one of the synchronizations the preload annotates, or under none.
// With the preload, TSan must stay silent for every synchronized mode and
// report the unsynchronized one.
//
//   tsan_preload_probe MODE    MODE: mutex, reader-lock, condvar, await,
//                              notification, kj-mutex, none
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "kj/mutex.h"

namespace {

constexpr int kRounds = 2000;

int Run(const char* mode) {
  absl::Mutex mu;
  absl::CondVar changed;
  int64_t counter = 0;
  bool turn_of_second = false;
  auto bump = [&] { counter = counter + 1; };

  if (std::strcmp(mode, "mutex") == 0 || std::strcmp(mode, "none") == 0) {
    const bool locked = std::strcmp(mode, "mutex") == 0;
    auto work = [&] {
      for (int i = 0; i < kRounds; ++i) {
        if (locked) mu.Lock();
        bump();
        if (locked) mu.Unlock();
      }
    };
    std::thread other(work);
    work();
    other.join();
  } else if (std::strcmp(mode, "reader-lock") == 0) {
    // A writer, then readers that read under a reader lock.
    std::thread writer([&] {
      absl::MutexLock lock(&mu);
      bump();
    });
    writer.join();
    std::thread reader([&] {
      absl::ReaderMutexLock lock(&mu);
      std::printf("%lld\n", static_cast<long long>(counter));
    });
    {
      absl::MutexLock lock(&mu);
      bump();
    }
    reader.join();
  } else if (std::strcmp(mode, "condvar") == 0 || std::strcmp(mode, "await") == 0) {
    // Two threads take turns, handing the counter over by a wait.
    const bool condvar = std::strcmp(mode, "condvar") == 0;
    auto take_turns = [&](bool second) {
      for (int i = 0; i < kRounds / 10; ++i) {
        absl::MutexLock lock(&mu);
        if (condvar) {
          while (turn_of_second != second) changed.WaitWithTimeout(&mu, absl::Seconds(10));
        } else {
          auto mine = [&] { return turn_of_second == second; };
          mu.AwaitWithTimeout(absl::Condition(&mine), absl::Seconds(10));
        }
        bump();
        turn_of_second = !second;
        changed.SignalAll();
      }
    };
    std::thread other(take_turns, true);
    take_turns(false);
    other.join();
  } else if (std::strcmp(mode, "notification") == 0) {
    absl::Notification done;
    std::thread other([&] {
      bump();
      done.Notify();
    });
    done.WaitForNotificationWithTimeout(absl::Seconds(10));
    bump();
    other.join();
  } else if (std::strcmp(mode, "kj-mutex") == 0) {
    kj::MutexGuarded<int64_t> guarded(0);
    auto work = [&] {
      for (int i = 0; i < kRounds; ++i) {
        auto locked = guarded.lockExclusive();
        *locked = *locked + 1;
        bump();  // guarded by the same lock
      }
    };
    std::thread other(work);
    work();
    other.join();
  } else {
    std::fprintf(stderr, "tsan_preload_probe: unknown mode '%s'\n", mode);
    return 2;
  }
  std::printf("counter %lld\n", static_cast<long long>(counter));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tsan_preload_probe MODE\n");
    return 2;
  }
  return Run(argv[1]);
}
