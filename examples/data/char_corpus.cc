#include "examples/data/char_corpus.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "examples/limits.h"
#include "ir/read_file.h"

namespace tandem::examples {
namespace {

constexpr char kDefaultCorpus[] = "/usr/share/common-licenses";

// A deterministic stand-in text when no file is available: sentences drawn
// from a small grammar, so there is structure to learn.
std::string GeneratedText() {
  const char* subjects[] = {"the actor", "a stage", "the controller", "each microbatch", "the schedule"};
  const char* verbs[] = {"sends", "receives", "computes", "waits for", "frees"};
  const char* objects[] = {"the activation", "a gradient", "its buffer", "the next task", "the loss"};
  std::string text;
  uint64_t state = 12345;
  for (int i = 0; i < 20000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    absl::StrAppend(&text, subjects[(state >> 33) % 5], " ", verbs[(state >> 40) % 5], " ",
                    objects[(state >> 50) % 5], ".\n");
  }
  return text;
}

// The offset of the first byte that makes `text` not UTF-8 text (a NUL,
// or a byte outside a well-formed UTF-8 sequence), or npos.
size_t FirstNonTextByte(absl::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const auto continues = [&](size_t i, unsigned char low = 0x80, unsigned char high = 0xBF) {
    return i < text.size() && byte(i) >= low && byte(i) <= high;
  };
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char lead = byte(i);
    size_t length = 0;
    if (lead == 0) return i;
    if (lead < 0x80) {
      length = 1;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = continues(i + 1) ? 2 : 0;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      // No overlong forms (E0 80..9F) and no surrogates (ED A0..BF).
      const unsigned char low = lead == 0xE0 ? 0xA0 : 0x80;
      const unsigned char high = lead == 0xED ? 0x9F : 0xBF;
      length = continues(i + 1, low, high) && continues(i + 2) ? 3 : 0;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      // No overlong forms (F0 80..8F) and nothing past U+10FFFF (F4 90..).
      const unsigned char low = lead == 0xF0 ? 0x90 : 0x80;
      const unsigned char high = lead == 0xF4 ? 0x8F : 0xBF;
      length = continues(i + 1, low, high) && continues(i + 2) && continues(i + 3) ? 4 : 0;
    }
    if (length == 0) return i;
    i += length;
  }
  return absl::string_view::npos;
}

// InvalidArgument naming `source` and the offset unless `text` is UTF-8
// text: a binary file given as data would train on noise.
absl::Status CheckText(absl::string_view text, absl::string_view source) {
  const size_t offset = FirstNonTextByte(text);
  if (offset == absl::string_view::npos) return absl::OkStatus();
  const std::string what = text[offset] == '\0'
                               ? "a NUL byte"
                               : absl::StrFormat("0x%02x, not UTF-8", static_cast<unsigned char>(text[offset]));
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": byte ", offset, " is ", what, ": the data must be a UTF-8 text file (this looks binary)"));
}

// The file's bytes; InvalidArgument before reading one larger than what is
// left of kMaxCorpusBytes after `already` bytes.
// A FIFO, a device or a directory is InvalidArgument before a byte is read
// (ir/read_file.h): /dev/zero would otherwise be read until memory ends.
absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path, int64_t already = 0) {
  return ir::ReadFileUpTo(path.string(), kMaxCorpusBytes - already,
                          absl::StrCat("the text data (at most ", kMaxCorpusBytes, " bytes in all) ", path.string()));
}

}  // namespace

absl::StatusOr<CharCorpus> CharCorpus::FromText(std::string text, std::string source) {
  if (absl::Status status = CheckText(text, source); !status.ok()) return status;
  if (text.size() < 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", text.size(), " bytes of text is too little to train on (need 1024)"));
  }
  CharCorpus corpus;
  corpus.source_ = std::move(source);
  bool seen[256] = {};
  for (unsigned char c : text) seen[c] = true;
  int32_t index_of[256] = {};
  for (int c = 0; c < 256; ++c) {
    if (seen[c]) {
      index_of[c] = static_cast<int32_t>(corpus.alphabet_.size());
      corpus.alphabet_.push_back(static_cast<char>(c));
    }
  }
  corpus.ids_.reserve(text.size());
  for (unsigned char c : text) corpus.ids_.push_back(index_of[c]);
  return corpus;
}

absl::StatusOr<CharCorpus> CharCorpus::Load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::is_directory(path, error)) {
    absl::StatusOr<std::vector<std::string>> files = TextFiles(path);
    if (!files.ok()) return files.status();
    std::string text;
    for (const fs::path file : *files) {
      absl::StatusOr<std::string> content = ReadFile(file, static_cast<int64_t>(text.size()));
      if (absl::IsInvalidArgument(content.status())) return content.status();
      if (!content.ok()) continue;
      if (absl::Status status = CheckText(*content, file.string()); !status.ok()) return status;
      text += *content;
    }
    return FromText(std::move(text), path);
  }
  absl::StatusOr<std::string> content = ReadFile(path);
  if (!content.ok()) return content.status();
  return FromText(*std::move(content), path);
}

absl::StatusOr<CharCorpus> CharCorpus::LoadDefault(const std::optional<std::string>& data_path) {
  if (data_path) return Load(*data_path);
  if (std::filesystem::is_directory(kDefaultCorpus)) {
    absl::StatusOr<CharCorpus> corpus = Load(kDefaultCorpus);
    if (corpus.ok()) return corpus;
  }
  return FromText(GeneratedText(), "<generated text>");
}

absl::StatusOr<std::vector<int32_t>> CharCorpus::Encode(absl::string_view text) const {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < text.size(); ++i) {
    const size_t at = alphabet_.find(text[i]);
    if (at == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "byte %d of the text (0x%02x) never occurs in %s: the character-level model cannot read it", i,
          static_cast<unsigned char>(text[i]), source_));
    }
    ids.push_back(static_cast<int32_t>(at));
  }
  return ids;
}

absl::StatusOr<std::string> CharCorpus::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      // A head wider than the corpus (--vocab) may pick an id no byte has.
      text += "\xef\xbf\xbd";  // U+FFFD
      continue;
    }
    text.push_back(alphabet_[static_cast<size_t>(id)]);
  }
  return text;
}

std::string CharCorpus::description() const { return absl::StrCat(source_, " (", size(), " bytes)"); }

}  // namespace tandem::examples
