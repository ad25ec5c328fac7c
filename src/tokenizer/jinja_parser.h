// Internal to the chat-template engine (src/tokenizer/jinja*.{h,cpp}); its
// interface is jinja.h. The parser: from the lexer's pieces (jinja_lexer.h)
// to the tree of statements and expressions of jinja_nodes.h. Defined in
// jinja_parser.cpp.
#pragma once
#include <vector>

#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_nodes.h"

namespace ms::jinja::detail {

// The template's statements, by recursive descent; throws ms::Error
// "jinja: line N: ..." for a syntax error or a construct the renderer does
// not support, LimitExceeded for nesting deeper than limits.max_nesting.
Body parse(std::vector<Piece> pieces, const Limits& limits);

}  // namespace ms::jinja::detail
