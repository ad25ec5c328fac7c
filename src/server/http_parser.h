// Frames HTTP/1.x requests out of a connection's bytes (RFC 9112), with every
// size a client controls bounded: the request line, the header section (bytes
// and count), the body after chunked decoding, each chunk's size line and the
// trailers. Bytes are fed as they arrive; the work is linear in them (a
// trickling client does not make the parser rescan what it has seen).
//
// Refused (the connection must close after the error response, as the framing
// of what follows is unknown):
//  - two Content-Length values that differ, or one that is not 1*DIGIT (400);
//  - Content-Length together with Transfer-Encoding (400: the smuggling pattern),
//    a transfer coding other than chunked (501), Transfer-Encoding on HTTP/1.0 (400);
//  - Content-Encoding other than identity (415: compressed bodies are not
//    accepted, so nothing expands after the size check);
//  - a body past max_body, decoded (413), a header section past its limits (431),
//    a request line past its limit (414), a version other than HTTP/1.0 or 1.1 (505),
//    obsolete line folding, whitespace before a header's colon, control bytes in a
//    value, no Host (or several) on HTTP/1.1 (400), an Expect other than 100-continue (417).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/http_message.h"

namespace ms::server::http {

struct ParserLimits {
  size_t max_request_line = 8192;    // method, target and version
  size_t max_header_bytes = 65536;   // the whole header section, request line included
  size_t max_headers = 100;          // header fields
  size_t max_body = 8u << 20;        // after chunked decoding
  size_t max_chunk_line = 1024;      // a chunk's size line, extensions included
};

// What went wrong, as the response should say it.
struct ParseError {
  int status = 0;  // 0: none
  std::string message;
};

class RequestParser {
 public:
  enum class State {
    NeedMore,     // feed more bytes
    HeadersDone,  // the header section is in and valid; the body follows (returned once per request)
    Complete,     // a request is ready: take()
    Error,        // error(); the connection must be closed after answering
  };

  explicit RequestParser(ParserLimits lim) : lim_(lim) {}

  void feed(const char* data, size_t size) { buf_.append(data, size); }
  // Advances over what has been fed.
  State parse();
  // After Complete: the request; parsing continues with the bytes after it.
  Request take();
  const ParseError& error() const { return err_; }
  // Whether the request being read asked for "Expect: 100-continue" (valid after HeadersDone).
  bool expects_continue() const { return expect_continue_; }
  // The request being read (valid after HeadersDone: its line and headers).
  const Request& pending() const { return req_; }
  // Bytes held: unparsed input plus the body decoded so far.
  size_t buffered() const { return buf_.size() - pos_ + req_.body.size(); }
  // Whether a request has begun arriving (any byte of it).
  bool in_request() const { return phase_ != Phase::Head || pos_ < buf_.size(); }

 private:
  enum class Phase { Head, Body, ChunkSize, ChunkData, ChunkDataEnd, Trailers, Done, Failed };
  State fail(int status, std::string message);
  State parse_head(size_t end);
  void compact();
  // The '\n' ending the line at pos_ if it comes within max_len bytes, else npos
  // (bytes already searched are not searched again: scanned_).
  size_t line_end(size_t max_len);

  ParserLimits lim_;
  std::string buf_;
  size_t pos_ = 0;        // start of unparsed bytes in buf_
  size_t scanned_ = 0;    // bytes from pos_ already searched (for the blank line, or a line's end)
  bool line_done_ = false;  // head: the request line's end has been seen within its limit
  Phase phase_ = Phase::Head;
  Request req_;
  uint64_t remaining_ = 0;  // Content-Length left, or the current chunk's bytes left
  size_t trailer_bytes_ = 0, trailer_count_ = 0;
  bool expect_continue_ = false;
  ParseError err_;
};

}  // namespace ms::server::http
