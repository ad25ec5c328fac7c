// An HTTP request as the server's handlers see it (framed and bounded by
// server/http_parser.h), and the response they fill in. The member names follow
// cpp-httplib's, which the handlers were first written against.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ms::server::http {

// Case-insensitive ASCII comparison (header names, tokens).
bool iequals(std::string_view a, std::string_view b);

struct Request {
  std::string method;
  std::string target;  // as sent
  std::string path;    // the target's path, percent-decoded (may hold any byte)
  std::string query;   // after '?', as sent
  int minor_version = 1;  // HTTP/1.<minor_version>
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent, values trimmed
  std::string body;     // decoded (chunked framing removed)
  std::string remote_addr;
  bool keep_alive = true;  // the connection may carry another request after this one
  bool over_capacity = false;  // came past max_connections: serve cheap routes only
  std::vector<std::string> matches;  // matches[0]: the path; [1]: what a "(.+)" route caught

  // The first value of a header ("" when absent).
  std::string get_header_value(std::string_view name) const;
  bool has_header(std::string_view name) const;
  // Set by the server: whether the client has gone away (see HttpFront).
  std::function<bool()> client_gone;
};

// Where a streamed response's bytes go; write() returns false once the client
// is gone (or the write timed out): the provider should stop.
class DataSink {
 public:
  virtual ~DataSink() = default;
  virtual bool write(const char* data, size_t size) = 0;
  // The stream is complete.
  virtual void done() = 0;
};

struct Response {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Set: the body is streamed (chunked on HTTP/1.1, until the close on
  // HTTP/1.0). The provider is called until it calls sink.done() or returns
  // false; `finished(success)` runs after it either way.
  std::function<bool(size_t offset, DataSink& sink)> provider;
  std::function<void(bool success)> finished;
  bool close = false;  // end the connection after this response

  void set_header(std::string name, std::string value);
  void set_content(std::string content, std::string content_type);
  void set_chunked_content_provider(std::string content_type, std::function<bool(size_t, DataSink&)> p,
                                    std::function<void(bool)> done = {});
  std::string get_header_value(std::string_view name) const;
};

// The reason phrase of a status ("OK", "Not Found", ...).
const char* status_reason(int status);

}  // namespace ms::server::http
