#include "ir/text_lexer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/excerpt.h"
#include "ir/limits.h"

namespace tandem::ir {
namespace {

// ASCII only, whatever the locale.
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool IsIdentifierStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool IsIdentifierChar(char c) { return IsIdentifierStart(c) || IsDigit(c) || c == '.'; }

int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A character as it reads in an error message.
std::string DescribeChar(char c) {
  unsigned char u = static_cast<unsigned char>(c);
  if (u < 0x20 || u >= 0x7f) return absl::StrFormat("'\\x%02x'", u);
  return absl::StrCat("'", std::string(1, c), "'");
}

}  // namespace

std::string DescribeToken(const Token& token) {
  switch (token.kind) {
    case TokenKind::kEnd: return "end of input";
    case TokenKind::kError: return token.text;
    case TokenKind::kIdentifier: return absl::StrCat("'", Excerpt(token.text), "'");
    case TokenKind::kInteger: return absl::StrCat("integer ", Excerpt(token.text));
    case TokenKind::kFloat: return absl::StrCat("number ", Excerpt(token.text));
    case TokenKind::kString: return absl::StrCat("string ", QuoteTextString(Excerpt(token.text)));
    case TokenKind::kValueId: return absl::StrCat("'%", Excerpt(token.text), "'");
    case TokenKind::kPunct: return absl::StrCat("'", token.text, "'");
  }
  return "?";
}

bool IsTextIdentifier(absl::string_view name) {
  if (name.empty() || !IsIdentifierStart(name[0])) return false;
  for (char c : name) {
    if (!IsIdentifierChar(c)) return false;
  }
  return true;
}

std::string QuoteTextString(absl::string_view text) {
  std::string quoted = "\"";
  for (char c : text) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (c == '\n') {
      quoted += "\\n";
    } else if (c == '\t') {
      quoted += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      quoted += absl::StrFormat("\\x%02x", u);
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

char Lexer::PeekChar(size_t ahead) const {
  return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
}

void Lexer::Advance() {
  if (pos_ >= text_.size()) return;
  if (text_[pos_] == '\n') {
    ++line_;
    column_ = 1;
  } else {
    ++column_;
  }
  ++pos_;
}

void Lexer::SkipSpaceAndComments() {
  while (pos_ < text_.size()) {
    char c = text_[pos_];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      Advance();
    } else if ((c == '/' && PeekChar(1) == '/') || c == '#') {
      while (pos_ < text_.size() && text_[pos_] != '\n') Advance();
    } else {
      return;
    }
  }
}

Token Lexer::Next() {
  SkipSpaceAndComments();
  Token token;
  token.line = line_;
  token.column = column_;
  if (pos_ >= text_.size()) return token;  // kEnd
  char c = text_[pos_];
  if (IsIdentifierStart(c)) {
    token.kind = TokenKind::kIdentifier;
    size_t length = 0;
    while (IsIdentifierChar(PeekChar(length))) ++length;
    token.text = std::string(text_.substr(pos_, length));
    pos_ += length;  // no newline inside
    column_ += static_cast<int>(length);
    return token;
  }
  if (IsDigit(c) || c == '-') return LexNumber(std::move(token));
  if (c == '"') return LexString(std::move(token));
  if (c == '%') {
    Advance();
    if (!IsDigit(PeekChar())) {
      token.kind = TokenKind::kError;
      token.text = "'%' must be followed by a value number, as in %0";
      return token;
    }
    token.kind = TokenKind::kValueId;
    while (IsDigit(PeekChar())) {
      token.text += PeekChar();
      Advance();
    }
    return token;
  }
  if (absl::string_view("(){}[],=:@").find(c) != absl::string_view::npos) {
    token.kind = TokenKind::kPunct;
    token.text = std::string(1, c);
    Advance();
    return token;
  }
  token.kind = TokenKind::kError;
  token.text = absl::StrCat("unexpected character ", DescribeChar(c));
  return token;
}

Token Lexer::LexNumber(Token token) {
  token.kind = TokenKind::kInteger;
  if (PeekChar() == '-') {
    token.text += '-';
    Advance();
    for (absl::string_view word : {"inf", "nan"}) {
      if (text_.substr(pos_, word.size()) == word &&
          !IsIdentifierChar(PeekChar(word.size()))) {
        token.kind = TokenKind::kFloat;
        token.text += std::string(word);
        for (size_t i = 0; i < word.size(); ++i) Advance();
        return token;
      }
    }
    if (!IsDigit(PeekChar())) {
      token.kind = TokenKind::kError;
      token.text = "unexpected character '-'";
      return token;
    }
  }
  auto take_digits = [&] {
    while (IsDigit(PeekChar())) {
      token.text += PeekChar();
      Advance();
    }
  };
  take_digits();
  if (PeekChar() == '.') {
    token.kind = TokenKind::kFloat;
    token.text += '.';
    Advance();
    take_digits();
  }
  bool malformed = false;
  if (PeekChar() == 'e' || PeekChar() == 'E') {
    token.kind = TokenKind::kFloat;
    token.text += PeekChar();
    Advance();
    if (PeekChar() == '+' || PeekChar() == '-') {
      token.text += PeekChar();
      Advance();
    }
    if (!IsDigit(PeekChar())) malformed = true;
    take_digits();
  }
  while (IsIdentifierChar(PeekChar())) {
    malformed = true;
    token.text += PeekChar();
    Advance();
  }
  if (malformed) {
    token.text = absl::StrCat("malformed number '", Excerpt(token.text), "'");
    token.kind = TokenKind::kError;
  }
  return token;
}

Token Lexer::LexString(Token token) {
  Advance();  // the opening quote
  token.kind = TokenKind::kString;
  while (true) {
    char c = PeekChar();
    bool at_end = pos_ >= text_.size() || c == '\n' ||
                  (c == '\\' && (pos_ + 1 >= text_.size() || PeekChar(1) == '\n'));
    if (at_end) {
      token.kind = TokenKind::kError;
      token.text = "unterminated string";
      return token;
    }
    if (c == '"') {
      Advance();
      return token;
    }
    if (c != '\\') {
      token.text += c;
      Advance();
      continue;
    }
    int escape_line = line_;
    int escape_column = column_;
    char escaped = PeekChar(1);
    int high = HexDigitValue(PeekChar(2));
    int low = HexDigitValue(PeekChar(3));
    if (escaped == '"' || escaped == '\\' || escaped == 'n' || escaped == 't') {
      token.text += escaped == 'n' ? '\n' : escaped == 't' ? '\t' : escaped;
      Advance();
      Advance();
    } else if (escaped == 'x' && high >= 0 && low >= 0) {
      token.text += static_cast<char>(high * 16 + low);
      for (int i = 0; i < 4; ++i) Advance();
    } else {
      token.kind = TokenKind::kError;
      token.text = escaped == 'x' ? "'\\x' must be followed by two hex digits"
                                  : absl::StrCat("unknown escape '\\", std::string(1, escaped),
                                                 "' in string");
      token.line = escape_line;
      token.column = escape_column;
      return token;
    }
  }
}

}  // namespace tandem::ir
