#include "rpc/status_convert.h"

#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kj/debug.h"

namespace tandem::rpc {
namespace {

absl::string_view Description(const kj::Exception& exception) {
  kj::StringPtr text = exception.getDescription();
  return absl::string_view(text.cStr(), text.size());
}

bool ParseCodeName(absl::string_view name, absl::StatusCode* code) {
  // absl::StatusCodeToString's names for codes 1..16.
  for (int value = 1; value <= 16; ++value) {
    auto candidate = static_cast<absl::StatusCode>(value);
    if (absl::StatusCodeToString(candidate) == name) {
      *code = candidate;
      return true;
    }
  }
  return false;
}

}  // namespace

absl::Status FromKjException(const kj::Exception& exception) {
  absl::string_view text = Description(exception);
  size_t prefix = text.find(kStatusPrefix);
  if (prefix != absl::string_view::npos) {
    absl::string_view rest = text.substr(prefix + sizeof(kStatusPrefix) - 1);
    size_t colon = rest.find(": ");
    absl::StatusCode code;
    if (colon != absl::string_view::npos && ParseCodeName(rest.substr(0, colon), &code)) {
      return absl::Status(code, rest.substr(colon + 2));
    }
  }
  switch (exception.getType()) {
    case kj::Exception::Type::DISCONNECTED:
      return absl::UnavailableError(absl::StrCat("peer disconnected: ", text));
    case kj::Exception::Type::OVERLOADED:
      return absl::ResourceExhaustedError(absl::StrCat("peer overloaded: ", text));
    case kj::Exception::Type::UNIMPLEMENTED:
      return absl::UnimplementedError(text);
    case kj::Exception::Type::FAILED:
      break;
  }
  return absl::InternalError(text);
}

kj::Exception ToKjException(const absl::Status& status) {
  KJ_REQUIRE(!status.ok(), "ToKjException needs an error");
  std::string text = absl::StrCat(kStatusPrefix, absl::StatusCodeToString(status.code()), ": ",
                                  status.message());
  kj::Exception::Type type = status.code() == absl::StatusCode::kUnavailable
                                 ? kj::Exception::Type::DISCONNECTED
                                 : kj::Exception::Type::FAILED;
  return kj::Exception(type, __FILE__, __LINE__, kj::heapString(text.data(), text.size()));
}

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) kj::throwFatalException(ToKjException(status));
}

}  // namespace tandem::rpc
