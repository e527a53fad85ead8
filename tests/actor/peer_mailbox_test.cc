// PeerMailbox (actor/peer_mailbox.h): the receiving half the four
// transports share. What a Receive answers and in which order: the abort
// (first one wins), a message that is there, the peer's error, the
// deadline.
#include "actor/peer_mailbox.h"

#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::actor {
namespace {

using ::testing::HasSubstr;

struct Guarded {
  absl::Mutex mu;
  PeerMailbox<std::string> mailbox ABSL_GUARDED_BY(mu){3};
};

TEST(PeerMailbox, MessagesAreClaimedByPeerAndTagWhateverTheirOrder) {
  PeerMailbox<std::string> mailbox(3);
  ASSERT_TRUE(mailbox.File(1, 7, "one-seven").ok());
  ASSERT_TRUE(mailbox.File(2, 7, "two-seven").ok());
  ASSERT_TRUE(mailbox.File(1, 9, "one-nine").ok());
  EXPECT_EQ(**mailbox.TryClaim(1, 9), "one-nine");
  EXPECT_EQ(**mailbox.TryClaim(2, 7), "two-seven");
  EXPECT_EQ(**mailbox.TryClaim(1, 7), "one-seven");
  EXPECT_FALSE(mailbox.TryClaim(1, 7).has_value());  // claimed once only
}

TEST(PeerMailbox, ASecondMessageUnderATagIsDataLossAndTheFirstIsKept) {
  PeerMailbox<std::string> mailbox(2);
  ASSERT_TRUE(mailbox.File(1, 5, "first").ok());
  const absl::Status again = mailbox.File(1, 5, "second");
  EXPECT_EQ(again.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(again.message(), "actor 1 sent tag 5 again before it was received");
  EXPECT_EQ(**mailbox.TryClaim(1, 5), "first");
}

TEST(PeerMailbox, APeersErrorComesAfterWhatItDeliveredAndTheFirstErrorSticks) {
  PeerMailbox<std::string> mailbox(3);
  ASSERT_TRUE(mailbox.File(1, 1, "before").ok());
  mailbox.FailPeer(1, absl::UnavailableError("lost the connection to actor 1"));
  mailbox.FailPeer(1, absl::DataLossError("a later error"));
  EXPECT_EQ(**mailbox.TryClaim(1, 1), "before");
  const absl::Status missing = mailbox.TryClaim(1, 2)->status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(missing.message(), "no message from actor 1 with tag 2: lost the connection to actor 1");
  EXPECT_FALSE(mailbox.TryClaim(2, 2).has_value());  // other peers are untouched
}

TEST(PeerMailbox, TheFirstAbortWinsAndComesBeforeEverything) {
  PeerMailbox<std::string> mailbox(2);
  ASSERT_TRUE(mailbox.File(1, 1, "there").ok());
  EXPECT_TRUE(mailbox.Abort(absl::UnavailableError("actor 3 died")));
  EXPECT_FALSE(mailbox.Abort(absl::AbortedError("later")));
  EXPECT_EQ(mailbox.TryClaim(1, 1)->status().message(), "actor 3 died");
  mailbox.Clear();
  EXPECT_TRUE(mailbox.abort_status().ok());
  EXPECT_TRUE(mailbox.Abort(absl::OkStatus()));
  EXPECT_EQ(mailbox.abort_status().code(), absl::StatusCode::kAborted);
}

TEST(PeerMailbox, ClearForgetsMessagesAndErrors) {
  PeerMailbox<std::string> mailbox(2);
  ASSERT_TRUE(mailbox.File(1, 1, "left over").ok());
  mailbox.FailPeer(1, absl::UnavailableError("gone"));
  int seen = 0;
  mailbox.ForEach([&](int32_t peer, uint64_t tag, const std::string& message) {
    EXPECT_EQ(peer, 1);
    EXPECT_EQ(tag, 1u);
    EXPECT_EQ(message, "left over");
    ++seen;
  });
  EXPECT_EQ(seen, 1);
  mailbox.Clear();
  EXPECT_FALSE(mailbox.TryClaim(1, 1).has_value());
  EXPECT_TRUE(mailbox.peer_error(1).ok());
}

TEST(PeerMailbox, AReceiveWakesForAMessageFiledUnderTheMutex) {
  Guarded g;
  // Held from before the sender starts until Receive waits (releasing it):
  // the message is filed only while the receive is waiting for it.
  absl::MutexLock lock(&g.mu);
  std::thread sender([&] {
    absl::MutexLock lock(&g.mu);
    ASSERT_TRUE(g.mailbox.File(2, 4, "late").ok());
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got = g.mailbox.Receive(g.mu, 2, 4, start, start + absl::Seconds(20));
  sender.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "late");
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // woken by the message, not by the deadline
}

TEST(PeerMailbox, AReceiveWakesForAnAbortAndForAPeersError) {
  for (const bool abort : {true, false}) {
    Guarded g;
    absl::MutexLock lock(&g.mu);  // as above: the failure comes while the receive waits
    std::thread failer([&] {
      absl::MutexLock lock(&g.mu);
      if (abort) {
        g.mailbox.Abort(absl::UnavailableError("actor 2 died"));
      } else {
        g.mailbox.FailPeer(1, absl::UnavailableError("lost"));
      }
    });
    const absl::Time start = absl::Now();
    absl::StatusOr<std::string> got = g.mailbox.Receive(g.mu, 1, 4, start, start + absl::Seconds(20));
    failer.join();
    EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(got.status().message(), HasSubstr(abort ? "actor 2 died" : "lost"));
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  }
}

TEST(PeerMailbox, AReceiveWithNothingComingEndsAtItsDeadline) {
  Guarded g;
  absl::MutexLock lock(&g.mu);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got = g.mailbox.Receive(g.mu, 1, 8, start, start + absl::Milliseconds(100));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(got.status().message(), HasSubstr("no message from actor 1 with tag 8 after waiting"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

}  // namespace
}  // namespace tandem::actor
