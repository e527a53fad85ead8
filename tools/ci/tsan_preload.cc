// libtandem_tsan_preload.so: makes Abseil's (and KJ's) synchronization visible
// to ThreadSanitizer when those libraries were not built with it (Debian's
// are not), for tools/ci/thread_suite.sh, which preloads it (LD_PRELOAD)
// into every test and actor process of the TSan build.
//
// TSan sees only the synchronization of code it instrumented. Debian's
// absl::Mutex locks with its own atomics and futex calls inside
// libabsl_synchronization.so, so TSan cannot see that two accesses under one
// mutex are ordered, and reports them as races. This library interposes the
// mutex's out-of-line methods (absl::Mutex, absl::CondVar,
// absl::Notification, and kj::_::Mutex, under KJ's MutexGuarded and its
// cross-thread kj::Executor), calls the real ones (dlsym RTLD_NEXT) and tells TSan
// what they did through its custom-mutex annotations
// (sanitizer/tsan_interface.h): a lock acquires the mutex, an unlock
// releases it, and a wait (CondVar::Wait, Mutex::Await, LockWhen) releases
// it, then acquires it again. TSan ignores the memory accesses made between
// a pre_ and a post_ annotation, which covers the absl::Condition
// predicates that Abseil evaluates inside Unlock and Await with the mutex
// held.
//
// It is built without TSan's instrumentation and with no dependency on its
// runtime: the __tsan_ functions resolve to the preloaded process's own.
// The mangled names are those of the Abseil that Debian 12 ships (inline
// namespace `debian3`) and of its Cap'n Proto 0.9's KJ; loading it next to
// others fails with a message saying so, rather than annotating nothing.
#include <dlfcn.h>
#include <kj/mutex.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>

extern "C" {
void __tsan_mutex_pre_lock(void* addr, unsigned flags);
void __tsan_mutex_post_lock(void* addr, unsigned flags, int recursion);
int __tsan_mutex_pre_unlock(void* addr, unsigned flags);
void __tsan_mutex_post_unlock(void* addr, unsigned flags);
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace {

constexpr unsigned kReadLock = 1u << 3;  // __tsan_mutex_read_lock
constexpr unsigned kTryLock = 1u << 4;   // __tsan_mutex_try_lock
constexpr unsigned kTryLockFailed = 1u << 5;

// absl::Duration and absl::Time as the x86-64 ABI passes them (trivially
// copyable, 16 bytes: two integer registers).
struct Duration {
  int64_t hi;
  uint32_t lo;
};
using Time = Duration;

// Abseil's methods call one another through the PLT (CondVar's
// WaitWithTimeout is its WaitWithDeadline, Notification locks its own
// Mutex, ...), so they land here again: only the outermost call of a thread
// is annotated, and a nested one goes straight to Abseil.
thread_local int depth = 0;
class Outermost {
 public:
  Outermost() : outermost_(depth++ == 0) {}
  Outermost(const Outermost&) = delete;
  Outermost& operator=(const Outermost&) = delete;
  ~Outermost() { --depth; }
  explicit operator bool() const { return outermost_; }

 private:
  bool outermost_;
};

template <typename F>
F Real(const char* name) {
  void* real = dlsym(RTLD_NEXT, name);
  if (real == nullptr) {
    std::fprintf(stderr,
                 "libtandem_tsan_preload: no %s after this library: it annotates the Abseil and KJ of "
                 "Debian 12 (absl::debian3, Cap'n Proto 0.9) and this process has others\n",
                 name);
    std::abort();
  }
  return reinterpret_cast<F>(real);
}

// The three shapes of call, each made straight when nested (Outermost) and
// annotated when outermost. `real` is the interposed function; `args` its
// arguments, `mu` the mutex among them.

// A call that takes `mu`. With kTryLock in `flags`, its result says whether
// it did; any other result (a timed LockWhen's) is the caller's.
template <typename F, typename... Args>
auto Lock(F real, void* mu, unsigned flags, Args&&... args) {
  const Outermost outermost;
  if (!outermost) return real(std::forward<Args>(args)...);
  __tsan_mutex_pre_lock(mu, flags);
  if constexpr (std::is_void_v<decltype(real(std::forward<Args>(args)...))>) {
    real(std::forward<Args>(args)...);
    __tsan_mutex_post_lock(mu, flags, 0);
  } else {
    auto result = real(std::forward<Args>(args)...);
    __tsan_mutex_post_lock(mu, result || (flags & kTryLock) == 0 ? flags : flags | kTryLockFailed, 0);
    return result;
  }
}

// A call that lets `mu` go.
template <typename F, typename... Args>
void Unlock(F real, void* mu, unsigned flags, Args&&... args) {
  const Outermost outermost;
  if (!outermost) return real(std::forward<Args>(args)...);
  __tsan_mutex_pre_unlock(mu, flags);
  real(std::forward<Args>(args)...);
  __tsan_mutex_post_unlock(mu, flags);
}

// A call made with `mu` held that lets it go and takes it again before it
// returns (a wait).
template <typename F, typename... Args>
auto Wait(F real, void* mu, Args&&... args) {
  const Outermost outermost;
  if (!outermost) return real(std::forward<Args>(args)...);
  __tsan_mutex_pre_unlock(mu, 0);
  struct TakenAgain {
    void* mu;
    ~TakenAgain() {
      __tsan_mutex_post_unlock(mu, 0);
      __tsan_mutex_pre_lock(mu, 0);
      __tsan_mutex_post_lock(mu, 0, 0);
    }
  } taken_again{mu};
  return real(std::forward<Args>(args)...);
}

// The real function behind an extern "C" interposer, whose name is the
// mangled name itself: `static const auto real = REAL_OF(its name);`.
#define REAL_OF(name) Real<decltype(&name)>(#name)

}  // namespace

extern "C" {

// ---- absl::Mutex

void _ZN4absl7debian35Mutex4LockEv(void* mu) {
  static const auto real = REAL_OF(_ZN4absl7debian35Mutex4LockEv);
  Lock(real, mu, 0, mu);
}

void _ZN4absl7debian35Mutex10ReaderLockEv(void* mu) {
  static const auto real = REAL_OF(_ZN4absl7debian35Mutex10ReaderLockEv);
  Lock(real, mu, kReadLock, mu);
}

bool _ZN4absl7debian35Mutex7TryLockEv(void* mu) {
  static const auto real = REAL_OF(_ZN4absl7debian35Mutex7TryLockEv);
  return Lock(real, mu, kTryLock, mu);
}

bool _ZN4absl7debian35Mutex13ReaderTryLockEv(void* mu) {
  static const auto real = REAL_OF(_ZN4absl7debian35Mutex13ReaderTryLockEv);
  return Lock(real, mu, kReadLock | kTryLock, mu);
}

void _ZN4absl7debian35Mutex6UnlockEv(void* mu) {
  static const auto real = REAL_OF(_ZN4absl7debian35Mutex6UnlockEv);
  Unlock(real, mu, 0, mu);
}

void _ZN4absl7debian35Mutex12ReaderUnlockEv(void* mu) {
  static const auto real = REAL_OF(_ZN4absl7debian35Mutex12ReaderUnlockEv);
  Unlock(real, mu, kReadLock, mu);
}

// LockWhen: a lock, taken once the condition holds. The timed ones take
// the mutex whatever they return (the result says whether the condition
// holds).
void _ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(void* mu, const void* condition) {
  static const auto real = REAL_OF(_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE);
  Lock(real, mu, 0, mu, condition);
}

void _ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(void* mu, const void* condition) {
  static const auto real = REAL_OF(_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE);
  Lock(real, mu, kReadLock, mu, condition);
}

bool _ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(void* mu, const void* condition,
                                                                                  Duration timeout) {
  static const auto real = REAL_OF(_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE);
  return Lock(real, mu, 0, mu, condition, timeout);
}

bool _ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(void* mu, const void* condition,
                                                                               Time deadline) {
  static const auto real = REAL_OF(_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE);
  return Lock(real, mu, 0, mu, condition, deadline);
}

bool _ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(void* mu,
                                                                                        const void* condition,
                                                                                        Duration timeout) {
  static const auto real =
      REAL_OF(_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE);
  return Lock(real, mu, kReadLock, mu, condition, timeout);
}

bool _ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(void* mu,
                                                                                     const void* condition,
                                                                                     Time deadline) {
  static const auto real =
      REAL_OF(_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE);
  return Lock(real, mu, kReadLock, mu, condition, deadline);
}

// Await: made with the mutex held (as a writer: Abseil's Await on a reader
// lock is rare and Tandem makes none).
void _ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(void* mu, const void* condition) {
  static const auto real = REAL_OF(_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE);
  Wait(real, mu, mu, condition);
}

bool _ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(void* mu, const void* condition,
                                                                               Duration timeout) {
  static const auto real = REAL_OF(_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE);
  return Wait(real, mu, mu, condition, timeout);
}

bool _ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(void* mu, const void* condition,
                                                                            Time deadline) {
  static const auto real = REAL_OF(_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE);
  return Wait(real, mu, mu, condition, deadline);
}

// ---- absl::CondVar: every wait lets its mutex go and takes it again.

void _ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(void* cv, void* mu) {
  static const auto real = REAL_OF(_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE);
  Wait(real, mu, cv, mu);
}

bool _ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(void* cv, void* mu, Duration timeout) {
  static const auto real = REAL_OF(_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE);
  return Wait(real, mu, cv, mu, timeout);
}

bool _ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(void* cv, void* mu, Time deadline) {
  static const auto real = REAL_OF(_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE);
  return Wait(real, mu, cv, mu, deadline);
}

// ---- absl::Notification: Notify releases, a wait that saw it acquires.

void _ZN4absl7debian312Notification6NotifyEv(void* notification) {
  static const auto real = REAL_OF(_ZN4absl7debian312Notification6NotifyEv);
  if (const Outermost outermost; outermost) __tsan_release(notification);
  real(notification);
}

void _ZNK4absl7debian312Notification19WaitForNotificationEv(const void* notification) {
  static const auto real = REAL_OF(_ZNK4absl7debian312Notification19WaitForNotificationEv);
  const Outermost outermost;
  real(notification);
  if (outermost) __tsan_acquire(const_cast<void*>(notification));
}

bool _ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(const void* notification,
                                                                                    Duration timeout) {
  static const auto real = REAL_OF(_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE);
  const Outermost outermost;
  const bool notified = real(notification, timeout);
  if (outermost && notified) __tsan_acquire(const_cast<void*>(notification));
  return notified;
}

bool _ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE(const void* notification,
                                                                                 Time deadline) {
  static const auto real = REAL_OF(_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE);
  const Outermost outermost;
  const bool notified = real(notification, deadline);
  if (outermost && notified) __tsan_acquire(const_cast<void*>(notification));
  return notified;
}

}  // extern "C"

// ---- kj::_::Mutex (through its class: the arguments' types decide how they
// are passed).

namespace kj::_ {

bool Mutex::lock(Exclusivity exclusivity, Maybe<Duration> timeout, LockSourceLocationArg location) {
  static const auto real = Real<bool (*)(Mutex*, Exclusivity, Maybe<Duration>, LockSourceLocationArg)>(
      "_ZN2kj1_5Mutex4lockENS1_11ExclusivityENS_5MaybeINS_8QuantityIlNS0_15NanosecondLabelEEEEENS_18NoopSourceLocationE");
  const unsigned flags = (exclusivity == SHARED ? kReadLock : 0u) | (timeout == nullptr ? 0u : kTryLock);
  return ::Lock(real, this, flags, this, exclusivity, kj::mv(timeout), location);
}

void Mutex::unlock(Exclusivity exclusivity, Waiter* waiter_to_skip) {
  static const auto real =
      Real<void (*)(Mutex*, Exclusivity, Waiter*)>("_ZN2kj1_5Mutex6unlockENS1_11ExclusivityEPNS1_6WaiterE");
  ::Unlock(real, this, exclusivity == SHARED ? kReadLock : 0u, this, exclusivity, waiter_to_skip);
}

// Made with the mutex held exclusively; it lets it go while it waits.
void Mutex::wait(Predicate& predicate, Maybe<Duration> timeout, LockSourceLocationArg location) {
  static const auto real = Real<void (*)(Mutex*, Predicate&, Maybe<Duration>, LockSourceLocationArg)>(
      "_ZN2kj1_5Mutex4waitERNS1_9PredicateENS_5MaybeINS_8QuantityIlNS0_15NanosecondLabelEEEEENS_18NoopSourceLocationE");
  ::Wait(real, this, this, predicate, kj::mv(timeout), location);
}

}  // namespace kj::_
