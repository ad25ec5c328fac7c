// The lexer of the chat-template engine (jinja_lexer.h): finds the tags in
// the template's text, applies whitespace control, and cuts each tag into
// tokens (names, string and number literals, operators).
#include "tokenizer/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>

#include "tokenizer/jinja_value.h"

namespace ms::jinja::detail {

namespace {

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : s_(src) {}

  std::vector<Piece> run() {
    std::vector<Piece> out;
    bool strip_next = false;  // a "-" closed the previous tag
    bool trim_nl = false;     // trim_blocks: drop one newline after a block tag
    while (pos_ < s_.size()) {
      // The next tag opening.
      size_t open = pos_;
      for (;;) {
        open = s_.find('{', open);
        if (open == std::string_view::npos || open + 1 >= s_.size()) {
          open = std::string_view::npos;
          break;
        }
        const char c = s_[open + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++open;
      }
      std::string text(s_.substr(pos_, open == std::string_view::npos ? std::string_view::npos : open - pos_));
      if (trim_nl) {
        if (text.rfind("\r\n", 0) == 0) text.erase(0, 2);
        else if (!text.empty() && text[0] == '\n') text.erase(0, 1);
      }
      if (strip_next) {
        size_t b = 0;
        while (b < text.size() && is_space(text[b])) ++b;
        text.erase(0, b);
      }
      strip_next = trim_nl = false;
      if (open == std::string_view::npos) {
        add_text(out, text);
        break;
      }
      const char kind = s_[open + 1];
      size_t p = open + 2;
      const bool minus = p < s_.size() && s_[p] == '-';
      const bool plus = p < s_.size() && s_[p] == '+';
      if (minus || plus) ++p;
      if (minus) {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (kind != '{' && !plus) {
        // lstrip_blocks: spaces and tabs before a block tag on its line.
        size_t e = text.size();
        while (e > 0 && (text[e - 1] == ' ' || text[e - 1] == '\t')) --e;
        const bool line_start = e == 0 ? at_line_start(open - text.size()) : text[e - 1] == '\n';
        if (line_start) text.erase(e);
      }
      add_text(out, text);
      line_ = line_at(open);
      if (kind == '#') {
        const size_t close = s_.find("#}", p);
        if (close == std::string_view::npos) fail_at("unclosed comment");
        strip_next = close > 0 && s_[close - 1] == '-';
        trim_nl = !strip_next;
        pos_ = close + 2;
        continue;
      }
      pos_ = p;
      Piece piece{kind == '{' ? Piece::Output : Piece::Stmt, "", {}, line_};
      const std::string close = kind == '{' ? "}}" : "%}";
      for (;;) {
        skip_ws();
        if (pos_ >= s_.size()) fail_at("unclosed tag");
        if (s_[pos_] == '-' && s_.compare(pos_ + 1, 2, close) == 0) {
          strip_next = true;
          pos_ += 3;
          break;
        }
        if (s_[pos_] == '+' && s_.compare(pos_ + 1, 2, close) == 0) {
          pos_ += 3;
          break;
        }
        if (s_.compare(pos_, 2, close) == 0) {
          pos_ += 2;
          trim_nl = kind == '%';
          break;
        }
        piece.tokens.push_back(next_token());
      }
      if (strip_next) trim_nl = false;
      piece.tokens.push_back({Tok::End, "", line_});
      // {% raw %} ... {% endraw %}: the text in between as it is.
      if (piece.kind == Piece::Stmt && piece.tokens.size() == 2 && piece.tokens[0].text == "raw") {
        const size_t end = s_.find("endraw", pos_);
        if (end == std::string_view::npos) fail_at("raw without endraw");
        const size_t tag = s_.rfind("{%", end);
        const size_t close_at = s_.find("%}", end);
        if (tag == std::string_view::npos || tag < pos_ || close_at == std::string_view::npos)
          fail_at("raw without {% endraw %}");
        std::string raw(s_.substr(pos_, tag - pos_));
        if (tag + 2 < s_.size() && s_[tag + 2] == '-')
          while (!raw.empty() && is_space(raw.back())) raw.pop_back();
        add_text(out, raw);
        strip_next = close_at > 0 && s_[close_at - 1] == '-';
        trim_nl = !strip_next;
        pos_ = close_at + 2;
        continue;
      }
      out.push_back(std::move(piece));
    }
    return out;
  }

 private:
  bool at_line_start(size_t at) const { return at == 0 || s_[at - 1] == '\n'; }
  int line_at(size_t at) {
    while (counted_ < at && counted_ < s_.size()) {
      if (s_[counted_] == '\n') ++cur_line_;
      ++counted_;
    }
    return cur_line_;
  }
  [[noreturn]] void fail_at(const std::string& what) const { fail("line " + std::to_string(line_) + ": " + what); }

  void add_text(std::vector<Piece>& out, const std::string& text) {
    if (!text.empty()) out.push_back({Piece::Text, text, {}, line_});
  }

  void skip_ws() {
    while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
  }

  Token next_token() {
    const char c = s_[pos_];
    if (ident_start(c)) {
      const size_t b = pos_;
      while (pos_ < s_.size() && ident_char(s_[pos_])) ++pos_;
      return {Tok::Name, std::string(s_.substr(b, pos_ - b)), line_};
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      const size_t b = pos_;
      bool is_float = false;
      while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
      if (pos_ + 1 < s_.size() && s_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
        is_float = true;
        ++pos_;
        while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      }
      if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
        is_float = true;
        ++pos_;
        if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
        while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      }
      std::string t(s_.substr(b, pos_ - b));
      t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
      return {is_float ? Tok::Float : Tok::Int, t, line_};
    }
    if (c == '\'' || c == '"') {
      ++pos_;
      std::string out;
      while (pos_ < s_.size() && s_[pos_] != c) {
        char ch = s_[pos_++];
        if (ch == '\\' && pos_ < s_.size()) {
          const char e = s_[pos_++];
          switch (e) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case '0': out += '\0'; break;
            case '\\': out += '\\'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case '\n': break;
            case 'x':
            case 'u':
            case 'U': {
              const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
              if (pos_ + n > s_.size()) fail_at("bad escape in a string");
              uint32_t cp = 0;
              for (size_t k = 0; k < n; ++k) {
                const char h = s_[pos_ + k];
                if (!std::isxdigit(static_cast<unsigned char>(h))) fail_at("bad escape in a string");
                cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
              }
              if (cp > 0x10FFFF) fail_at("bad escape in a string");
              pos_ += n;
              append_utf8(out, cp);
              break;
            }
            default: out += '\\', out += e;
          }
        } else {
          if (ch == '\n') ++cur_line_, ++counted_;  // keep line numbers right inside strings
          out += ch;
        }
      }
      if (pos_ >= s_.size()) fail_at("unterminated string");
      ++pos_;
      return {Tok::Str, out, line_};
    }
    static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ".", ",", ":",
                                "|",  "~",  "+",  "-",  "*",  "/",  "%", "<", ">", "="};
    for (const char* op : ops)
      if (s_.compare(pos_, std::strlen(op), op) == 0) {
        pos_ += std::strlen(op);
        return {Tok::Op, op, line_};
      }
    fail_at(std::string("unexpected character '") + c + "'");
  }

  std::string_view s_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t counted_ = 0;
  int cur_line_ = 1;
};

}  // namespace

std::vector<Piece> lex(std::string_view source) { return Lexer(source).run(); }

}  // namespace ms::jinja::detail
