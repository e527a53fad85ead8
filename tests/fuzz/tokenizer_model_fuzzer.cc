// Fuzz target: a SentencePiece model file as `tandem tokenize --model`,
// `train --tokenizer` and `generate --tokenizer` read one
// (examples/data/sentencepiece_model_check.h, then the library). Beyond not
// crashing: a refusal is InvalidArgument naming the file; a model the check
// passes loads or is refused by the library with a message, and then
// encodes and decodes text without reading outside its tables. The text is
// a fixed one, through every normaliser rule a real model has, followed by
// the input's last bytes, so that the fuzzer also drives the trie's search.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "examples/data/sentencepiece_bridge.h"
#include "examples/data/sentencepiece_model_check.h"
#include "tests/fuzz/fuzz_support.h"

namespace tandem::examples {
namespace {

void Run(const uint8_t* data, size_t size) {
  const absl::string_view model = fuzz::AsText(data, size);
  if (absl::Status checked = CheckSentencePieceModel(model, "fuzz.model"); !checked.ok()) {
    fuzz::FuzzCheck(checked.code() == absl::StatusCode::kInvalidArgument,
                    "unexpected error code: " + checked.ToString());
    fuzz::FuzzCheck(absl::StrContains(checked.message(), "fuzz.model"), "error does not name the file: " + checked.ToString());
    return;
  }
  std::shared_ptr<const spm::Model> loaded;
  if (!spm::LoadSerialized(std::string_view(model.data(), model.size()), &loaded).empty()) return;
  std::string text = "Hello, world! \xef\xbc\xa1\xef\xbd\x81 \xe2\x85\xa2 \xef\xac\x81 \xe3\x8c\x80 caf\xc3\xa9 \t\n ";
  text.append(model.substr(size > 64 ? size - 64 : 0).data(), std::min<size_t>(size, 64));
  std::vector<int> ids;
  if (!spm::Encode(*loaded, text, &ids).empty()) return;
  for (int id : ids) fuzz::FuzzCheck(id >= 0 && id < spm::PieceCount(*loaded), "an id outside the vocabulary");
  std::string decoded;
  (void)spm::Decode(*loaded, ids, &decoded);
}

}  // namespace
}  // namespace tandem::examples

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::examples::Run(data, size);
  return 0;
}
