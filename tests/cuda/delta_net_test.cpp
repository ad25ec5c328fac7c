// The Gated DeltaNet kernels of src/cuda/delta_net.h against the CPU's scalar
// references (src/cpu/delta_net.h) on random inputs: the conv with its window
// (several calls carrying it), q/k preparation, the gates, the recurrence
// over prompts of 1, 63, 64, 65 tokens with a carried state, the gated norm;
// the chunked prompt form (delta_rule_chunked) against the reference and the
// token-by-token kernel over prompts across its chunk edges (1 .. 4097 tokens,
// one sequence whose state carries from call to call), in both precisions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cpu/delta_net.h"
#include "cuda/delta_net.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

double max_rel(const std::vector<float>& got, const std::vector<float>& want) {
  double mx = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    mx = std::max(mx, static_cast<double>(std::fabs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return mx / scale;
}

const ms::DeltaNetShape kShapes[] = {{2, 4, 32, 32}, {16, 32, 128, 128}, {1, 3, 40, 8}};

TEST(CudaDeltaNet, ConvCarriesItsWindowLikeTheReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(3);
  Stream s;
  const int64_t C = 300;
  for (int taps : {2, 4, 5, 16}) {
    const auto w = random_floats(static_cast<size_t>(C * taps), rng);
    auto win = random_floats(static_cast<size_t>((taps - 1) * C), rng);
    DeviceBuffer dw = upload(w), dwin = upload(win);
    // Calls in a row: the window carries over; lengths below the window,
    // across the kernel's 16-token runs and over several of them.
    for (int n : {1, 2, 17, 1, 15, 16, 33, 3, 300}) {
      const auto x = random_floats(static_cast<size_t>(n * C), rng, -2.f, 2.f);
      std::vector<float> want(static_cast<size_t>(n * C));
      ms::conv1d_silu_ref(x.data(), C, n, C, w.data(), taps, win.data(), want.data());
      DeviceBuffer dx = upload(x), out = poisoned(want.size());
      conv1d_silu(dx.as<float>(), C, n, C, dw.as<float>(), taps, dwin.as<float>(), out.as<float>(), s);
      EXPECT_LT(max_rel(download<float>(out.get(), want.size()), want), 1e-5) << taps << " " << n;
      EXPECT_LT(max_rel(download<float>(dwin.get(), win.size()), win), 1e-6) << "window " << taps << " " << n;
    }
  }
}

// The kernel splits a prompt over threads by token runs: one call over n
// tokens and the same tokens in several calls (the window carried between
// them) give the same bits, outputs and window, at a wide layer's channel count.
TEST(CudaDeltaNet, ConvDoesNotDependOnHowThePromptIsSplit) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(5);
  Stream s;
  const int64_t C = 1000, ld = 1032;  // x rows wider than the channels, as the layer's qkv
  const int n = 211;
  for (int taps : {3, 4, 9}) {
    const auto w = random_floats(static_cast<size_t>(C * taps), rng);
    const auto win0 = random_floats(static_cast<size_t>((taps - 1) * C), rng);
    const auto x = random_floats(static_cast<size_t>(n * ld), rng, -2.f, 2.f);
    DeviceBuffer dw = upload(w), dx = upload(x);
    DeviceBuffer win_one = upload(win0), out_one = poisoned(static_cast<size_t>(n * C));
    conv1d_silu(dx.as<float>(), ld, n, C, dw.as<float>(), taps, win_one.as<float>(), out_one.as<float>(), s);
    DeviceBuffer win_parts = upload(win0), out_parts = poisoned(static_cast<size_t>(n * C));
    int t = 0;
    for (int part : {1, 5, 16, 40, 149}) {
      conv1d_silu(dx.as<float>() + t * ld, ld, part, C, dw.as<float>(), taps, win_parts.as<float>(),
                  out_parts.as<float>() + t * C, s);
      t += part;
    }
    ASSERT_EQ(t, n);
    const auto a = download<float>(out_one.get(), static_cast<size_t>(n * C));
    const auto b = download<float>(out_parts.get(), a.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "taps " << taps << " element " << i;
    EXPECT_EQ(download<float>(win_one.get(), win0.size()), download<float>(win_parts.get(), win0.size()))
        << "window, taps " << taps;
    // The window holds the last taps - 1 inputs.
    const auto got_win = download<float>(win_one.get(), win0.size());
    for (int j = 0; j < taps - 1; ++j)
      for (int64_t c = 0; c < C; ++c)
        ASSERT_EQ(got_win[j * C + c], x[(n - (taps - 1) + j) * ld + c]) << "taps " << taps << " slot " << j;
  }
}

TEST(CudaDeltaNet, PrepareGatesAndGatedNormMatchReferences) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(4);
  Stream s;
  for (const ms::DeltaNetShape& sh : kShapes) {
    const int n = 5;
    const auto qkv = random_floats(static_cast<size_t>(n * sh.conv_dim()), rng, -2.f, 2.f);
    auto want = qkv;
    for (int t = 0; t < n; ++t) {
      float* row = want.data() + t * sh.conv_dim();
      for (int h = 0; h < sh.n_k_heads; ++h) {
        ms::l2norm_scale_ref(row + h * sh.head_k, sh.head_k, 1e-6f, 1.0f / std::sqrt(float(sh.head_k)));
        ms::l2norm_scale_ref(row + sh.key_dim() + h * sh.head_k, sh.head_k, 1e-6f, 1.0f);
      }
    }
    DeviceBuffer d = upload(qkv);
    delta_prepare_qk(d.as<float>(), sh.conv_dim(), n, sh, 1e-6f, s);
    EXPECT_LT(max_rel(download<float>(d.get(), qkv.size()), want), 1e-5);

    const int nv = sh.n_v_heads;
    const auto a = random_floats(static_cast<size_t>(n * nv), rng, -4.f, 4.f), b = random_floats(a.size(), rng, -4.f, 4.f);
    const auto A = random_floats(static_cast<size_t>(nv), rng, -4.f, -0.05f), dt = random_floats(A.size(), rng);
    std::vector<float> gw(a.size()), bw(a.size());
    for (int t = 0; t < n; ++t)
      ms::delta_gates_ref(a.data() + t * nv, b.data() + t * nv, A.data(), dt.data(), nv, gw.data() + t * nv,
                          bw.data() + t * nv);
    DeviceBuffer da = upload(a), db = upload(b), dA = upload(A), ddt = upload(dt), g = poisoned(a.size()),
                 be = poisoned(a.size());
    delta_gates(da.as<float>(), db.as<float>(), dA.as<float>(), ddt.as<float>(), n, nv, g.as<float>(), be.as<float>(), s);
    EXPECT_LT(max_rel(download<float>(g.get(), a.size()), gw), 1e-5);
    EXPECT_LT(max_rel(download<float>(be.get(), a.size()), bw), 1e-5);

    const int64_t rows = int64_t{n} * nv;
    const auto x = random_floats(static_cast<size_t>(rows * sh.head_v), rng, -3.f, 3.f);
    const auto z = random_floats(x.size(), rng, -3.f, 3.f), wn = random_floats(static_cast<size_t>(sh.head_v), rng, 0.5f, 1.5f);
    std::vector<float> nw(x.size());
    for (int64_t r = 0; r < rows; ++r)
      ms::gated_rmsnorm_ref(x.data() + r * sh.head_v, z.data() + r * sh.head_v, wn.data(), nw.data() + r * sh.head_v,
                            sh.head_v, 1e-6f);
    DeviceBuffer dx = upload(x), dz = upload(z), dwn = upload(wn), o = poisoned(x.size());
    gated_rmsnorm(dx.as<float>(), dz.as<float>(), dwn.as<float>(), o.as<float>(), rows, sh.head_v, 1e-6f, s);
    EXPECT_LT(max_rel(download<float>(o.get(), x.size()), nw), 1e-5);
  }
}

TEST(CudaDeltaNet, RecurrenceMatchesReferenceAcrossChunkEdges) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(5);
  Stream s;
  for (const ms::DeltaNetShape& sh : kShapes) {
    auto S = random_floats(static_cast<size_t>(sh.state_elems()), rng, -0.3f, 0.3f);
    DeviceBuffer dS = upload(S);
    for (int n : {1, 63, 64, 65}) {  // one sequence: the state carries from call to call
      auto qkv = random_floats(static_cast<size_t>(n * sh.conv_dim()), rng, -1.f, 1.f);
      for (int t = 0; t < n; ++t) ms::delta_prepare_qk(sh, qkv.data() + t * sh.conv_dim(), 1e-6f);
      const auto g = random_floats(static_cast<size_t>(n * sh.n_v_heads), rng, -3.f, 0.f);
      const auto beta = random_floats(g.size(), rng, 0.f, 1.f);
      std::vector<float> want(static_cast<size_t>(n * sh.value_dim()));
      ms::delta_rule_ref(sh, qkv.data(), sh.conv_dim(), g.data(), beta.data(), n, S.data(), want.data());
      DeviceBuffer dq = upload(qkv), dg = upload(g), db = upload(beta), out = poisoned(want.size());
      delta_rule(dq.as<float>(), sh.conv_dim(), dg.as<float>(), db.as<float>(), n, sh, dS.as<float>(), out.as<float>(), s);
      EXPECT_LT(max_rel(download<float>(out.get(), want.size()), want), 2e-5) << sh.head_k << " n " << n;
      EXPECT_LT(max_rel(download<float>(dS.get(), S.size()), S), 2e-5) << sh.head_k << " n " << n;
    }
  }
}

// One prompt's inputs as the delta rule sees them: prepared q/k/v rows, the
// log decays (g in [-decay_hi, 0]) and the write strengths.
struct Prompt {
  std::vector<float> qkv, g, beta;
};

Prompt random_prompt(const ms::DeltaNetShape& sh, int n, float decay_hi, std::mt19937& rng) {
  Prompt p;
  p.qkv = random_floats(static_cast<size_t>(n * sh.conv_dim()), rng, -1.f, 1.f);
  for (int t = 0; t < n; ++t) ms::delta_prepare_qk(sh, p.qkv.data() + t * sh.conv_dim(), 1e-6f);
  p.g = random_floats(static_cast<size_t>(n * sh.n_v_heads), rng, -decay_hi, 0.f);
  p.beta = random_floats(p.g.size(), rng, 0.f, 1.f);
  return p;
}

// Value heads sharing key heads (2:1, 2:1 with Qwen3.6-35B-A3B's 128-wide
// heads, 3:1 with narrow odd heads), one value head per key head, and
// head widths that are not multiples of the kernel's tiles (48 keys, 80
// values: a partial slice of state rows).
// The chunked kernel needs tf32 tensor cores (code built for sm_80 or newer).
#define MS_REQUIRE_CHUNKED()                                                                     \
  do {                                                                                           \
    if (!delta_rule_chunked_supported({2, 4, 32, 32}))                                           \
      GTEST_SKIP() << "the chunked delta rule needs tf32 tensor cores (sm_80+ code): skipped"; \
  } while (0)

const ms::DeltaNetShape kChunkedShapes[] = {{2, 4, 32, 32}, {16, 32, 128, 128}, {1, 3, 40, 8}, {4, 4, 64, 64},
                                            {2, 2, 48, 80}};

// The chunked form over one sequence of prompts of 1 .. 4097 tokens (chunk
// edges at 64: 63, 64, 65; several chunks; a partial last chunk), from a
// nonzero state: every output and the state after each prompt equal the
// double-precision reference (while it is affordable: up to 1000-token
// prompts at the largest shape) and always the token-by-token kernel run
// beside it. Strong decays (cumulative decays underflow within a chunk) and
// weak ones (the state carries across chunks for long).
TEST(CudaDeltaNet, ChunkedMatchesReferenceAndTokenByToken) {
  MS_REQUIRE_GPU();
  MS_REQUIRE_CHUNKED();
  std::mt19937 rng(11);
  Stream s;
  for (const ms::DeltaNetShape& sh : kChunkedShapes) {
    ASSERT_TRUE(delta_rule_chunked_supported(sh)) << sh.head_k;
    for (float decay_hi : {3.f, 0.1f}) {
      auto S = random_floats(static_cast<size_t>(sh.state_elems()), rng, -0.3f, 0.3f);
      DeviceBuffer dS_tok = upload(S), dS_ch = upload(S);
      bool ref_valid = true;  // the reference state still follows the sequence
      for (int n : {1, 63, 64, 65, 200, 1000, 4097}) {
        const Prompt p = random_prompt(sh, n, decay_hi, rng);
        const size_t outs = static_cast<size_t>(n) * sh.value_dim();
        DeviceBuffer dq = upload(p.qkv), dg = upload(p.g), db = upload(p.beta);
        DeviceBuffer o_tok = poisoned(outs), o_ch = poisoned(outs);
        delta_rule(dq.as<float>(), sh.conv_dim(), dg.as<float>(), db.as<float>(), n, sh, dS_tok.as<float>(),
                   o_tok.as<float>(), s);
        delta_rule_chunked(dq.as<float>(), sh.conv_dim(), dg.as<float>(), db.as<float>(), n, sh, dS_ch.as<float>(),
                           o_ch.as<float>(), s);
        const auto got = download<float>(o_ch.get(), outs), tok = download<float>(o_tok.get(), outs);
        const auto S_ch = download<float>(dS_ch.get(), S.size()), S_tok = download<float>(dS_tok.get(), S.size());
        const double e_tok = max_rel(got, tok), es_tok = max_rel(S_ch, S_tok);
        double e_ref = -1, es_ref = -1;
        ref_valid = ref_valid && static_cast<int64_t>(n) * sh.state_elems() <= int64_t{1000} * 32 * 128 * 128;
        if (ref_valid) {
          std::vector<float> want(outs);
          ms::delta_rule_ref(sh, p.qkv.data(), sh.conv_dim(), p.g.data(), p.beta.data(), n, S.data(), want.data());
          e_ref = max_rel(got, want);
          es_ref = max_rel(S_ch, S);
          EXPECT_LT(e_ref, 1e-4) << sh.head_k << "/" << sh.head_v << " n " << n << " decay " << decay_hi;
          EXPECT_LT(es_ref, 1e-4) << "state " << sh.head_k << "/" << sh.head_v << " n " << n;
        }
        std::printf("[ delta chunked %d:%d heads %d/%d, g >= -%.1f ] n %4d: vs token-by-token %.2e (state %.2e), "
                    "vs reference %.2e (state %.2e)\n",
                    sh.n_v_heads, sh.n_k_heads, sh.head_k, sh.head_v, decay_hi, n, e_tok, es_tok, e_ref, es_ref);
        EXPECT_LT(e_tok, 1e-4) << sh.head_k << "/" << sh.head_v << " n " << n << " decay " << decay_hi;
        EXPECT_LT(es_tok, 1e-4) << "state " << sh.head_k << "/" << sh.head_v << " n " << n;
      }
    }
  }
}

// Plain tf32 operands: within tf32's rounding of the reference (about 1e-3),
// not f32's; a wrong formula is off by O(1).
TEST(CudaDeltaNet, ChunkedTf32IsWithinItsRounding) {
  MS_REQUIRE_GPU();
  MS_REQUIRE_CHUNKED();
  std::mt19937 rng(12);
  Stream s;
  for (const ms::DeltaNetShape& sh : {ms::DeltaNetShape{2, 4, 32, 32}, ms::DeltaNetShape{16, 32, 128, 128}}) {
    auto S = random_floats(static_cast<size_t>(sh.state_elems()), rng, -0.3f, 0.3f);
    DeviceBuffer dS = upload(S);
    for (int n : {65, 300}) {
      const Prompt p = random_prompt(sh, n, 0.5f, rng);
      const size_t outs = static_cast<size_t>(n) * sh.value_dim();
      std::vector<float> want(outs);
      ms::delta_rule_ref(sh, p.qkv.data(), sh.conv_dim(), p.g.data(), p.beta.data(), n, S.data(), want.data());
      DeviceBuffer dq = upload(p.qkv), dg = upload(p.g), db = upload(p.beta), o = poisoned(outs);
      delta_rule_chunked(dq.as<float>(), sh.conv_dim(), dg.as<float>(), db.as<float>(), n, sh, dS.as<float>(),
                         o.as<float>(), s, DeltaPrecision::kTf32);
      const double e = max_rel(download<float>(o.get(), outs), want);
      const double es = max_rel(download<float>(dS.get(), S.size()), S);
      std::printf("[ delta chunked tf32 heads %d/%d ] n %d: vs reference %.2e (state %.2e)\n", sh.head_k, sh.head_v,
                  n, e, es);
      EXPECT_LT(e, 1e-2) << sh.head_k << " n " << n;
      EXPECT_LT(es, 1e-2) << sh.head_k << " n " << n;
    }
  }
}

// What the layer calls: either side of kDeltaChunkedMinTokens, the reference's
// outputs and state (a prompt, then a decode step continuing from its state);
// where the chunked kernel cannot run, the token-by-token one does it all.
TEST(CudaDeltaNet, PromptDispatchMatchesReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(13);
  Stream s;
  const ms::DeltaNetShape sh{2, 4, 32, 32};
  auto S = random_floats(static_cast<size_t>(sh.state_elems()), rng, -0.3f, 0.3f);
  DeviceBuffer dS = upload(S);
  for (int n : {kDeltaChunkedMinTokens - 1, kDeltaChunkedMinTokens, 1, 2 * kDeltaChunkedMinTokens + 3, 1}) {
    if (n < 1) continue;
    const Prompt p = random_prompt(sh, n, 1.f, rng);
    const size_t outs = static_cast<size_t>(n) * sh.value_dim();
    std::vector<float> want(outs);
    ms::delta_rule_ref(sh, p.qkv.data(), sh.conv_dim(), p.g.data(), p.beta.data(), n, S.data(), want.data());
    DeviceBuffer dq = upload(p.qkv), dg = upload(p.g), db = upload(p.beta), o = poisoned(outs);
    delta_rule_prompt(dq.as<float>(), sh.conv_dim(), dg.as<float>(), db.as<float>(), n, sh, dS.as<float>(),
                      o.as<float>(), s);
    EXPECT_LT(max_rel(download<float>(o.get(), outs), want), 1e-4) << n;
    EXPECT_LT(max_rel(download<float>(dS.get(), S.size()), S), 1e-4) << n;
  }
  // A head too wide for the chunked kernel's tiles falls back to the token-by-token kernel.
  const ms::DeltaNetShape wide{1, 1, 256, 4};
  EXPECT_FALSE(delta_rule_chunked_supported(wide));
  const Prompt p = random_prompt(wide, 70, 1.f, rng);
  auto Sw = random_floats(static_cast<size_t>(wide.state_elems()), rng, -0.3f, 0.3f);
  std::vector<float> want(static_cast<size_t>(70) * wide.value_dim());
  DeviceBuffer dSw = upload(Sw), dq = upload(p.qkv), dg = upload(p.g), db = upload(p.beta), o = poisoned(want.size());
  ms::delta_rule_ref(wide, p.qkv.data(), wide.conv_dim(), p.g.data(), p.beta.data(), 70, Sw.data(), want.data());
  delta_rule_prompt(dq.as<float>(), wide.conv_dim(), dg.as<float>(), db.as<float>(), 70, wide, dSw.as<float>(),
                    o.as<float>(), s);
  EXPECT_LT(max_rel(download<float>(o.get(), want.size()), want), 1e-4);
}

TEST(CudaDeltaNet, UnsupportedShapesAreErrors) {
  MS_REQUIRE_GPU();
  Stream s;
  EXPECT_THROW(delta_rule(nullptr, 1, nullptr, nullptr, 1, {1, 1, 512, 4}, nullptr, nullptr, s), Error);
  EXPECT_THROW(delta_rule_chunked(nullptr, 1, nullptr, nullptr, 64, {1, 1, 256, 4}, nullptr, nullptr, s), Error);
  EXPECT_THROW(delta_rule_chunked(nullptr, 1, nullptr, nullptr, 64, {2, 3, 32, 32}, nullptr, nullptr, s), Error);
  EXPECT_THROW(conv1d_silu(nullptr, 1, 1, 1, nullptr, 17, nullptr, nullptr, s), Error);
}

}  // namespace
}  // namespace ms::cuda::test
