// The DFlash drafter (model/dflash_weights.h, engine/dflash_forward.h,
// engine/speculative_dflash.h) on the tiny targets: the gen file binds and
// fits both tiny targets; missing, ill-shaped and unsupported tensors and
// keys are errors naming them, corrupted headers never crash; the CPU
// backend's layer inputs against the float64 reference target; the
// drafter's forward against a straightforward float64 implementation of the
// equations written here (non-causal, causal, shared K/V); greedy output
// with --spec dflash identical to plain decoding for K = 1..8 on qwen3moe
// and qwen35moe (and with a replayed rollback); the drafter following the target back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/dflash_forward.h"
#include "engine/generate.h"
#include "engine/loaded_model.h"
#include "engine/speculative.h"
#include "engine/speculative_dflash.h"
#include "format/gguf.h"
#include "forward_ref_util.h"
#include "model/dflash_weights.h"
#include "ref_model.h"
#include "tiny_gguf.h"
#include "util/error.h"

namespace ms {
namespace {

using test::rel_rms;

const std::string& tiny_dflash() { return test::tiny_gguf("dflash", "f32", 7); }

struct Drafter {
  std::unique_ptr<GgufFile> f = GgufFile::open(tiny_dflash());
  DFlashWeights w = bind_dflash(*f);
};

TEST(DFlashLoad, TinyFileBindsAndFitsTheTinyTargets) {
  Drafter d;
  const DFlashConfig& c = d.w.cfg;
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_embd, 256);
  EXPECT_EQ(c.block_size, 16);
  EXPECT_FALSE(c.causal);
  EXPECT_EQ(c.target_layers, (std::vector<int>{1, 3}));
  EXPECT_EQ(c.mask_token, 508);
  EXPECT_EQ(c.n_vocab, 0) << "shares the target's embeddings and head";
  EXPECT_FALSE(d.w.token_embd);
  EXPECT_EQ(d.w.fc.cols, 512);
  ASSERT_EQ(d.w.layers.size(), 2u);
  EXPECT_TRUE(d.w.layers[1].wv);
  for (const char* arch : {"qwen3moe", "qwen35moe"}) {
    auto m = LoadedModel::open(test::tiny_gguf(arch, "q8_0", 41));
    EXPECT_NO_THROW(check_dflash_fits(c, m->weights.cfg)) << arch;
  }
  ModelConfig t = LoadedModel::open(test::tiny_gguf("qwen3moe", "q8_0", 41))->weights.cfg;
  auto refused = [&](ModelConfig bad, const std::string& what) {
    try {
      check_dflash_fits(c, bad);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  ModelConfig narrow = t;
  narrow.n_embd = 128;
  refused(narrow, "hidden size");
  ModelConfig shallow = t;
  shallow.n_layer = 3;
  refused(shallow, "target layer 3");
  ModelConfig small = t;
  small.n_vocab = 300;
  refused(small, "mask token");
}

// The tiny drafter rewritten with `edit` applied to its metadata and tensors.
struct Rewrite {
  std::vector<std::pair<std::string, GgufValue>> kv;
  struct T {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<T> tensors;
  Rewrite() {
    auto f = GgufFile::open(tiny_dflash());
    kv = f->metadata();
    for (const GgufTensorInfo& t : f->tensors()) tensors.push_back({t.name, t.type, t.shape, {t.data, t.data + t.nbytes}});
  }
  void set(const std::string& k, GgufValue v) {
    for (auto& [key, val] : kv)
      if (key == k) {
        val = std::move(v);
        return;
      }
    kv.emplace_back(k, std::move(v));
  }
  void drop_key(const std::string& k) { std::erase_if(kv, [&](const auto& p) { return p.first == k; }); }
  void drop_tensor(const std::string& n) { std::erase_if(tensors, [&](const T& t) { return t.name == n; }); }
  T& tensor(const std::string& n) {
    for (T& t : tensors)
      if (t.name == n) return t;
    throw Error("no tensor " + n);
  }
  void write(const std::string& path) const {
    GgufWriter w(path);
    for (const auto& [k, v] : kv) w.set(k, v);
    for (const T& t : tensors) w.add_tensor(t.name, t.type, t.shape);
    for (const T& t : tensors) w.write_tensor_data(t.bytes.data(), t.bytes.size());
    w.finish();
  }
  // Binds the result; returns the error (empty: it bound).
  std::string bind_error() const {
    const std::string path = testing::TempDir() + "dflash_bad_" + std::to_string(::getpid()) + ".gguf";
    write(path);
    std::string err;
    try {
      auto f = GgufFile::open(path);
      bind_dflash(*f);
    } catch (const Error& e) {
      err = e.what();
    }
    std::remove(path.c_str());
    return err;
  }
};

TEST(DFlashLoad, BadFilesAreErrorsNamingWhatIsWrong) {
  EXPECT_EQ(Rewrite().bind_error(), "") << "the unedited file binds";
  struct Case {
    std::function<void(Rewrite&)> edit;
    std::string what;
  };
  const std::vector<Case> cases = {
      {[](Rewrite& r) { r.drop_tensor("fc.weight"); }, "missing tensor 'fc.weight'"},
      {[](Rewrite& r) { r.drop_tensor("blk.1.ffn_down.weight"); }, "blk.1.ffn_down.weight"},
      {[](Rewrite& r) { r.tensor("blk.0.attn_q.weight").shape = {256, 128}; r.tensor("blk.0.attn_q.weight").bytes.resize(256 * 128 * 4); },
       "'blk.0.attn_q.weight' has shape {256, 128}"},
      {[](Rewrite& r) { r.set("dflash.target_layers", GgufValue::of_i32s({1, 2, 3})); }, "'fc.weight' has shape"},
      {[](Rewrite& r) { r.drop_key("dflash.target_layers"); }, "target_layers"},
      {[](Rewrite& r) { r.set("dflash.target_layers", GgufValue::of_i32s({})); }, "target_layers"},
      {[](Rewrite& r) { r.set("dflash.target_layers", GgufValue::of_i32s({1, -5})); }, "target_layers"},
      {[](Rewrite& r) { r.drop_key("tokenizer.ggml.mask_token_id"); }, "mask_token_id"},
      {[](Rewrite& r) { r.set("dflash.block_size", GgufValue::of_u32(100000)); }, "block_size"},
      {[](Rewrite& r) { r.set("dflash.block_count", GgufValue::of_u32(1u << 30)); }, "block_count"},
      {[](Rewrite& r) { r.set("dflash.attention.head_count_kv", GgufValue::of_u32(3)); }, "head_count"},
      {[](Rewrite& r) { r.set("dflash.embedding_length", GgufValue::of_u32(0)); }, "embedding_length"},
      {[](Rewrite& r) { r.set("dflash.attention.head_count", GgufValue::of_u32(64)); }, "over 4 times the hidden size"},
      {[](Rewrite& r) { r.set("general.architecture", GgufValue::of_string("qwen3")); }, "not 'dflash'"},
      {[](Rewrite& r) { r.set("dflash.attention.sliding_window", GgufValue::of_u32(512)); }, "variant"},
      {[](Rewrite& r) { r.set("dflash.hidden_act", GgufValue::of_string("gelu")); }, "gelu"},
      {[](Rewrite& r) { r.tensors.push_back({"markov_w1.weight", DType::F32, {8, 512}, std::vector<uint8_t>(8 * 512 * 4)}); },
       "'markov_w1.weight' belongs to a DFlash variant"},
      {[](Rewrite& r) { r.tensor("blk.0.attn_norm.weight").type = DType::F16; r.tensor("blk.0.attn_norm.weight").bytes.resize(512); },
       "norms must be f32"},
  };
  for (const Case& c : cases) {
    Rewrite r;
    c.edit(r);
    const std::string err = r.bind_error();
    EXPECT_NE(err.find(c.what), std::string::npos) << "want '" << c.what << "', got: " << (err.empty() ? "(bound)" : err);
  }
}

// Bytes of the header flipped at random: the reader or the binder refuses the
// file with an ms::Error, or it binds; nothing else (the run is bounded by
// the reader's limits and the binder's ranges).
TEST(DFlashLoad, CorruptedHeadersNeverCrash) {
  std::ifstream in(tiny_dflash(), std::ios::binary);
  const std::vector<uint8_t> good{std::istreambuf_iterator<char>(in), {}};
  auto head = GgufFile::from_memory(good.data(), good.size());
  const size_t header = static_cast<size_t>(head->data_offset());
  std::mt19937 rng(11);
  int refused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<uint8_t> bad = good;
    for (int k = 0; k < 1 + trial % 4; ++k) bad[rng() % header] = static_cast<uint8_t>(rng());
    try {
      auto f = GgufFile::from_memory(bad.data(), bad.size());
      bind_dflash(*f);
    } catch (const Error&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(DFlashHook, LayerInputsMatchTheReferenceTarget) {
  for (const char* arch : {"qwen3moe", "qwen35moe"}) {
    auto m = LoadedModel::open(test::tiny_gguf(arch, "f32", 41));
    ThreadPool pool(2);
    CpuBackend be(m->weights, pool);
    testref::RefModel ref(*m->file);
    const std::vector<int32_t> prompt = test::random_tokens(9, 3);
    std::vector<std::vector<std::vector<double>>> want;
    for (int32_t t : prompt) {
      ref.step(t);
      want.push_back(ref.last_layer_inputs);
    }
    const std::vector<int> layers = {3, 0, 1};
    KvCache kv = be.make_cache(32, KvType::F32);
    std::vector<float> rows, logits;
    be.set_hidden_layers(layers);
    be.set_hidden_hook([&](const HiddenEvent& e) {
      ASSERT_EQ(e.n_layer_rows, 3);
      rows.insert(rows.end(), e.layer_rows, e.layer_rows + e.n * 3 * 256);
    });
    be.forward(kv, std::span<const int32_t>(prompt.data(), 5), logits);
    be.forward(kv, std::span<const int32_t>(prompt.data() + 5, 4), logits);
    be.set_hidden_hook(nullptr);
    ASSERT_EQ(rows.size(), prompt.size() * 3 * 256);
    for (size_t p = 0; p < prompt.size(); ++p)
      for (size_t j = 0; j < layers.size(); ++j)
        EXPECT_LT(rel_rms(rows.data() + (p * 3 + j) * 256, want[p][static_cast<size_t>(layers[j])]), 1e-4)
            << arch << ": position " << p << ", layer " << layers[j];
    EXPECT_THROW(be.set_hidden_layers({4}), Error);
    EXPECT_THROW(be.set_hidden_layers({-1}), Error);
  }
}

// The drafter's equations in float64, written out plainly: context features
// fused and turned into per-layer K/V, then the block through the layers.
struct RefDFlash {
  const DFlashConfig& c;
  testref::Mat fc, enc_norm, out_norm;
  const testref::Mat &embd, &head;
  struct Layer {
    testref::Mat attn_norm, q, k, v, o, qn, kn, ffn_norm, gate, up, down;
  };
  std::vector<Layer> L;
  std::vector<std::vector<std::vector<double>>> K, V;  // [layer][pos][kv_dim]
  bool shared_kv = false;

  RefDFlash(const GgufFile& f, const DFlashConfig& cfg, const testref::RefModel& target)
      : c(cfg), embd(target.embd), head(target.out), K(cfg.n_layer), V(cfg.n_layer) {
    fc = testref::load(f, "fc.weight");
    enc_norm = testref::load(f, "enc.output_norm.weight");
    out_norm = testref::load(f, "output_norm.weight");
    for (int il = 0; il < c.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      auto g = [&](const char* n) { return testref::load(f, p + n + ".weight"); };
      L.push_back({g("attn_norm"), g("attn_q"), g("attn_k"), g("attn_v"), g("attn_output"), g("attn_q_norm"),
                   g("attn_k_norm"), g("ffn_norm"), g("ffn_gate"), g("ffn_up"), g("ffn_down")});
    }
  }
  void rope(double* x, int64_t pos) const {  // NeoX pairs (i, i + n_rot/2)
    const int half = c.n_rot / 2;
    for (int i = 0; i < half; ++i) {
      const double a = static_cast<double>(pos) * std::pow(static_cast<double>(c.rope_base), -2.0 * i / c.n_rot);
      const double x0 = x[i], x1 = x[i + half];
      x[i] = x0 * std::cos(a) - x1 * std::sin(a);
      x[i + half] = x0 * std::sin(a) + x1 * std::cos(a);
    }
  }
  static void head_norm(double* x, int n, const testref::Mat* w, double eps) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += x[i] * x[i];
    const double s = 1 / std::sqrt(ss / n + eps);
    for (int i = 0; i < n; ++i) x[i] *= s * (w ? w->w[static_cast<size_t>(i)] : 1.0);
  }
  // K and V of input x at `pos` for layer il.
  void kv_of(int il, const std::vector<double>& x, int64_t pos, std::vector<double>& k, std::vector<double>& v) const {
    k = testref::mul(L[il].k, x);
    v = shared_kv ? k : testref::mul(L[il].v, x);
    for (int h = 0; h < c.n_head_kv; ++h) {
      head_norm(k.data() + h * c.head_dim, c.head_dim, &L[il].kn, c.rms_eps);
      if (shared_kv) head_norm(v.data() + h * c.head_dim, c.head_dim, nullptr, c.rms_eps);
      rope(k.data() + h * c.head_dim, pos);
    }
  }
  void context(const std::vector<double>& feature) {
    const auto g = testref::norm(testref::mul(fc, feature), enc_norm, c.rms_eps);
    for (int il = 0; il < c.n_layer; ++il) {
      std::vector<double> k, v;
      kv_of(il, g, static_cast<int64_t>(K[il].size()), k, v);
      K[il].push_back(k);
      V[il].push_back(v);
    }
  }
  std::vector<std::vector<double>> block(const std::vector<int32_t>& tokens) const {
    const int n = static_cast<int>(tokens.size());
    const int64_t D = c.n_embd, L0 = static_cast<int64_t>(K[0].size()), hd = c.head_dim;
    std::vector<std::vector<double>> h;
    for (int32_t t : tokens) h.emplace_back(embd.w.begin() + t * D, embd.w.begin() + (t + 1) * D);
    for (int il = 0; il < c.n_layer; ++il) {
      std::vector<std::vector<double>> x, q, Kb = K[il], Vb = V[il];
      for (int t = 0; t < n; ++t) {
        x.push_back(testref::norm(h[t], L[il].attn_norm, c.rms_eps));
        q.push_back(testref::mul(L[il].q, x[t]));
        for (int hh = 0; hh < c.n_head; ++hh) {
          head_norm(q[t].data() + hh * hd, c.head_dim, &L[il].qn, c.rms_eps);
          rope(q[t].data() + hh * hd, L0 + t);
        }
        std::vector<double> k, v;
        kv_of(il, x[t], L0 + t, k, v);
        Kb.push_back(k);
        Vb.push_back(v);
      }
      for (int t = 0; t < n; ++t) {
        const int64_t seen = c.causal ? L0 + t + 1 : L0 + n;
        std::vector<double> att(static_cast<size_t>(c.n_head * hd), 0.0);
        for (int hh = 0; hh < c.n_head; ++hh) {
          const int kh = hh / (c.n_head / c.n_head_kv);
          std::vector<double> s(static_cast<size_t>(seen));
          double mx = -1e300, sum = 0;
          for (int64_t j = 0; j < seen; ++j) {
            double d = 0;
            for (int i = 0; i < hd; ++i) d += q[t][hh * hd + i] * Kb[j][kh * hd + i];
            s[j] = d / std::sqrt(static_cast<double>(hd));
            mx = std::max(mx, s[j]);
          }
          for (double& e : s) sum += (e = std::exp(e - mx));
          for (int64_t j = 0; j < seen; ++j)
            for (int i = 0; i < hd; ++i) att[hh * hd + i] += s[j] / sum * Vb[j][kh * hd + i];
        }
        const auto o = testref::mul(L[il].o, att);
        for (int64_t i = 0; i < D; ++i) h[t][i] += o[i];
        const auto xf = testref::norm(h[t], L[il].ffn_norm, c.rms_eps);
        auto g = testref::mul(L[il].gate, xf);
        const auto u = testref::mul(L[il].up, xf);
        for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
        const auto dn = testref::mul(L[il].down, g);
        for (int64_t i = 0; i < D; ++i) h[t][i] += dn[i];
      }
    }
    std::vector<std::vector<double>> logits;
    for (int t = 1; t < n; ++t) logits.push_back(testref::mul(head, testref::norm(h[t], out_norm, c.rms_eps)));
    return logits;
  }
};

TEST(DFlashForward, BlockMatchesTheReference) {
  Drafter d;
  auto m = LoadedModel::open(test::tiny_gguf("qwen3moe", "f32", 41));
  testref::RefModel target(*m->file);
  ThreadPool pool(2);
  const int64_t F = d.w.fc.cols;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> feats(static_cast<size_t>(7 * F));
  for (float& x : feats) x = nd(rng);
  const std::vector<int32_t> block = {17, 508, 508, 508, 508, 508};
  for (int variant = 0; variant < 3; ++variant) {  // as written; causal; V shares K
    DFlashWeights w = d.w;
    if (variant == 1) w.cfg.causal = true;
    if (variant == 2)
      for (DFlashLayer& L : w.layers) L.wv = {};
    RefDFlash ref(*d.f, w.cfg, target);
    ref.shared_kv = variant == 2;
    for (int p = 0; p < 7; ++p) ref.context(std::vector<double>(feats.begin() + p * F, feats.begin() + (p + 1) * F));
    const auto want = ref.block(block);

    DFlashForward fwd(w, m->weights, pool, 64, KvType::F32);
    fwd.add_context(std::span<const float>(feats.data(), static_cast<size_t>(4 * F)), 4);
    fwd.add_context(std::span<const float>(feats.data() + 4 * F, static_cast<size_t>(3 * F)), 3);
    EXPECT_EQ(fwd.context_len(), 7);
    std::vector<float> logits;
    fwd.draft_block(block, logits);
    ASSERT_EQ(logits.size(), 5u * 512);
    for (size_t r = 0; r < want.size(); ++r)
      EXPECT_LT(rel_rms(logits.data() + r * 512, want[r]), 1e-4) << "variant " << variant << ", row " << r;
    EXPECT_EQ(fwd.context_len(), 7) << "the block's keys are not kept";
    // Again from the same context: the block left nothing behind.
    std::vector<float> again;
    fwd.draft_block(block, again);
    EXPECT_EQ(again, logits);
  }
  DFlashForward fwd(d.w, m->weights, pool, 8);
  std::vector<float> logits;
  EXPECT_THROW(fwd.draft_block(std::vector<int32_t>{1}, logits), Error);
  EXPECT_THROW(fwd.draft_block(std::vector<int32_t>(17, 1), logits), Error);
  EXPECT_THROW(fwd.draft_block(std::vector<int32_t>{1, 512}, logits), Error);
  EXPECT_THROW(fwd.add_context(std::span<const float>(feats.data(), 5), 1), Error);
  EXPECT_THROW(fwd.add_context(std::span<const float>(feats.data(), static_cast<size_t>(9 * F)), 9), Error) << "past ctx";
}

// A drafter with its own embeddings (and so, tied, its own output head):
// those are used instead of the target's.
TEST(DFlashForward, OwnEmbeddingsAndHeadAreUsed) {
  auto m = LoadedModel::open(test::tiny_gguf("qwen3moe", "f32", 41));
  testref::RefModel target(*m->file);
  Rewrite r;
  std::vector<float> embd(512 * 256);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  for (float& x : embd) x = u(rng);
  r.tensors.push_back({"token_embd.weight", DType::F32, {256, 512},
                       {reinterpret_cast<uint8_t*>(embd.data()), reinterpret_cast<uint8_t*>(embd.data() + embd.size())}});
  const std::string path = testing::TempDir() + "dflash_own_" + std::to_string(::getpid()) + ".gguf";
  r.write(path);
  auto f = GgufFile::open(path);
  const DFlashWeights w = bind_dflash(*f);
  EXPECT_EQ(w.cfg.n_vocab, 512);
  ASSERT_TRUE(w.token_embd);
  EXPECT_EQ(w.output.data, w.token_embd.data) << "tied";
  testref::RefModel own_target = target;  // the reference reads the drafter's own table for both
  own_target.embd = testref::load(*f, "token_embd.weight");
  own_target.out = own_target.embd;
  RefDFlash ref(*f, w.cfg, own_target);
  std::vector<float> feat(512);
  for (float& x : feat) x = u(rng) * 10;
  ref.context(std::vector<double>(feat.begin(), feat.end()));
  const std::vector<int32_t> block = {33, 508, 508};
  const auto want = ref.block(block);
  ThreadPool pool(2);
  DFlashForward fwd(w, m->weights, pool, 16, KvType::F32);
  fwd.add_context(feat, 1);
  std::vector<float> logits;
  fwd.draft_block(block, logits);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_LT(rel_rms(logits.data() + i * 512, want[i]), 1e-4) << "row " << i;
  // Its own vocabulary must be the target's.
  ModelConfig bigger = m->weights.cfg;
  bigger.n_vocab = 600;
  EXPECT_THROW(check_dflash_fits(w.cfg, bigger), Error);
  std::remove(path.c_str());
}

struct SpecRun {
  std::vector<int32_t> tokens;
  GenerateStats st;
  std::vector<float> next_logits;
  int64_t passes = 0;
};

SpecRun generate_with(Backend& be, const ModelWeights& tw, const DFlashWeights* dw, ThreadPool& pool,
                      const std::vector<int32_t>& prompt, int k, int n_predict, bool replay = false) {
  KvCache kv = be.make_cache(128, KvType::F32);
  std::unique_ptr<DFlashDrafter> d;
  if (dw) d = std::make_unique<DFlashDrafter>(be, kv, *dw, tw, pool);
  SamplerParams sp;
  sp.temperature = 0;
  Sampler sampler(sp);
  GenerateParams gp;
  gp.n_predict = n_predict;
  gp.stop_at_eog = false;
  gp.spec.drafter = d.get();
  gp.spec.control.draft_max = k;
  gp.spec.control.adaptive = false;
  if (replay) gp.spec.rollback = SpecDecoding::Rollback::Replay;
  SpecRun r;
  r.st = generate(be, kv, sampler, nullptr, prompt, gp, [&](int32_t id) {
    r.tokens.push_back(id);
    return true;
  });
  if (d) r.passes = d->passes();
  const int32_t next[1] = {r.tokens.back()};
  be.forward(kv, next, r.next_logits);
  return r;
}

TEST(DFlashSpec, GreedyOutputIsPlainDecodingsForEveryK) {
  Drafter d;
  for (const char* arch : {"qwen3moe", "qwen35moe"}) {
    auto m = LoadedModel::open(test::tiny_gguf(arch, "q8_0", 41));
    ThreadPool pool(2);
    CpuBackend be(m->weights, pool);
    const std::vector<int32_t> prompt = test::random_tokens(12, 9);
    const SpecRun plain = generate_with(be, m->weights, nullptr, pool, prompt, 1, 40);
    for (int k = 1; k <= 8; ++k) {
      const SpecRun spec = generate_with(be, m->weights, &d.w, pool, prompt, k, 40);
      EXPECT_EQ(spec.tokens, plain.tokens) << arch << ", K = " << k;
      EXPECT_EQ(spec.next_logits, plain.next_logits) << arch << ", K = " << k << ": the cache goes on as plain decoding's";
      EXPECT_GT(spec.st.spec.verifies, 0) << arch << ", K = " << k;
      EXPECT_GE(spec.st.spec.drafted, spec.st.spec.verifies) << arch << ", K = " << k;
      EXPECT_EQ(spec.passes, spec.st.spec.verifies) << arch << ", K = " << k << ": one block pass per verify";
    }
    // A hybrid rolled back by replaying the kept tokens: the replay's rows
    // replace the verify's in the drafter's context.
    const SpecRun replayed = generate_with(be, m->weights, &d.w, pool, prompt, 5, 40, true);
    EXPECT_EQ(replayed.tokens, plain.tokens) << arch << ", replay";
  }
}

// The target truncated below what the drafter's context holds and run on
// differently: the drafter drafts as one that only ever saw the new sequence.
TEST(DFlashSpec, DrafterFollowsTheTargetBack) {
  Drafter d;
  auto m = LoadedModel::open(test::tiny_gguf("qwen3moe", "q8_0", 41));
  ThreadPool pool(2);
  CpuBackend be(m->weights, pool);
  std::vector<int32_t> seq = test::random_tokens(14, 8);
  std::vector<float> logits;
  std::vector<int32_t> out, out2;
  {
    KvCache kv = be.make_cache(64);
    DFlashDrafter dr(be, kv, d.w, m->weights, pool);
    be.forward(kv, std::span<const int32_t>(seq.data(), 10), logits);
    dr.propose(std::span<const int32_t>(seq.data(), 11), 20, out);
    EXPECT_EQ(out.size(), 15u) << "block_size - 1 at most";
    EXPECT_EQ(dr.context_len(), 10);
    // A verify's positions past what the target keeps are cut at the next proposal.
    const int32_t verify[3] = {seq[10], out[0], out[1]};
    be.forward(kv, verify, logits, true);
    EXPECT_EQ(dr.context_len(), 13);
    kv.truncate(11);
    dr.propose(std::span<const int32_t>(seq.data(), 12), 2, out);
    EXPECT_EQ(dr.context_len(), 11);
    kv.truncate(6);
    seq[6] = 123;  // a different continuation
    be.forward(kv, std::span<const int32_t>(seq.data() + 6, 2), logits);
    EXPECT_EQ(dr.context_len(), 8) << "cut back to 6, positions 6 and 7 fused anew";
    dr.propose(std::span<const int32_t>(seq.data(), 9), 4, out);
    EXPECT_EQ(dr.context_len(), 8);
    EXPECT_EQ(dr.passes(), 3);
  }
  KvCache kv2 = be.make_cache(64);
  DFlashDrafter fresh(be, kv2, d.w, m->weights, pool);
  be.forward(kv2, std::span<const int32_t>(seq.data(), 8), logits);
  fresh.propose(std::span<const int32_t>(seq.data(), 9), 4, out2);
  EXPECT_EQ(out, out2);
  // A prompt run before a drafter existed: it has nothing to read, no drafts.
  KvCache kv3 = be.make_cache(64);
  be.set_hidden_hook(nullptr);
  be.forward(kv3, std::span<const int32_t>(seq.data(), 8), logits);
  DFlashDrafter late(be, kv3, d.w, m->weights, pool);
  late.propose(std::span<const int32_t>(seq.data(), 9), 4, out);
  EXPECT_TRUE(out.empty());
}

TEST(DFlashSpec, ChoiceSpellings) {
  EXPECT_EQ(parse_draft_choice("dflash").kind, DraftChoice::Kind::DFlash);
  EXPECT_EQ(parse_draft_choice("draft-dflash").kind, DraftChoice::Kind::DFlash);
  EXPECT_EQ(parse_draft_choice("dflash").describe(), "dflash");
  EXPECT_TRUE(parse_draft_choice("dflash").needs_file());
  EXPECT_FALSE(parse_draft_choice("mtp").needs_file());
}

}  // namespace
}  // namespace ms
