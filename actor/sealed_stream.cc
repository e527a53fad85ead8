#include "actor/sealed_stream.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "actor/socket_io.h"
#include "rpc/openssl_error.h"

namespace tandem::actor {
namespace {

constexpr absl::string_view kFramesLabel = "tandem data-plane frames v1";
constexpr size_t kIvBytes = 12;

void PutBigEndian(int32_t value, std::string& out) {
  const auto bits = static_cast<uint32_t>(value);
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((bits >> shift) & 0xff));
}

absl::StatusOr<SealKey> DirectionKey(absl::string_view token, const rpc::Nonce& acceptor_nonce,
                                     const rpc::Nonce& dialer_nonce, int32_t dialer, int32_t receiver,
                                     absl::string_view direction) {
  std::string message(kFramesLabel);
  message.append(reinterpret_cast<const char*>(acceptor_nonce.data()), acceptor_nonce.size());
  message.append(reinterpret_cast<const char*>(dialer_nonce.data()), dialer_nonce.size());
  PutBigEndian(dialer, message);
  PutBigEndian(receiver, message);
  message.append(direction.data(), direction.size());
  absl::StatusOr<rpc::Proof> mac = rpc::HmacSha256(token, rpc::AsBytes(message));
  if (!mac.ok()) return mac.status();
  SealKey key;
  std::copy(mac->begin(), mac->end(), key.begin());
  return key;
}

std::array<uint8_t, kIvBytes> Iv(uint64_t record) {
  std::array<uint8_t, kIvBytes> iv{};
  for (int b = 0; b < 8; ++b) iv[4 + b] = static_cast<uint8_t>(record >> (8 * b));
  return iv;
}

absl::Status OpenSslFailure(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", rpc::OpenSslError()));
}

}  // namespace

absl::StatusOr<StreamKeys> DeriveStreamKeys(absl::string_view token, const rpc::Nonce& acceptor_nonce,
                                            const rpc::Nonce& dialer_nonce, int32_t dialer, int32_t receiver,
                                            bool is_dialer) {
  absl::StatusOr<SealKey> outbound =
      DirectionKey(token, acceptor_nonce, dialer_nonce, dialer, receiver, "dialer to receiver");
  absl::StatusOr<SealKey> inbound = DirectionKey(token, acceptor_nonce, dialer_nonce, dialer, receiver, "receiver to dialer");
  if (!outbound.ok()) return outbound.status();
  if (!inbound.ok()) return inbound.status();
  StreamKeys keys;
  keys.send = is_dialer ? *outbound : *inbound;
  keys.receive = is_dialer ? *inbound : *outbound;
  return keys;
}

// Each record sets its IV; null `context` if OpenSSL could not make one.
struct GcmContext {
  EVP_CIPHER_CTX* context = EVP_CIPHER_CTX_new();
  GcmContext() = default;
  GcmContext(const GcmContext&) = delete;
  GcmContext& operator=(const GcmContext&) = delete;
  ~GcmContext() { EVP_CIPHER_CTX_free(context); }
};

SealedWriter::SealedWriter(int fd, const SealKey& key) : fd_(fd), cipher_(std::make_unique<GcmContext>()) {
  plain_.reserve(kMaxRecordBytes);
  sealed_.resize(4 + kMaxRecordBytes + kSealTagBytes);
  if (cipher_->context != nullptr) {
    EVP_EncryptInit_ex(cipher_->context, EVP_aes_256_gcm(), nullptr, key.data(), nullptr);
  }
}

SealedWriter::~SealedWriter() = default;

absl::Status SealedWriter::Write(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const size_t take = std::min(size, kMaxRecordBytes - plain_.size());
    plain_.insert(plain_.end(), bytes, bytes + take);
    bytes += take;
    size -= take;
    if (plain_.size() == kMaxRecordBytes) {
      if (absl::Status status = Flush(); !status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

absl::Status SealedWriter::Flush() {
  if (plain_.empty()) return absl::OkStatus();
  if (cipher_->context == nullptr) return OpenSslFailure("sealing a data-plane record");
  const auto length = static_cast<uint32_t>(plain_.size());
  for (int b = 0; b < 4; ++b) sealed_[b] = static_cast<uint8_t>(length >> (8 * b));
  const std::array<uint8_t, kIvBytes> iv = Iv(records_++);
  int out = 0;
  int final_out = 0;
  if (EVP_EncryptInit_ex(cipher_->context, nullptr, nullptr, nullptr, iv.data()) != 1 ||
      EVP_EncryptUpdate(cipher_->context, nullptr, &out, sealed_.data(), 4) != 1 ||
      EVP_EncryptUpdate(cipher_->context, sealed_.data() + 4, &out, plain_.data(), static_cast<int>(length)) != 1 ||
      EVP_EncryptFinal_ex(cipher_->context, sealed_.data() + 4 + out, &final_out) != 1 ||
      EVP_CIPHER_CTX_ctrl(cipher_->context, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kSealTagBytes),
                          sealed_.data() + 4 + length) != 1) {
    return OpenSslFailure("sealing a data-plane record");
  }
  plain_.clear();
  return socket_io::WriteAll(fd_, sealed_.data(), 4 + length + kSealTagBytes);
}

SealedReader::SealedReader(int fd, const SealKey& key) : fd_(fd), cipher_(std::make_unique<GcmContext>()) {
  if (cipher_->context != nullptr) {
    EVP_DecryptInit_ex(cipher_->context, EVP_aes_256_gcm(), nullptr, key.data(), nullptr);
  }
}

SealedReader::~SealedReader() = default;

absl::Status SealedReader::NextRecord() {
  uint8_t header[4];
  if (absl::Status status = socket_io::ReadAll(fd_, header, sizeof(header)); !status.ok()) return status;
  const uint32_t length = static_cast<uint32_t>(header[0]) | static_cast<uint32_t>(header[1]) << 8 |
                          static_cast<uint32_t>(header[2]) << 16 | static_cast<uint32_t>(header[3]) << 24;
  if (length == 0 || length > kMaxRecordBytes) {
    return absl::DataLossError(absl::StrCat("a sealed record of ", length, " bytes (1 to ", kMaxRecordBytes,
                                            " may come): the stream is not this job's, or was cut"));
  }
  sealed_.resize(length + kSealTagBytes);
  if (absl::Status status = socket_io::ReadAll(fd_, sealed_.data(), sealed_.size()); !status.ok()) return status;
  if (cipher_->context == nullptr) return OpenSslFailure("opening a data-plane record");
  plain_.resize(length);
  served_ = 0;
  const std::array<uint8_t, kIvBytes> iv = Iv(records_++);
  int out = 0;
  if (EVP_DecryptInit_ex(cipher_->context, nullptr, nullptr, nullptr, iv.data()) != 1 ||
      EVP_DecryptUpdate(cipher_->context, nullptr, &out, header, 4) != 1 ||
      EVP_DecryptUpdate(cipher_->context, plain_.data(), &out, sealed_.data(), static_cast<int>(length)) != 1 ||
      EVP_CIPHER_CTX_ctrl(cipher_->context, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kSealTagBytes),
                          sealed_.data() + length) != 1) {
    return OpenSslFailure("opening a data-plane record");
  }
  int final_out = 0;
  if (EVP_DecryptFinal_ex(cipher_->context, plain_.data() + out, &final_out) != 1) {
    plain_.clear();
    return absl::DataLossError(absl::StrCat("sealed record ", records_ - 1,
                                            " failed authentication: it was forged, replayed or changed on the way"));
  }
  return absl::OkStatus();
}

absl::Status SealedReader::Read(void* data, size_t size) {
  auto* bytes = static_cast<uint8_t*>(data);
  while (size > 0) {
    if (!broken_.ok()) return broken_;
    if (served_ == plain_.size()) {
      if (absl::Status status = NextRecord(); !status.ok()) {
        broken_ = status;
        return status;
      }
    }
    const size_t take = std::min(size, plain_.size() - served_);
    std::memcpy(bytes, plain_.data() + served_, take);
    served_ += take;
    bytes += take;
    size -= take;
  }
  return absl::OkStatus();
}

}  // namespace tandem::actor
