// The prompt of `run --chat` and `tokenize --chat`: one user message through
// the server's ChatRenderer, so that all three commands build the same text
// from the same messages -- the GGUF's Jinja template
// (tokenizer.chat_template) where it has one, else the built-in format it
// resembles (tokenizer/chat_template.h).
#pragma once
#include <string>

#include "tokenizer/reply_decoder.h"

namespace ms {
class Tokenizer;
}

namespace ms::cli {

// `format`: a built-in format name instead of the file's template (as
// `serve --chat-template`; "" = the file's). Throws ms::Error for an unknown
// name or a template that refuses the message.
std::string chat_prompt(const Tokenizer& tok, const std::string& user_text, const std::string& format = "");

// Prints what a ReplyDecoder gave: the answer on stdout; a gpt-oss model's
// reasoning (its analysis channel) on stderr unless `quiet`, so stdout holds
// the answer alone; a tool call as a note on stderr (run offers no tools, so
// the call goes nowhere).
void print_reply(const HarmonyParser::Out& piece, bool quiet);

}  // namespace ms::cli
