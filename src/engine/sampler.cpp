#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "util/error.h"

namespace ms {

std::string SamplerParams::describe() const {
  if (temperature <= 0) {
    if (repeat_penalty == 1.0f) return "greedy";
    char buf[96];
    std::snprintf(buf, sizeof buf, "greedy rep=%.2f/%d", repeat_penalty, repeat_last_n);
    return buf;
  }
  char buf[192];
  std::snprintf(buf, sizeof buf, "temp=%.2f top_k=%d top_p=%.2f min_p=%.2f rep=%.2f/%d seed=%llu", temperature,
                top_k, top_p, min_p, repeat_penalty, repeat_last_n, static_cast<unsigned long long>(seed));
  return buf;
}

void SamplerParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    throw Error("sampling: temperature must be a number >= 0 (0: greedy)");
  if (top_k < 0) throw Error("sampling: top-k must be >= 0 (0 turns it off)");
  if (!(top_p > 0.0f && top_p <= 1.0f)) throw Error("sampling: top-p must be in (0, 1] (1 turns it off)");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) throw Error("sampling: min-p must be in [0, 1] (0 turns it off)");
  if (!(repeat_penalty > 0.0f) || !std::isfinite(repeat_penalty))
    throw Error("sampling: the repetition penalty must be > 0 (1 turns it off)");
  if (repeat_last_n < 0) throw Error("sampling: the repetition window must be >= 0 tokens");
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    throw Error("sampling: the presence penalty must be in [-2, 2] (0 turns it off)");
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    throw Error("sampling: the frequency penalty must be in [-2, 2] (0 turns it off)");
  if (logit_bias.size() > kMaxLogitBias)
    throw Error("sampling: the logit bias may name at most " + std::to_string(kMaxLogitBias) + " tokens (got " +
                std::to_string(logit_bias.size()) + ")");
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0) throw Error("sampling: the logit bias names token id " + std::to_string(id) + ", not a token");
    if (!(bias >= -100.0f && bias <= 100.0f)) throw Error("sampling: a logit bias must be in [-100, 100]");
  }
}

// Two passes: the largest value (NaNs never win), then its first index. The
// obvious one-pass loop compares against x[best], a load whose address
// depends on the previous comparison: one dependent load per element over a
// 152k-entry vocabulary, which a greedy decode step on the GPU waits for
// (figures: bench/results/cuda_bench.md, "The tg regression").
// Here the max runs over 16 independent lanes (SSE where there is SSE).
int32_t argmax(const float* x, int32_t n) {
  if (n <= 1 || std::isnan(x[0])) return 0;  // as the one-pass loop: a NaN first value is never beaten
  float m = x[0];
  int32_t i = 1;
#if defined(__SSE2__)
  if (n >= 17) {
    __m128 a = _mm_set1_ps(x[0]), b = a, c = a, d = a;
    for (; i + 16 <= n; i += 16) {
      // maxps(v, acc) returns acc when v is NaN: NaNs are skipped.
      a = _mm_max_ps(_mm_loadu_ps(x + i), a);
      b = _mm_max_ps(_mm_loadu_ps(x + i + 4), b);
      c = _mm_max_ps(_mm_loadu_ps(x + i + 8), c);
      d = _mm_max_ps(_mm_loadu_ps(x + i + 12), d);
    }
    alignas(16) float lanes[4];
    _mm_store_ps(lanes, _mm_max_ps(_mm_max_ps(a, b), _mm_max_ps(c, d)));
    for (float v : lanes) m = v > m ? v : m;
  }
#endif
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int32_t j = 0; j < n; ++j)
    if (x[j] == m) return j;
  return 0;  // not reached: m is one of the values
}

namespace {

float rank_value(float v) { return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v; }

// The largest of 16 values, -inf when all are NaN (a NaN never wins:
// maxps(v, acc) returns acc when v is NaN).
float max16(const float* x) {
#if defined(__SSE2__)
  __m128 acc = _mm_set1_ps(-std::numeric_limits<float>::infinity());
  for (int i = 0; i < 16; i += 4) acc = _mm_max_ps(_mm_loadu_ps(x + i), acc);
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, acc);
  return std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
#else
  float m = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < 16; ++i) m = x[i] > m ? x[i] : m;
  return m;
#endif
}

}  // namespace

// A heap of the k best so far, its worst in front (NaN ranks as -inf, so
// the order stays a strict one whatever the values). A value enters only when
// it beats that worst one strictly: an equal value comes later, so its index
// is higher and it ranks after. Most of a vocabulary's logits are far below
// the k-th best, so most blocks of 64 are passed over after one max.
void best_ids(const float* x, int32_t n, int32_t k, std::vector<int32_t>& out) {
  struct Item {
    float v;
    int32_t id;
  };
  auto ranks_before = [](const Item& a, const Item& b) { return a.v > b.v || (a.v == b.v && a.id < b.id); };
  std::vector<Item> heap;
  heap.reserve(static_cast<size_t>(k));
  int32_t i = 0;
  for (; i < k; ++i) heap.push_back({rank_value(x[i]), i});
  std::make_heap(heap.begin(), heap.end(), ranks_before);
  float worst = heap.front().v;
  constexpr int32_t kBlock = 64;
  while (i < n) {
    if (i + kBlock <= n) {
      const float m = std::max(std::max(max16(x + i), max16(x + i + 16)), std::max(max16(x + i + 32), max16(x + i + 48)));
      if (!(m > worst)) {
        i += kBlock;
        continue;
      }
    }
    for (const int32_t end = std::min(n, i + kBlock); i < end; ++i) {
      if (!(x[i] > worst)) continue;
      std::pop_heap(heap.begin(), heap.end(), ranks_before);
      heap.back() = {x[i], i};
      std::push_heap(heap.begin(), heap.end(), ranks_before);
      worst = heap.front().v;
    }
  }
  std::sort(heap.begin(), heap.end(), ranks_before);
  out.resize(heap.size());
  for (size_t j = 0; j < heap.size(); ++j) out[j] = heap[j].id;
}

Sampler::Sampler(const SamplerParams& params) : params_(params), rng_(params.seed) { params_.validate(); }

void Sampler::reset() {
  rng_.seed(params_.seed);
  recent_.clear();
}

void Sampler::accept(int32_t token) {
  if (params_.repeat_last_n <= 0) return;
  recent_.push_back(token);
  while (static_cast<int>(recent_.size()) > params_.repeat_last_n) recent_.pop_front();
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0); }

int32_t Sampler::sample(const float* logits, int32_t n_vocab) { return sample(logits, n_vocab, SampleOptions{}); }

bool Sampler::prepare(const float* logits, int32_t n_vocab, bool force) {
  const bool penalised = !recent_.empty() && (params_.repeat_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                                              params_.frequency_penalty != 0.0f);
  if (!force && params_.temperature <= 0 && !penalised && params_.logit_bias.empty()) return false;
  work_.assign(logits, logits + n_vocab);
  for (const auto& [id, bias] : params_.logit_bias)
    if (id >= 0 && id < n_vocab) work_[static_cast<size_t>(id)] += bias;
  // Repetition penalty (each distinct recent token once): positive logits are
  // divided, negative ones multiplied, so the token always becomes less likely.
  if (params_.repeat_penalty != 1.0f && !recent_.empty()) {
    std::vector<int32_t> seen(recent_.begin(), recent_.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t id : seen) {
      if (id < 0 || id >= n_vocab) continue;
      float& l = work_[id];
      l = l > 0 ? l / params_.repeat_penalty : l * params_.repeat_penalty;
    }
  }
  // Presence and frequency penalties (OpenAI's): subtracted from the logit.
  if ((params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) && !recent_.empty()) {
    std::vector<int32_t> seen(recent_.begin(), recent_.end());
    std::sort(seen.begin(), seen.end());
    for (size_t i = 0; i < seen.size();) {
      size_t j = i;
      while (j < seen.size() && seen[j] == seen[i]) ++j;
      if (seen[i] >= 0 && seen[i] < n_vocab)
        work_[seen[i]] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(j - i);
      i = j;
    }
  }
  return true;
}

int32_t Sampler::sample(const float* logits, int32_t n_vocab, const SampleOptions& opt) {
  if (n_vocab <= 0) throw Error("sampling: empty logits");
  // Plain greedy reads the logits as they are: no copy of the vocabulary's row.
  if (!prepare(logits, n_vocab, opt.allowed || opt.filter || opt.logprobs)) return argmax(logits, n_vocab);
  // The grammar's mask, after the penalties (which must not lift a masked
  // token back): a masked token has no probability at all.
  const uint8_t* allowed = opt.allowed;
  if (!allowed && opt.filter) {
    // The lazy filter's candidates are the whole mask's top-k (or argmax):
    // drawn from directly (logprobs, which need every allowed token, take
    // the mask).
    const bool lazy = !opt.logprobs && (params_.temperature <= 0 || (params_.top_k > 0 && params_.top_k <= kLazyTopK));
    if (lazy && candidates_from_best(*opt.filter)) return params_.temperature <= 0 ? ids_[0] : draw();
    allowed = opt.filter->mask();
  }
  if (allowed) {
    bool any = false;
    for (int32_t i = 0; i < n_vocab; ++i) {
      if (!allowed[i]) work_[static_cast<size_t>(i)] = -std::numeric_limits<float>::infinity();
      else any = true;
    }
    if (!any) throw Error("sampling: the constraint allows no token here");
  }
  const int32_t id = pick();
  if (opt.logprobs) fill_logprobs(id, opt);
  return id;
}

// The k best of work_, best first (lower id first on ties).
void Sampler::sorted_best(int32_t k, std::vector<int32_t>& out) const {
  const int32_t n = static_cast<int32_t>(work_.size());
  if (k < n) {
    best_ids(work_.data(), n, k, out);
    return;
  }
  out.resize(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), 0);
  std::sort(out.begin(), out.end(), [&](int32_t a, int32_t b) {
    const float va = rank_value(work_[a]), vb = rank_value(work_[b]);
    return va > vb || (va == vb && a < b);
  });
}

// The lazy filter (SampleOptions::filter): the best tokens (by penalised
// logit, lower id first on ties: pick()'s order) are asked in turn, in
// growing sorted prefixes, until `need` are allowed: the argmax, or top-k's
// candidates, which go to ids_ best first, as pick() would have them from
// the whole mask. False (nothing decided) when fewer than `need` tokens are
// allowed at all or too many were refused first.
bool Sampler::candidates_from_best(TokenFilter& filter) {
  const int32_t n = static_cast<int32_t>(work_.size());
  const int32_t need = params_.temperature <= 0 ? 1 : std::min(params_.top_k, n);
  lazy_ids_.clear();
  // Greedy's usual case first: the argmax itself allowed, no sort at all.
  const int32_t best = argmax(work_.data(), n);
  if (need == 1 && filter.allows(best)) {
    ids_.assign(1, best);
    return true;
  }
  int32_t found = 0, refused = need == 1 ? 1 : 0, asked = 0;
  for (int32_t sorted = 0, upto = std::min(n, std::max(64, 2 * need)); sorted < n;
       sorted = upto, upto = static_cast<int32_t>(std::min<int64_t>(n, int64_t{upto} * 4))) {
    // The best `upto` in order (the `sorted` asked already are its front).
    sorted_best(upto, ids_);
    for (; asked < upto; ++asked) {
      if (need == 1 && ids_[static_cast<size_t>(asked)] == best) continue;  // asked above: refused
      const int32_t id = ids_[static_cast<size_t>(asked)];
      if (!filter.allows(id)) {
        if (++refused > kLazyRefusals) return false;
        continue;
      }
      lazy_ids_.push_back(id);
      if (++found == need) {
        ids_.swap(lazy_ids_);
        return true;
      }
    }
  }
  return false;
}

void Sampler::fill_logprobs(int32_t id, const SampleOptions& opt) {
  const int32_t n = static_cast<int32_t>(work_.size());
  double mx = -std::numeric_limits<double>::infinity();
  for (float v : work_)
    if (v > mx) mx = v;
  double sum = 0;
  for (float v : work_)
    if (v > -std::numeric_limits<float>::infinity()) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  StepLogprobs& out = *opt.logprobs;
  out.sampled = {id, static_cast<float>(work_[static_cast<size_t>(id)] - lse)};
  out.top.clear();
  const int32_t k = std::min<int32_t>(std::max(opt.top_logprobs, 0), n);
  if (k == 0) return;
  std::vector<int32_t> ids;
  sorted_best(k, ids);
  for (int32_t i = 0; i < k; ++i) {
    const float v = work_[static_cast<size_t>(ids[static_cast<size_t>(i)])];
    if (!(v > -std::numeric_limits<float>::infinity())) break;  // masked tokens are not alternatives
    out.top.push_back({ids[static_cast<size_t>(i)], static_cast<float>(v - lse)});
  }
}

// The token from work_ (penalties and mask applied).
int32_t Sampler::pick() {
  const int32_t n_vocab = static_cast<int32_t>(work_.size());
  if (params_.temperature <= 0) return argmax(work_.data(), n_vocab);

  // Candidates sorted by logit (descending, lower id first on ties), cut to top-k.
  sorted_best(params_.top_k > 0 ? std::min(params_.top_k, n_vocab) : n_vocab, ids_);
  return draw();
}

// draw()'s probabilities over ids_ (the candidates, best first): softmax
// with temperature, then top-p and min-p cut the tail; returns how many of
// the first candidates they keep.
size_t Sampler::candidate_probs(std::vector<double>& p) const {
  p.resize(ids_.size());
  const double mx = work_[ids_[0]];
  double sum = 0;
  for (size_t i = 0; i < ids_.size(); ++i) sum += (p[i] = std::exp((work_[ids_[i]] - mx) / params_.temperature));
  for (double& v : p) v /= sum;

  // Masked tokens (probability 0) are never candidates.
  size_t keep = p.size();
  while (keep > 1 && p[keep - 1] <= 0.0) --keep;
  // Top-p: the smallest prefix whose mass reaches top_p (at least one token).
  if (params_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < keep; ++i) {
      cum += p[i];
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  // Min-p: drop tokens less likely than min_p times the most likely one.
  if (params_.min_p > 0.0f) {
    const double floor = params_.min_p * p[0];
    size_t n = 1;
    while (n < keep && p[n] >= floor) ++n;
    keep = n;
  }
  return keep;
}

// One of ids_ (the candidates, best first) by temperature, top-p and min-p.
int32_t Sampler::draw() {
  std::vector<double> p;
  const size_t keep = candidate_probs(p);
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += p[i];
  const double r = uniform() * kept;
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += p[i];
    if (r < cum) return ids_[i];
  }
  return ids_[keep - 1];  // r rounded onto the total
}

void Sampler::distribution(const float* logits, int32_t n_vocab, std::vector<TokenProb>& out) {
  if (n_vocab <= 0) throw Error("sampling: empty logits");
  out.clear();
  if (!prepare(logits, n_vocab, false)) {
    out.push_back({argmax(logits, n_vocab), 1.0});
    return;
  }
  if (params_.temperature <= 0) {
    out.push_back({argmax(work_.data(), n_vocab), 1.0});
    return;
  }
  sorted_best(params_.top_k > 0 ? std::min(params_.top_k, n_vocab) : n_vocab, ids_);
  std::vector<double> p;
  const size_t keep = candidate_probs(p);
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += p[i];
  for (size_t i = 0; i < keep; ++i) out.push_back({ids_[i], p[i] / kept});
}

int32_t Sampler::draw_from(const std::vector<TokenProb>& dist) {
  if (dist.empty()) throw Error("sampling: an empty distribution");
  double total = 0;
  for (const TokenProb& t : dist) total += t.p > 0 ? t.p : 0;
  if (!(total > 0)) throw Error("sampling: a distribution without mass");
  const double r = uniform() * total;
  double cum = 0;
  int32_t last = dist.front().id;
  for (const TokenProb& t : dist) {
    if (!(t.p > 0)) continue;
    cum += t.p;
    last = t.id;
    if (r < cum) return t.id;
  }
  return last;  // r rounded onto the total
}

}  // namespace ms
