#include "actor/state_writer.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::actor {

std::optional<int64_t> FirstNonFinite(const ir::HostTensor& tensor) {
  const int64_t count = tensor.num_elements();
  switch (tensor.dtype()) {
    case ir::DType::kF32:
      for (int64_t i = 0; i < count; ++i) {
        if (!std::isfinite(tensor.f32()[i])) return i;
      }
      return std::nullopt;
    case ir::DType::kBF16:  // exponent all ones
    case ir::DType::kF16: {
      const uint16_t exponent = tensor.dtype() == ir::DType::kBF16 ? 0x7f80 : 0x7c00;
      for (int64_t i = 0; i < count; ++i) {
        if ((tensor.bf16()[i] & exponent) == exponent) return i;
      }
      return std::nullopt;
    }
    case ir::DType::kI32:
      return std::nullopt;
  }
  return std::nullopt;
}

StateWriter::~StateWriter() {
  if (thread_.joinable()) thread_.join();
}

StateWriter::Outcome StateWriter::Run(const std::string& path, const ir::TensorMap& state) const {
  for (const auto& [name, tensor] : state) {
    if (std::optional<int64_t> at = FirstNonFinite(tensor); at.has_value()) {
      return absl::OutOfRangeError(absl::StrCat(name_, ": state '", name, "' is not finite (element ", *at,
                                                "): no checkpoint is written of it, and the last one saved stays "
                                                "the newest"));
    }
  }
  absl::StatusOr<ir::WrittenFile> file = ir::WriteStateFile(path, state);
  if (!file.ok()) return absl::Status(file.status().code(), absl::StrCat(name_, ": ", file.status().message()));
  return file;
}

void StateWriter::Write(std::string path, ir::TensorMap state) {
  if (thread_.joinable()) thread_.join();
  {
    absl::MutexLock lock(&mu_);
    path_ = path;
    outcome_.reset();
  }
  thread_ = std::thread([this, path = std::move(path), state = std::move(state)]() mutable {
    Outcome outcome = Run(path, state);
    state.clear();  // the snapshot's memory goes back before anyone hears of the outcome
    std::vector<std::function<void(const Outcome&)>> waiting;
    {
      absl::MutexLock lock(&mu_);
      outcome_ = outcome;
      waiting.swap(waiting_);
    }
    for (auto& done : waiting) done(outcome);
  });
}

std::optional<StateWriter::Outcome> StateWriter::Poll(const std::string& path) const {
  absl::MutexLock lock(&mu_);
  if (path != path_ || path.empty()) {
    return Outcome(absl::NotFoundError(absl::StrCat(name_, ": no checkpoint file ", path, " is being written")));
  }
  return outcome_;
}

void StateWriter::WhenWritten(const std::string& path, std::function<void(const Outcome&)> done) {
  std::optional<Outcome> now;
  {
    absl::MutexLock lock(&mu_);
    if (path != path_ || path.empty()) {
      now = Outcome(absl::NotFoundError(absl::StrCat(name_, ": no checkpoint file ", path, " is being written")));
    } else if (outcome_.has_value()) {
      now = outcome_;
    } else {
      waiting_.push_back(std::move(done));
      return;
    }
  }
  done(*now);
}

}  // namespace tandem::actor
