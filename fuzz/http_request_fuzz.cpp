// libFuzzer target: a request body as the HTTP server receives it, through
// parse_request (the JSON limits, parsing, every field's validation) for the
// chat or the completion endpoint, then the recursive walks the server runs
// on an accepted request (dumps of the messages and template kwargs, the
// error body), and parse_json_bounded against nlohmann's own parser (the
// same value, or a refusal). None of it may crash, hang, or throw anything but ApiError;
// errors are 4xx. Input: first byte's low bit picks the endpoint, the rest is
// the body. Run by scripts/fuzz.sh (clang, ASan+UBSan).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/api.h"
#include "tokenizer/tokenizer.h"

// engine/generate.cpp is linked for GenerateParams::validate; its generate()
// asks the tokenizer, which this target does not link, and never runs here.
bool ms::Tokenizer::is_eog(int32_t) const { std::abort(); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) != 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  // The bounded parser (linear in keys) builds exactly what nlohmann's parser
  // builds, keys in the same order, or refuses (a limit, or what nlohmann refuses too).
  try {
    const nlohmann::ordered_json v = ms::server::parse_json_bounded(body);
    const auto dump = [](const nlohmann::ordered_json& j) {
      return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    };
    if (dump(v) != dump(nlohmann::ordered_json::parse(body))) std::abort();
  } catch (const ms::server::ApiError& e) {
    if (e.status != 400) std::abort();
  }
  try {
    const ms::server::CompletionRequest r = ms::server::parse_request(body, chat);
    (void)r.messages.dump();
    (void)r.template_kwargs.dump();
    if (chat ? r.messages.empty() : r.prompt.empty()) std::abort();  // accepted without what it needs
    if (r.gen.n_predict < -1) std::abort();
    if (r.sampling.logit_bias.size() > ms::SamplerParams::kMaxLogitBias) std::abort();
    for (const auto& [id, bias] : r.sampling.logit_bias)
      if (id < 0 || !(bias >= -100.0f && bias <= 100.0f)) std::abort();  // accepted out of range
  } catch (const ms::server::ApiError& e) {
    if (e.status < 400 || e.status >= 500) std::abort();
    (void)e.body().dump();  // strict: an error message must itself be valid UTF-8
  }
  return 0;
}
