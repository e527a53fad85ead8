// What the fuzz targets under tests/fuzz/ share: the input as text, a check
// that fails loudly, and Cap'n Proto framing of arbitrary bytes.
//
// A target is one LLVMFuzzerTestOneInput. Built with -fsanitize=fuzzer it is
// a libFuzzer binary (TANDEM_FUZZ=ON, tests/fuzz/run_fuzzers.sh); linked
// with replay_main.cc it is the CTest test that replays the target's seed
// corpus and regression inputs in every build. A failed FuzzCheck prints
// what broke and aborts: libFuzzer saves the input as a crash, the replay
// test fails naming the file.
#ifndef TANDEM_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define TANDEM_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "capnp/message.h"
#include "capnp/serialize.h"
#include "kj/array.h"
#include "kj/exception.h"

namespace tandem::fuzz {

inline absl::string_view AsText(const uint8_t* data, size_t size) {
  return absl::string_view(reinterpret_cast<const char*>(data), size);
}

inline void FuzzCheck(bool holds, absl::string_view what) {
  if (holds) return;
  std::fprintf(stderr, "fuzz check failed: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

// Errors of the text parsers must be InvalidArgument and begin with the
// file name they were given ("<file>:<line>:<col>: error: ...").
inline void CheckNamesFile(const absl::Status& status, absl::string_view filename) {
  FuzzCheck(status.code() == absl::StatusCode::kInvalidArgument,
            std::string("error is not InvalidArgument: ") + status.ToString());
  FuzzCheck(absl::StartsWith(status.message(), filename),
            std::string("error does not begin with the file name: ") + status.ToString());
}

// `read()`, or nullopt if it throws: for reading what the RPC layer reads
// before a decoder gets its part of a message (the root, a parameter's
// pointer), where a malformed message fails the call, not the decoder.
template <typename Read>
auto ReadOrSkip(Read&& read) -> std::optional<decltype(read())> {
  std::optional<decltype(read())> result;
  kj::runCatchingExceptions([&] { result.emplace(read()); });
  return result;
}

// `bytes` as a Cap'n Proto message (segment table first), read with
// `options`. The framing is the RPC layer's business, not the codecs': bytes
// it refuses are skipped (nullopt), as the connection would refuse them.
class FramedMessage {
 public:
  FramedMessage(const uint8_t* data, size_t size, const capnp::ReaderOptions& options)
      : words_(kj::heapArray<capnp::word>((size + sizeof(capnp::word) - 1) / sizeof(capnp::word))) {
    std::memset(words_.begin(), 0, words_.size() * sizeof(capnp::word));
    if (size > 0) std::memcpy(words_.begin(), data, size);
    kj::runCatchingExceptions([&] { reader_.emplace(words_.asPtr(), options); });
  }

  // The root as a `Struct`, or nullopt when the framing or the root pointer is
  // malformed.
  template <typename Struct>
  std::optional<typename Struct::Reader> GetRoot() {
    if (!reader_.has_value()) return std::nullopt;
    return ReadOrSkip([&] { return reader_->getRoot<Struct>(); });
  }

 private:
  kj::Array<capnp::word> words_;
  std::optional<capnp::FlatArrayMessageReader> reader_;
};

}  // namespace tandem::fuzz

#endif  // TANDEM_TESTS_FUZZ_FUZZ_SUPPORT_H_
