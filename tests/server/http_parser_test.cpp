// The request framing of server/http_parser.h (RFC 9112), byte by byte and
// whole: what is accepted, and each refusal's status and message.
#include "server/http_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ms::server::http {
namespace {

struct Outcome {
  std::vector<Request> requests;
  int error = 0;  // status, 0: none
  std::string message;
  int headers_done = 0;
};

// Feeds `bytes` in pieces of `step` bytes, taking every request.
Outcome run(const std::string& bytes, size_t step = 1 << 20, ParserLimits lim = {}) {
  RequestParser p(lim);
  Outcome o;
  for (size_t at = 0; at < bytes.size() && !o.error; at += step) {
    p.feed(bytes.data() + at, std::min(step, bytes.size() - at));
    for (;;) {
      const RequestParser::State s = p.parse();
      if (s == RequestParser::State::NeedMore) break;
      if (s == RequestParser::State::HeadersDone) {
        ++o.headers_done;
        continue;
      }
      if (s == RequestParser::State::Error) {
        o.error = p.error().status;
        o.message = p.error().message;
        break;
      }
      o.requests.push_back(p.take());
    }
  }
  return o;
}

TEST(HttpParser, SimpleRequestAnyFeedSize) {
  const std::string req =
      "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello";
  for (size_t step : {1, 2, 7, 1000}) {
    const Outcome o = run(req, step);
    ASSERT_EQ(o.error, 0) << o.message;
    ASSERT_EQ(o.requests.size(), 1u) << step;
    const Request& r = o.requests[0];
    EXPECT_EQ(r.method, "POST");
    EXPECT_EQ(r.path, "/v1/completions");
    EXPECT_EQ(r.query, "x=1");
    EXPECT_EQ(r.body, "hello");
    EXPECT_EQ(r.get_header_value("content-type"), "application/json");
    EXPECT_TRUE(r.keep_alive);
    EXPECT_EQ(r.minor_version, 1);
  }
}

TEST(HttpParser, PipelinedRequestsComeInOrder) {
  std::string bytes;
  for (int i = 0; i < 3; ++i)
    bytes += "POST /" + std::to_string(i) + " HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\n" + std::to_string(i);
  bytes += "GET /last HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
  for (size_t step : {1, 5, 4096}) {
    const Outcome o = run(bytes, step);
    ASSERT_EQ(o.requests.size(), 4u);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(o.requests[i].path, "/" + std::to_string(i));
      EXPECT_EQ(o.requests[i].body, std::to_string(i));
    }
    EXPECT_FALSE(o.requests[3].keep_alive);
  }
}

TEST(HttpParser, ChunkedBodyIsDecoded) {
  const std::string bytes =
      "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n"
      "GET /next HTTP/1.1\r\nHost: a\r\n\r\n";
  for (size_t step : {1, 3, 4096}) {
    const Outcome o = run(bytes, step);
    ASSERT_EQ(o.error, 0) << o.message;
    ASSERT_EQ(o.requests.size(), 2u);
    EXPECT_EQ(o.requests[0].body, "hello world");
    EXPECT_EQ(o.requests[1].path, "/next");
  }
}

TEST(HttpParser, ChunkedBodyIsBoundedAfterDecoding) {
  ParserLimits lim;
  lim.max_body = 100;
  std::string bytes = "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 20; ++i) bytes += "a\r\n0123456789\r\n";  // 200 bytes in 10-byte chunks
  const Outcome o = run(bytes, 7, lim);
  EXPECT_EQ(o.error, 413);
  EXPECT_NE(o.message.find("100 bytes"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("chunked"), std::string::npos) << o.message;
  // One chunk declaring more than the limit is refused at its size line.
  EXPECT_EQ(run("POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n", 1 << 20, lim).error, 413);
  EXPECT_EQ(run("POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n").error, 400);
}

TEST(HttpParser, ContentLengthMustBeOneDecimalValue) {
  const std::string start = "POST / HTTP/1.1\r\nHost: a\r\n";
  struct Case {
    std::string headers;
    int status;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {"Content-Length: 5\r\nContent-Length: 6\r\n", 400, "conflicting Content-Length"},
           {"Content-Length: 5, 6\r\n", 400, "conflicting Content-Length"},
           {"Content-Length: -5\r\n", 400, "malformed Content-Length"},
           {"Content-Length: abc\r\n", 400, "malformed Content-Length"},
           {"Content-Length: +5\r\n", 400, "malformed Content-Length"},
           {"Content-Length: \r\n", 400, "malformed Content-Length"},
           {"Content-Length: 99999999999999999999999\r\n", 400, "malformed Content-Length"},
           {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", 400, "both Content-Length and Transfer-Encoding"},
           {"Transfer-Encoding: gzip\r\n", 400, "does not end in chunked"},
           {"Transfer-Encoding: gzip, chunked\r\n", 501, "not supported"},
           {"Content-Encoding: gzip\r\nContent-Length: 5\r\n", 415, "compressed request bodies are not accepted"},
           {"Content-Length: 9000000000\r\n", 413, "larger than the server's limit"},
           {"Expect: something\r\n", 417, "unsupported expectation"},
           {" Folded: x\r\n", 400, "folding"},
           {"Bad Name: x\r\n", 400, "header name"},
           {"X: a\x01b\r\n", 400, "control byte"},
           {"Host: b\r\n", 400, "more than one Host"},
       }) {
    const Outcome o = run(start + c.headers + "\r\nhello");
    EXPECT_EQ(o.error, c.status) << c.headers;
    EXPECT_NE(o.message.find(c.says), std::string::npos) << c.headers << " -> " << o.message;
    EXPECT_TRUE(o.requests.empty());
  }
  // Repeated identical values are one length.
  const Outcome same = run(start + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello");
  ASSERT_EQ(same.requests.size(), 1u);
  EXPECT_EQ(same.requests[0].body, "hello");
  // Identity encoding is no encoding.
  EXPECT_EQ(run(start + "Content-Encoding: identity\r\nContent-Length: 5\r\n\r\nhello").requests.size(), 1u);
}

TEST(HttpParser, RequestLineAndVersion) {
  EXPECT_EQ(run("GET / HTTP/2.0\r\nHost: a\r\n\r\n").error, 505);
  EXPECT_EQ(run("GET / HTTX/1.1\r\nHost: a\r\n\r\n").error, 400);
  EXPECT_EQ(run("GET  / HTTP/1.1\r\nHost: a\r\n\r\n").error, 400);
  EXPECT_EQ(run("GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n").error, 400);
  EXPECT_EQ(run("GET / HTTP/1.1\r\n\r\n").error, 400);  // no Host on 1.1
  EXPECT_EQ(run("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").error, 400);
  const Outcome ten = run("GET /%41b HTTP/1.0\r\n\r\n");
  ASSERT_EQ(ten.requests.size(), 1u);
  EXPECT_EQ(ten.requests[0].path, "/Ab");
  EXPECT_EQ(ten.requests[0].minor_version, 0);
  EXPECT_FALSE(ten.requests[0].keep_alive);  // HTTP/1.0: one request per connection
  const Outcome abs = run("GET http://h:1/health?q HTTP/1.1\r\nHost: h\r\n\r\n");
  ASSERT_EQ(abs.requests.size(), 1u);
  EXPECT_EQ(abs.requests[0].path, "/health");
  // Empty lines before a request are skipped; bare LF line ends are accepted.
  const Outcome lf = run("\r\n\r\nGET /x HTTP/1.1\nHost: a\n\n");
  ASSERT_EQ(lf.requests.size(), 1u);
  EXPECT_EQ(lf.requests[0].path, "/x");
}

TEST(HttpParser, HeaderSectionIsBounded) {
  ParserLimits lim;
  lim.max_headers = 10;
  lim.max_header_bytes = 2000;
  lim.max_request_line = 500;
  std::string many = "GET / HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 11; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  const Outcome o = run(many + "\r\n", 1 << 20, lim);
  EXPECT_EQ(o.error, 431);
  EXPECT_NE(o.message.find("10 header fields"), std::string::npos) << o.message;
  // A header section that never ends is refused once it passes the limit, without the blank line.
  const Outcome big = run("GET / HTTP/1.1\r\nHost: a\r\nX: " + std::string(5000, 'a'), 100, lim);
  EXPECT_EQ(big.error, 431);
  const Outcome line = run("GET /" + std::string(1000, 'a'), 100, lim);
  EXPECT_EQ(line.error, 414);
}

TEST(HttpParser, ExpectContinueIsReported) {
  RequestParser p(ParserLimits{});
  const std::string head = "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
  p.feed(head.data(), head.size());
  ASSERT_EQ(p.parse(), RequestParser::State::HeadersDone);
  EXPECT_TRUE(p.expects_continue());
  EXPECT_EQ(p.parse(), RequestParser::State::NeedMore);
  p.feed("ok", 2);
  ASSERT_EQ(p.parse(), RequestParser::State::Complete);
  EXPECT_EQ(p.take().body, "ok");
  EXPECT_FALSE(p.in_request());
}

}  // namespace
}  // namespace ms::server::http
