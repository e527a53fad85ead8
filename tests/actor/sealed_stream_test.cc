// The sealing of a TCP data-plane connection (actor/sealed_stream.h), over a
// socketpair: bytes come back as written across record boundaries; each
// end's keys are the other's, and differ by direction and by connection; a
// record changed, replayed or cut on the way is DataLoss, and so is a length
// outside its bounds, before anything is allocated from it.
#include "actor/sealed_stream.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::actor {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

class SocketPair {
 public:
  SocketPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds_), 0); }
  ~SocketPair() {
    close(fds_[0]);
    close(fds_[1]);
  }
  int writer() const { return fds_[0]; }
  int reader() const { return fds_[1]; }

 private:
  int fds_[2] = {-1, -1};
};

rpc::Nonce NonceOf(uint8_t fill) {
  rpc::Nonce nonce;
  nonce.fill(fill);
  return nonce;
}

StreamKeys Keys(bool is_dialer, uint8_t acceptor_fill = 1) {
  absl::StatusOr<StreamKeys> keys = DeriveStreamKeys(kToken, NonceOf(acceptor_fill), NonceOf(2), 3, 5, is_dialer);
  EXPECT_TRUE(keys.ok()) << keys.status();
  return keys.value_or(StreamKeys{});
}

// Bytes that no two places of repeat, so that a misplaced piece shows.
std::vector<uint8_t> Pattern(size_t size) {
  std::vector<uint8_t> bytes(size);
  uint32_t state = 7;
  for (uint8_t& byte : bytes) {
    state = state * 1664525u + 1013904223u;
    byte = static_cast<uint8_t>(state >> 24);
  }
  return bytes;
}

// What crossed the socket, read off its far end once the writer is done.
std::string Drain(int fd, size_t bytes) {
  std::string out(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = read(fd, out.data() + got, bytes - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

TEST(SealedStream, EachEndsKeysAreTheOthersAndDifferByDirectionAndConnection) {
  const StreamKeys dialer = Keys(true);
  const StreamKeys receiver = Keys(false);
  EXPECT_EQ(dialer.send, receiver.receive);
  EXPECT_EQ(dialer.receive, receiver.send);
  EXPECT_NE(dialer.send, dialer.receive);
  EXPECT_NE(Keys(true, 9).send, dialer.send) << "another challenge, another key";
  absl::StatusOr<StreamKeys> other_token = DeriveStreamKeys("another token", NonceOf(1), NonceOf(2), 3, 5, true);
  ASSERT_TRUE(other_token.ok());
  EXPECT_NE(other_token->send, dialer.send);
}

TEST(SealedStream, BytesComeBackAsWrittenAcrossRecordBoundaries) {
  SocketPair pair;
  const std::vector<uint8_t> small = Pattern(13);
  const std::vector<uint8_t> large = Pattern(3 * kMaxRecordBytes + 77);
  std::thread writing([&] {
    SealedWriter writer(pair.writer(), Keys(true).send);
    EXPECT_TRUE(writer.Write(small.data(), small.size()).ok());
    EXPECT_TRUE(writer.Flush().ok());
    EXPECT_TRUE(writer.Write(large.data(), large.size()).ok());
    EXPECT_TRUE(writer.Flush().ok());
  });
  SealedReader reader(pair.reader(), Keys(false).receive);
  std::vector<uint8_t> got(small.size());
  ASSERT_TRUE(reader.Read(got.data(), got.size()).ok());
  EXPECT_EQ(got, small);
  got.assign(large.size(), 0);
  // In odd pieces, as the frame reader asks.
  for (size_t at = 0; at < got.size();) {
    const size_t piece = std::min<size_t>(got.size() - at, 100003);
    ASSERT_TRUE(reader.Read(got.data() + at, piece).ok());
    at += piece;
  }
  EXPECT_TRUE(got == large);
  writing.join();
}

TEST(SealedStream, NothingOfThePlaintextCrossesTheSocket) {
  SocketPair pair;
  const std::string secret = "activations of stage 3, microbatch 7";
  {
    SealedWriter writer(pair.writer(), Keys(true).send);
    ASSERT_TRUE(writer.Write(secret.data(), secret.size()).ok());
    ASSERT_TRUE(writer.Flush().ok());
  }
  const std::string wire = Drain(pair.reader(), 4 + secret.size() + kSealTagBytes);
  EXPECT_EQ(wire.size(), 4 + secret.size() + kSealTagBytes);
  EXPECT_EQ(wire.find("activations"), std::string::npos);
}

// Writes `records` sealed records of `text` through a pair, hands the
// wire bytes to `change`, and reads them back through a reader.
std::vector<absl::Status> ReadChanged(const std::string& text, int records,
                                      const std::function<void(std::string&)>& change) {
  std::string wire;
  {
    SocketPair pair;
    SealedWriter writer(pair.writer(), Keys(true).send);
    for (int r = 0; r < records; ++r) {
      EXPECT_TRUE(writer.Write(text.data(), text.size()).ok());
      EXPECT_TRUE(writer.Flush().ok());
    }
    wire = Drain(pair.reader(), records * (4 + text.size() + kSealTagBytes));
  }
  change(wire);
  SocketPair pair;
  EXPECT_EQ(write(pair.writer(), wire.data(), wire.size()), static_cast<ssize_t>(wire.size()));
  shutdown(pair.writer(), SHUT_WR);
  SealedReader reader(pair.reader(), Keys(false).receive);
  std::vector<absl::Status> statuses;
  for (int r = 0; r < records; ++r) {
    std::string got(text.size(), '\0');
    statuses.push_back(reader.Read(got.data(), got.size()));
    if (statuses.back().ok()) {
      EXPECT_EQ(got, text);
    }
  }
  return statuses;
}

TEST(SealedStream, AChangedReplayedOrCutRecordIsDataLoss) {
  const std::string text = "a gradient bucket";
  const size_t record = 4 + text.size() + kSealTagBytes;
  // Unchanged: both records read.
  for (const absl::Status& status : ReadChanged(text, 2, [](std::string&) {})) EXPECT_TRUE(status.ok()) << status;
  // One bit of the ciphertext flipped.
  std::vector<absl::Status> flipped = ReadChanged(text, 2, [](std::string& wire) { wire[6] ^= 0x01; });
  EXPECT_EQ(flipped[0].code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(flipped[0].message(), HasSubstr("failed authentication"));
  EXPECT_EQ(flipped[1].code(), absl::StatusCode::kDataLoss) << "a broken stream stays broken";
  // The first record sent again in place of the second.
  std::vector<absl::Status> replayed =
      ReadChanged(text, 2, [&](std::string& wire) { wire.replace(record, record, wire.substr(0, record)); });
  EXPECT_TRUE(replayed[0].ok());
  EXPECT_EQ(replayed[1].code(), absl::StatusCode::kDataLoss);
  // The tag cut short: the stream ends inside a record.
  std::vector<absl::Status> cut = ReadChanged(text, 1, [](std::string& wire) { wire.resize(wire.size() - 3); });
  EXPECT_EQ(cut[0].code(), absl::StatusCode::kUnavailable);
  // A length past the bound, refused before it is allocated.
  std::vector<absl::Status> huge = ReadChanged(text, 1, [](std::string& wire) { wire[3] = '\x7f'; });
  EXPECT_EQ(huge[0].code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(huge[0].message(), HasSubstr("bytes (1 to"));
}

}  // namespace
}  // namespace tandem::actor
