// The Gated DeltaNet ops of src/cpu/delta_net.h: each fast version against
// its scalar reference on random inputs, the chunked prompt form against the
// token-by-token recurrence (chunk edges, carried state, strong and weak
// decay), and the references against facts computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/delta_net.h"
#include "cpu/thread_pool.h"
#include "util/error.h"

namespace ms {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Largest |a - b| relative to the largest |b| (outputs of the delta rule are
// O(1); a relative-to-max bound does not blow up on values near zero).
double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double mx = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    mx = std::max(mx, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return mx / scale;
}

// A random sequence as the delta rule sees it: prepared q/k/v rows, decays
// (log space, <= 0) and write strengths.
struct Seq {
  DeltaNetShape s;
  int n;
  std::vector<float> qkv, g, beta;
};

Seq make_seq(const DeltaNetShape& s, int n, uint32_t seed, float decay_mean) {
  Seq q{s, n, random_vec(static_cast<size_t>(n * s.conv_dim()), seed), {}, {}};
  for (int t = 0; t < n; ++t) delta_prepare_qk(s, q.qkv.data() + t * s.conv_dim(), 1e-6f);
  std::mt19937 rng(seed + 1);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int i = 0; i < n * s.n_v_heads; ++i) {
    q.g.push_back(-decay_mean * 2.0f * u(rng));
    q.beta.push_back(u(rng));
  }
  return q;
}

const DeltaNetShape kShape{2, 4, 16, 8};  // 2 key heads, 4 value heads (2 per key head)

TEST(DeltaNet, ConvMatchesReferenceAndCarriesItsWindow) {
  ThreadPool pool(2);
  const int64_t C = 37;
  for (int taps : {2, 4}) {
    const auto w = random_vec(static_cast<size_t>(C * taps), 3, 0.5f);
    for (int n : {1, 2, 5, 17}) {
      const auto x = random_vec(static_cast<size_t>(n * C), 10 + n);
      auto win_ref = random_vec(static_cast<size_t>((taps - 1) * C), 20 + n), win_fast = win_ref;
      std::vector<float> ref(n * C), fast(n * C);
      conv1d_silu_ref(x.data(), C, n, C, w.data(), taps, win_ref.data(), ref.data());
      conv1d_silu(x.data(), C, n, C, w.data(), taps, win_fast.data(), fast.data());
      EXPECT_LT(max_rel(fast, ref), 1e-6) << taps << " " << n;
      EXPECT_EQ(win_fast, win_ref) << "windows hold the same inputs";
      // Token by token from the same start gives the same outputs and window.
      auto win_step = random_vec(static_cast<size_t>((taps - 1) * C), 20 + n);
      std::vector<float> step(n * C);
      for (int t = 0; t < n; ++t)
        conv1d_silu(x.data() + t * C, C, 1, C, w.data(), taps, win_step.data(), step.data() + t * C);
      EXPECT_LT(max_rel(step, ref), 1e-6) << taps << " " << n;
      EXPECT_EQ(win_step, win_ref);
    }
  }
}

TEST(DeltaNet, ConvReferenceByHand) {
  // One channel, 3 taps, window {1, 2}, inputs {3, 4}: outputs silu(w . [1 2 3]) and silu(w . [2 3 4]).
  const float w[3] = {0.5f, -1.0f, 2.0f};
  float window[2] = {1, 2};
  const float x[2] = {3, 4};
  float out[2];
  conv1d_silu_ref(x, 1, 2, 1, w, 3, window, out);
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  EXPECT_NEAR(out[0], silu(0.5 - 2 + 6), 1e-6);
  EXPECT_NEAR(out[1], silu(1 - 3 + 8), 1e-6);
  EXPECT_EQ(window[0], 3);
  EXPECT_EQ(window[1], 4);
}

TEST(DeltaNet, SmallOpsMatchReferences) {
  for (int64_t n : {1, 7, 128, 131}) {
    auto x = random_vec(n, 1 + n, 2.0f), ref = x;
    l2norm_scale_ref(ref.data(), n, 1e-6f, 0.25f);
    l2norm_scale(x.data(), n, 1e-6f, 0.25f);
    EXPECT_LT(max_rel(x, ref), 1e-6) << n;
    double ss = 0;
    for (float v : ref) ss += double(v) * v;
    EXPECT_NEAR(std::sqrt(ss), 0.25, 1e-5) << "unit length, then scaled";

    const auto z = random_vec(n, 5 + n), w = random_vec(n, 6 + n, 1.0f, 1.0f), y = random_vec(n, 7 + n, 3.0f);
    std::vector<float> gr(n), gf(n);
    gated_rmsnorm_ref(y.data(), z.data(), w.data(), gr.data(), n, 1e-6f);
    gated_rmsnorm(y.data(), z.data(), w.data(), gf.data(), n, 1e-6f);
    EXPECT_LT(max_rel(gf, gr), 1e-5) << n;
  }
  const int nv = 9;
  const auto a = random_vec(nv, 1, 3.0f), b = random_vec(nv, 2, 3.0f), dt = random_vec(nv, 3);
  std::vector<float> A(nv);
  for (int h = 0; h < nv; ++h) A[h] = -0.5f - h;
  std::vector<float> gr(nv), br(nv), gf(nv), bf(nv);
  delta_gates_ref(a.data(), b.data(), A.data(), dt.data(), nv, gr.data(), br.data());
  delta_gates(a.data(), b.data(), A.data(), dt.data(), nv, gf.data(), bf.data());
  EXPECT_LT(max_rel(gf, gr), 1e-6);
  EXPECT_LT(max_rel(bf, br), 1e-6);
  for (int h = 0; h < nv; ++h) {
    EXPECT_LT(gr[h], 0) << "a decay, in log space";
    EXPECT_NEAR(gr[h], A[h] * std::log1p(std::exp(double(a[h]) + dt[h])), 1e-5);
    EXPECT_NEAR(br[h], 1 / (1 + std::exp(-double(b[h]))), 1e-6);
  }
}

TEST(DeltaNet, RecurrenceByHand) {
  // One head of 1/1: S = e^g S + beta (v - e^g S k) k, o = S q.
  const DeltaNetShape s{1, 1, 1, 1};
  const float qkv[2][3] = {{0.5f, 1.0f, 2.0f}, {1.0f, 1.0f, -1.0f}};
  const float g[2] = {0.0f, std::log(0.5f)}, beta[2] = {0.5f, 1.0f};
  float S = 0, out[2];
  delta_rule_ref(s, &qkv[0][0], 3, g, beta, 2, &S, out);
  // t0: S = 0.5 * 2 * 1 = 1, o = 0.5. t1: S = 0.5 + 1 * (-1 - 0.5) = -1, o = -1.
  EXPECT_NEAR(out[0], 0.5, 1e-7);
  EXPECT_NEAR(out[1], -1.0, 1e-7);
  EXPECT_NEAR(S, -1.0, 1e-7);
}

TEST(DeltaNet, ValueHeadsReadKeyHeadsTiled) {
  // Value head j reads key head j % n_k: with key head 1's q and k zero,
  // heads 1 and 3 output zero and heads 0 and 2 do not.
  const DeltaNetShape s{2, 4, 4, 2};
  Seq q = make_seq(s, 3, 9, 0.5f);
  for (int t = 0; t < 3; ++t) {
    float* row = q.qkv.data() + t * s.conv_dim();
    for (int x = 0; x < 4; ++x) row[4 + x] = row[s.key_dim() + 4 + x] = 0;
  }
  std::vector<float> S(s.state_elems(), 0.0f), out(3 * s.value_dim());
  delta_rule_ref(s, q.qkv.data(), s.conv_dim(), q.g.data(), q.beta.data(), 3, S.data(), out.data());
  for (int t = 0; t < 3; ++t)
    for (int h = 0; h < 4; ++h)
      for (int c = 0; c < 2; ++c) {
        const float o = out[t * s.value_dim() + h * 2 + c];
        if (h % 2 == 1) EXPECT_EQ(o, 0.0f) << t << " " << h;
        else EXPECT_NE(o, 0.0f) << t << " " << h;
      }
}

TEST(DeltaNet, RecurrentMatchesReference) {
  ThreadPool pool(2);
  for (const DeltaNetShape& s : {kShape, DeltaNetShape{2, 4, 128, 128}, DeltaNetShape{1, 3, 37, 5}}) {
    const int n = 9;
    Seq q = make_seq(s, n, 11, 0.3f);
    auto S0 = random_vec(static_cast<size_t>(s.state_elems()), 12, 0.3f);
    auto Sr = S0, Sf = S0;
    std::vector<float> ref(n * s.value_dim()), fast(n * s.value_dim());
    delta_rule_ref(s, q.qkv.data(), s.conv_dim(), q.g.data(), q.beta.data(), n, Sr.data(), ref.data());
    delta_rule_recurrent(&pool, s, q.qkv.data(), s.conv_dim(), q.g.data(), q.beta.data(), n, Sf.data(), fast.data());
    EXPECT_LT(max_rel(fast, ref), 1e-5) << s.head_k;
    EXPECT_LT(max_rel(Sf, Sr), 1e-5) << s.head_k;
  }
}

// The chunked form equals the recurrence at the chunk edges and beyond, with
// a state carried in, and for decays from none to strong (where exp of the
// cumulative decay underflows within a chunk).
TEST(DeltaNet, ChunkedMatchesTokenByToken) {
  ThreadPool pool(2);
  for (float decay : {0.0f, 0.2f, 8.0f})
    for (int n : {1, 2, 63, 64, 65, 130}) {
      Seq q = make_seq(kShape, n, 100 + n, decay);
      const auto S0 = random_vec(static_cast<size_t>(kShape.state_elems()), 7, 0.2f);
      auto Sr = S0, Sc = S0;
      std::vector<float> ref(n * kShape.value_dim()), ch(n * kShape.value_dim());
      delta_rule_ref(kShape, q.qkv.data(), kShape.conv_dim(), q.g.data(), q.beta.data(), n, Sr.data(), ref.data());
      delta_rule_chunked(&pool, kShape, q.qkv.data(), kShape.conv_dim(), q.g.data(), q.beta.data(), n, Sc.data(),
                         ch.data());
      EXPECT_LT(max_rel(ch, ref), 2e-5) << "decay " << decay << " n " << n;
      EXPECT_LT(max_rel(Sc, Sr), 2e-5) << "decay " << decay << " n " << n;
    }
}

TEST(DeltaNet, ChunkSizeDoesNotChangeResults) {
  const int n = 50;
  Seq q = make_seq(kShape, n, 5, 0.3f);
  std::vector<float> S1(kShape.state_elems(), 0.0f), ref(n * kShape.value_dim());
  delta_rule_chunked(nullptr, kShape, q.qkv.data(), kShape.conv_dim(), q.g.data(), q.beta.data(), n, S1.data(),
                     ref.data(), 1);
  for (int chunk : {3, 16, 49, 64}) {
    std::vector<float> S(kShape.state_elems(), 0.0f), out(n * kShape.value_dim());
    delta_rule_chunked(nullptr, kShape, q.qkv.data(), kShape.conv_dim(), q.g.data(), q.beta.data(), n, S.data(),
                       out.data(), chunk);
    EXPECT_LT(max_rel(out, ref), 2e-5) << chunk;
    EXPECT_LT(max_rel(S, S1), 2e-5) << chunk;
  }
}

TEST(DeltaNet, StateCarriedAcrossCallsEqualsOneCall) {
  // A prompt in pieces (63 + 1 + 2 + 64 tokens, the engine's prompt and
  // decode steps) ends in the state and outputs of one pass.
  ThreadPool pool(2);
  const int n = 130;
  Seq q = make_seq(kShape, n, 77, 0.2f);
  std::vector<float> Sone(kShape.state_elems(), 0.0f), one(n * kShape.value_dim());
  delta_rule_ref(kShape, q.qkv.data(), kShape.conv_dim(), q.g.data(), q.beta.data(), n, Sone.data(), one.data());
  std::vector<float> S(kShape.state_elems(), 0.0f), out(n * kShape.value_dim());
  int t0 = 0;
  for (int piece : {63, 1, 2, 64}) {
    delta_rule(&pool, kShape, q.qkv.data() + t0 * kShape.conv_dim(), kShape.conv_dim(),
               q.g.data() + t0 * kShape.n_v_heads, q.beta.data() + t0 * kShape.n_v_heads, piece, S.data(),
               out.data() + t0 * kShape.value_dim());
    t0 += piece;
  }
  EXPECT_LT(max_rel(out, one), 2e-5);
  EXPECT_LT(max_rel(S, Sone), 2e-5);
}

TEST(DeltaNet, BadShapeIsAnError) {
  std::vector<float> S(64), out(64), qkv(64), g(8), b(8);
  EXPECT_THROW(delta_rule_ref({3, 4, 2, 2}, qkv.data(), 8, g.data(), b.data(), 1, S.data(), out.data()), Error);
  EXPECT_THROW(delta_rule_chunked(nullptr, {1, 1, 2, 2}, qkv.data(), 6, g.data(), b.data(), 1, S.data(), out.data(), 0),
               Error);
}

}  // namespace
}  // namespace ms
