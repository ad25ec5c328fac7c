// Decode (split-K) and causal prefill attention against a double-precision
// reference over the same f16 cache contents.
#include <gtest/gtest.h>

#include "cuda/attention.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

struct Cache {
  std::vector<uint16_t> k, v;  // [n_kv][ctx][hd]
};

Cache random_cache(int n_kv, int64_t ctx, int hd, std::mt19937& rng) {
  Cache c;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  c.k.resize(static_cast<size_t>(n_kv * ctx * hd));
  c.v.resize(c.k.size());
  for (auto& x : c.k) x = f32_to_f16(u(rng) * 2.f);
  for (auto& x : c.v) x = f32_to_f16(u(rng));
  return c;
}

// out[h][d] for one query (head h) attending to positions 0..last.
std::vector<double> ref_attend(const float* q, const Cache& c, int kvh, int64_t ctx, int hd, int last, float scale) {
  std::vector<double> s(last + 1);
  double mx = -1e300;
  for (int t = 0; t <= last; ++t) {
    double acc = 0;
    for (int d = 0; d < hd; ++d) acc += double(q[d]) * f16_to_f32(c.k[(kvh * ctx + t) * hd + d]);
    s[t] = acc * scale;
    mx = std::max(mx, s[t]);
  }
  double l = 0;
  for (auto& x : s) { x = std::exp(x - mx); l += x; }
  std::vector<double> o(hd, 0.0);
  for (int t = 0; t <= last; ++t)
    for (int d = 0; d < hd; ++d) o[d] += s[t] * f16_to_f32(c.v[(kvh * ctx + t) * hd + d]);
  for (auto& x : o) x /= l;
  return o;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= 2e-4 + 1e-3 * std::fabs(want[i])))
      if (++bad <= 5) ADD_FAILURE() << what << ": [" << i << "] got " << got[i] << " want " << want[i];
  EXPECT_EQ(bad, 0) << what;
}

struct Shape {
  int n_head, n_kv, hd;
};

TEST(CudaAttention, DecodeSplitKMatchesReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(21);
  Stream s;
  for (Shape sh : {Shape{32, 4, 128}, Shape{8, 8, 64}, Shape{16, 1, 256}, Shape{6, 2, 80}}) {
    const int64_t ctx = 1100;
    const Cache c = random_cache(sh.n_kv, ctx, sh.hd, rng);
    DeviceBuffer dk = upload(c.k), dv = upload(c.v);
    AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
    const int group = sh.n_head / sh.n_kv;
    for (int kv_len : {1, 127, 128, 129, 1100}) {
      const auto q = random_floats(static_cast<size_t>(sh.n_head * sh.hd), rng);
      DeviceBuffer dq = upload(q), out = poisoned(q.size());
      // launch sized for the whole cache, actual length from the device (graph-style)
      DeviceBuffer scratch(attention_decode_scratch_bytes(as, static_cast<int>(ctx)));
      const std::vector<int32_t> len = {kv_len};
      DeviceBuffer dlen = upload(len);
      attention_decode(as, dq.as<float>(), dk.as<uint16_t>(), dv.as<uint16_t>(), static_cast<int>(ctx),
                       dlen.as<int32_t>(), out.as<float>(), scratch.get(), s);
      std::vector<double> want;
      for (int h = 0; h < sh.n_head; ++h) {
        const auto o = ref_attend(q.data() + h * sh.hd, c, h / group, ctx, sh.hd, kv_len - 1, as.scale);
        want.insert(want.end(), o.begin(), o.end());
      }
      expect_close(download<float>(out.get(), q.size()), want,
                   "decode heads " + std::to_string(sh.n_head) + "/" + std::to_string(sh.n_kv) + " hd " +
                       std::to_string(sh.hd) + " kv_len " + std::to_string(kv_len));
      // and with the host length
      poison(out.get(), q.size() * 4);
      DeviceBuffer scratch2(attention_decode_scratch_bytes(as, kv_len));
      attention_decode(as, dq.as<float>(), dk.as<uint16_t>(), dv.as<uint16_t>(), kv_len, nullptr, out.as<float>(),
                       scratch2.get(), s);
      expect_close(download<float>(out.get(), q.size()), want, "decode host length " + std::to_string(kv_len));
    }
  }
}

// Long contexts through the split-K fast path (many splits, several 32-position
// tiles per warp, partial last tiles), both with the device length in a launch
// sized for the whole cache and with the host length.
TEST(CudaAttention, DecodeLongContextMatchesReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(23);
  Stream s;
  for (Shape sh : {Shape{32, 4, 128}, Shape{8, 1, 64}, Shape{16, 8, 128}, Shape{4, 4, 256}, Shape{16, 1, 128}}) {
    const int64_t ctx = 5000;
    const Cache c = random_cache(sh.n_kv, ctx, sh.hd, rng);
    DeviceBuffer dk = upload(c.k), dv = upload(c.v);
    AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
    const int group = sh.n_head / sh.n_kv;
    DeviceBuffer scratch(attention_decode_scratch_bytes(as, static_cast<int>(ctx)));
    for (int kv_len : {1, 31, 33, 600, 4097, 5000}) {
      const auto q = random_floats(static_cast<size_t>(sh.n_head * sh.hd), rng);
      DeviceBuffer dq = upload(q), out = poisoned(q.size());
      const std::vector<int32_t> len = {kv_len};
      DeviceBuffer dlen = upload(len);
      attention_decode(as, dq.as<float>(), dk.as<uint16_t>(), dv.as<uint16_t>(), static_cast<int>(ctx),
                       dlen.as<int32_t>(), out.as<float>(), scratch.get(), s);
      std::vector<double> want;
      for (int h = 0; h < sh.n_head; ++h) {
        const auto o = ref_attend(q.data() + h * sh.hd, c, h / group, ctx, sh.hd, kv_len - 1, as.scale);
        want.insert(want.end(), o.begin(), o.end());
      }
      const std::string what = "long decode heads " + std::to_string(sh.n_head) + "/" + std::to_string(sh.n_kv) +
                               " hd " + std::to_string(sh.hd) + " kv_len " + std::to_string(kv_len);
      expect_close(download<float>(out.get(), q.size()), want, what);
      poison(out.get(), q.size() * 4);
      DeviceBuffer scratch2(attention_decode_scratch_bytes(as, kv_len));
      attention_decode(as, dq.as<float>(), dk.as<uint16_t>(), dv.as<uint16_t>(), kv_len, nullptr, out.as<float>(),
                       scratch2.get(), s);
      expect_close(download<float>(out.get(), q.size()), want, what + " (host length)");
    }
  }
}

TEST(CudaAttention, PrefillCausalMatchesReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(22);
  Stream s;
  for (Shape sh : {Shape{8, 2, 128}, Shape{4, 4, 64}, Shape{6, 3, 256}, Shape{4, 2, 80}}) {
    const int64_t ctx = 200;
    const Cache c = random_cache(sh.n_kv, ctx, sh.hd, rng);
    DeviceBuffer dk = upload(c.k), dv = upload(c.v);
    AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
    const int group = sh.n_head / sh.n_kv;
    for (auto [n_tok, pos0] : {std::pair{1, 0}, std::pair{13, 0}, std::pair{37, 50}, std::pair{70, 130}}) {
      const auto q = random_floats(static_cast<size_t>(n_tok * sh.n_head * sh.hd), rng);
      DeviceBuffer dq = upload(q), out = poisoned(q.size());
      attention_prefill(as, dq.as<float>(), dk.as<uint16_t>(), dv.as<uint16_t>(), n_tok, pos0, out.as<float>(), s);
      std::vector<double> want;
      for (int t = 0; t < n_tok; ++t)
        for (int h = 0; h < sh.n_head; ++h) {
          const auto o = ref_attend(q.data() + (t * sh.n_head + h) * sh.hd, c, h / group, ctx, sh.hd, pos0 + t,
                                    as.scale);
          want.insert(want.end(), o.begin(), o.end());
        }
      expect_close(download<float>(out.get(), q.size()), want,
                   "prefill hd " + std::to_string(sh.hd) + " tokens " + std::to_string(n_tok) + " pos0 " +
                       std::to_string(pos0));
    }
  }
  AttentionShape bad{4, 3, 64, 100, 0.125f};
  EXPECT_THROW(attention_prefill(bad, nullptr, nullptr, nullptr, 1, 0, nullptr, s), Error);
}

}  // namespace
}  // namespace ms::cuda::test
