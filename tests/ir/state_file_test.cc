// State files: the bytes checkpoints are made of. Whatever the bytes, the
// decoder answers with tensors or a clear error, never a crash.
#include "ir/state_file.h"

#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::ir {
namespace {

using ::testing::HasSubstr;

TensorMap Sample() {
  TensorMap tensors;
  const float nan_with_payload = std::bit_cast<float>(uint32_t{0x7fc01234});
  tensors["w"] = HostTensor::FromFloats({2, 3}, {1.5f, -0.0f, nan_with_payload,
                                                 std::numeric_limits<float>::infinity(), 1e-40f, 3});
  tensors["step.count"] = HostTensor::FromInts({}, {7});
  tensors["empty"] = HostTensor(TensorType{DType::kF32, {0, 4}});
  return tensors;
}

TEST(StateFile, RoundTripsEveryBit) {
  const TensorMap tensors = Sample();
  absl::StatusOr<TensorMap> decoded = DecodeStateFile(EncodeStateFile(tensors), "sample");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    ASSERT_TRUE(decoded->contains(name)) << name;
    EXPECT_TRUE(decoded->at(name).BitwiseEquals(tensor)) << name;
  }
}

TEST(StateFile, EveryTruncationIsAClearError) {
  const std::string bytes = EncodeStateFile(Sample());
  for (size_t size = 0; size < bytes.size(); ++size) {
    absl::StatusOr<TensorMap> decoded = DecodeStateFile(absl::string_view(bytes).substr(0, size), "cut.state");
    ASSERT_FALSE(decoded.ok()) << "a prefix of " << size << " bytes decoded";
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(decoded.status().message(), HasSubstr("cut.state is not a valid state file"));
  }
}

TEST(StateFile, RejectsForeignBytesNamingTheProblem) {
  std::string bytes = EncodeStateFile(Sample());
  EXPECT_THAT(DecodeStateFile(bytes + "x", "f").status().message(), HasSubstr("1 trailing bytes"));
  std::string magic = bytes;
  magic[0] = 'X';
  EXPECT_THAT(DecodeStateFile(magic, "f").status().message(), HasSubstr("bad magic"));
  std::string version = bytes;
  version[8] = 9;
  EXPECT_THAT(DecodeStateFile(version, "f").status().message(), HasSubstr("version 9"));
  // The first tensor is "empty" (name order); its dtype byte follows the
  // 8-byte magic, version, count, name length and the 5-byte name.
  std::string dtype = bytes;
  dtype[8 + 4 + 4 + 4 + 5] = 42;
  EXPECT_THAT(DecodeStateFile(dtype, "f").status().message(), HasSubstr("tensor 'empty' has unknown dtype 42"));
}

TEST(StateFile, ChecksumIsTheStandardCrc32) {
  EXPECT_EQ(StateChecksum("123456789"), "cbf43926");  // the CRC-32 check value
  EXPECT_EQ(StateChecksum(""), "00000000");
}

TEST(StateFile, AtomicWriteReplacesTheFileAndLeavesNoTemporary) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("tandem-state-file-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "a.state").string();
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "new contents").ok());
  EXPECT_EQ(*ReadWholeFile(path), "new contents");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
  absl::Status missing_dir = WriteFileAtomically((dir / "no/such/dir/file").string(), "x");
  EXPECT_EQ(missing_dir.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(missing_dir.message(), HasSubstr("cannot create"));
  EXPECT_EQ(ReadWholeFile((dir / "absent").string()).status().code(), absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem::ir
