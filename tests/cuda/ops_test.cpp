// CUDA element-wise ops beyond tests/backend_ops (which checks rms_norm,
// add, silu_mul, rope, router_topk, moe_combine, embedding rows and KV
// appends against the scalar references on many shapes): RMSNorm's Q8 output
// and in-place form, row gather/scatter, KV appends skipping positions
// outside the cache, the fused RoPE prologues with YaRN, argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "cpu/ops.h"
#include "cuda/backend/decode_fused.h"
#include "cuda/backend/prefill_fused.h"
#include "cuda/ops.h"
#include "model/rope_yarn.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double rel, double abs,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= abs + rel * std::fabs(want[i]))) {
      if (++bad <= 5) ADD_FAILURE() << what << ": [" << i << "] got " << got[i] << " want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(CudaOps, RmsNormWithAndWithoutQ8) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(5);
  Stream s;
  for (int64_t n : {32, 96, 2048, 4096}) {
    for (int64_t rows : {1, 3, 17}) {
      const auto x = random_floats(static_cast<size_t>(rows * n), rng, -3.f, 3.f);
      const auto w = random_floats(static_cast<size_t>(n), rng, 0.5f, 1.5f);
      DeviceBuffer dx = upload(x), dw = upload(w);
      DeviceBuffer out = poisoned(static_cast<size_t>(rows * n));
      DeviceBuffer q8buf(q8act_bytes(n, rows));
      poison(q8buf.get(), q8act_bytes(n, rows));
      Q8Act q8 = q8act_view(q8buf.get(), n, rows);
      rmsnorm(dx.as<float>(), dw.as<float>(), out.as<float>(), rows, n, 1e-6f, s, &q8);
      std::vector<double> want(static_cast<size_t>(rows * n));
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
        const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
        for (int64_t i = 0; i < n; ++i) want[r * n + i] = x[r * n + i] * inv * w[i];
      }
      const auto got = download<float>(out.get(), want.size());
      expect_near_all(got, want, 1e-5, 1e-6, "rmsnorm n=" + std::to_string(n));
      // Q8: dequantised values within half a step of the f32 result
      const auto q = download<int8_t>(q8.q, want.size());
      const auto ds = download<float>(q8.ds, want.size() / 32 * 2);
      int bad = 0;
      for (size_t b = 0; b < want.size() / 32; ++b) {
        int sum = 0;
        for (int i = 0; i < 32; ++i) {
          const double v = ds[2 * b] * q[b * 32 + i];
          sum += q[b * 32 + i];
          if (!(std::fabs(v - want[b * 32 + i]) <= ds[2 * b] * 0.5001 + 2e-5 * std::fabs(want[b * 32 + i]) + 1e-6)) ++bad;
        }
        if (!(std::fabs(ds[2 * b + 1] - ds[2 * b] * sum) <= 1e-5 * std::fabs(ds[2 * b] * sum) + 1e-7)) ++bad;
      }
      EXPECT_EQ(bad, 0) << "rmsnorm q8 n=" << n;
      // in place, without q8 and without weight
      rmsnorm(dx.as<float>(), nullptr, dx.as<float>(), rows, n, 1e-6f, s);
      const auto inplace = download<float>(dx.get(), want.size());
      std::vector<double> want_nw(want.size());
      for (size_t i = 0; i < want.size(); ++i) want_nw[i] = want[i] / w[i % n];
      expect_near_all(inplace, want_nw, 1e-5, 1e-6, "rmsnorm in place");
    }
  }
}

// quantize_q8act's bytes against the scalar reference: tests/backend_ops
// (op quantize_gpu_q8, implementation cuda). Here: its argument check.
TEST(CudaOps, QuantizeQ8RejectsPartialBlocks) {
  MS_REQUIRE_GPU();
  Stream s;
  DeviceBuffer dx(4 * 64), buf(q8act_bytes(32, 1));
  Q8Act a = q8act_view(buf.get(), 32, 1);
  EXPECT_THROW(quantize_q8act(dx.as<float>(), 33, 1, a, s), Error);
}

// Rows moved by index (the hybrid MoE step's gather of (token, expert) rows and
// scatter of expert outputs): exact copies, rows not named stay untouched.
TEST(CudaOps, GatherAndScatterRows) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(9);
  Stream s;
  const int n_src = 13, n_rows = 7;
  const int64_t n = 1031;  // odd width
  const auto src = random_floats(static_cast<size_t>(n_src * n), rng);
  std::vector<int32_t> rows(n_src);
  for (int i = 0; i < n_src; ++i) rows[i] = i;
  std::shuffle(rows.begin(), rows.end(), rng);
  rows.resize(n_rows);  // distinct rows of src, in random order
  DeviceBuffer dsrc = upload(src), drows = upload(rows), dg = poisoned(n_rows * n);
  gather_rows(dsrc.as<float>(), drows.as<int32_t>(), n_rows, n, dg.as<float>(), s);
  const std::vector<float> g = download<float>(dg.get(), static_cast<size_t>(n_rows * n));
  for (int i = 0; i < n_rows; ++i)
    for (int64_t c = 0; c < n; ++c) ASSERT_EQ(g[i * n + c], src[rows[i] * n + c]) << "gather row " << i;
  // Back to their places in a poisoned buffer: named rows equal src, the rest stay poison (NaN).
  DeviceBuffer dsc = poisoned(n_src * n);
  scatter_rows(dg.as<float>(), drows.as<int32_t>(), n_rows, n, dsc.as<float>(), s);
  const std::vector<float> sc = download<float>(dsc.get(), static_cast<size_t>(n_src * n));
  for (int r = 0; r < n_src; ++r) {
    const bool named = std::find(rows.begin(), rows.end(), r) != rows.end();
    for (int64_t c = 0; c < n; ++c) {
      if (named) ASSERT_EQ(sc[r * n + c], src[r * n + c]) << "scatter row " << r;
      else ASSERT_TRUE(std::isnan(sc[r * n + c])) << "row " << r << " was written";
    }
  }
}

TEST(CudaOps, RopeRejectsBadRotaryDims) {
  MS_REQUIRE_GPU();
  Stream s;
  EXPECT_THROW(rope(nullptr, 1, 1, 64, 65, nullptr, 1e4f, 1.f, RopeMode::Neox, s), Error);
}

TEST(CudaOps, RouterTopKRejectsKAboveExperts) {
  MS_REQUIRE_GPU();
  Stream s;
  EXPECT_THROW(router_topk(nullptr, 1, 8, 9, RouterMode::SoftmaxTopK, true, nullptr, nullptr, s), Error);
}

// Rows of every format against dequantize_row_ref: tests/backend_ops (ops
// dequantize_<type>, implementation cuda_embed). Here: ids outside the table
// give zero rows, and a format without a kernel is refused.
TEST(CudaOps, EmbedRowsOutOfRangeIdsGiveZeroRows) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(10);
  Stream s;
  for (DType t : {DType::F32, DType::Q4_K, DType::IQ2_XS}) {
    const int64_t n_vocab = 50, n = 512;
    const auto table = random_weights(t, n_vocab, n, rng);
    const std::vector<int32_t> ids = {3, -1, 50, 49};
    DeviceBuffer dt = upload(table), di = upload(ids), out = poisoned(ids.size() * n);
    embed_rows(t, dt.get(), n_vocab, n, di.as<int32_t>(), static_cast<int>(ids.size()), out.as<float>(), s);
    const auto got = download<float>(out.get(), ids.size() * n);
    for (size_t k = 0; k < ids.size(); ++k) {
      const bool valid = ids[k] >= 0 && ids[k] < n_vocab;
      const auto want = valid ? dequant_row(t, table, ids[k], n) : std::vector<float>(n, 0.f);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(got[k * n + i], want[i], 1e-6f * (1.f + std::fabs(want[i])))
            << type_name(t) << " id " << ids[k] << " element " << i;
    }
  }
  EXPECT_THROW(embed_rows(DType::Q8_K, nullptr, 1, 256, nullptr, 1, nullptr, s), Error);  // no kernel for it
}

TEST(CudaOps, KvAppendWritesF16AtPositions) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(11);
  Stream s;
  const int n_tok = 3, n_kv = 2, hd = 64;
  const int64_t ctx = 40;
  const auto k = random_floats(n_tok * n_kv * hd, rng, -8.f, 8.f), v = random_floats(n_tok * n_kv * hd, rng);
  const std::vector<int32_t> pos = {5, 39, 40};  // the last is outside the cache: skipped
  DeviceBuffer dk = upload(k), dv = upload(v), dp = upload(pos);
  DeviceBuffer kc(2 * n_kv * ctx * hd), vc(2 * n_kv * ctx * hd);
  device_fill(kc.get(), 0, kc.size());
  device_fill(vc.get(), 0, vc.size());
  kv_append(dk.as<float>(), dv.as<float>(), n_tok, n_kv, hd, dp.as<int32_t>(), kc.as<uint16_t>(), vc.as<uint16_t>(),
            ctx, s);
  const auto gk = download<uint16_t>(kc.get(), n_kv * ctx * hd), gv = download<uint16_t>(vc.get(), n_kv * ctx * hd);
  std::vector<uint16_t> wk(gk.size(), 0), wv(gv.size(), 0);
  for (int t = 0; t < n_tok; ++t) {
    if (pos[t] >= ctx) continue;
    for (int h = 0; h < n_kv; ++h)
      for (int d = 0; d < hd; ++d) {
        wk[(h * ctx + pos[t]) * hd + d] = f32_to_f16(k[(t * n_kv + h) * hd + d]);
        wv[(h * ctx + pos[t]) * hd + d] = f32_to_f16(v[(t * n_kv + h) * hd + d]);
      }
  }
  EXPECT_EQ(gk, wk);
  EXPECT_EQ(gv, wv);
}

// The f32 cache keeps the rows bit for bit; untouched positions keep their poison.
TEST(CudaOps, KvAppendWritesF32AtPositions) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(12);
  Stream s;
  const int n_tok = 4, n_kv = 3, hd = 80;
  const int64_t ctx = 33;
  const auto k = random_floats(n_tok * n_kv * hd, rng, -8.f, 8.f), v = random_floats(n_tok * n_kv * hd, rng);
  const std::vector<int32_t> pos = {0, 32, -1, 7};  // -1 is outside the cache: skipped
  DeviceBuffer dk = upload(k), dv = upload(v), dp = upload(pos);
  const size_t n = static_cast<size_t>(n_kv * ctx * hd);
  DeviceBuffer kc = poisoned(n), vc = poisoned(n);
  kv_append(dk.as<float>(), dv.as<float>(), n_tok, n_kv, hd, dp.as<int32_t>(), kc.as<float>(), vc.as<float>(), ctx,
            s);
  const auto gk = download<uint32_t>(kc.get(), n), gv = download<uint32_t>(vc.get(), n);
  std::vector<uint32_t> wk(n, 0xffffffffu), wv(n, 0xffffffffu);
  for (int t = 0; t < n_tok; ++t) {
    if (pos[t] < 0 || pos[t] >= ctx) continue;
    for (int h = 0; h < n_kv; ++h)
      for (int d = 0; d < hd; ++d) {
        std::memcpy(&wk[(h * ctx + pos[t]) * hd + d], &k[(t * n_kv + h) * hd + d], 4);
        std::memcpy(&wv[(h * ctx + pos[t]) * hd + d], &v[(t * n_kv + h) * hd + d], 4);
      }
  }
  EXPECT_EQ(gk, wk);
  EXPECT_EQ(gv, wv);
}


// RoPE with YaRN scaling (model/rope_scaling.h): the fused q/k prologues of
// decode and prompt batches against the CPU's scalar rope_ref, at positions
// past the original context (the separate kernel: tests/backend_ops, op rope).
TEST(CudaOps, RopeYarnMatchesCpu) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(71);
  Stream s;
  const int n_tok = 5, n_head = 3, n_kv = 2, hd = 128;
  const std::vector<int32_t> pos = {0, 1, 63, 4097, 100000};
  DeviceBuffer dpos = upload(pos);
  for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox})
    for (int n_rot : {128, 64}) {
      YarnParams yp;
      yp.factor = 4;
      yp.n_rot = n_rot;
      yp.n_ctx_orig = 4096;
      yp.theta_base = 1e6;
      const RopeScaling sc = yarn_scaling(yp);
      ASSERT_GT(sc.corr_high, sc.corr_low);
      const std::string what = std::string(mode == RopeMode::Neox ? "neox" : "normal") + " n_rot " + std::to_string(n_rot);
      auto cpu_rope = [&](std::vector<float> x, int heads, int n) {
        for (int t = 0; t < n; ++t)
          ms::rope_ref(x.data() + static_cast<size_t>(t) * heads * hd, heads, hd, n_rot, pos[t], 1e6f, sc, mode);
        return std::vector<double>(x.begin(), x.end());
      };
      // The prompt batch's fused prologue (no norms, f32 cache).
      const auto q = random_floats(static_cast<size_t>(n_tok * n_head * hd), rng);
      const auto k = random_floats(static_cast<size_t>(n_tok * n_kv * hd), rng);
      const auto v = random_floats(static_cast<size_t>(n_tok * n_kv * hd), rng);
      const int64_t ctx = 100001;
      DeviceBuffer dq = upload(q), dk = upload(k), dv = upload(v);
      DeviceBuffer kc(static_cast<size_t>(n_kv * ctx * hd) * sizeof(float), "k cache");
      DeviceBuffer vc(static_cast<size_t>(n_kv * ctx * hd) * sizeof(float), "v cache");
      batch_qk_prologue(dq.as<float>(), dk.as<float>(), dv.as<float>(), n_tok, n_head, n_kv, hd, nullptr, nullptr, 1e-6f,
                        n_rot, dpos.as<int32_t>(), 1e6f, sc, mode, kc.as<float>(), vc.as<float>(), ctx, s);
      expect_near_all(download<float>(dq.get(), q.size()), cpu_rope(q, n_head, n_tok), 1e-5, 1e-5, "batch q " + what);
      expect_near_all(download<float>(dk.get(), k.size()), cpu_rope(k, n_kv, n_tok), 1e-5, 1e-5, "batch k " + what);
      // The decode prologue: one token at the last position, q|k|v in one row.
      std::vector<float> qkv = random_floats(static_cast<size_t>((n_head + 2 * n_kv) * hd), rng);
      DeviceBuffer dqkv = upload(qkv), dlast = upload(std::vector<int32_t>{pos.back()});
      decode_qk_prologue(dqkv.as<float>(), n_head, n_kv, hd, nullptr, nullptr, 1e-6f, n_rot, dlast.as<int32_t>(), 1e6f,
                         sc, mode, kc.as<float>(), vc.as<float>(), ctx, s);
      std::vector<float> qk(qkv.begin(), qkv.begin() + (n_head + n_kv) * hd);
      ms::rope_ref(qk.data(), n_head + n_kv, hd, n_rot, pos.back(), 1e6f, sc, mode);
      expect_near_all(download<float>(dqkv.get(), qk.size()), std::vector<double>(qk.begin(), qk.end()), 1e-5, 1e-5,
                      "decode q|k " + what);
    }
}

}  // namespace
}  // namespace ms::cuda::test
