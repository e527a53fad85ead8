#include "examples/data/corpus.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/initial_state.h"

namespace tandem::examples {

absl::StatusOr<std::vector<std::string>> TextFiles(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::is_regular_file(path, error)) return std::vector<std::string>{path};
  if (!fs::is_directory(path, error)) return absl::NotFoundError(absl::StrCat("no text file or directory at ", path));
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(path, error)) {
    if (entry.is_regular_file(error)) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) return absl::NotFoundError(absl::StrCat(path, " holds no regular file"));
  return files;
}

absl::StatusOr<ir::TensorMap> Corpus::Batch(Split split, int64_t batch, int64_t sequence_length, uint64_t seed,
                                            uint64_t index) const {
  const int64_t split_point = SplitPoint(size());
  const int64_t begin = split == Split::kTrain ? 0 : split_point;
  const int64_t end = split == Split::kTrain ? split_point : size();
  const int64_t span = std::max<int64_t>(1, end - begin - sequence_length - 1);
  // MakeExampleJob bounds the batch: this is small.
  ir::HostTensor drawn = *ir::MakeTensor({ir::DType::kF32, {batch}},
                                         {ir::Initializer::Kind::kUniform, 0.0, 1.0, seed * 1000003 + index});
  std::vector<int64_t> starts(batch);
  for (int64_t b = 0; b < batch; ++b) {
    starts[b] = begin + std::min<int64_t>(span - 1, static_cast<int64_t>(drawn.f32()[b] * span));
  }
  return WindowsAt(starts, sequence_length);
}

absl::StatusOr<ir::TensorMap> Corpus::Windows(int64_t first, int64_t batch, int64_t sequence_length) const {
  // Callers bound first, batch and sequence_length (`tandem eval`'s flags):
  // the products fit.
  if ((first + batch) * sequence_length + 1 > size()) {
    return absl::OutOfRangeError(absl::StrCat(description(), " holds ", (size() - 1) / sequence_length,
                                              " windows of ", sequence_length, " tokens (each followed by its ",
                                              "label), not ", first + batch));
  }
  std::vector<int64_t> starts(batch);
  for (int64_t b = 0; b < batch; ++b) starts[b] = (first + b) * sequence_length;
  return WindowsAt(starts, sequence_length);
}

absl::StatusOr<ir::TensorMap> Corpus::WindowsAt(const std::vector<int64_t>& starts, int64_t sequence_length) const {
  const int64_t batch = static_cast<int64_t>(starts.size());
  std::vector<int32_t> tokens(batch * sequence_length);
  std::vector<int32_t> labels(batch * sequence_length);
  std::vector<int32_t> window(sequence_length + 1);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = starts[b];
    // The window and the token after it; past the end, the last token
    // repeats.
    const int64_t count = std::min<int64_t>(sequence_length + 1, size() - start);
    if (absl::Status status = Read(start, count, window.data()); !status.ok()) {
      return absl::Status(status.code(), absl::StrCat(description(), ": tokens ", start, " to ", start + count - 1,
                                                      ": ", status.message()));
    }
    for (int64_t t = count; t <= sequence_length; ++t) window[t] = window[count - 1];
    for (int64_t t = 0; t < sequence_length; ++t) {
      tokens[b * sequence_length + t] = window[t];
      labels[b * sequence_length + t] = window[t + 1];
    }
  }
  return ir::TensorMap{{"tokens", ir::HostTensor::FromInts({batch, sequence_length}, tokens)},
                       {"labels", ir::HostTensor::FromInts({batch, sequence_length}, labels)}};
}

}  // namespace tandem::examples
