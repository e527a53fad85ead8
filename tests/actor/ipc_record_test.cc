// The IPC host records: what RecordWriter writes, RecordReader reads back;
// a short record is caught; ParseRecord refuses records that are not for
// this pair.
#include "actor/ipc_record.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::actor::ipc {
namespace {

using ::testing::HasSubstr;

ir::HostTensor AsTensor(const std::vector<int32_t>& words) {
  return ir::HostTensor::FromInts({static_cast<int64_t>(words.size())}, words);
}

TEST(IpcRecord, WhatTheWriterWritesTheReaderReadsBack) {
  backends::IpcMemHandle handle;
  for (size_t i = 0; i < handle.bytes.size(); ++i) handle.bytes[i] = std::byte(static_cast<uint8_t>(i * 7 + 1));
  RecordWriter writer(RecordKind::kMessage, 2, 5);
  writer.Put32(-7);
  writer.Put64(0xFEDCBA9876543210u);
  writer.PutHandle(handle.bytes);
  const std::vector<int32_t> words = writer.Take();
  ASSERT_EQ(words.size(), kRecordHeadWords + 1 + 2 + kHandleWords);

  absl::StatusOr<std::vector<int32_t>> parsed = ParseRecord({AsTensor(words)}, 2, 5);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(KindOf(*parsed), RecordKind::kMessage);
  RecordReader reader(*parsed);
  EXPECT_EQ(reader.Get32(), -7);
  EXPECT_EQ(reader.Get64(), 0xFEDCBA9876543210u);
  EXPECT_EQ(reader.GetHandle<backends::IpcMemHandle>().bytes, handle.bytes);
  EXPECT_TRUE(reader.ok());
  EXPECT_EQ(reader.left(), 0u);
  reader.Get32();  // past the end
  EXPECT_FALSE(reader.ok());
}

TEST(IpcRecord, ParseRefusesRecordsNotForThisPair) {
  const std::vector<int32_t> words = RecordWriter(RecordKind::kRelease, 0, 1).Take();
  const struct {
    std::vector<ir::HostTensor> tensors;
    const char* why;
  } cases[] = {
      {{}, "not one i32 vector"},
      {{AsTensor(words), AsTensor(words)}, "not one i32 vector"},
      {{ir::HostTensor::FromFloats({4}, {1, 2, 3, 4})}, "not one i32 vector"},
      {{AsTensor({kRecordMagic, 3, 0})}, "bad magic"},
      {{AsTensor({kRecordMagic + 1, 3, 0, 1})}, "bad magic"},
      {{AsTensor(RecordWriter(RecordKind::kRelease, 2, 1).Take())}, "addressed from actor 2 to actor 1"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<std::vector<int32_t>> parsed = ParseRecord(c.tensors, 0, 1);
    ASSERT_FALSE(parsed.ok()) << c.why;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(parsed.status().message(), HasSubstr("actor 1: malformed record from actor 0: "));
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.why));
  }
}

}  // namespace
}  // namespace tandem::actor::ipc
