// The gpt-oss forward pass on the CPU, end to end on tiny generated files:
// against a plain reference written here from the architecture's definition
// (llama.cpp's openai-moe graph / transformers' GptOss: biases on q/k/v/o,
// learned sinks in the softmax denominator, a sliding window on the even
// layers, YaRN RoPE, router bias then softmax over the top k, expert biases
// and the clamped SwiGLU); batched prefill against token by token; greedy
// tokens the same however the prompt is batched. The reference is shown to
// tell the window and the sinks apart (turning either off moves its logits by
// far more than the tolerance), so the comparison can fail.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/synthetic_model.h"
#include "format/gguf.h"
#include "model/rope_router.h"
#include "model/tensor_table.h"
#include "model/weights.h"
#include "forward_ref_util.h"  // rel_rms
#include "ref_model.h"  // testref::Mat, load, mul, norm

namespace ms {
namespace {

namespace fs = std::filesystem;
using testref::Mat;
using test::rel_rms;

const std::string& model_path(const std::string& quant) {
  static std::map<std::string, std::string> paths;
  static const fs::path dir = fs::temp_directory_path() / ("moestream_gptoss_fwd_" + std::to_string(::getpid()));
  static struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup;
  if (auto it = paths.find(quant); it != paths.end()) return it->second;
  fs::create_directories(dir);
  ThreadPool pool(2);
  GenOptions o;
  o.arch = "gpt-oss";
  o.quant = quant;
  o.seed = 3;
  o.router_skew = 0.5;
  const std::string p = (dir / (quant + ".gguf")).string();
  generate_model(o, p, pool);
  return paths[quant] = p;
}

// gpt-oss, one token at a time, in double. RoPE angles use the file's YaRN
// (rope_pair_scale and mscale of the loader's RopeScaling, the shared
// definition), everything else is written out here.
struct GptOssRef {
  const ModelConfig& c;
  bool use_window = true, use_sinks = true;
  Mat embd, out_norm, out;
  struct Layer {
    Mat attn_norm, wq, wk, wv, wo, bq, bk, bv, bo, sinks, post_norm, router, router_b;
    std::vector<Mat> eg, eu, ed;
    Mat bg, bu, bd;  // [n_expert] rows
  };
  std::vector<Layer> layers;
  std::vector<std::vector<std::vector<double>>> K, V;
  int64_t pos = 0;

  GptOssRef(const GgufFile& f, const ModelConfig& cfg) : c(cfg) {
    using testref::load;
    embd = load(f, "token_embd.weight");
    out_norm = load(f, "output_norm.weight");
    out = load(f, "output.weight");
    for (int il = 0; il < c.n_layer; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      // Dense tensors by the tensor table's spelling; experts by theirs.
      auto name = [&](TensorView LayerWeights::*field) { return layer_tensor_name(il, field, *c.arch); };
      Layer L;
      L.attn_norm = load(f, name(&LayerWeights::attn_norm));
      L.wq = load(f, name(&LayerWeights::wq));
      L.wk = load(f, name(&LayerWeights::wk));
      L.wv = load(f, name(&LayerWeights::wv));
      L.wo = load(f, name(&LayerWeights::wo));
      L.bq = load(f, name(&LayerWeights::bq));
      L.bk = load(f, name(&LayerWeights::bk));
      L.bv = load(f, name(&LayerWeights::bv));
      L.bo = load(f, name(&LayerWeights::bo));
      L.sinks = load(f, name(&LayerWeights::attn_sinks));
      L.post_norm = load(f, name(&LayerWeights::ffn_norm));
      L.router = load(f, name(&LayerWeights::router));
      L.router_b = load(f, name(&LayerWeights::router_b));
      for (int e = 0; e < c.n_expert; ++e) {
        L.eg.push_back(load(f, b + "ffn_gate_exps.weight", e));
        L.eu.push_back(load(f, b + "ffn_up_exps.weight", e));
        L.ed.push_back(load(f, b + "ffn_down_exps.weight", e));
      }
      L.bg = load(f, b + "ffn_gate_exps.bias");
      L.bu = load(f, b + "ffn_up_exps.bias");
      L.bd = load(f, b + "ffn_down_exps.bias");
      layers.push_back(std::move(L));
    }
    K.assign(static_cast<size_t>(c.n_layer), {});
    V.assign(static_cast<size_t>(c.n_layer), {});
  }

  static void add(std::vector<double>& y, const Mat& b, int64_t row = 0) {
    for (size_t i = 0; i < y.size(); ++i) y[i] += b.w[static_cast<size_t>(row) * y.size() + i];
  }

  void rope(std::vector<double>& x, int heads) const {  // NEOX pairs (i, i + n_rot/2)
    const int hd = c.head_dim, half = c.n_rot / 2;
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < half; ++i) {
        const double ang = static_cast<double>(pos) * rope_pair_scale(c.rope_scaling, i) *
                           std::pow(static_cast<double>(c.rope_base), -2.0 * i / c.n_rot);
        const double cs = std::cos(ang) * c.rope_scaling.mscale, sn = std::sin(ang) * c.rope_scaling.mscale;
        double& a = x[static_cast<size_t>(h * hd + i)];
        double& b = x[static_cast<size_t>(h * hd + i + half)];
        const double x0 = a, x1 = b;
        a = x0 * cs - x1 * sn;
        b = x0 * sn + x1 * cs;
      }
  }

  std::vector<double> step(int32_t token) {
    const int64_t D = c.n_embd;
    const int hd = c.head_dim, nh = c.n_head, nkv = c.n_head_kv;
    std::vector<double> h(embd.w.begin() + token * D, embd.w.begin() + (token + 1) * D);
    for (int il = 0; il < c.n_layer; ++il) {
      const Layer& L = layers[static_cast<size_t>(il)];
      const auto x = testref::norm(h, L.attn_norm, c.rms_eps);
      auto q = testref::mul(L.wq, x), k = testref::mul(L.wk, x), v = testref::mul(L.wv, x);
      add(q, L.bq);
      add(k, L.bk);
      add(v, L.bv);
      rope(q, nh);
      rope(k, nkv);
      K[static_cast<size_t>(il)].push_back(k);
      V[static_cast<size_t>(il)].push_back(v);
      // Keys in (pos - window, pos] on the sliding layers, 0..pos on the others.
      const int64_t first = use_window && c.is_swa(il) ? std::max<int64_t>(0, pos - c.n_swa + 1) : 0;
      std::vector<double> att(static_cast<size_t>(nh) * hd, 0.0);
      for (int hh = 0; hh < nh; ++hh) {
        const int g = hh / (nh / nkv);
        std::vector<double> sc;
        double mx = use_sinks ? L.sinks.w[static_cast<size_t>(hh)] : -1e300;
        for (int64_t j = first; j <= pos; ++j) {
          double d = 0;
          for (int i = 0; i < hd; ++i) d += q[static_cast<size_t>(hh * hd + i)] * K[static_cast<size_t>(il)][static_cast<size_t>(j)][static_cast<size_t>(g * hd + i)];
          sc.push_back(d / std::sqrt(static_cast<double>(hd)));
          mx = std::max(mx, sc.back());
        }
        double sum = use_sinks ? std::exp(L.sinks.w[static_cast<size_t>(hh)] - mx) : 0.0;  // the sink: no value
        for (double& s : sc) sum += (s = std::exp(s - mx));
        for (int64_t j = first; j <= pos; ++j)
          for (int i = 0; i < hd; ++i)
            att[static_cast<size_t>(hh * hd + i)] +=
                sc[static_cast<size_t>(j - first)] / sum * V[static_cast<size_t>(il)][static_cast<size_t>(j)][static_cast<size_t>(g * hd + i)];
      }
      auto o = testref::mul(L.wo, att);
      add(o, L.bo);
      for (int64_t i = 0; i < D; ++i) h[static_cast<size_t>(i)] += o[static_cast<size_t>(i)];

      const auto y = testref::norm(h, L.post_norm, c.rms_eps);
      auto logits = testref::mul(L.router, y);
      add(logits, L.router_b);
      std::vector<int> ids(static_cast<size_t>(c.n_expert));
      for (int e = 0; e < c.n_expert; ++e) ids[static_cast<size_t>(e)] = e;
      std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]; });
      double sum_k = 0;
      const double top = logits[static_cast<size_t>(ids[0])];
      for (int j = 0; j < c.n_expert_used; ++j) sum_k += std::exp(logits[static_cast<size_t>(ids[static_cast<size_t>(j)])] - top);
      for (int j = 0; j < c.n_expert_used; ++j) {
        const int e = ids[static_cast<size_t>(j)];
        const double w = std::exp(logits[static_cast<size_t>(e)] - top) / sum_k;
        auto g = testref::mul(L.eg[static_cast<size_t>(e)], y), u = testref::mul(L.eu[static_cast<size_t>(e)], y);
        add(g, L.bg, e);
        add(u, L.bu, e);
        for (size_t i = 0; i < g.size(); ++i) {
          const double gg = std::min(g[i], 7.0), uu = std::clamp(u[i], -7.0, 7.0);
          g[i] = gg / (1.0 + std::exp(-1.702 * gg)) * (uu + 1.0);
        }
        auto d = testref::mul(L.ed[static_cast<size_t>(e)], g);
        add(d, L.bd, e);
        for (int64_t i = 0; i < D; ++i) h[static_cast<size_t>(i)] += w * d[static_cast<size_t>(i)];
      }
    }
    ++pos;
    return testref::mul(out, testref::norm(h, out_norm, c.rms_eps));
  }
};

std::vector<int32_t> prompt(int n, int64_t n_vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 37 + 11) % n_vocab));
  return t;
}

// 20 tokens: past the window of 8 on layers 0 and 2.
constexpr int kPrompt = 20;

TEST(GptOssForward, MatchesReferenceAcrossTheWindow) {
  auto f = GgufFile::open(model_path("f32"));
  const ModelWeights w = bind_weights(*f);
  ASSERT_EQ(w.cfg.n_swa, 8);
  ThreadPool pool(2);
  CpuBackend be(w, pool);
  KvCache kv = be.make_cache(64, KvType::F32);
  const std::vector<int32_t> toks = prompt(kPrompt, w.cfg.n_vocab);
  std::vector<float> logits;
  be.forward(kv, toks, logits, /*all_logits=*/true);
  GptOssRef ref(*f, w.cfg), no_window(*f, w.cfg), no_sinks(*f, w.cfg);
  no_window.use_window = false;
  no_sinks.use_sinks = false;
  double worst = 0, window_effect = 0, sink_effect = 0;
  for (int t = 0; t < kPrompt; ++t) {
    const auto r = ref.step(toks[static_cast<size_t>(t)]);
    worst = std::max(worst, rel_rms(logits.data() + t * w.cfg.n_vocab, r));
    window_effect = std::max(window_effect, rel_rms(no_window.step(toks[static_cast<size_t>(t)]), r));
    sink_effect = std::max(sink_effect, rel_rms(no_sinks.step(toks[static_cast<size_t>(t)]), r));
  }
  EXPECT_LT(worst, 2e-4);  // f32 weights, f32 cache: float against double
  // The reference tells both features apart by far more than the tolerance.
  EXPECT_GT(window_effect, 50 * 2e-4);
  EXPECT_GT(sink_effect, 50 * 2e-4);
}

TEST(GptOssForward, PublishedTypesTrackTheReference) {
  // mxfp4 experts, q8_0 attention (the published mix), default f16 cache:
  // activations are rounded to 8 bits for the integer dots.
  auto f = GgufFile::open(model_path("mxfp4_moe"));
  const ModelWeights w = bind_weights(*f);
  ThreadPool pool(2);
  CpuBackend be(w, pool);
  KvCache kv = be.make_cache(64);
  const std::vector<int32_t> toks = prompt(kPrompt, w.cfg.n_vocab);
  std::vector<float> logits;
  be.forward(kv, toks, logits, true);
  GptOssRef ref(*f, w.cfg);
  for (int t = 0; t < kPrompt; ++t)
    EXPECT_LT(rel_rms(logits.data() + t * w.cfg.n_vocab, ref.step(toks[static_cast<size_t>(t)])), 5e-2) << t;
}

TEST(GptOssForward, BatchedPrefillEqualsTokenByTokenAndGreedyIsStable) {
  auto f = GgufFile::open(model_path("mxfp4_moe"));
  const ModelWeights w = bind_weights(*f);
  ThreadPool pool(2);
  const std::vector<int32_t> toks = prompt(kPrompt, w.cfg.n_vocab);
  const int64_t V = w.cfg.n_vocab;
  auto greedy = [&](int max_batch, std::vector<float>& last_logits) {
    CpuBackend::Options o;
    o.max_batch = max_batch;
    CpuBackend be(w, pool, o);
    KvCache kv = be.make_cache(64);
    std::vector<float> logits;
    be.forward(kv, toks, logits);
    last_logits = logits;
    std::vector<int32_t> out;
    for (int i = 0; i < 12; ++i) {  // decode past the window again
      const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
      out.push_back(next);
      be.forward(kv, std::vector<int32_t>{next}, logits);
    }
    return out;
  };
  std::vector<float> a, b, c;
  const auto one = greedy(1, a), five = greedy(5, b), all = greedy(256, c);
  EXPECT_EQ(one, all);
  EXPECT_EQ(five, all);
  for (int64_t i = 0; i < V; ++i) {
    EXPECT_NEAR(a[static_cast<size_t>(i)], c[static_cast<size_t>(i)], 1e-3f * (1.0f + std::fabs(c[static_cast<size_t>(i)])));
    EXPECT_NEAR(b[static_cast<size_t>(i)], c[static_cast<size_t>(i)], 1e-3f * (1.0f + std::fabs(c[static_cast<size_t>(i)])));
  }
}

}  // namespace
}  // namespace ms
