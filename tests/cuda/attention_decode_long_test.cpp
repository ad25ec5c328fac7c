// Decode attention at long contexts (the tensor-core flash-decoding kernel,
// src/cuda/attention_decode_long.cu, behind attention_decode for f16 and q8_0
// caches past decode_long::kMinLen positions) against a double-precision
// reference: lengths across split and tile edges, GQA 1/2/4/8/16, head_dim
// 64/128/256, windows and sinks, NaN bytes in the rows no query sees, a
// captured graph replayed at growing lengths, poisoned outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "cuda/attention.h"
#include "cuda/attention_decode_long.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

struct LongCache {
  bool q8 = false;
  std::vector<float> k, v;  // [n_kv][ctx][hd] as the device holds them (rounded / dequantized)
  std::vector<uint8_t> bk, bv;  // the device caches' bytes, to undo nan_rows
  DeviceBuffer dk, dv;
};

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<BlockQ8_0> to_q8_0(std::vector<float>& x) {
  std::vector<BlockQ8_0> b(x.size() / QK);
  quantize_row_ref(DType::Q8_0, x.data(), b.data(), static_cast<int64_t>(x.size()));
  dequantize_row_ref(DType::Q8_0, b.data(), x.data(), static_cast<int64_t>(x.size()));
  return b;
}

LongCache make_cache(int n_kv, int64_t ctx, int hd, bool q8, std::mt19937& rng) {
  LongCache c;
  c.q8 = q8;
  const size_t n = static_cast<size_t>(n_kv) * static_cast<size_t>(ctx) * static_cast<size_t>(hd);
  c.k = random_floats(n, rng, -2.f, 2.f);
  c.v = random_floats(n, rng, -1.f, 1.f);
  if (q8) {
    c.bk = bytes_of(to_q8_0(c.k));
    c.bv = bytes_of(to_q8_0(c.v));
    c.dk = upload(c.bk);
    c.dv = upload(c.bv);
    return c;
  }
  std::vector<uint16_t> hk(n), hv(n);
  for (size_t i = 0; i < n; ++i) {
    hk[i] = f32_to_f16(c.k[i]);
    hv[i] = f32_to_f16(c.v[i]);
    c.k[i] = f16_to_f32(hk[i]);
    c.v[i] = f16_to_f32(hv[i]);
  }
  c.bk = bytes_of(hk);
  c.bv = bytes_of(hv);
  c.dk = upload(c.bk);
  c.dv = upload(c.bv);
  return c;
}

// The device caches as make_cache left them (undoes nan_rows).
void restore(const LongCache& c) {
  MS_CUDA_CHECK(cudaMemcpy(c.dk.get(), c.bk.data(), c.bk.size(), cudaMemcpyHostToDevice));
  MS_CUDA_CHECK(cudaMemcpy(c.dv.get(), c.bv.data(), c.bv.size(), cudaMemcpyHostToDevice));
}

size_t row_bytes(const LongCache& c, int hd) { return c.q8 ? size_t(hd / QK) * sizeof(BlockQ8_0) : 2u * hd; }

// NaN bytes in rows [from, to) of every KV head of the device cache: rows no
// query sees (past kv_len, before a window) must not reach the output.
void nan_rows(const LongCache& c, int n_kv, int64_t ctx, int hd, int64_t from, int64_t to) {
  if (to <= from) return;
  const size_t rb = row_bytes(c, hd);
  for (int h = 0; h < n_kv; ++h)
    for (const DeviceBuffer* b : {&c.dk, &c.dv})
      device_fill(static_cast<char*>(b->get()) + (static_cast<size_t>(h) * ctx + from) * rb, 0xff,
                  static_cast<size_t>(to - from) * rb);
}

void decode(const AttentionShape& as, const float* q, const LongCache& c, int max_kv_len, const int32_t* kv_len,
            float* out, void* scratch, cudaStream_t s, const AttentionExtras& x = {}) {
  if (c.q8)
    attention_decode(as, q, c.dk.as<BlockQ8_0>(), c.dv.as<BlockQ8_0>(), max_kv_len, kv_len, out, scratch, s, x);
  else
    attention_decode(as, q, c.dk.as<uint16_t>(), c.dv.as<uint16_t>(), max_kv_len, kv_len, out, scratch, s, x);
}

DeviceBuffer zeroed_scratch(const AttentionShape& as, int max_kv_len) {
  DeviceBuffer b(attention_decode_scratch_bytes(as, max_kv_len));
  device_fill(b.get(), 0, b.size());
  return b;
}

// All heads' outputs for a query at kv_len - 1 seeing positions first..kv_len-1
// (and a sink logit per head when given), in double.
std::vector<double> reference(const AttentionShape& as, const std::vector<float>& q, const LongCache& c, int kv_len,
                              int first, const std::vector<float>* sinks) {
  const int hd = as.head_dim, group = as.n_head / as.n_kv;
  std::vector<double> out;
  std::vector<double> sc(static_cast<size_t>(kv_len));
  for (int h = 0; h < as.n_head; ++h) {
    const int kvh = h / group;
    const float* qh = q.data() + static_cast<size_t>(h) * hd;
    double mx = sinks ? double((*sinks)[h]) : -1e300;
    for (int t = first; t < kv_len; ++t) {
      const float* kr = c.k.data() + (kvh * as.ctx + t) * static_cast<int64_t>(hd);
      double acc = 0;
      for (int d = 0; d < hd; ++d) acc += double(qh[d]) * kr[d];
      sc[t] = acc * as.scale;
      mx = std::max(mx, sc[t]);
    }
    double l = sinks ? std::exp(double((*sinks)[h]) - mx) : 0.0;
    std::vector<double> o(hd, 0.0);
    for (int t = first; t < kv_len; ++t) {
      const double w = std::exp(sc[t] - mx);
      l += w;
      const float* vr = c.v.data() + (kvh * as.ctx + t) * static_cast<int64_t>(hd);
      for (int d = 0; d < hd; ++d) o[d] += w * vr[d];
    }
    for (double& x : o) out.push_back(x / l);
  }
  return out;
}

// The f32 decode kernels' bound (tests/cuda/attention_test.cpp): the hi/lo
// f16 pairs keep q and p to ~22 bits, so only the cache's own rounding is
// left; a missed or extra tile moves outputs by 1e-2 or more.
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

std::string label(const Shape& sh, bool q8, int kv_len, int window, bool sinks) {
  return "heads " + std::to_string(sh.n_head) + "/" + std::to_string(sh.n_kv) + " hd " + std::to_string(sh.hd) +
         " kv_len " + std::to_string(kv_len) + (window ? " window " + std::to_string(window) : "") +
         (sinks ? " sinks" : "") + (q8 ? " (q8_0)" : " (f16)");
}

// One case three ways: the device length in a launch sized for the whole
// cache (a captured graph's launch), the host length with its own scratch,
// and the host length with the whole cache's scratch.
void check(const Shape& sh, const LongCache& c, int64_t ctx, int kv_len, const AttentionExtras& x,
           const std::vector<float>* sinks, void* full_scratch, std::mt19937& rng, cudaStream_t s) {
  const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
  const auto q = random_floats(static_cast<size_t>(sh.n_head * sh.hd), rng, -1.5f, 1.5f);
  const int first = x.window > 0 ? std::max(0, kv_len - x.window) : 0;
  const std::vector<double> want = reference(as, q, c, kv_len, first, sinks);
  const std::string what = label(sh, c.q8, kv_len, x.window, sinks != nullptr);
  DeviceBuffer dq = upload(q), out = poisoned(q.size()), dlen = upload(std::vector<int32_t>{kv_len});
  decode(as, dq.as<float>(), c, static_cast<int>(ctx), dlen.as<int32_t>(), out.as<float>(), full_scratch, s, x);
  expect_close(download<float>(out.get(), q.size()), want, what + " (device length)");
  poison(out.get(), q.size() * 4);
  DeviceBuffer own = zeroed_scratch(as, kv_len);
  decode(as, dq.as<float>(), c, kv_len, nullptr, out.as<float>(), own.get(), s, x);
  expect_close(download<float>(out.get(), q.size()), want, what + " (host length)");
  poison(out.get(), q.size() * 4);
  decode(as, dq.as<float>(), c, kv_len, nullptr, out.as<float>(), full_scratch, s, x);
  expect_close(download<float>(out.get(), q.size()), want, what + " (host length, shared scratch)");
}

// Lengths around the switch to the long kernel (kMinLen), a block step (64),
// a tile (16), the split count's edges, and the whole cache; the rows past
// kv_len hold NaN bytes.
TEST(CudaAttentionLong, DecodeMatchesReferenceAcrossEdges) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(91);
  Stream s;
  const int m = decode_long::kMinLen;
  for (bool q8 : {false, true})
    for (Shape sh : {Shape{32, 4, 128}, Shape{16, 4, 128}, Shape{32, 2, 128}, Shape{16, 2, 256}, Shape{8, 8, 64},
                     Shape{16, 8, 64}, Shape{16, 1, 64}}) {
      const int64_t ctx = 9001;
      const LongCache c = make_cache(sh.n_kv, ctx, sh.hd, q8, rng);
      const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
      DeviceBuffer full = zeroed_scratch(as, static_cast<int>(ctx));
      for (int kv_len : {1, 17, m, m + 1, m + 63, m + 64, m + 65, 4097, 9001}) {
        nan_rows(c, sh.n_kv, ctx, sh.hd, kv_len, ctx);
        check(sh, c, ctx, kv_len, {}, nullptr, full.get(), rng, s);
        restore(c);
      }
    }
}

// Windows and sinks through the long kernel: windows past kMinLen (so that the
// splits cover the window only), with NaN bytes before the window's start.
TEST(CudaAttentionLong, DecodeWindowAndSinksMatchReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(93);
  Stream s;
  for (bool q8 : {false, true})
    for (Shape sh : {Shape{64, 8, 64}, Shape{32, 4, 128}, Shape{32, 2, 128}}) {
      const int64_t ctx = 7000;
      const LongCache c = make_cache(sh.n_kv, ctx, sh.hd, q8, rng);
      const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
      std::vector<float> sinks = random_floats(static_cast<size_t>(sh.n_head), rng, -3.f, 3.f);
      sinks[0] = 30.f;  // nearly all the mass on the sink
      sinks[1] = -30.f;
      DeviceBuffer dsinks = upload(sinks), full = zeroed_scratch(as, static_cast<int>(ctx));
      int i = 0;
      for (int window : {0, 1100, 2500, 6999})
        for (int kv_len : {1030, 3001, 7000}) {
          const bool with_sinks = ++i % 2 == 0 || window == 0;
          AttentionExtras x;
          x.window = window;
          x.sinks = with_sinks ? dsinks.as<float>() : nullptr;
          const int first = window > 0 ? std::max(0, kv_len - window) : 0;
          nan_rows(c, sh.n_kv, ctx, sh.hd, 0, first);
          nan_rows(c, sh.n_kv, ctx, sh.hd, kv_len, ctx);
          check(sh, c, ctx, kv_len, x, with_sinks ? &sinks : nullptr, full.get(), rng, s);
          restore(c);
        }
    }
}

// As the backend runs decode: one launch captured in a graph for the whole
// cache (max_kv_len = ctx), replayed while the device length grows; a
// deep cache (65537 positions) for the Qwen3-30B-A3B shape.
TEST(CudaAttentionLong, CapturedGraphFollowsDeviceLength) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(95);
  Stream s;
  for (bool q8 : {false, true}) {
    const Shape sh{32, 4, 128};
    const int64_t ctx = 65537;
    const LongCache c = make_cache(sh.n_kv, ctx, sh.hd, q8, rng);
    const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
    DeviceBuffer scratch = zeroed_scratch(as, static_cast<int>(ctx));
    const auto q = random_floats(static_cast<size_t>(sh.n_head * sh.hd), rng, -1.5f, 1.5f);
    DeviceBuffer dq = upload(q), out = poisoned(q.size()), dlen = upload(std::vector<int32_t>{1});
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    MS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    decode(as, dq.as<float>(), c, static_cast<int>(ctx), dlen.as<int32_t>(), out.as<float>(), scratch.get(), s);
    MS_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    MS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int kv_len : {1500, 32768, 40001, 65537}) {
      const std::vector<int32_t> len = {kv_len};
      MS_CUDA_CHECK(cudaMemcpyAsync(dlen.get(), len.data(), sizeof(int32_t), cudaMemcpyHostToDevice, s));
      poison(out.get(), q.size() * 4);
      MS_CUDA_CHECK(cudaGraphLaunch(exec, s));
      MS_CUDA_CHECK(cudaStreamSynchronize(s));
      expect_close(download<float>(out.get(), q.size()), reference(as, q, c, kv_len, 0, nullptr),
                   label(sh, q8, kv_len, 0, false) + " (graph replay)");
    }
    MS_CUDA_CHECK(cudaGraphExecDestroy(exec));
    MS_CUDA_CHECK(cudaGraphDestroy(graph));
  }
}

}  // namespace
}  // namespace ms::cuda::test
