#include "rpc/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rpc/openssl_error.h"

namespace tandem::rpc {
namespace {

void AppendId(std::vector<uint8_t>& message, int32_t id) {
  const auto value = static_cast<uint32_t>(id);
  for (int shift = 24; shift >= 0; shift -= 8) message.push_back(static_cast<uint8_t>(value >> shift));
}

absl::Status CheckLength(absl::string_view what, Bytes bytes, size_t expected) {
  if (bytes.size() == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " has ", bytes.size(), " bytes, not ", expected));
}

// nonce || ids || label.
absl::StatusOr<std::vector<uint8_t>> Message(Bytes nonce, std::initializer_list<int32_t> ids,
                                              absl::string_view label) {
  if (absl::Status length = CheckLength("the challenge", nonce, kNonceBytes); !length.ok()) return length;
  std::vector<uint8_t> message(nonce.begin(), nonce.end());
  for (int32_t id : ids) AppendId(message, id);
  message.insert(message.end(), label.begin(), label.end());
  return message;
}

absl::StatusOr<Proof> Prove(absl::string_view token, const absl::StatusOr<std::vector<uint8_t>>& message) {
  if (!message.ok()) return message.status();
  return HmacSha256(token, *message);
}

absl::Status Check(absl::string_view token, const absl::StatusOr<std::vector<uint8_t>>& message, Bytes proof) {
  if (!message.ok()) return message.status();
  if (absl::Status length = CheckLength("the answer", proof, kProofBytes); !length.ok()) return length;
  absl::StatusOr<Proof> expected = HmacSha256(token, *message);
  if (!expected.ok()) return expected.status();
  if (CRYPTO_memcmp(expected->data(), proof.data(), kProofBytes) != 0) {
    return absl::PermissionDeniedError("wrong answer to the challenge (not made with the job's token)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Nonce> MakeNonce() {
  Nonce nonce;
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    return absl::InternalError(absl::StrCat("OpenSSL could not make a nonce: ", OpenSslError()));
  }
  return nonce;
}

absl::StatusOr<Proof> HmacSha256(absl::string_view key, Bytes message) {
  static constexpr uint8_t kNothing = 0;
  Proof proof;
  unsigned int length = 0;
  // Never a null key: OpenSSL reads a null key as "the previous one".
  const void* key_data = key.empty() ? &kNothing : static_cast<const void*>(key.data());
  const uint8_t* data = message.empty() ? &kNothing : message.data();
  if (HMAC(EVP_sha256(), key_data, static_cast<int>(key.size()), data, message.size(), proof.data(), &length) ==
          nullptr ||
      length != proof.size()) {
    return absl::InternalError(absl::StrCat("OpenSSL's HMAC-SHA256 failed: ", OpenSslError()));
  }
  return proof;
}

absl::StatusOr<Proof> ProveRegistration(absl::string_view token, Bytes nonce, int32_t actor) {
  return Prove(token, Message(nonce, {actor}, kRegistrationLabel));
}

absl::Status CheckRegistration(absl::string_view token, Bytes nonce, int32_t actor, Bytes proof) {
  return Check(token, Message(nonce, {actor}, kRegistrationLabel), proof);
}

absl::StatusOr<Proof> ProveConnection(absl::string_view token, Bytes nonce, int32_t dialer, int32_t receiver) {
  return Prove(token, Message(nonce, {dialer, receiver}, kConnectionLabel));
}

absl::Status CheckConnection(absl::string_view token, Bytes nonce, int32_t dialer, int32_t receiver, Bytes proof) {
  return Check(token, Message(nonce, {dialer, receiver}, kConnectionLabel), proof);
}

absl::StatusOr<Proof> ProveController(absl::string_view token, Bytes nonce, int32_t actor) {
  return Prove(token, Message(nonce, {actor}, kControllerLabel));
}

absl::Status CheckController(absl::string_view token, Bytes nonce, int32_t actor, Bytes proof) {
  return Check(token, Message(nonce, {actor}, kControllerLabel), proof);
}

absl::StatusOr<Proof> ProveAcceptance(absl::string_view token, Bytes nonce, int32_t dialer, int32_t receiver) {
  return Prove(token, Message(nonce, {dialer, receiver}, kAcceptanceLabel));
}

absl::Status CheckAcceptance(absl::string_view token, Bytes nonce, int32_t dialer, int32_t receiver, Bytes proof) {
  return Check(token, Message(nonce, {dialer, receiver}, kAcceptanceLabel), proof);
}

ChallengeBook::ChallengeBook(Options options, Clock now) : options_(options), now_(std::move(now)) {}

absl::StatusOr<Nonce> ChallengeBook::Issue(uint64_t owner) {
  const absl::Time now = now_();
  Expire(now);
  absl::StatusOr<Nonce> nonce = MakeNonce();
  if (!nonce.ok()) return nonce.status();
  std::deque<std::string>& mine = owned_[owner];
  while (!mine.empty() && mine.size() >= std::max<size_t>(options_.max_outstanding, 1)) {
    Remove(issued_.find(mine.front()));  // forgotten: later answers to it are unknown
  }
  std::string key(nonce->begin(), nonce->end());
  issued_[key] = Issued{now, owner};
  owned_[owner].push_back(std::move(key));
  return nonce;
}

ChallengeBook::Verdict ChallengeBook::Redeem(Bytes nonce) {
  if (nonce.size() != kNonceBytes) return Verdict::kMalformed;
  Expire(now_());
  const std::string key(nonce.begin(), nonce.end());
  if (auto it = issued_.find(key); it != issued_.end()) {
    Remove(it);
    Remember(key, Verdict::kReplayed);  // what a second answer to it is
    return Verdict::kFresh;
  }
  if (auto it = spent_.find(key); it != spent_.end()) return it->second;
  return Verdict::kUnknown;
}

void ChallengeBook::Forget(uint64_t owner) {
  auto it = owned_.find(owner);
  if (it == owned_.end()) return;
  for (const std::string& key : it->second) issued_.erase(key);
  owned_.erase(it);
}

void ChallengeBook::Remove(std::map<std::string, Issued>::iterator it) {
  // An owner's (possibly empty) order stays until Forget: its connection
  // may ask again.
  if (auto owner = owned_.find(it->second.owner); owner != owned_.end()) {
    std::deque<std::string>& mine = owner->second;
    mine.erase(std::find(mine.begin(), mine.end(), it->first));
  }
  issued_.erase(it);
}

void ChallengeBook::Expire(absl::Time now) {
  for (auto it = issued_.begin(); it != issued_.end();) {
    auto next = std::next(it);
    if (now - it->second.when >= options_.lifetime) {
      Remember(it->first, Verdict::kExpired);
      Remove(it);
    }
    it = next;
  }
}

void ChallengeBook::Remember(const std::string& nonce, Verdict verdict) {
  if (options_.remembered == 0) return;
  if (spent_.emplace(nonce, verdict).second) spent_order_.push_back(nonce);
  while (spent_order_.size() > options_.remembered) {
    spent_.erase(spent_order_.front());
    spent_order_.pop_front();
  }
}

absl::string_view VerdictName(ChallengeBook::Verdict verdict) {
  switch (verdict) {
    case ChallengeBook::Verdict::kFresh:
      return "a fresh challenge";
    case ChallengeBook::Verdict::kReplayed:
      return "a challenge answered before (a replay)";
    case ChallengeBook::Verdict::kExpired:
      return "an expired challenge";
    case ChallengeBook::Verdict::kUnknown:
      return "a challenge this controller never issued";
    case ChallengeBook::Verdict::kMalformed:
      return "a malformed challenge";
  }
  return "?";
}

}  // namespace tandem::rpc
