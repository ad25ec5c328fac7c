// Decode (split-K) and causal prefill attention against a double-precision
// reference over the same cache contents, for the three cache element types:
// f16 (the reference reads the rounded values), q8_0 (the reference reads
// the dequantized values) and f32 (a bound ten times tighter, which a kernel
// rounding keys or values to f16 would miss). Prefill over f16 and q8_0 runs
// on tensor cores with f16 q and probabilities: its bound is wider (below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cuda/attention.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

enum class Kv { F16, F32, Q8_0 };

// [n_kv][ctx][hd] keys and values as the reference reads them (f32: exactly
// what the device holds; f16: rounded; q8_0: dequantized) and on the device.
struct Cache {
  Kv type = Kv::F16;
  bool f32 = false;
  std::vector<float> k, v;
  DeviceBuffer dk, dv;
};

// Rows of hd floats quantized to q8_0 blocks (the CPU cache's quantizer), and
// the values they stand for written back into x.
std::vector<BlockQ8_0> quantize_q8_0(std::vector<float>& x) {
  std::vector<BlockQ8_0> b(x.size() / QK);
  quantize_row_ref(DType::Q8_0, x.data(), b.data(), static_cast<int64_t>(x.size()));
  dequantize_row_ref(DType::Q8_0, b.data(), x.data(), static_cast<int64_t>(x.size()));
  return b;
}

Cache random_cache(int n_kv, int64_t ctx, int hd, Kv type, std::mt19937& rng) {
  Cache c;
  c.type = type;
  c.f32 = type == Kv::F32;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const size_t n = static_cast<size_t>(n_kv) * static_cast<size_t>(ctx) * static_cast<size_t>(hd);
  c.k.resize(n);
  c.v.resize(n);
  for (auto& x : c.k) x = u(rng) * 2.f;
  for (auto& x : c.v) x = u(rng);
  if (type == Kv::F32) {
    c.dk = upload(c.k);
    c.dv = upload(c.v);
    return c;
  }
  if (type == Kv::Q8_0) {
    c.dk = upload(quantize_q8_0(c.k));
    c.dv = upload(quantize_q8_0(c.v));
    return c;
  }
  std::vector<uint16_t> hk(n), hv(n);
  for (size_t i = 0; i < n; ++i) {
    hk[i] = f32_to_f16(c.k[i]);
    hv[i] = f32_to_f16(c.v[i]);
    c.k[i] = f16_to_f32(hk[i]);
    c.v[i] = f16_to_f32(hv[i]);
  }
  c.dk = upload(hk);
  c.dv = upload(hv);
  return c;
}

void decode(const AttentionShape& as, const float* q, const Cache& c, int max_kv_len, const int32_t* kv_len,
            float* out, void* scratch, cudaStream_t s, const AttentionExtras& x = {}) {
  if (c.type == Kv::F32)
    attention_decode(as, q, c.dk.as<float>(), c.dv.as<float>(), max_kv_len, kv_len, out, scratch, s, x);
  else if (c.type == Kv::Q8_0)
    attention_decode(as, q, c.dk.as<BlockQ8_0>(), c.dv.as<BlockQ8_0>(), max_kv_len, kv_len, out, scratch, s, x);
  else
    attention_decode(as, q, c.dk.as<uint16_t>(), c.dv.as<uint16_t>(), max_kv_len, kv_len, out, scratch, s, x);
}

void prefill(const AttentionShape& as, const float* q, const Cache& c, int n_tok, int pos0, float* out,
             cudaStream_t s, const AttentionExtras& x = {}) {
  if (c.type == Kv::F32)
    attention_prefill(as, q, c.dk.as<float>(), c.dv.as<float>(), n_tok, pos0, out, s, x);
  else if (c.type == Kv::Q8_0)
    attention_prefill(as, q, c.dk.as<BlockQ8_0>(), c.dv.as<BlockQ8_0>(), n_tok, pos0, out, s, x);
  else
    attention_prefill(as, q, c.dk.as<uint16_t>(), c.dv.as<uint16_t>(), n_tok, pos0, out, s, x);
}

// Decode scratch as attention.h asks: zero-filled once, then reused.
DeviceBuffer decode_scratch(const AttentionShape& as, int max_kv_len) {
  DeviceBuffer b(attention_decode_scratch_bytes(as, max_kv_len));
  device_fill(b.get(), 0, b.size());
  return b;
}

std::string type_tag(const Cache& c) {
  return c.type == Kv::F32 ? " (f32 cache)" : c.type == Kv::Q8_0 ? " (q8_0 cache)" : " (f16 cache)";
}

// out[h][d] for one query (head h) attending to positions first..last, with
// a sink logit (an extra denominator term exp(sink - max)) when given.
std::vector<double> ref_attend(const float* q, const Cache& c, int kvh, int64_t ctx, int hd, int last, float scale,
                               int first = 0, const float* sink = nullptr) {
  std::vector<double> s(last + 1, 0.0);
  double mx = sink ? double(*sink) : -1e300;
  for (int t = first; t <= last; ++t) {
    double acc = 0;
    for (int d = 0; d < hd; ++d) acc += double(q[d]) * c.k[(kvh * ctx + t) * static_cast<int64_t>(hd) + d];
    s[t] = acc * scale;
    mx = std::max(mx, s[t]);
  }
  double l = sink ? std::exp(double(*sink) - mx) : 0.0;
  for (int t = first; t <= last; ++t) { s[t] = std::exp(s[t] - mx); l += s[t]; }
  std::vector<double> o(hd, 0.0);
  for (int t = first; t <= last; ++t)
    for (int d = 0; d < hd; ++d) o[d] += s[t] * c.v[(kvh * ctx + t) * static_cast<int64_t>(hd) + d];
  for (auto& x : o) x /= l;
  return o;
}

// Decode arithmetic is f32 whatever the cache holds: f32 caches get a bound
// ten times tighter. The tensor-core prefill rounds q (and the softmax
// weights) to f16: a relative error of up to 2^-11 per weight and about
// 2e-4 per score, so |error| stays well under 1e-3 + 3e-3 |want| for these
// inputs, while a missed or extra key tile moves outputs by 1e-2 or more.
struct Tol {
  double abs, rel;
};
Tol decode_tol(const Cache& c) { return c.f32 ? Tol{1e-5, 1e-4} : Tol{2e-4, 1e-3}; }
Tol prefill_tol(const Cache& c) { return c.f32 ? Tol{1e-5, 1e-4} : Tol{1e-3, 3e-3}; }

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const Cache& c,
                  const std::string& what, Tol tol = {0, 0}) {
  ASSERT_EQ(got.size(), want.size());
  if (tol.abs == 0) tol = decode_tol(c);
  const double abs = tol.abs, rel = tol.rel;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= abs + rel * std::fabs(want[i])))
      if (++bad <= 5) ADD_FAILURE() << what << ": [" << i << "] got " << got[i] << " want " << want[i];
  EXPECT_EQ(bad, 0) << what;
}

struct Shape {
  int n_head, n_kv, hd;
};

// One decode case, checked three ways: the device length in a launch sized
// for the whole cache (as a captured graph runs it), the host length with
// scratch sized for it, and the host length with `full_scratch` (sized for
// the whole cache, as the backend shares it: geometry and split count change).
void check_decode(const Shape& sh, const Cache& c, int64_t ctx, int kv_len, void* full_scratch, std::mt19937& rng,
                  cudaStream_t s, const std::string& label) {
  const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
  const int group = sh.n_head / sh.n_kv;
  const auto q = random_floats(static_cast<size_t>(sh.n_head * sh.hd), rng);
  DeviceBuffer dq = upload(q), out = poisoned(q.size());
  const std::vector<int32_t> len = {kv_len};
  DeviceBuffer dlen = upload(len);
  decode(as, dq.as<float>(), c, static_cast<int>(ctx), dlen.as<int32_t>(), out.as<float>(), full_scratch, s);
  std::vector<double> want;
  for (int h = 0; h < sh.n_head; ++h) {
    const auto o = ref_attend(q.data() + h * sh.hd, c, h / group, ctx, sh.hd, kv_len - 1, as.scale);
    want.insert(want.end(), o.begin(), o.end());
  }
  const std::string what = label + " heads " + std::to_string(sh.n_head) + "/" + std::to_string(sh.n_kv) + " hd " +
                           std::to_string(sh.hd) + " kv_len " + std::to_string(kv_len) + type_tag(c);
  expect_close(download<float>(out.get(), q.size()), want, c, what);
  poison(out.get(), q.size() * 4);
  DeviceBuffer own_scratch = decode_scratch(as, kv_len);
  decode(as, dq.as<float>(), c, kv_len, nullptr, out.as<float>(), own_scratch.get(), s);
  expect_close(download<float>(out.get(), q.size()), want, c, what + " (host length)");
  poison(out.get(), q.size() * 4);
  decode(as, dq.as<float>(), c, kv_len, nullptr, out.as<float>(), full_scratch, s);
  expect_close(download<float>(out.get(), q.size()), want, c, what + " (host length, shared scratch)");
}

bool fits(Kv type, int hd) { return type != Kv::Q8_0 || hd % QK == 0; }

TEST(CudaAttention, DecodeSplitKMatchesReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(21);
  Stream s;
  for (Kv type : {Kv::F16, Kv::F32, Kv::Q8_0})
  for (Shape sh : {Shape{32, 4, 128}, Shape{8, 8, 64}, Shape{16, 1, 256}, Shape{6, 2, 80}, Shape{4, 2, 32},
                   Shape{6, 2, 96}}) {
    if (!fits(type, sh.hd)) continue;
    const int64_t ctx = 1100;
    const Cache c = random_cache(sh.n_kv, ctx, sh.hd, type, rng);
    const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
    DeviceBuffer scratch = decode_scratch(as, static_cast<int>(ctx));
    for (int kv_len : {1, 127, 128, 129, 1100}) check_decode(sh, c, ctx, kv_len, scratch.get(), rng, s, "decode");
  }
}

// Long contexts through the split-K fast path (many splits, several 32-position
// tiles per warp, partial last tiles), both with the device length in a launch
// sized for the whole cache and with the host length.
TEST(CudaAttention, DecodeLongContextMatchesReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(23);
  Stream s;
  for (Kv type : {Kv::F16, Kv::F32, Kv::Q8_0})
  for (Shape sh : {Shape{32, 4, 128}, Shape{8, 1, 64}, Shape{16, 8, 128}, Shape{4, 4, 256}, Shape{16, 1, 128},
                   Shape{32, 2, 256}}) {
    const int64_t ctx = 5000;
    const Cache c = random_cache(sh.n_kv, ctx, sh.hd, type, rng);
    const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
    DeviceBuffer scratch = decode_scratch(as, static_cast<int>(ctx));
    for (int kv_len : {1, 31, 33, 600, 4097, 5000})
      check_decode(sh, c, ctx, kv_len, scratch.get(), rng, s, "long decode");
  }
}

// Decode at depth 32k over a q8_0 cache (and f16, the same inputs): the
// Qwen3-30B-A3B shape and a head_dim 256 one, plus the generic path.
TEST(CudaAttention, DecodeDepth32kQ8_0MatchesReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(27);
  Stream s;
  for (Kv type : {Kv::Q8_0, Kv::F16})
  for (Shape sh : {Shape{32, 4, 128}, Shape{16, 2, 256}, Shape{6, 2, 96}}) {
    const int64_t ctx = 32768;
    const Cache c = random_cache(sh.n_kv, ctx, sh.hd, type, rng);
    const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
    DeviceBuffer scratch = decode_scratch(as, static_cast<int>(ctx));
    for (int kv_len : {20001, 32768}) check_decode(sh, c, ctx, kv_len, scratch.get(), rng, s, "depth decode");
  }
}

// Tokens of a prefill checked against the reference (a double-precision
// loop on the host, the cost that bounds these tests): all of them for small
// cases; else the first 80 and the last `tail` (tile edges at both ends)
// and every `every`-th.
struct Sampling {
  int tail = 48, every = 29;
};
std::vector<int> checked_tokens(int n_tok, int64_t keys, int n_head, int hd, Sampling smp) {
  std::vector<int> t;
  const bool all = static_cast<double>(n_tok) * static_cast<double>(keys) * n_head * hd < 4e7;
  for (int i = 0; i < n_tok; ++i)
    if (all || i < 80 || i >= n_tok - smp.tail || i % smp.every == 0) t.push_back(i);
  return t;
}

// One prefill: poisoned output, then every element must be finite (written)
// and the checked tokens within the bound of the reference.
void check_prefill(const Shape& sh, const Cache& c, int64_t ctx, int n_tok, int pos0, std::mt19937& rng,
                   cudaStream_t s, float q_range = 1.f, Sampling smp = {}) {
  const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
  const int group = sh.n_head / sh.n_kv;
  const size_t row = static_cast<size_t>(sh.n_head) * sh.hd;
  const auto q = random_floats(static_cast<size_t>(n_tok) * row, rng, -q_range, q_range);
  DeviceBuffer dq = upload(q), out = poisoned(q.size());
  prefill(as, dq.as<float>(), c, n_tok, pos0, out.as<float>(), s);
  const std::vector<float> all = download<float>(out.get(), q.size());
  const std::string what = "prefill heads " + std::to_string(sh.n_head) + "/" + std::to_string(sh.n_kv) + " hd " +
                           std::to_string(sh.hd) + " tokens " + std::to_string(n_tok) + " pos0 " +
                           std::to_string(pos0) + type_tag(c);
  const auto unwritten = std::count_if(all.begin(), all.end(), [](float x) { return !std::isfinite(x); });
  EXPECT_EQ(unwritten, 0) << what << ": outputs left unwritten (NaN poison) or not finite";
  std::vector<float> got;
  std::vector<double> want;
  for (int t : checked_tokens(n_tok, pos0 + n_tok, sh.n_head, sh.hd, smp)) {
    got.insert(got.end(), all.begin() + static_cast<int64_t>(t * row), all.begin() + static_cast<int64_t>((t + 1) * row));
    for (int h = 0; h < sh.n_head; ++h) {
      const auto o = ref_attend(q.data() + t * row + static_cast<size_t>(h) * sh.hd, c, h / group, ctx, sh.hd,
                                pos0 + t, as.scale);
      want.insert(want.end(), o.begin(), o.end());
    }
  }
  expect_close(got, want, c, what, prefill_tol(c));
}

// Causal prefill over every cache type: GQA ratios 1, 2, 4, 8, 16; head_dim
// 64, 128, 256 (the flash kernel's tiles), 80 and 96 (padded up to 128), 32,
// and 6 (f16: the tiled kernel); prompt lengths around the 64-token query
// tile and the 64- and 32-key tiles, over 1000 tokens, and chunks after
// earlier context (pos0 > 0, not a multiple of a tile).
TEST(CudaAttention, PrefillCausalMatchesReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(22);
  Stream s;
  const std::pair<int, int> runs[] = {{1, 0},  {15, 0},  {16, 0},  {17, 0},  {63, 0},   {64, 0},
                                      {65, 0}, {200, 0}, {37, 50}, {70, 130}, {130, 1000}, {1029, 0}};
  for (Kv type : {Kv::F16, Kv::Q8_0, Kv::F32})
  for (Shape sh : {Shape{4, 4, 64}, Shape{8, 2, 128}, Shape{8, 1, 256}, Shape{16, 1, 128}, Shape{16, 1, 64},
                   Shape{6, 3, 256}, Shape{4, 2, 80}, Shape{4, 2, 96}, Shape{4, 2, 32}, Shape{2, 1, 6}}) {
    if (!fits(type, sh.hd)) continue;
    const int64_t ctx = 1160;
    const Cache c = random_cache(sh.n_kv, ctx, sh.hd, type, rng);
    for (auto [n_tok, pos0] : runs) {
      if (type == Kv::F32 && n_tok > 200) continue;  // the old kernel, covered at these lengths
      check_prefill(sh, c, ctx, n_tok, pos0, rng, s, 2.f);
    }
  }
  AttentionShape bad{4, 3, 64, 100, 0.125f};
  EXPECT_THROW(attention_prefill(bad, nullptr, static_cast<const uint16_t*>(nullptr), nullptr, 1, 0, nullptr, s),
               Error);
  EXPECT_THROW(attention_prefill(bad, nullptr, static_cast<const float*>(nullptr), nullptr, 1, 0, nullptr, s), Error);
  EXPECT_THROW(attention_prefill(bad, nullptr, static_cast<const BlockQ8_0*>(nullptr), nullptr, 1, 0, nullptr, s),
               Error);
  // q8_0 needs head_dim a multiple of 32; positions past the cache are refused
  AttentionShape odd{4, 2, 80, 100, 0.125f};
  EXPECT_THROW(attention_prefill(odd, nullptr, static_cast<const BlockQ8_0*>(nullptr), nullptr, 1, 0, nullptr, s),
               Error);
  AttentionShape small{4, 2, 64, 100, 0.125f};
  EXPECT_THROW(attention_prefill(small, nullptr, static_cast<const uint16_t*>(nullptr), nullptr, 60, 50, nullptr, s),
               Error);
}

// A long prompt (4096 tokens, the Qwen3-30B-A3B attention shape, and a
// Qwen3.5/3.6 full-attention shape of head_dim 256), f16 and q8_0 caches,
// plus a second chunk after it (pos0 4096). Every output must be written;
// about 120 tokens of each are checked (first 80, last 16, every 199th).
TEST(CudaAttention, PrefillLongPromptMatchesReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(29);
  Stream s;
  for (Kv type : {Kv::F16, Kv::Q8_0})
  for (Shape sh : {Shape{32, 4, 128}, Shape{16, 2, 256}}) {
    const int64_t ctx = 4096 + 40;
    const Cache c = random_cache(sh.n_kv, ctx, sh.hd, type, rng);
    check_prefill(sh, c, ctx, 4096, 0, rng, s, 2.f, Sampling{16, 199});
    check_prefill(sh, c, ctx, 40, 4096, rng, s, 2.f, Sampling{16, 199});
  }
}

// The tensor-core kernel and the f32 tiled one agree on the same f16 cache
// (two independent implementations; the bound is the tensor-core one's).
TEST(CudaAttention, PrefillFlashMatchesTiledKernel) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(31);
  Stream s;
  const Shape sh{8, 2, 128};
  const int64_t ctx = 700;
  const Cache c = random_cache(sh.n_kv, ctx, sh.hd, Kv::F16, rng);
  const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
  const int n_tok = 333, pos0 = 367;
  const auto q = random_floats(static_cast<size_t>(n_tok) * sh.n_head * sh.hd, rng, -2.f, 2.f);
  DeviceBuffer dq = upload(q), a = poisoned(q.size()), b = poisoned(q.size());
  attention_prefill(as, dq.as<float>(), c.dk.as<uint16_t>(), c.dv.as<uint16_t>(), n_tok, pos0, a.as<float>(), s);
  attention_prefill_tiled(as, dq.as<float>(), c.dk.as<uint16_t>(), c.dv.as<uint16_t>(), n_tok, pos0, b.as<float>(),
                          s);
  const auto fa = download<float>(a.get(), q.size()), tb = download<float>(b.get(), q.size());
  std::vector<double> want(tb.begin(), tb.end());
  expect_close(fa, want, c, "flash vs tiled", prefill_tol(c));
}

// kv_append into a q8_0 cache: every block bit for bit the CPU quantizer's
// (quantize_row_ref Q8_0, as the CPU cache stores it), at the given
// positions only (the rest of the cache keeps its bytes).
TEST(CudaAttention, KvAppendQ8_0MatchesCpuQuantizer) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(33);
  Stream s;
  const int n_kv = 3, hd = 96, n_tok = 7;
  const int64_t ctx = 20;
  const auto k = random_floats(static_cast<size_t>(n_tok) * n_kv * hd, rng, -3.f, 3.f);
  auto v = random_floats(k.size(), rng);
  for (int d = 0; d < QK; ++d) v[static_cast<size_t>(hd + d)] = 0.f;  // an all-zero block: d = 0, q = 0
  const std::vector<int32_t> pos = {0, 5, 6, 19, 3, 25, -1};            // the last two are outside: skipped
  const size_t blocks = static_cast<size_t>(n_kv) * ctx * (hd / QK);
  DeviceBuffer dk = upload(k), dv = upload(v), dpos = upload(pos);
  DeviceBuffer kc(blocks * sizeof(BlockQ8_0)), vc(blocks * sizeof(BlockQ8_0));
  device_fill(kc.get(), 0x5a, kc.size());
  device_fill(vc.get(), 0x5a, vc.size());
  kv_append(dk.as<float>(), dv.as<float>(), n_tok, n_kv, hd, dpos.as<int32_t>(), kc.as<BlockQ8_0>(),
            vc.as<BlockQ8_0>(), ctx, s);
  const auto gk = download<uint8_t>(kc.get(), blocks * sizeof(BlockQ8_0));
  const auto gv = download<uint8_t>(vc.get(), blocks * sizeof(BlockQ8_0));
  std::vector<uint8_t> wk(gk.size(), 0x5a), wv(gv.size(), 0x5a);
  const size_t row_bytes = static_cast<size_t>(hd / QK) * sizeof(BlockQ8_0);
  for (int t = 0; t < n_tok; ++t) {
    if (pos[t] < 0 || pos[t] >= ctx) continue;
    for (int h = 0; h < n_kv; ++h) {
      const size_t src = (static_cast<size_t>(t) * n_kv + h) * hd;
      const size_t dst = (static_cast<size_t>(h) * ctx + pos[t]) * row_bytes;
      quantize_row_ref(DType::Q8_0, k.data() + src, wk.data() + dst, hd);
      quantize_row_ref(DType::Q8_0, v.data() + src, wv.data() + dst, hd);
    }
  }
  EXPECT_EQ(gk, wk);
  EXPECT_EQ(gv, wv);
  EXPECT_THROW(kv_append(dk.as<float>(), dv.as<float>(), 1, 1, 80, dpos.as<int32_t>(), kc.as<BlockQ8_0>(),
                         vc.as<BlockQ8_0>(), ctx, s),
               Error);
}

// ------------------------------------------------ sinks and sliding window (gpt-oss)

// Per-head sink logits, host and device: around the scores' range, one far
// above them (nearly all the mass on the sink) and one far below.
struct Sinks {
  std::vector<float> h;
  DeviceBuffer d;
};
Sinks random_sinks(int n_head, std::mt19937& rng) {
  Sinks r;
  r.h = random_floats(static_cast<size_t>(n_head), rng, -3.f, 3.f);
  r.h[0] = 30.f;
  if (n_head > 1) r.h[1] = -30.f;
  r.d = upload(r.h);
  return r;
}

int first_key(int window, int p) { return window > 0 ? std::max(0, p - window + 1) : 0; }

size_t row_bytes(const Cache& c, int hd) {
  return c.type == Kv::F32 ? 4u * hd : c.type == Kv::Q8_0 ? size_t(hd / QK) * sizeof(BlockQ8_0) : 2u * hd;
}

// Sets rows 0 .. rows-1 of every KV head of the device cache to NaN bytes
// (f16, f32 and q8_0's scale alike) and restores them when destroyed: no
// query of the call sees them, and reading one would poison its output.
class PoisonedRows {
 public:
  PoisonedRows(Cache& c, int n_kv, int64_t ctx, int hd, int rows) : c_(c), n_kv_(n_kv) {
    head_ = static_cast<size_t>(ctx) * row_bytes(c, hd);
    bytes_ = static_cast<size_t>(rows) * row_bytes(c, hd);
    if (bytes_ == 0) return;
    for (int h = 0; h < n_kv; ++h)
      for (DeviceBuffer* b : {&c.dk, &c.dv}) {
        saved_.push_back(download<uint8_t>(static_cast<char*>(b->get()) + h * head_, bytes_));
        poison(static_cast<char*>(b->get()) + h * head_, bytes_);
      }
  }
  ~PoisonedRows() {  // after the kernel (on a non-blocking stream) is done with them
    size_t i = 0;
    if (bytes_ == 0) return;
    MS_CUDA_CHECK(cudaDeviceSynchronize());
    for (int h = 0; h < n_kv_; ++h)
      for (DeviceBuffer* b : {&c_.dk, &c_.dv})
        MS_CUDA_CHECK(cudaMemcpy(static_cast<char*>(b->get()) + h * head_, saved_[i++].data(), bytes_,
                                 cudaMemcpyHostToDevice));
    MS_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  Cache& c_;
  int n_kv_;
  size_t head_ = 0, bytes_ = 0;
  std::vector<std::vector<uint8_t>> saved_;
};

// One prefill with a window and/or sinks against the reference, the rows
// before the first token's window poisoned.
void check_prefill_extras(const Shape& sh, Cache& c, int64_t ctx, int n_tok, int pos0, int window,
                          const Sinks* sinks, std::mt19937& rng, cudaStream_t s) {
  const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
  const int group = sh.n_head / sh.n_kv;
  const size_t row = static_cast<size_t>(sh.n_head) * sh.hd;
  const auto q = random_floats(static_cast<size_t>(n_tok) * row, rng, -2.f, 2.f);
  DeviceBuffer dq = upload(q), out = poisoned(q.size());
  AttentionExtras x;
  x.window = window;
  x.sinks = sinks ? sinks->d.as<float>() : nullptr;
  {
    PoisonedRows pr(c, sh.n_kv, ctx, sh.hd, first_key(window, pos0));
    prefill(as, dq.as<float>(), c, n_tok, pos0, out.as<float>(), s, x);
  }
  const std::vector<float> all = download<float>(out.get(), q.size());
  const std::string what = "prefill heads " + std::to_string(sh.n_head) + "/" + std::to_string(sh.n_kv) + " hd " +
                           std::to_string(sh.hd) + " tokens " + std::to_string(n_tok) + " pos0 " +
                           std::to_string(pos0) + " window " + std::to_string(window) +
                           (sinks ? " sinks" : "") + type_tag(c);
  const auto unwritten = std::count_if(all.begin(), all.end(), [](float v) { return !std::isfinite(v); });
  EXPECT_EQ(unwritten, 0) << what << ": outputs unwritten or not finite";
  const int64_t keys = window > 0 ? std::min<int64_t>(window, pos0 + n_tok) : pos0 + n_tok;
  std::vector<float> got;
  std::vector<double> want;
  for (int t : checked_tokens(n_tok, keys, sh.n_head, sh.hd, Sampling{})) {
    got.insert(got.end(), all.begin() + static_cast<int64_t>(t * row), all.begin() + static_cast<int64_t>((t + 1) * row));
    for (int h = 0; h < sh.n_head; ++h) {
      const auto o = ref_attend(q.data() + t * row + static_cast<size_t>(h) * sh.hd, c, h / group, ctx, sh.hd,
                                pos0 + t, as.scale, first_key(window, pos0 + t), sinks ? &sinks->h[h] : nullptr);
      want.insert(want.end(), o.begin(), o.end());
    }
  }
  expect_close(got, want, c, what, prefill_tol(c));
}

// Windows of one key, under and over the 32- and 64-key tiles and the 64-token
// query tile, not multiples of them, and past the context; sinks with and
// without a window; prompts from 1 token to several query tiles, after
// earlier context too; GQA 1..8; head_dim 64 (gpt-oss), 128, 256, 96 (padded)
// and 6 (f16: the tiled kernel); every cache type.
TEST(CudaAttention, PrefillWindowAndSinksMatchReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(41);
  Stream s;
  const std::pair<int, int> runs[] = {{1, 0}, {17, 0}, {65, 0}, {200, 0}, {130, 300}, {300, 900}};
  for (Kv type : {Kv::F16, Kv::Q8_0, Kv::F32})
  for (Shape sh : {Shape{8, 1, 64}, Shape{4, 2, 128}, Shape{6, 3, 256}, Shape{4, 2, 96}, Shape{2, 1, 6}}) {
    if (!fits(type, sh.hd)) continue;
    const int64_t ctx = 1213;
    Cache c = random_cache(sh.n_kv, ctx, sh.hd, type, rng);
    const Sinks sinks = random_sinks(sh.n_head, rng);
    int i = 0;
    for (int window : {0, 1, 7, 64, 100, 1000})
      for (auto [n_tok, pos0] : runs) {
        const bool with_sinks = window == 0 || ++i % 2 == 0;
        check_prefill_extras(sh, c, ctx, n_tok, pos0, window, with_sinks ? &sinks : nullptr, rng, s);
      }
  }
}

// A window reaching past position 0 and no sinks is the plain kernel bit for bit.
TEST(CudaAttention, PrefillWideWindowIsThePlainResult) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(43);
  Stream s;
  for (Kv type : {Kv::F16, Kv::Q8_0, Kv::F32}) {
    const Shape sh{8, 2, 128};
    const int64_t ctx = 500;
    const Cache c = random_cache(sh.n_kv, ctx, sh.hd, type, rng);
    const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
    const int n_tok = 150, pos0 = 333;
    const auto q = random_floats(static_cast<size_t>(n_tok) * sh.n_head * sh.hd, rng, -2.f, 2.f);
    DeviceBuffer dq = upload(q), a = poisoned(q.size()), b = poisoned(q.size());
    prefill(as, dq.as<float>(), c, n_tok, pos0, a.as<float>(), s);
    AttentionExtras x;
    x.window = pos0 + n_tok;
    prefill(as, dq.as<float>(), c, n_tok, pos0, b.as<float>(), s, x);
    EXPECT_EQ(download<float>(a.get(), q.size()), download<float>(b.get(), q.size())) << type_tag(c);
  }
  AttentionShape as{4, 2, 64, 100, 0.125f};
  AttentionExtras neg;
  neg.window = -1;
  EXPECT_THROW(attention_prefill(as, nullptr, static_cast<const uint16_t*>(nullptr), nullptr, 1, 0, nullptr, s, neg),
               Error);
  EXPECT_THROW(attention_decode(as, nullptr, static_cast<const uint16_t*>(nullptr), nullptr, 1, nullptr, nullptr,
                                nullptr, s, neg),
               Error);
}

// Decode with a window and/or sinks: the device length in a launch sized for
// the whole cache (the window's start follows it) and the host length with its
// own scratch; fast paths (head_dim 64/128/256, GQA 8, 4, 16) and the generic
// one (head_dim 80); windows of one position, under, at and over a split.
TEST(CudaAttention, DecodeWindowAndSinksMatchReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(45);
  Stream s;
  for (Kv type : {Kv::F16, Kv::Q8_0, Kv::F32})
  for (Shape sh : {Shape{64, 8, 64}, Shape{32, 4, 128}, Shape{16, 1, 256}, Shape{6, 2, 80}}) {
    if (!fits(type, sh.hd)) continue;
    const int64_t ctx = 3000;
    const Cache c = random_cache(sh.n_kv, ctx, sh.hd, type, rng);
    const Sinks sinks = random_sinks(sh.n_head, rng);
    const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
    const int group = sh.n_head / sh.n_kv;
    DeviceBuffer full_scratch = decode_scratch(as, static_cast<int>(ctx));
    int i = 0;
    for (int window : {0, 1, 33, 128, 1024})
      for (int kv_len : {1, 100, 129, 700, 3000}) {
        const bool with_sinks = window == 0 || ++i % 2 == 0;
        AttentionExtras x;
        x.window = window;
        x.sinks = with_sinks ? sinks.d.as<float>() : nullptr;
        const auto q = random_floats(static_cast<size_t>(sh.n_head * sh.hd), rng);
        std::vector<double> want;
        for (int h = 0; h < sh.n_head; ++h) {
          const auto o = ref_attend(q.data() + h * sh.hd, c, h / group, ctx, sh.hd, kv_len - 1, as.scale,
                                    first_key(window, kv_len - 1), with_sinks ? &sinks.h[h] : nullptr);
          want.insert(want.end(), o.begin(), o.end());
        }
        const std::string what = "decode heads " + std::to_string(sh.n_head) + "/" + std::to_string(sh.n_kv) +
                                 " hd " + std::to_string(sh.hd) + " kv_len " + std::to_string(kv_len) + " window " +
                                 std::to_string(window) + (with_sinks ? " sinks" : "") + type_tag(c);
        DeviceBuffer dq = upload(q), out = poisoned(q.size());
        const std::vector<int32_t> len = {kv_len};
        DeviceBuffer dlen = upload(len);
        decode(as, dq.as<float>(), c, static_cast<int>(ctx), dlen.as<int32_t>(), out.as<float>(), full_scratch.get(),
               s, x);
        expect_close(download<float>(out.get(), q.size()), want, c, what);
        poison(out.get(), q.size() * 4);
        DeviceBuffer own_scratch = decode_scratch(as, kv_len);
        decode(as, dq.as<float>(), c, kv_len, nullptr, out.as<float>(), own_scratch.get(), s, x);
        expect_close(download<float>(out.get(), q.size()), want, c, what + " (host length)");
      }
  }
}

}  // namespace
}  // namespace ms::cuda::test
