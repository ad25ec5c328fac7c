#include "server/http_parser.h"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace ms::server::http {

namespace {

bool is_tchar(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A value quoted in an error message: printable ASCII, at most 40 bytes.
std::string quoted(std::string_view v) {
  std::string out = "'";
  for (char c : v.substr(0, 40)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (v.size() > 40) out += "...";
  return out + "'";
}

// Splits a comma-separated header value into trimmed elements (empty ones kept).
std::vector<std::string_view> list_elements(std::string_view v) {
  std::vector<std::string_view> out;
  size_t at = 0;
  for (;;) {
    const size_t comma = v.find(',', at);
    out.push_back(trim(v.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at)));
    if (comma == std::string_view::npos) return out;
    at = comma + 1;
  }
}

}  // namespace

RequestParser::State RequestParser::fail(int status, std::string message) {
  phase_ = Phase::Failed;
  err_ = ParseError{status, std::move(message)};
  return State::Error;
}

void RequestParser::compact() {
  // Amortized: the prefix goes once it is at least half of what is held.
  if (pos_ > 4096 && pos_ * 2 > buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
}

Request RequestParser::take() {
  Request r = std::move(req_);
  req_ = Request{};
  phase_ = Phase::Head;
  scanned_ = 0;
  remaining_ = 0;
  line_done_ = false;
  trailer_bytes_ = trailer_count_ = 0;
  expect_continue_ = false;
  compact();
  return r;
}

size_t RequestParser::line_end(size_t max_len) {
  const size_t from = pos_ + scanned_, to = std::min(buf_.size(), pos_ + max_len + 1);
  const void* nl = from < to ? std::memchr(buf_.data() + from, '\n', to - from) : nullptr;
  if (!nl) {
    scanned_ = std::max(from, to) - pos_;
    return std::string::npos;
  }
  scanned_ = 0;  // the line is consumed by the caller
  return static_cast<size_t>(static_cast<const char*>(nl) - buf_.data());
}

RequestParser::State RequestParser::parse() {
  for (;;) {
    const size_t avail = buf_.size() - pos_;
    switch (phase_) {
      case Phase::Failed: return State::Error;
      case Phase::Done: return State::Complete;
      case Phase::Head: {
        // Empty lines before a request line are ignored (RFC 9112, 2.2).
        while (scanned_ == 0 && pos_ < buf_.size() && (buf_[pos_] == '\r' || buf_[pos_] == '\n')) ++pos_;
        // The end of the header section: a line feed followed by an empty line.
        size_t end = std::string::npos;
        size_t i = pos_ + scanned_;
        for (; i < buf_.size(); ++i) {
          if (buf_[i] != '\n') continue;
          if (i + 1 >= buf_.size()) break;
          if (buf_[i + 1] == '\n') {
            end = i + 2;
            break;
          }
          if (buf_[i + 1] == '\r') {
            if (i + 2 >= buf_.size()) break;
            if (buf_[i + 2] == '\n') {
              end = i + 3;
              break;
            }
          }
        }
        if (end == std::string::npos) {
          scanned_ = std::min(i, buf_.size()) - pos_;
          const size_t held = buf_.size() - pos_;
          // No line feed among the bytes scanned (they are scanned once): the request line is still open.
          if (!line_done_ && held > lim_.max_request_line) {
            line_done_ = std::memchr(buf_.data() + pos_, '\n', lim_.max_request_line + 1) != nullptr;
            if (!line_done_)
              return fail(414, "the request line is longer than " + std::to_string(lim_.max_request_line) + " bytes");
          }
          if (held > lim_.max_header_bytes)
            return fail(431, "the request's header section is larger than " + std::to_string(lim_.max_header_bytes) +
                                 " bytes");
          compact();
          return State::NeedMore;
        }
        if (!std::memchr(buf_.data() + pos_, '\n', std::min(end - pos_, lim_.max_request_line + 1)))
          return fail(414, "the request line is longer than " + std::to_string(lim_.max_request_line) + " bytes");
        if (end - pos_ > lim_.max_header_bytes)
          return fail(431,
                      "the request's header section is larger than " + std::to_string(lim_.max_header_bytes) + " bytes");
        const State s = parse_head(end);
        if (s == State::Error) return s;
        pos_ = end;
        scanned_ = 0;
        return State::HeadersDone;
      }
      case Phase::Body: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, avail));
        req_.body.append(buf_, pos_, n);
        pos_ += n;
        remaining_ -= n;
        if (remaining_ > 0) {
          compact();
          return State::NeedMore;
        }
        phase_ = Phase::Done;
        break;
      }
      case Phase::ChunkSize: {
        const size_t eol = line_end(lim_.max_chunk_line);
        if (eol == std::string::npos) {
          if (avail > lim_.max_chunk_line)
            return fail(400, "a chunk-size line is longer than " + std::to_string(lim_.max_chunk_line) + " bytes");
          compact();
          return State::NeedMore;
        }
        std::string_view line(buf_.data() + pos_, eol - pos_);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        uint64_t size = 0;
        size_t k = 0;
        for (; k < line.size() && hex_value(line[k]) >= 0; ++k) {
          if (k >= 15) return fail(400, "a chunk size has more than 15 hex digits");
          size = size * 16 + static_cast<uint64_t>(hex_value(line[k]));
        }
        if (k == 0) return fail(400, "malformed chunk size " + quoted(line) + " (hex digits expected)");
        std::string_view rest = trim(line.substr(k));
        if (!rest.empty() && rest.front() != ';')
          return fail(400, "malformed chunk size line " + quoted(line));
        for (char c : rest)
          if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f)
            return fail(400, "a control byte in a chunk extension");
        pos_ = eol + 1;
        if (size == 0) {
          phase_ = Phase::Trailers;
          break;
        }
        if (size > lim_.max_body - req_.body.size())
          return fail(413, "the request body is larger than the server's limit of " + std::to_string(lim_.max_body) +
                               " bytes (--max-body), counted after chunked decoding");
        remaining_ = size;
        phase_ = Phase::ChunkData;
        break;
      }
      case Phase::ChunkData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, avail));
        req_.body.append(buf_, pos_, n);
        pos_ += n;
        remaining_ -= n;
        if (remaining_ > 0) {
          compact();
          return State::NeedMore;
        }
        phase_ = Phase::ChunkDataEnd;
        break;
      }
      case Phase::ChunkDataEnd: {
        if (avail == 0) return State::NeedMore;
        if (buf_[pos_] == '\n') {
          ++pos_;
        } else if (buf_[pos_] == '\r') {
          if (avail < 2) return State::NeedMore;
          if (buf_[pos_ + 1] != '\n') return fail(400, "a chunk's data is not followed by CRLF");
          pos_ += 2;
        } else {
          return fail(400, "a chunk's data is longer than its size says (no CRLF after it)");
        }
        phase_ = Phase::ChunkSize;
        break;
      }
      case Phase::Trailers: {
        const size_t room = lim_.max_header_bytes - std::min(lim_.max_header_bytes, trailer_bytes_);
        const size_t eol = line_end(room);
        if (eol == std::string::npos) {
          if (avail > room)
            return fail(431, "the request's trailer section is larger than " + std::to_string(lim_.max_header_bytes) +
                                 " bytes");
          compact();
          return State::NeedMore;
        }
        std::string_view line(buf_.data() + pos_, eol - pos_);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        trailer_bytes_ += eol + 1 - pos_;
        pos_ = eol + 1;
        if (line.empty()) {
          phase_ = Phase::Done;
          break;
        }
        if (++trailer_count_ > lim_.max_headers)
          return fail(431, "the request has more than " + std::to_string(lim_.max_headers) + " trailer fields");
        break;  // trailers are not used
      }
    }
  }
}

RequestParser::State RequestParser::parse_head(size_t end) {
  // Lines of [pos_, end): the request line, header fields, the empty line.
  std::vector<std::string_view> lines;
  size_t at = pos_;
  while (at < end) {
    const size_t nl = buf_.find('\n', at);
    std::string_view line(buf_.data() + at, nl - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find('\r') != std::string_view::npos) return fail(400, "a bare CR in the request's header section");
    lines.push_back(line);
    at = nl + 1;
  }
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty()) return fail(400, "an empty request");

  // request-line = method SP request-target SP HTTP-version
  const std::string_view rl = lines[0];
  if (rl.size() > lim_.max_request_line)
    return fail(414, "the request line is longer than " + std::to_string(lim_.max_request_line) + " bytes");
  const size_t sp1 = rl.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "malformed request line " + quoted(rl) + " (expected: METHOD TARGET HTTP/1.1)");
  const std::string_view method = rl.substr(0, sp1), target = rl.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = rl.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), [](char c) { return is_tchar(c); }))
    return fail(400, "malformed method " + quoted(method));
  if (target.empty()) return fail(400, "an empty request target");
  for (char c : target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return fail(400, "a control byte in the request target");
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' || version[5] < '0' ||
      version[5] > '9' || version[7] < '0' || version[7] > '9')
    return fail(400, "malformed HTTP version " + quoted(version));
  if (version[5] != '1') return fail(505, "HTTP version " + quoted(version) + " is not supported (HTTP/1.1 is)");
  req_.method = method;
  req_.target = target;
  req_.minor_version = version[7] == '0' ? 0 : 1;  // 1.2 and later minors: answered as 1.1

  // The path: origin-form ("/p?q"), absolute-form ("http://host/p?q", which a
  // server must accept), or "*" for OPTIONS.
  std::string_view p = target;
  if (p.front() != '/') {
    const size_t scheme = p.find("://");
    if (p == "*" && method == "OPTIONS") {
      p = "*";
    } else if (scheme != std::string_view::npos && scheme > 0) {
      const size_t slash = p.find('/', scheme + 3);
      p = slash == std::string_view::npos ? std::string_view("/") : p.substr(slash);
    } else {
      return fail(400, "malformed request target " + quoted(target) + " (expected a path starting with '/')");
    }
  }
  const size_t q = p.find('?');
  if (q != std::string_view::npos) {
    req_.query = p.substr(q + 1);
    p = p.substr(0, q);
  }
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != '%') {
      req_.path += p[i];
      continue;
    }
    if (i + 2 >= p.size() || hex_value(p[i + 1]) < 0 || hex_value(p[i + 2]) < 0)
      return fail(400, "malformed percent-encoding in the request path");
    req_.path += static_cast<char>(hex_value(p[i + 1]) * 16 + hex_value(p[i + 2]));
    i += 2;
  }

  if (lines.size() - 1 > lim_.max_headers)
    return fail(431, "the request has more than " + std::to_string(lim_.max_headers) + " header fields");
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (line.front() == ' ' || line.front() == '\t')
      return fail(400, "obsolete line folding in the request's header section");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return fail(400, "malformed header line " + quoted(line) + " (expected NAME: VALUE)");
    const std::string_view name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), [](char c) { return is_tchar(c); }))
      return fail(400, "malformed header name " + quoted(name) + " (no whitespace before the colon)");
    const std::string_view value = trim(line.substr(colon + 1));
    for (char c : value)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f)
        return fail(400, "a control byte in the value of header " + quoted(name));
    req_.headers.emplace_back(name, value);
  }

  // Framing and what it depends on.
  int hosts = 0;
  bool has_length = false, chunked = false, close = false, keep_alive = false;
  std::string_view length;
  std::vector<std::string_view> codings;
  for (const auto& [name, value] : req_.headers) {
    if (iequals(name, "Host")) {
      ++hosts;
    } else if (iequals(name, "Content-Length")) {
      for (std::string_view v : list_elements(value)) {
        if (v.empty() || v.size() > 18 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
          return fail(400, "malformed Content-Length " + quoted(value) + " (a decimal byte count expected)");
        if (has_length && v != length)
          return fail(400, "conflicting Content-Length values " + quoted(length) + " and " + quoted(v));
        has_length = true;
        length = v;
      }
    } else if (iequals(name, "Transfer-Encoding")) {
      for (std::string_view v : list_elements(value)) codings.push_back(v);
    } else if (iequals(name, "Content-Encoding")) {
      for (std::string_view v : list_elements(value))
        if (!v.empty() && !iequals(v, "identity"))
          return fail(415, "compressed request bodies are not accepted (Content-Encoding: " + std::string(quoted(v)) +
                               "); send the body uncompressed");
    } else if (iequals(name, "Expect")) {
      if (!iequals(value, "100-continue")) return fail(417, "unsupported expectation " + quoted(value));
      expect_continue_ = true;
    } else if (iequals(name, "Connection")) {
      for (std::string_view v : list_elements(value)) {
        close = close || iequals(v, "close");
        keep_alive = keep_alive || iequals(v, "keep-alive");
      }
    }
  }
  (void)keep_alive;  // HTTP/1.0 connections are closed after one response either way
  if (req_.minor_version == 1 && hosts != 1)
    return fail(400, hosts == 0 ? "an HTTP/1.1 request without a Host header" : "more than one Host header");
  if (!codings.empty()) {
    if (req_.minor_version == 0) return fail(400, "Transfer-Encoding in an HTTP/1.0 request");
    if (has_length) return fail(400, "both Content-Length and Transfer-Encoding (the request's length is ambiguous)");
    const std::string_view last = codings.back();
    const std::string_view last_name = trim(last.substr(0, last.find(';')));
    if (!iequals(last_name, "chunked"))
      return fail(400, "Transfer-Encoding " + quoted(last) + " does not end in chunked (the body's end is unknown)");
    for (size_t i = 0; i + 1 < codings.size(); ++i)
      return fail(501, "transfer coding " + quoted(codings[i]) + " is not supported (only chunked)");
    chunked = true;
  }
  req_.keep_alive = req_.minor_version == 1 && !close;
  if (chunked) {
    phase_ = Phase::ChunkSize;
  } else if (has_length) {
    uint64_t n = 0;
    for (char c : length) n = n * 10 + static_cast<uint64_t>(c - '0');
    if (n > lim_.max_body)
      return fail(413, "the request body (" + std::to_string(n) + " bytes) is larger than the server's limit of " +
                           std::to_string(lim_.max_body) + " bytes (--max-body)");
    remaining_ = n;
    phase_ = n > 0 ? Phase::Body : Phase::Done;
  } else {
    phase_ = Phase::Done;
  }
  if (phase_ == Phase::Done) expect_continue_ = false;  // nothing to continue with
  return State::HeadersDone;
}

}  // namespace ms::server::http
