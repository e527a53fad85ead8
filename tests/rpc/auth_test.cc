// Proving the job's token (rpc/auth.h): HMAC-SHA256 against RFC 4231's
// known answers, the layout of both planes' answers, answers that do not
// transfer between uses, actors or tokens, sizes from the wire that are
// errors rather than crashes, and challenges that are used once, expire and
// are bounded in number.
#include "rpc/auth.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::rpc {
namespace {

using ::testing::HasSubstr;

std::string Hex(const Proof& proof) {
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(proof.data()), proof.size()));
}

std::vector<uint8_t> Repeat(uint8_t byte, size_t count) { return std::vector<uint8_t>(count, byte); }

// RFC 4231, section 4: test cases 1, 2, 6 and 7 (HMAC-SHA-256).
TEST(HmacSha256, MatchesRfc4231KnownAnswers) {
  struct Case {
    std::string key;
    std::string data;
    std::string hmac;
  };
  const std::string key6(131, '\xaa');
  const std::vector<Case> cases = {
      {std::string(20, '\x0b'), "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {key6, "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {key6,
       "This is a test using a larger than block-size key and a larger than block-size data. The key needs to be "
       "hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Proof> hmac = HmacSha256(c.key, AsBytes(c.data));
    ASSERT_TRUE(hmac.ok()) << hmac.status();
    EXPECT_EQ(Hex(*hmac), c.hmac) << c.data;
  }
}

TEST(HmacSha256, AnEmptyKeyAndAnEmptyMessageAreValid) {
  absl::StatusOr<Proof> hmac = HmacSha256("", {});
  ASSERT_TRUE(hmac.ok()) << hmac.status();
  // HMAC-SHA256 with an empty key of an empty message.
  EXPECT_EQ(Hex(*hmac), "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST(Proofs, AreTheHmacOfNonceIdsAndLabel) {
  const std::string token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  const std::vector<uint8_t> nonce = Repeat(0x5a, kNonceBytes);
  std::vector<uint8_t> message = nonce;
  message.insert(message.end(), {0x00, 0x00, 0x01, 0x02});  // actor 258, big-endian
  message.insert(message.end(), kRegistrationLabel.begin(), kRegistrationLabel.end());
  absl::StatusOr<Proof> registration = ProveRegistration(token, nonce, 258);
  ASSERT_TRUE(registration.ok()) << registration.status();
  EXPECT_EQ(*registration, *HmacSha256(token, message));

  message = nonce;
  message.insert(message.end(), {0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x01});  // dialer 3, receiver 1
  message.insert(message.end(), kConnectionLabel.begin(), kConnectionLabel.end());
  absl::StatusOr<Proof> connection = ProveConnection(token, nonce, 3, 1);
  ASSERT_TRUE(connection.ok()) << connection.status();
  EXPECT_EQ(*connection, *HmacSha256(token, message));
}

TEST(Proofs, HoldOnlyForTheirTokenNonceActorsAndUse) {
  const std::string token = "the-job-token";
  absl::StatusOr<Nonce> nonce = MakeNonce();
  ASSERT_TRUE(nonce.ok());
  absl::StatusOr<Proof> proof = ProveRegistration(token, *nonce, 1);
  ASSERT_TRUE(proof.ok());
  EXPECT_TRUE(CheckRegistration(token, *nonce, 1, *proof).ok());
  EXPECT_EQ(CheckRegistration("another-token", *nonce, 1, *proof).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckRegistration(token, *nonce, 2, *proof).code(), absl::StatusCode::kPermissionDenied);
  absl::StatusOr<Nonce> other = MakeNonce();
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(CheckRegistration(token, *other, 1, *proof).code(), absl::StatusCode::kPermissionDenied);
  // A registration's answer is no data-plane answer, even for the same ids.
  EXPECT_EQ(CheckConnection(token, *nonce, 1, 0, *proof).code(), absl::StatusCode::kPermissionDenied);

  absl::StatusOr<Proof> connection = ProveConnection(token, *nonce, 2, 0);
  ASSERT_TRUE(connection.ok());
  EXPECT_TRUE(CheckConnection(token, *nonce, 2, 0, *connection).ok());
  EXPECT_EQ(CheckConnection(token, *nonce, 0, 2, *connection).code(), absl::StatusCode::kPermissionDenied);
  absl::Status wrong = CheckConnection(token, *nonce, 3, 0, *connection);
  EXPECT_THAT(std::string(wrong.message()), HasSubstr("not made with the job's token"));
}

// The answers each side gives the other are separate uses: the
// controller's answer to an actor's nonce never passes as that actor's
// registration (so a controller answering anyone's nonce is no oracle for
// registering), nor an acceptor's welcome as a dialer's hello.
TEST(Proofs, TheTwoDirectionsOfEachPlaneAreSeparateUses) {
  const std::string token = "the-job-token";
  absl::StatusOr<Nonce> nonce = MakeNonce();
  ASSERT_TRUE(nonce.ok());
  absl::StatusOr<Proof> controller = ProveController(token, *nonce, 1);
  ASSERT_TRUE(controller.ok());
  EXPECT_TRUE(CheckController(token, *nonce, 1, *controller).ok());
  EXPECT_EQ(CheckController("another-token", *nonce, 1, *controller).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckController(token, *nonce, 2, *controller).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckRegistration(token, *nonce, 1, *controller).code(), absl::StatusCode::kPermissionDenied);
  absl::StatusOr<Proof> registration = ProveRegistration(token, *nonce, 1);
  ASSERT_TRUE(registration.ok());
  EXPECT_EQ(CheckController(token, *nonce, 1, *registration).code(), absl::StatusCode::kPermissionDenied);

  absl::StatusOr<Proof> acceptance = ProveAcceptance(token, *nonce, 2, 0);
  ASSERT_TRUE(acceptance.ok());
  EXPECT_TRUE(CheckAcceptance(token, *nonce, 2, 0, *acceptance).ok());
  EXPECT_EQ(CheckAcceptance(token, *nonce, 0, 2, *acceptance).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckConnection(token, *nonce, 2, 0, *acceptance).code(), absl::StatusCode::kPermissionDenied);
  absl::StatusOr<Proof> connection = ProveConnection(token, *nonce, 2, 0);
  ASSERT_TRUE(connection.ok());
  EXPECT_EQ(CheckAcceptance(token, *nonce, 2, 0, *connection).code(), absl::StatusCode::kPermissionDenied);
}

TEST(Proofs, InputsOfTheWrongLengthAreErrorsNotCrashes) {
  const std::string token = "t";
  for (size_t length : {size_t{0}, size_t{1}, kNonceBytes - 1, kNonceBytes + 1, size_t{4096}}) {
    const std::vector<uint8_t> bytes = Repeat(7, length);
    EXPECT_EQ(ProveRegistration(token, bytes, 0).status().code(), absl::StatusCode::kInvalidArgument) << length;
    EXPECT_EQ(ProveConnection(token, bytes, 1, 0).status().code(), absl::StatusCode::kInvalidArgument) << length;
    EXPECT_EQ(CheckRegistration(token, bytes, 0, Repeat(0, kProofBytes)).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(CheckRegistration(token, Repeat(0, kNonceBytes), 0, bytes).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(CheckConnection(token, Repeat(0, kNonceBytes), 1, 0, bytes).code(), absl::StatusCode::kInvalidArgument);
  }
  absl::Status status = CheckRegistration(token, Repeat(0, 5), 0, Repeat(0, kProofBytes));
  EXPECT_THAT(std::string(status.message()), HasSubstr("has 5 bytes, not 32"));
}

TEST(Nonces, AreFreshEachTime) {
  std::set<Nonce> seen;
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<Nonce> nonce = MakeNonce();
    ASSERT_TRUE(nonce.ok()) << nonce.status();
    EXPECT_TRUE(seen.insert(*nonce).second);
  }
}

// A ChallengeBook on a clock the test moves.
struct Book {
  explicit Book(ChallengeBook::Options options = {}) : book(options, [this] { return now; }) {}
  absl::Time now = absl::UnixEpoch();
  ChallengeBook book;
};

TEST(ChallengeBook, AChallengeIsGoodForOneAnswer) {
  Book b;
  absl::StatusOr<Nonce> nonce = b.book.Issue();
  ASSERT_TRUE(nonce.ok());
  EXPECT_EQ(b.book.outstanding(), 1u);
  EXPECT_EQ(b.book.Redeem(*nonce), ChallengeBook::Verdict::kFresh);
  EXPECT_EQ(b.book.outstanding(), 0u);
  EXPECT_EQ(b.book.Redeem(*nonce), ChallengeBook::Verdict::kReplayed);
  EXPECT_EQ(b.book.Redeem(*nonce), ChallengeBook::Verdict::kReplayed);
}

TEST(ChallengeBook, UnknownAndMalformedChallengesAreNamed) {
  Book b;
  ASSERT_TRUE(b.book.Issue().ok());
  EXPECT_EQ(b.book.Redeem(Repeat(1, kNonceBytes)), ChallengeBook::Verdict::kUnknown);
  EXPECT_EQ(b.book.Redeem(Repeat(1, 3)), ChallengeBook::Verdict::kMalformed);
  EXPECT_EQ(b.book.Redeem({}), ChallengeBook::Verdict::kMalformed);
  EXPECT_EQ(b.book.outstanding(), 1u);
}

TEST(ChallengeBook, ChallengesExpireAfterTheirLifetime) {
  Book b({.lifetime = absl::Seconds(10)});
  absl::StatusOr<Nonce> young = b.book.Issue();
  b.now += absl::Seconds(6);
  absl::StatusOr<Nonce> younger = b.book.Issue();
  ASSERT_TRUE(young.ok() && younger.ok());
  b.now += absl::Seconds(4);  // young: exactly 10 s old
  EXPECT_EQ(b.book.Redeem(*young), ChallengeBook::Verdict::kExpired);
  EXPECT_EQ(b.book.outstanding(), 1u);
  EXPECT_EQ(b.book.Redeem(*younger), ChallengeBook::Verdict::kFresh);
}

TEST(ChallengeBook, OutstandingChallengesAreBoundedForgettingTheOldest) {
  Book b({.max_outstanding = 3});
  std::vector<Nonce> nonces;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<Nonce> nonce = b.book.Issue();
    ASSERT_TRUE(nonce.ok());
    nonces.push_back(*nonce);
    EXPECT_LE(b.book.outstanding(), 3u);
  }
  EXPECT_EQ(b.book.Redeem(nonces[0]), ChallengeBook::Verdict::kUnknown);
  EXPECT_EQ(b.book.Redeem(nonces[1]), ChallengeBook::Verdict::kUnknown);
  for (int i = 2; i < 5; ++i) EXPECT_EQ(b.book.Redeem(nonces[i]), ChallengeBook::Verdict::kFresh) << i;
}

TEST(ChallengeBook, StaysBoundedUnderManyIssuedAndAnsweredOutOfOrder) {
  Book b({.max_outstanding = 4, .remembered = 8});
  for (int round = 0; round < 1000; ++round) {
    absl::StatusOr<Nonce> first = b.book.Issue();
    absl::StatusOr<Nonce> second = b.book.Issue();
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_EQ(b.book.Redeem(*second), ChallengeBook::Verdict::kFresh);
    EXPECT_LE(b.book.outstanding(), 4u);
  }
}

TEST(ChallengeBook, OneOwnersChallengesNeverEvictAnothers) {
  // A stranger's connection asking for challenges in a loop forgets only its
  // own: the real actor's challenge, issued to another connection, stays
  // good. (With one shared bound, 256 requests evicted it.)
  Book b({.max_outstanding = 4});
  absl::StatusOr<Nonce> actor = b.book.Issue(/*owner=*/1);
  ASSERT_TRUE(actor.ok());
  std::vector<Nonce> flood;
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<Nonce> nonce = b.book.Issue(/*owner=*/2);
    ASSERT_TRUE(nonce.ok());
    flood.push_back(*nonce);
  }
  EXPECT_LE(b.book.outstanding(), 5u);  // the stranger's 4 and the actor's 1
  EXPECT_EQ(b.book.Redeem(*actor), ChallengeBook::Verdict::kFresh);
  EXPECT_EQ(b.book.Redeem(flood.front()), ChallengeBook::Verdict::kUnknown);  // its own oldest, forgotten
  EXPECT_EQ(b.book.Redeem(flood.back()), ChallengeBook::Verdict::kFresh);
  // A connection that closes takes its challenges with it.
  absl::StatusOr<Nonce> pending = b.book.Issue(/*owner=*/3);
  ASSERT_TRUE(pending.ok());
  b.book.Forget(3);
  EXPECT_EQ(b.book.Redeem(*pending), ChallengeBook::Verdict::kUnknown);
}

}  // namespace
}  // namespace tandem::rpc
