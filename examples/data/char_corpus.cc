#include "examples/data/char_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

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

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

absl::StatusOr<CharCorpus> CharCorpus::FromText(std::string text, std::string source) {
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
  corpus.split_point_ = corpus.size() * 9 / 10;
  return corpus;
}

absl::StatusOr<CharCorpus> CharCorpus::Load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::is_directory(path, error)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(path, error)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    std::string text;
    for (const fs::path& file : files) {
      absl::StatusOr<std::string> content = ReadFile(file);
      if (content.ok()) text += *content;
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

ir::TensorMap CharCorpus::Batch(Split split, int64_t batch, int64_t sequence_length, uint64_t seed,
                                uint64_t index) const {
  int64_t begin = split == Split::kTrain ? 0 : split_point_;
  int64_t end = split == Split::kTrain ? split_point_ : size();
  int64_t span = std::max<int64_t>(1, end - begin - sequence_length - 1);
  ir::HostTensor starts = ir::MakeTensor({ir::DType::kF32, {batch}},
                                         {ir::Initializer::Kind::kUniform, 0.0, 1.0, seed * 1000003 + index});
  std::vector<int32_t> tokens(batch * sequence_length);
  std::vector<int32_t> labels(batch * sequence_length);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t start = begin + std::min<int64_t>(span - 1, static_cast<int64_t>(starts.f32()[b] * span));
    for (int64_t t = 0; t < sequence_length; ++t) {
      tokens[b * sequence_length + t] = ids_[start + t];
      labels[b * sequence_length + t] = ids_[std::min<int64_t>(start + t + 1, size() - 1)];
    }
  }
  return {{"tokens", ir::HostTensor::FromInts({batch, sequence_length}, tokens)},
          {"labels", ir::HostTensor::FromInts({batch, sequence_length}, labels)}};
}

}  // namespace tandem::examples
