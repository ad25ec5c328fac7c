// Decode (split-K) and causal prefill attention against a double-precision
// reference over the same cache contents, for both cache element types: f16
// (the reference reads the rounded values) and f32 (a bound ten times
// tighter, which a kernel rounding keys or values to f16 would miss).
#include <gtest/gtest.h>

#include "cuda/attention.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

// [n_kv][ctx][hd] keys and values as the reference reads them (f32: exactly
// what the device holds; f16: rounded) and on the device.
struct Cache {
  bool f32 = false;
  std::vector<float> k, v;
  DeviceBuffer dk, dv;
};

Cache random_cache(int n_kv, int64_t ctx, int hd, bool f32, std::mt19937& rng) {
  Cache c;
  c.f32 = f32;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const size_t n = static_cast<size_t>(n_kv * ctx * hd);
  c.k.resize(n);
  c.v.resize(n);
  for (auto& x : c.k) x = u(rng) * 2.f;
  for (auto& x : c.v) x = u(rng);
  if (f32) {
    c.dk = upload(c.k);
    c.dv = upload(c.v);
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
            float* out, void* scratch, cudaStream_t s) {
  if (c.f32)
    attention_decode(as, q, c.dk.as<float>(), c.dv.as<float>(), max_kv_len, kv_len, out, scratch, s);
  else
    attention_decode(as, q, c.dk.as<uint16_t>(), c.dv.as<uint16_t>(), max_kv_len, kv_len, out, scratch, s);
}

void prefill(const AttentionShape& as, const float* q, const Cache& c, int n_tok, int pos0, float* out,
             cudaStream_t s) {
  if (c.f32)
    attention_prefill(as, q, c.dk.as<float>(), c.dv.as<float>(), n_tok, pos0, out, s);
  else
    attention_prefill(as, q, c.dk.as<uint16_t>(), c.dv.as<uint16_t>(), n_tok, pos0, out, s);
}

// Decode scratch as attention.h asks: zero-filled once, then reused.
DeviceBuffer decode_scratch(const AttentionShape& as, int max_kv_len) {
  DeviceBuffer b(attention_decode_scratch_bytes(as, max_kv_len));
  device_fill(b.get(), 0, b.size());
  return b;
}

std::string type_tag(const Cache& c) { return c.f32 ? " (f32 cache)" : " (f16 cache)"; }

// out[h][d] for one query (head h) attending to positions 0..last.
std::vector<double> ref_attend(const float* q, const Cache& c, int kvh, int64_t ctx, int hd, int last, float scale) {
  std::vector<double> s(last + 1);
  double mx = -1e300;
  for (int t = 0; t <= last; ++t) {
    double acc = 0;
    for (int d = 0; d < hd; ++d) acc += double(q[d]) * c.k[(kvh * ctx + t) * hd + d];
    s[t] = acc * scale;
    mx = std::max(mx, s[t]);
  }
  double l = 0;
  for (auto& x : s) { x = std::exp(x - mx); l += x; }
  std::vector<double> o(hd, 0.0);
  for (int t = 0; t <= last; ++t)
    for (int d = 0; d < hd; ++d) o[d] += s[t] * c.v[(kvh * ctx + t) * hd + d];
  for (auto& x : o) x /= l;
  return o;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const Cache& c,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  const double abs = c.f32 ? 1e-5 : 2e-4, rel = c.f32 ? 1e-4 : 1e-3;
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

TEST(CudaAttention, DecodeSplitKMatchesReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(21);
  Stream s;
  for (bool f32 : {false, true})
  for (Shape sh : {Shape{32, 4, 128}, Shape{8, 8, 64}, Shape{16, 1, 256}, Shape{6, 2, 80}, Shape{4, 2, 32}}) {
    const int64_t ctx = 1100;
    const Cache c = random_cache(sh.n_kv, ctx, sh.hd, f32, rng);
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
  for (bool f32 : {false, true})
  for (Shape sh : {Shape{32, 4, 128}, Shape{8, 1, 64}, Shape{16, 8, 128}, Shape{4, 4, 256}, Shape{16, 1, 128},
                   Shape{32, 2, 256}}) {
    const int64_t ctx = 5000;
    const Cache c = random_cache(sh.n_kv, ctx, sh.hd, f32, rng);
    const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
    DeviceBuffer scratch = decode_scratch(as, static_cast<int>(ctx));
    for (int kv_len : {1, 31, 33, 600, 4097, 5000})
      check_decode(sh, c, ctx, kv_len, scratch.get(), rng, s, "long decode");
  }
}

TEST(CudaAttention, PrefillCausalMatchesReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(22);
  Stream s;
  for (bool f32 : {false, true})
  for (Shape sh : {Shape{8, 2, 128}, Shape{4, 4, 64}, Shape{6, 3, 256}, Shape{4, 2, 80}, Shape{4, 2, 32},
                   Shape{2, 1, 6}}) {
    const int64_t ctx = 200;
    const Cache c = random_cache(sh.n_kv, ctx, sh.hd, f32, rng);
    AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
    const int group = sh.n_head / sh.n_kv;
    for (auto [n_tok, pos0] : {std::pair{1, 0}, std::pair{13, 0}, std::pair{37, 50}, std::pair{70, 130}}) {
      const auto q = random_floats(static_cast<size_t>(n_tok * sh.n_head * sh.hd), rng);
      DeviceBuffer dq = upload(q), out = poisoned(q.size());
      prefill(as, dq.as<float>(), c, n_tok, pos0, out.as<float>(), s);
      std::vector<double> want;
      for (int t = 0; t < n_tok; ++t)
        for (int h = 0; h < sh.n_head; ++h) {
          const auto o = ref_attend(q.data() + (t * sh.n_head + h) * sh.hd, c, h / group, ctx, sh.hd, pos0 + t,
                                    as.scale);
          want.insert(want.end(), o.begin(), o.end());
        }
      expect_close(download<float>(out.get(), q.size()), want, c,
                   "prefill hd " + std::to_string(sh.hd) + " tokens " + std::to_string(n_tok) + " pos0 " +
                       std::to_string(pos0) + type_tag(c));
    }
  }
  AttentionShape bad{4, 3, 64, 100, 0.125f};
  EXPECT_THROW(attention_prefill(bad, nullptr, static_cast<const uint16_t*>(nullptr), nullptr, 1, 0, nullptr, s),
               Error);
  EXPECT_THROW(attention_prefill(bad, nullptr, static_cast<const float*>(nullptr), nullptr, 1, 0, nullptr, s), Error);
}

}  // namespace
}  // namespace ms::cuda::test
