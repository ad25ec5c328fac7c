// Picks the next token from logits: greedy, or temperature sampling narrowed
// by top-k, top-p and min-p, with a repetition penalty over recent tokens.
//
// Deterministic for a given seed on every platform: the generator is
// std::mt19937_64 (its output sequence is fixed by the standard) and the
// uniform draw is computed here from its bits (std:: distributions are
// implementation-defined). Ties between equal logits go to the lower id.
#pragma once
#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace ms {

struct SamplerParams {
  float temperature = 0.8f;  // 0: greedy (argmax); negative values are rejected
  int top_k = 40;            // <= 0: no limit
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off; keep tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f;  // 1: off; > 1 discourages tokens seen in the last repeat_last_n
  int repeat_last_n = 64;
  // OpenAI-style penalties over the same window: each token's logit is
  // lowered by presence_penalty once if it occurs there and by
  // frequency_penalty times its count. 0: off; in [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // OpenAI's logit_bias: (token id, value in [-100, 100]) added to that
  // token's logit before anything else (-100 all but bans it, 100 all but
  // forces it); at most kMaxLogitBias entries. Ids past the vocabulary are
  // skipped here (the server refuses them first).
  std::vector<std::pair<int32_t, float>> logit_bias;
  static constexpr size_t kMaxLogitBias = 1024;
  uint64_t seed = 0;

  // "greedy" or "temp=0.8 top_k=40 top_p=0.95 min_p=0.05 rep=1.1 seed=1"
  std::string describe() const;
  // Throws ms::Error for values out of range (negative temperature, top_p
  // outside (0, 1], ...), saying what the valid range is. Shared by `run`
  // and the server, so both accept the same values.
  void validate() const;
};

// Log-probabilities of one step, as OpenAI's `logprobs` reports them: the
// log-softmax of the logits after the penalties and the grammar mask, before
// temperature, top-k, top-p and min-p (the model's distribution over the
// tokens the request allows, independent of how it is then sampled).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};
struct StepLogprobs {
  TokenLogprob sampled;
  std::vector<TokenLogprob> top;  // the most likely tokens, best first (ties: lower id first)
};

// A constraint asked token by token (a grammar's matcher): cheap per token,
// where the whole mask walks every token of the vocabulary.
class TokenFilter {
 public:
  virtual ~TokenFilter() = default;
  // May this token come next?
  virtual bool allows(int32_t token) = 0;
  // Every token's answer (n_vocab flags, 0: not allowed), where the sampler
  // needs them all; throws ms::Error when no token is allowed.
  virtual const uint8_t* mask() = 0;
};

// One token's probability in a sampling distribution.
struct TokenProb {
  int32_t id = 0;
  double p = 0;
};

struct SampleOptions {
  // n_vocab flags, 0 = this token may not come next (constrained sampling:
  // its logit becomes -inf before anything else); nullptr = all allowed.
  // At least one token must be allowed.
  const uint8_t* allowed = nullptr;
  // The same constraint asked lazily (when `allowed` is null): greedy and
  // top-k sampling ask the best tokens in turn until they hold the top_k
  // allowed ones, then sample among those: the token and the generator's
  // state are the whole mask's. Logprobs, sampling without top-k or with a
  // top-k above kLazyTopK, and more than kLazyRefusals refused tokens take
  // filter->mask() instead.
  TokenFilter* filter = nullptr;
  // Filled when non-null, with `top_logprobs` alternatives (0..20).
  StepLogprobs* logprobs = nullptr;
  int top_logprobs = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);

  // Chooses a token from logits[0..n_vocab). Does not record it: call accept()
  // with the token actually used (prompt tokens too, for the penalty window).
  int32_t sample(const float* logits, int32_t n_vocab);
  int32_t sample(const float* logits, int32_t n_vocab, const SampleOptions& opt);
  void accept(int32_t token);
  void reset();  // forgets history and restarts the generator from the seed

  // The distribution sample(logits, n_vocab) draws from, in `out` (the
  // tokens it may pick, best first, probabilities summing to 1): penalties
  // and logit bias, then temperature, top-k, top-p and min-p as sample()
  // applies them; greedy: the argmax with probability 1. Speculative
  // sampling compares it with the drafter's (speculative.h). Does not touch
  // the generator.
  void distribution(const float* logits, int32_t n_vocab, std::vector<TokenProb>& out);
  // A token drawn from `dist` (non-negative weights, not necessarily
  // normalised, at least one positive) with this sampler's generator.
  int32_t draw_from(const std::vector<TokenProb>& dist);  // forgets history and restarts the generator from the seed

  const SamplerParams& params() const { return params_; }

  // A uniform double in [0, 1) from 53 bits of the generator (exposed for tests).
  double uniform();

  // Refused tokens after which a lazy filter gives way to its whole mask,
  // and the largest top-k it serves (asking more tokens one by one than
  // that costs about what the whole mask does).
  static constexpr int32_t kLazyRefusals = 256;
  static constexpr int32_t kLazyTopK = 256;

 private:
  int32_t pick();
  int32_t draw();
  // Penalties and logit bias applied to logits, into work_; false: plain
  // greedy with nothing to apply (work_ untouched, read the logits).
  bool prepare(const float* logits, int32_t n_vocab, bool force);
  // draw()'s candidate probabilities (ids_ order, not normalised) and how
  // many of ids_ top-p and min-p keep.
  size_t candidate_probs(std::vector<double>& p) const;
  void sorted_best(int32_t k, std::vector<int32_t>& out) const;
  bool candidates_from_best(TokenFilter& filter);
  void fill_logprobs(int32_t id, const SampleOptions& opt);
  SamplerParams params_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;
  std::vector<float> work_;
  std::vector<int32_t> ids_;
  std::vector<int32_t> lazy_ids_;
};

// The index of the largest value; the lowest index among equal maxima.
int32_t argmax(const float* x, int32_t n);

// The k best indices of x (largest value first, the lower index first among
// equal values), in out: what a partial sort of every index gives, in one
// pass that skips whole blocks below the k-th best so far. NaN ranks as -inf;
// 0 < k <= n.
void best_ids(const float* x, int32_t n, int32_t k, std::vector<int32_t>& out);

}  // namespace ms
