// libFuzzer target: bytes from a connection through the request framing
// (server/http_parser.h). The input is fed twice: whole, and in pieces whose
// sizes come from the input itself. Both must frame the same requests and end
// in the same state (a parser that depends on how bytes arrive is a smuggling
// risk), every body must be within max_body, what is held within what was
// fed, and every refusal a 4xx/5xx with a message. Small limits, so that the
// fuzzer reaches them. Run by scripts/fuzz.sh (clang, ASan+UBSan).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "server/http_parser.h"

namespace {

using ms::server::http::ParserLimits;
using ms::server::http::Request;
using ms::server::http::RequestParser;

struct Framed {
  std::vector<Request> requests;
  int error = 0;
};

Framed frame(const uint8_t* data, size_t size, const ParserLimits& lim, const uint8_t* steps, size_t n_steps) {
  RequestParser p(lim);
  Framed out;
  size_t at = 0, k = 0;
  while (at < size && !out.error) {
    const size_t step = n_steps ? 1 + steps[k++ % n_steps] % 64 : size;
    const size_t n = std::min(step, size - at);
    p.feed(reinterpret_cast<const char*>(data) + at, n);
    at += n;
    for (;;) {
      const RequestParser::State s = p.parse();
      if (p.buffered() > size) std::abort();  // holds no more than it was given
      if (s == RequestParser::State::NeedMore) break;
      if (s == RequestParser::State::HeadersDone) continue;
      if (s == RequestParser::State::Error) {
        out.error = p.error().status;
        if (out.error < 400 || out.error > 599 || p.error().message.empty()) std::abort();
        break;
      }
      Request r = p.take();
      if (r.body.size() > lim.max_body || r.headers.size() > lim.max_headers) std::abort();
      out.requests.push_back(std::move(r));
    }
  }
  return out;
}

bool same(const Request& a, const Request& b) {
  return a.method == b.method && a.target == b.target && a.path == b.path && a.query == b.query &&
         a.minor_version == b.minor_version && a.headers == b.headers && a.body == b.body &&
         a.keep_alive == b.keep_alive;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  ParserLimits lim;
  lim.max_request_line = 64;
  lim.max_header_bytes = 256;
  lim.max_headers = 8;
  lim.max_body = 128;
  lim.max_chunk_line = 32;
  const uint8_t* steps = data;  // the first 4 bytes: piece sizes
  const Framed whole = frame(data + 4, size - 4, lim, nullptr, 0);
  const Framed pieces = frame(data + 4, size - 4, lim, steps, 4);
  if (whole.error != pieces.error || whole.requests.size() != pieces.requests.size()) std::abort();
  for (size_t i = 0; i < whole.requests.size(); ++i)
    if (!same(whole.requests[i], pieces.requests[i])) std::abort();
  return 0;
}
