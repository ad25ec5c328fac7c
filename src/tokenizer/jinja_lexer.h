// Internal to the chat-template engine (src/tokenizer/jinja*.{h,cpp}); its
// interface is jinja.h. The lexer: the template cut into pieces (text,
// {{ expression }}, {% statement %}), each tag as its tokens. Defined in
// jinja_lexer.cpp; the parser (jinja_parser.h) reads its pieces.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace ms::jinja::detail {

enum class Tok { Name, Str, Int, Float, Op, End };

struct Token {
  Tok type;
  std::string text;
  int line;
};

// One piece of the template: text, {{ expression }}, or {% statement %}.
struct Piece {
  enum Kind { Text, Output, Stmt } kind;
  std::string text;            // Text
  std::vector<Token> tokens;   // Output / Stmt (ending with an End token)
  int line;
};

// Cuts template source into pieces (comments dropped, {% raw %} kept as
// text), applying "-" and "+" whitespace control, trim_blocks and
// lstrip_blocks; throws ms::Error "jinja: line N: ..." for an unclosed tag or
// comment, a bad string literal or an unexpected character.
std::vector<Piece> lex(std::string_view source);

}  // namespace ms::jinja::detail
