// `moestream tokenize`: the token ids of a text under a model's tokenizer.
//   moestream tokenize -m FILE [--raw] [--pieces] [--chat [--chat-template NAME]] [-f TEXTFILE | TEXT]
// Works on a full model GGUF and on a vocab-only GGUF (tokenizer metadata, no tensors).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cli/chat_prompt.h"
#include "cli/commands.h"
#include "cli/model_path.h"
#include "format/gguf.h"
#include "tokenizer/chat_template.h"  // chat_format_names()
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace ms::cli {
namespace {

struct TokenizeArgs {
  std::string model, text, file, chat_template;
  bool raw = false, pieces = false, chat = false;
};

std::string read_text_file(const std::string& path) {
  if (path == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open text file '" + path + "'");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A piece for display: printable UTF-8 as is, control characters and
// incomplete bytes escaped, so every piece stays on one line.
std::string escape_piece(const std::string& p) {
  std::string out;
  for (size_t i = 0; i < p.size();) {
    const auto c = static_cast<unsigned char>(p[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '\\') out += "\\\\";
    else if (c == '\'') out += "\\'";
    else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else if (c >= 0x80) {
      const size_t n = utf8::valid_char_length(std::string_view(p).substr(i));
      if (n == 0) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02X", c);
        out += buf;
        ++i;
        continue;
      }
      out.append(p, i, n);
      i += n;
      continue;
    } else {
      out.push_back(static_cast<char>(c));
    }
    ++i;
  }
  return out;
}

RegisterCommand reg("tokenize", [](CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* sub = app.add_subcommand("tokenize", "Print the token ids of a text under a model's tokenizer");
  sub->add_option("-m,--model", a->model, "GGUF file (a full model or a vocab-only file)")->required();
  sub->add_option("-f,--file", a->file, "read the text from this file ('-' for stdin)");
  sub->add_option("text", a->text, "the text (when no -f is given)");
  sub->add_flag("--raw", a->raw, "add no BOS/EOS and treat special-token text as plain text");
  sub->add_flag("--pieces", a->pieces, "print one token per line: id and its text");
  sub->add_flag("--chat", a->chat,
                "wrap the text as one user message in the model's chat template, as `serve` and `run --chat` do");
  sub->add_option("--chat-template", a->chat_template,
                  "chat format instead of the one detected from the GGUF (" + chat_format_names() + ")");
  return [a]() -> int {
    if (!a->file.empty() && !a->text.empty())
      throw Error("tokenize: give the text either as an argument or with -f, not both");
    if (a->file.empty() && a->text.empty())
      throw Error("tokenize: no text; give it as an argument or with -f FILE");
    require_regular_file(a->model, "-m");
    std::string text = a->file.empty() ? a->text : read_text_file(a->file);
    const auto file = GgufFile::open(a->model);
    const Tokenizer tok = Tokenizer::from_gguf(*file);
    if (a->chat || !a->chat_template.empty()) text = chat_prompt(tok, text, a->chat_template);
    const std::vector<int32_t> ids = tok.encode(text, !a->raw, !a->raw);
    if (a->pieces) {
      for (int32_t id : ids)
        std::printf("%d\t'%s'\n", id, escape_piece(tok.token_to_piece(id, true)).c_str());
    } else {
      std::string line;
      for (int32_t id : ids) {
        if (!line.empty()) line.push_back(' ');
        line += std::to_string(id);
      }
      std::printf("%s\n", line.c_str());
    }
    return 0;
  };
});

}  // namespace
}  // namespace ms::cli
