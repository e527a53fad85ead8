// The lexer of the IR's text form (see printer.h for the grammar).
//
// Internal to the printer and parser. Turns text into tokens on demand, each
// with the 1-based line and column of its first character. It never fails:
// a malformed token (an unterminated string, a stray character) comes back
// as a kError token whose text says what is wrong, and the parser reports it
// when it reaches it, so the first error in the text is the one reported.
// Views the text it is given, which must outlive it. Not synchronized.
#ifndef TANDEM_IR_TEXT_LEXER_H_
#define TANDEM_IR_TEXT_LEXER_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace tandem::ir {

enum class TokenKind : uint8_t {
  kEnd,         // end of input
  kError,       // text: what is wrong
  kIdentifier,  // [A-Za-z_][A-Za-z0-9_.]*; text: the identifier
  kInteger,     // -?[0-9]+; text: as written
  kFloat,       // 1.5, 1e-05, -2.5e+10, -inf, -nan; text: as written
  kString,      // "..."; text: the decoded contents
  kValueId,     // %12; text: the digits
  kPunct,       // one of ( ) { } [ ] , = : @; text: the character
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  int line = 1;
  int column = 1;
};

// How a token reads in an error message: "identifier 'foo'", "'{'",
// "end of input", ...
std::string DescribeToken(const Token& token);

// True for a name that the text form can write bare (as an identifier).
bool IsTextIdentifier(absl::string_view name);

// `text` in double quotes, with \" \\ \n \t and \xHH escapes: the inverse of
// the lexer's string rule.
std::string QuoteTextString(absl::string_view text);

class Lexer {
 public:
  explicit Lexer(absl::string_view text) : text_(text) {}

  // The next token; kEnd forever once the text is consumed.
  Token Next();

 private:
  char PeekChar(size_t ahead = 0) const;
  void Advance();  // one character, tracking line and column
  void SkipSpaceAndComments();
  Token LexNumber(Token token);
  Token LexString(Token token);

  absl::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
  int column_ = 1;
};

}  // namespace tandem::ir

#endif  // TANDEM_IR_TEXT_LEXER_H_
