#include "engine/generate.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace ms {

void GenerateParams::validate() const {
  if (n_predict < -1)
    throw Error("the number of tokens to generate must be >= 0, or -1 for \"until end of text\" (got " +
                std::to_string(n_predict) + ")");
}

void check_finite_logits(std::span<const float> logits, const char* where, int64_t step) {
  // Blocks without an early exit, which the compiler vectorizes (a float is
  // NaN or Inf when its exponent bits are all set); a per-value branch cost a
  // server's step more than the argmax did.
  constexpr size_t kBlock = 256;
  constexpr uint32_t kExponent = 0x7f800000u;
  size_t i = 0;
  for (; i < logits.size(); i += kBlock) {
    const size_t end = std::min(logits.size(), i + kBlock);
    uint32_t bad = 0;
    for (size_t k = i; k < end; ++k) bad |= (std::bit_cast<uint32_t>(logits[k]) & kExponent) == kExponent;
    if (bad) break;
  }
  for (; i < logits.size(); ++i) {
    if (std::isfinite(logits[i])) continue;
    throw Error(std::string(where) + (step >= 0 ? " " + std::to_string(step) : std::string()) + ": the forward pass produced non-finite logits (" + (std::isnan(logits[i]) ? "NaN" : "Inf") +
                " for token id " + std::to_string(i) +
                "); the model's weights are likely corrupt (a damaged download?): `moestream inspect --check FILE` "
                "names the first bad tensor");
  }
}

GenerateStats generate(Backend& backend, KvCache& kv, Sampler& sampler, const Tokenizer* tok,
                       std::span<const int32_t> prompt, const GenerateParams& params,
                       const std::function<bool(int32_t)>& on_token) {
  using clock = std::chrono::steady_clock;
  GenerateStats st;
  if (prompt.empty()) throw Error("generate: the prompt has no tokens");
  st.n_prompt = static_cast<int>(prompt.size());
  const int32_t n_vocab = static_cast<int32_t>(backend.config().n_vocab);
  std::vector<float> logits;

  if (params.spec.drafter) {
    params.spec.control.validate();
    // Every verify keeps the state after each of its tokens (a hybrid's
    // rollback needs them); set before the prompt so its checkpoint stays.
    const int want = params.spec.control.draft_max + 2;
    if (kv.checkpoints().capacity() < want) kv.set_checkpoints({want, kv.checkpoints().options().spacing});
  }
  auto t0 = clock::now();
  backend.forward(kv, prompt, logits);
  check_finite_logits(logits, "prompt");
  st.prompt_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  for (int32_t id : prompt) sampler.accept(id);

  t0 = clock::now();
  st.stop_reason = "length";
  if (params.spec.drafter) {
    decode_speculative(backend, kv, sampler, tok, std::vector<int32_t>(prompt.begin(), prompt.end()), logits, params,
                       on_token, st);
    st.decode_seconds = std::chrono::duration<double>(clock::now() - t0).count();
    return st;
  }
  while (params.n_predict < 0 || st.n_generated < params.n_predict) {
    const int32_t id = sampler.sample(logits.data(), n_vocab);
    sampler.accept(id);
    ++st.n_generated;
    const bool eog = params.stop_at_eog && tok && tok->is_eog(id);
    if (!on_token(id)) {
      st.stop_reason = "stopped";
      break;
    }
    if (eog) {
      st.stop_reason = "eog";
      break;
    }
    if (params.n_predict >= 0 && st.n_generated >= params.n_predict) break;
    if (kv.n_past() + 1 > kv.ctx()) {
      st.stop_reason = "context full (" + std::to_string(kv.ctx()) + " tokens)";
      break;
    }
    const int32_t next[1] = {id};
    backend.forward(kv, next, logits);
    check_finite_logits(logits, "decode step", st.n_generated);
  }
  st.decode_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return st;
}

}  // namespace ms
