// State files: the bytes checkpoints are made of. Whatever the bytes, the
// decoder answers with tensors or a clear error, never a crash.
#include "ir/state_file.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/read_file.h"
#include "tests/testing/temporary_directory.h"

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
  EXPECT_EQ(*ReadFileUpTo(path, 1 << 20, path), "new contents");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
  absl::Status missing_dir = WriteFileAtomically((dir / "no/such/dir/file").string(), "x");
  EXPECT_EQ(missing_dir.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(missing_dir.message(), HasSubstr("cannot create"));
  EXPECT_EQ(ReadFileUpTo((dir / "absent").string(), 1 << 20, "absent").status().code(), absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(StateFile, WrittenPieceByPieceItIsIndexedAndReadBackTensorByTensor) {
  test::TemporaryDirectory dir("tandem-state-file-test");
  const std::string path = dir.Path("actor-0.state");
  TensorMap tensors = Sample();
  // Larger than a piece: written, checksummed and read in several.
  absl::StatusOr<HostTensor> big = HostTensor::Allocate(TensorType{DType::kF32, {3, (kStatePieceBytes / 4) + 5}});
  ASSERT_TRUE(big.ok());
  for (int64_t i = 0; i < big->num_elements(); ++i) big->f32()[i] = static_cast<float>(i % 1021) * 0.5f;
  tensors["big"] = *big;
  absl::StatusOr<WrittenFile> written = WriteStateFile(path, tensors);
  ASSERT_TRUE(written.ok()) << written.status();
  // The same bytes as the in-memory form, and the checksum of what is on disk.
  const std::string encoded = EncodeStateFile(tensors);
  EXPECT_EQ(written->bytes, encoded.size());
  EXPECT_EQ(written->checksum, StateChecksum(encoded));
  absl::StatusOr<WrittenFile> read = ChecksumFile(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->bytes, written->bytes);
  EXPECT_EQ(read->checksum, written->checksum);

  absl::StatusOr<std::vector<StateFileEntry>> index = IndexStateFile(path);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->size(), tensors.size());
  for (const StateFileEntry& entry : *index) {
    ASSERT_TRUE(tensors.contains(entry.name)) << entry.name;
    EXPECT_EQ(entry.type, tensors.at(entry.name).type());
    absl::StatusOr<HostTensor> tensor = ReadStateTensor(path, entry.offset, entry.type);
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    EXPECT_TRUE(tensor->BitwiseEquals(tensors.at(entry.name))) << entry.name;
  }
  // The same tensor in another file compares equal, a changed one does not.
  const std::string other = dir.Path("actor-1.state");
  TensorMap changed = {{"big", *big}};
  ASSERT_TRUE(WriteStateFile(other, changed).ok());
  absl::StatusOr<std::vector<StateFileEntry>> other_index = IndexStateFile(other);
  ASSERT_TRUE(other_index.ok());
  auto big_entry = std::find_if(index->begin(), index->end(), [](const StateFileEntry& e) { return e.name == "big"; });
  const int64_t bytes = big->num_bytes();
  EXPECT_TRUE(*StateBytesEqual(path, big_entry->offset, other, other_index->at(0).offset, bytes));
  big->f32()[big->num_elements() - 1] += 1.0f;  // the last piece differs
  ASSERT_TRUE(WriteStateFile(other, {{"big", *big}}).ok());
  EXPECT_FALSE(*StateBytesEqual(path, big_entry->offset, other, other_index->at(0).offset, bytes));
}

TEST(StateFile, TheIndexRefusesWhatTheDecoderRefusesAndAShortReadIsAnError) {
  test::TemporaryDirectory dir("tandem-state-file-test");
  const std::string path = dir.Path("cut.state");
  const std::string encoded = EncodeStateFile(Sample());
  ASSERT_TRUE(WriteFileAtomically(path, encoded.substr(0, encoded.size() - 3)).ok());
  absl::StatusOr<std::vector<StateFileEntry>> index = IndexStateFile(path);
  EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(index.status().message(), HasSubstr("is not a valid state file"));
  absl::StatusOr<HostTensor> past = ReadStateTensor(path, static_cast<int64_t>(encoded.size()) - 8,
                                                    TensorType{DType::kF32, {4}});
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(past.status().message(), HasSubstr("it ends before the f32[4]"));
  EXPECT_EQ(IndexStateFile(dir.Path("absent")).status().code(), absl::StatusCode::kNotFound);
}

TEST(StateFile, AFileOverTheBoundOfAWholeReadIsRefusedBeforeReading) {
  test::TemporaryDirectory dir("tandem-state-file-test");
  const std::string path = dir.Path("text");
  ASSERT_TRUE(WriteFileAtomically(path, std::string(100, 'x')).ok());
  absl::StatusOr<std::string> read = ReadFileUpTo(path, 99, path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("has 100 bytes, more than the 99 it may have"));
  EXPECT_EQ(ReadFileUpTo(path, 100, path)->size(), 100u);
}

}  // namespace
}  // namespace tandem::ir
