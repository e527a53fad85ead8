// For tests of bad input that must not eat the machine if the code under
// test regresses: the case runs in a child process whose memory is capped,
// so an allocation sized by the input fails there (or the child dies)
// instead of growing for minutes into gigabytes.
//
// Two kinds of child:
// - a forked child that runs test code (ExpectWithinMemory): its address
//   space is capped at its current size plus a headroom (RLIMIT_AS). This
//   works under ASan and TSan too, whose shadow memory is reserved before
//   the cap; run the sanitizer suite with allocator_may_return_null=1 so
//   that an allocation over the cap returns null, as it does outside ASan.
// - a child about to exec a program of this build (tests/tools/
//   cli_process.h): its address space is capped at an absolute size. A
//   sanitized program reserves terabytes of address space when it starts,
//   so there the cap is the sanitizer's own hard_rss_limit_mb instead (the
//   program aborts once its resident memory passes it).
#ifndef TANDEM_TESTS_TESTING_MEMORY_LIMIT_H_
#define TANDEM_TESTS_TESTING_MEMORY_LIMIT_H_

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#if defined(__SANITIZE_ADDRESS__)
#define TANDEM_TESTS_SANITIZER_OPTIONS "ASAN_OPTIONS"
#elif defined(__SANITIZE_THREAD__)
#define TANDEM_TESTS_SANITIZER_OPTIONS "TSAN_OPTIONS"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TANDEM_TESTS_SANITIZER_OPTIONS "ASAN_OPTIONS"
#elif __has_feature(thread_sanitizer)
#define TANDEM_TESTS_SANITIZER_OPTIONS "TSAN_OPTIONS"
#endif
#endif
// Defined in a sanitizer build, whichever compiler made it (GCC says so
// with __SANITIZE_*__, clang only through __has_feature): its allocator is
// not glibc's malloc.
#ifdef TANDEM_TESTS_SANITIZER_OPTIONS
#define TANDEM_TESTS_SANITIZED 1
#endif

namespace tandem::test {

// The process's current address-space size, from /proc/self/statm.
inline int64_t AddressSpaceBytes() {
  long pages = 0;
  if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%ld", &pages) != 1) pages = 0;
    std::fclose(statm);
  }
  return static_cast<int64_t>(pages) * sysconf(_SC_PAGESIZE);
}

// Caps this process's address space at `bytes`; it cannot be undone. For a
// forked child only. Exits with 98 if the kernel refuses.
inline void CapAddressSpaceAt(int64_t bytes) {
  const rlim_t cap = static_cast<rlim_t>(bytes);
  const rlimit limit{cap, cap};
  if (setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(98);
}

// 1 GiB above what the process uses: far more than any bounded parse needs
// and far less than the unbounded ones asked for.
inline constexpr int64_t kHeadroom = int64_t{1} << 30;

// Runs `body` in a forked child capped at kHeadroom above the test's
// current size; the test fails unless `body` returns true there (what the
// child printed to stderr comes with the failure).
inline void ExpectWithinMemory(const std::function<bool()>& body) {
  EXPECT_EXIT(
      {
        CapAddressSpaceAt(AddressSpaceBytes() + kHeadroom);
        std::_Exit(body() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// The environment settings a child needs, on top of its inherited ones, to
// be held to `bytes` once it execs a program of this build: none outside a
// sanitizer build (CapBeforeExec does it all); in one, the sanitizer's
// options with hard_rss_limit_mb added. Call before fork(): it allocates.
inline std::vector<std::string> MemoryCapEnvironment(int64_t bytes) {
#ifdef TANDEM_TESTS_SANITIZER_OPTIONS
  const char* inherited = std::getenv(TANDEM_TESTS_SANITIZER_OPTIONS);
  return {absl::StrCat(TANDEM_TESTS_SANITIZER_OPTIONS, "=", inherited == nullptr ? "" : inherited,
                       inherited == nullptr ? "" : ":", "hard_rss_limit_mb=", bytes >> 20)};
#else
  (void)bytes;
  return {};
#endif
}

// In a forked child about to exec a program of this build: caps its
// address space at `bytes`, except in a sanitizer build, where
// MemoryCapEnvironment's setting holds it instead.
inline void CapBeforeExec(int64_t bytes) {
#ifdef TANDEM_TESTS_SANITIZER_OPTIONS
  (void)bytes;
#else
  CapAddressSpaceAt(bytes);
#endif
}

}  // namespace tandem::test

#endif  // TANDEM_TESTS_TESTING_MEMORY_LIMIT_H_
