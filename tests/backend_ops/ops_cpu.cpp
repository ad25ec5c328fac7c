// The forward pass's float ops: each op's shapes, random inputs and scalar
// reference (src/cpu *_ref), with the CPU's fast version as its first
// implementation (ops_cuda.cpp adds the CUDA ones, reading the same Problem
// fields documented here).
#include <cmath>
#include <string>

#include "backend_ops/case_params.h"
#include "backend_ops/inputs.h"
#include "backend_ops/registry.h"
#include "cpu/attention.h"
#include "cpu/delta_net.h"
#include "cpu/expert_ffn.h"
#include "cpu/matvec_many.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "model/rope_yarn.h"
#include "quant/blocks.h"
#include "quant/gpu_q8.h"

namespace ms::backend_ops {
namespace {

ThreadPool& pool() {
  static ThreadPool p(3);
  return p;
}

Case make_case(std::string label, std::map<std::string, int64_t> p, uint32_t seed) {
  Case c;
  c.label = std::move(label);
  c.p = std::move(p);
  c.seed = seed;
  return c;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// ---------------------------------------------------------------- rms_norm
// f["x"] [rows][n], f["w"] [n] (empty: no weight); out [rows][n].
void add_rms_norm(Registry& reg) {
  Op op;
  op.name = "rms_norm";
  uint32_t seed = 1;
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 32}, {3, 96}, {5, 100}, {17, 2048}, {2, 4096}, {4, 1}})
    for (int w : {1, 0})
      op.cases.push_back(make_case("rows=" + std::to_string(rows) + " n=" + std::to_string(n) + (w ? "" : " no w"),
                                   {{"rows", rows}, {"n", n}, {"w", w}}, seed++));
  op.make = [](const Case& c) {
    const int64_t rows = c.at("rows"), n = c.at("n");
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["x"] = uniform(static_cast<size_t>(rows * n), rng, -3.f, 3.f);
    p.f["w"] = c.at("w") ? uniform(static_cast<size_t>(n), rng, 0.5f, 1.5f) : std::vector<float>{};
    std::vector<float> out(p.f["x"].size());
    const float* w = p.f["w"].empty() ? nullptr : p.f["w"].data();
    for (int64_t r = 0; r < rows; ++r) rmsnorm_ref(p.f["x"].data() + r * n, w, out.data() + r * n, n, 1e-6f);
    p.ref = to_double(out);
    return p;
  };
  op.tol = 1e-5;
  op.impls.push_back({"cpu", false, nullptr, [](const Case& c, const Problem& p) {
                        const int64_t rows = c.at("rows"), n = c.at("n");
                        std::vector<float> out = poisoned(p.ref.size());
                        const float* w = p.f.at("w").empty() ? nullptr : p.f.at("w").data();
                        for (int64_t r = 0; r < rows; ++r) rmsnorm(p.f.at("x").data() + r * n, w, out.data() + r * n, n, 1e-6f);
                        return out;
                      }});
  reg.add(std::move(op));
}

// ---------------------------------------------------------------- rope
// f["x"] [n_tok][heads][head_dim], i["pos"] [n_tok]; parameters mode
// (RopeMode), n_rot, scaling (0 none, 1 linear 1/4, 2 YaRN factor 4 from a
// 4096 context); theta 1e6. Output: x rotated.
RopeScaling case_scaling_impl(const Case& c) {
  const int64_t kind = c.at("scaling");
  if (kind == 1) return RopeScaling(0.25f);
  if (kind == 2) {
    YarnParams yp;
    yp.factor = 4;
    yp.n_rot = static_cast<int>(c.at("n_rot"));
    yp.n_ctx_orig = 4096;
    yp.theta_base = 1e6;
    return yarn_scaling(yp);
  }
  return RopeScaling();
}

void add_rope(Registry& reg) {
  Op op;
  op.name = "rope";
  uint32_t seed = 100;
  for (int mode : {0, 1})
    for (int hd : {128, 64})
      for (int partial : {0, 1})
        for (int scaling : {0, 1, 2}) {
          const int n_rot = partial ? hd / 2 : hd;
          op.cases.push_back(make_case(std::string(mode ? "neox" : "normal") + " hd=" + std::to_string(hd) +
                                           " n_rot=" + std::to_string(n_rot) +
                                           (scaling == 1 ? " linear" : scaling == 2 ? " yarn" : ""),
                                       {{"mode", mode}, {"head_dim", hd}, {"n_rot", n_rot}, {"scaling", scaling},
                                        {"heads", 3}, {"n_tok", 5}},
                                       seed++));
        }
  op.make = [](const Case& c) {
    const int n_tok = static_cast<int>(c.at("n_tok")), heads = static_cast<int>(c.at("heads"));
    const int hd = static_cast<int>(c.at("head_dim")), n_rot = static_cast<int>(c.at("n_rot"));
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["x"] = uniform(static_cast<size_t>(n_tok) * heads * hd, rng);
    p.i["pos"] = {0, 1, 517, 4097, 100000};
    p.i["pos"].resize(n_tok, 7);
    std::vector<float> x = p.f["x"];
    const RopeScaling sc = rope_case_scaling(c);
    for (int t = 0; t < n_tok; ++t)
      rope_ref(x.data() + static_cast<size_t>(t) * heads * hd, heads, hd, n_rot, p.i["pos"][t], 1e6f, sc,
               static_cast<RopeMode>(c.at("mode")));
    p.ref = to_double(x);
    return p;
  };
  op.tol = 1e-5;
  op.impls.push_back({"cpu", false, nullptr, [](const Case& c, const Problem& p) {
                        const int n_tok = static_cast<int>(c.at("n_tok")), heads = static_cast<int>(c.at("heads"));
                        const int hd = static_cast<int>(c.at("head_dim")), n_rot = static_cast<int>(c.at("n_rot"));
                        std::vector<float> x = p.f.at("x"), cs(static_cast<size_t>(n_rot));
                        for (int t = 0; t < n_tok; ++t) {
                          rope_table(cs.data(), n_rot, p.i.at("pos")[t], 1e6f, rope_case_scaling(c));
                          rope_apply(x.data() + static_cast<size_t>(t) * heads * hd, heads, hd, n_rot, cs.data(),
                                     static_cast<RopeMode>(c.at("mode")));
                        }
                        return x;
                      }});
  reg.add(std::move(op));
}

// ---------------------------------------------------------------- softmax, silu_mul
// softmax: f["x"] [rows][n], in place per row. silu_mul: f["gate"], f["up"]
// [n]; out [n].
void add_softmax_silu(Registry& reg) {
  Op sm;
  sm.name = "softmax";
  uint32_t seed = 200;
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {2, 32}, {4, 1000}, {1, 4099}, {2, 151936}})
    sm.cases.push_back(make_case("rows=" + std::to_string(rows) + " n=" + std::to_string(n),
                                 {{"rows", rows}, {"n", n}}, seed++));
  sm.make = [](const Case& c) {
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["x"] = uniform(static_cast<size_t>(c.at("rows") * c.at("n")), rng, -20.f, 20.f);
    std::vector<float> x = p.f["x"];
    for (int64_t r = 0; r < c.at("rows"); ++r) softmax_ref(x.data() + r * c.at("n"), c.at("n"));
    p.ref = to_double(x);
    // relative per element: a float sum over n values, the error of every
    // output's normaliser, is ~n * 2^-24 relative at worst
    p.scale.resize(p.ref.size());
    for (size_t k = 0; k < p.ref.size(); ++k) p.scale[k] = std::fabs(p.ref[k]) + 1e-30;
    return p;
  };
  sm.tol = 3e-4;
  sm.impls.push_back({"cpu", false, nullptr, [](const Case& c, const Problem& p) {
                        std::vector<float> x = p.f.at("x");
                        for (int64_t r = 0; r < c.at("rows"); ++r) softmax(x.data() + r * c.at("n"), c.at("n"));
                        return x;
                      }});
  reg.add(std::move(sm));

  Op sw;
  sw.name = "silu_mul";
  for (int64_t n : {1, 7, 31, 1000, 40961})
    sw.cases.push_back(make_case("n=" + std::to_string(n), {{"n", n}}, seed++));
  sw.make = [](const Case& c) {
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["gate"] = uniform(static_cast<size_t>(c.at("n")), rng, -8.f, 8.f);
    p.f["up"] = uniform(static_cast<size_t>(c.at("n")), rng, -2.f, 2.f);
    std::vector<float> out(p.f["up"].size());
    silu_mul_ref(p.f["gate"].data(), p.f["up"].data(), out.data(), c.at("n"));
    p.ref = to_double(out);
    return p;
  };
  sw.tol = 1e-6;
  sw.impls.push_back({"cpu", false, nullptr, [](const Case& c, const Problem& p) {
                        std::vector<float> out = poisoned(p.ref.size());
                        silu_mul(p.f.at("gate").data(), p.f.at("up").data(), out.data(), c.at("n"));
                        return out;
                      }});
  reg.add(std::move(sw));
}

// ---------------------------------------------------------------- attention
// Cache kinds: 0 f16, 1 f32, 2 q8_0. b["k"], b["v"]: the caches
// ([n_kv][ctx][head_dim] elements or blocks, positions 0 .. pos0+n_tok-1
// written by kv_store, the rest zero); f["q"] [n_tok][n_head][head_dim]. Out
// [n_tok][n_head][head_dim]; scale 1/sqrt(head_dim).
const char* cache_name(int64_t kind) { return kind == 0 ? "f16" : kind == 1 ? "f32" : "q8_0"; }

size_t cache_bytes(int64_t kind, int64_t elems) {
  return static_cast<size_t>(kind == 0 ? elems * 2 : kind == 1 ? elems * 4 : elems / 32 * sizeof(BlockQ8_0));
}

AttentionShape attention_shape_impl(const Case& c) {
  AttentionShape s;
  s.n_head = static_cast<int>(c.at("n_head"));
  s.n_kv = static_cast<int>(c.at("n_kv"));
  s.head_dim = static_cast<int>(c.at("head_dim"));
  s.ctx = c.at("ctx");
  s.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  return s;
}

template <class F>
void with_cache(int64_t kind, const uint8_t* k, const uint8_t* v, F&& f) {
  if (kind == 0) f(reinterpret_cast<const uint16_t*>(k), reinterpret_cast<const uint16_t*>(v));
  else if (kind == 1) f(reinterpret_cast<const float*>(k), reinterpret_cast<const float*>(v));
  else f(reinterpret_cast<const BlockQ8_0*>(k), reinterpret_cast<const BlockQ8_0*>(v));
}

Problem make_attention(const Case& c) {
  const AttentionShape s = attention_case_shape(c);
  const int n_tok = static_cast<int>(c.at("n_tok"));
  const int64_t pos0 = c.at("pos0"), kind = c.at("cache"), len = pos0 + n_tok;
  std::mt19937 rng(c.seed);
  Problem p;
  p.f["q"] = normal(static_cast<size_t>(n_tok) * s.n_head * s.head_dim, rng);
  const std::vector<float> k = normal(static_cast<size_t>(len) * s.n_kv * s.head_dim, rng);
  const std::vector<float> v = normal(static_cast<size_t>(len) * s.n_kv * s.head_dim, rng);
  const int64_t elems = static_cast<int64_t>(s.n_kv) * s.ctx * s.head_dim;
  p.b["k"].assign(cache_bytes(kind, elems), 0);
  p.b["v"].assign(cache_bytes(kind, elems), 0);
  uint8_t *kc = p.b["k"].data(), *vc = p.b["v"].data();
  if (kind == 0) kv_store(s, k.data(), v.data(), static_cast<int>(len), 0, reinterpret_cast<uint16_t*>(kc), reinterpret_cast<uint16_t*>(vc));
  if (kind == 1) kv_store(s, k.data(), v.data(), static_cast<int>(len), 0, reinterpret_cast<float*>(kc), reinterpret_cast<float*>(vc));
  if (kind == 2) kv_store(s, k.data(), v.data(), static_cast<int>(len), 0, reinterpret_cast<BlockQ8_0*>(kc), reinterpret_cast<BlockQ8_0*>(vc));
  std::vector<float> out(p.f["q"].size());
  with_cache(kind, kc, vc, [&](auto* K, auto* V) { attention_ref(s, p.f["q"].data(), K, V, n_tok, pos0, out.data()); });
  p.ref = to_double(out);
  return p;
}

void add_attention(Registry& reg) {
  struct S {
    int n_head, n_kv, head_dim, n_tok, pos0;
  };
  // Decode: the split-K kernels' shapes, then (pos0 + 1 > 1024) the CUDA
  // long-context kernel's: GQA 8/4/16/8/1, head_dim 128/256/64, lengths just
  // past its switch, on and off its 64-position block step, and at depth.
  const S decode[] = {{4, 4, 64, 1, 0},       {8, 2, 128, 1, 300},   {4, 1, 256, 1, 77},
                      {6, 2, 96, 1, 1030},    {32, 4, 128, 1, 1024}, {16, 4, 128, 1, 2111},
                      {32, 2, 128, 1, 1087},  {16, 2, 256, 1, 4100}, {8, 8, 64, 1, 1500},
                      {32, 4, 128, 1, 8190}};
  const S prefill[] = {{6, 2, 128, 37, 0}, {4, 1, 64, 70, 50}, {4, 2, 256, 5, 20}, {16, 2, 128, 130, 0},
                       {2, 2, 96, 9, 3}};
  uint32_t seed = 300;
  for (int64_t kind : {0, 1, 2})
    for (bool is_decode : {true, false}) {
      Op op;
      op.name = std::string(is_decode ? "attention_decode_" : "attention_prefill_") + cache_name(kind);
      for (const S& s : is_decode ? std::vector<S>(std::begin(decode), std::end(decode))
                                  : std::vector<S>(std::begin(prefill), std::end(prefill)))
        op.cases.push_back(make_case("heads=" + std::to_string(s.n_head) + "/" + std::to_string(s.n_kv) + " hd=" +
                                         std::to_string(s.head_dim) + " n=" + std::to_string(s.n_tok) +
                                         " pos0=" + std::to_string(s.pos0),
                                     {{"n_head", s.n_head}, {"n_kv", s.n_kv}, {"head_dim", s.head_dim},
                                      {"n_tok", s.n_tok}, {"pos0", s.pos0}, {"ctx", s.pos0 + s.n_tok + 5},
                                      {"cache", kind}},
                                     seed++));
      op.make = make_attention;
      op.tol = 1e-5;
      op.impls.push_back({"cpu", false, nullptr, [](const Case& c, const Problem& p) {
                            std::vector<float> out = poisoned(p.ref.size());
                            with_cache(c.at("cache"), p.b.at("k").data(), p.b.at("v").data(), [&](auto* K, auto* V) {
                              attention(pool(), attention_case_shape(c), p.f.at("q").data(), K, V,
                                        static_cast<int>(c.at("n_tok")), c.at("pos0"), out.data());
                            });
                            return out;
                          }});
      reg.add(std::move(op));
    }
}

// ---------------------------------------------------------------- delta net
DeltaNetShape delta_shape_impl(const Case& c) {
  DeltaNetShape s;
  s.n_k_heads = static_cast<int>(c.at("n_k"));
  s.n_v_heads = static_cast<int>(c.at("n_v"));
  s.head_k = static_cast<int>(c.at("head_k"));
  s.head_v = static_cast<int>(c.at("head_v"));
  return s;
}

std::string delta_label(const DeltaNetShape& s, int n) {
  return "k=" + std::to_string(s.n_k_heads) + "x" + std::to_string(s.head_k) + " v=" + std::to_string(s.n_v_heads) +
         "x" + std::to_string(s.head_v) + " n=" + std::to_string(n);
}

std::map<std::string, int64_t> delta_params(const DeltaNetShape& s, int n) {
  return {{"n_k", s.n_k_heads}, {"n_v", s.n_v_heads}, {"head_k", s.head_k}, {"head_v", s.head_v}, {"n", n}};
}

// conv: f["x"] [n][ld] (ld = channels + 3), f["w"] [channels][taps],
// f["window"] [taps-1][channels]; out: [n][channels] then the window after.
void add_delta_conv(Registry& reg) {
  Op op;
  op.name = "delta_conv1d_silu";
  uint32_t seed = 400;
  for (int n : {1, 5, 70})
    for (auto [ch, taps] : {std::pair<int64_t, int>{64, 4}, {1000, 4}, {96, 2}})
      op.cases.push_back(make_case("n=" + std::to_string(n) + " channels=" + std::to_string(ch) +
                                       " taps=" + std::to_string(taps),
                                   {{"n", n}, {"channels", ch}, {"taps", taps}}, seed++));
  op.make = [](const Case& c) {
    const int n = static_cast<int>(c.at("n")), taps = static_cast<int>(c.at("taps"));
    const int64_t ch = c.at("channels"), ld = ch + 3;
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["x"] = uniform(static_cast<size_t>(n * ld), rng, -2.f, 2.f);
    p.f["w"] = uniform(static_cast<size_t>(ch * taps), rng, -1.f, 1.f);
    p.f["window"] = uniform(static_cast<size_t>((taps - 1) * ch), rng, -2.f, 2.f);
    std::vector<float> win = p.f["window"], out(static_cast<size_t>(n * ch));
    conv1d_silu_ref(p.f["x"].data(), ld, n, ch, p.f["w"].data(), taps, win.data(), out.data());
    out.insert(out.end(), win.begin(), win.end());
    p.ref = to_double(out);
    return p;
  };
  op.tol = 1e-5;
  op.impls.push_back({"cpu", false, nullptr, [](const Case& c, const Problem& p) {
                        const int n = static_cast<int>(c.at("n")), taps = static_cast<int>(c.at("taps"));
                        const int64_t ch = c.at("channels");
                        std::vector<float> win = p.f.at("window"), out = poisoned(static_cast<size_t>(n * ch));
                        conv1d_silu(p.f.at("x").data(), ch + 3, n, ch, p.f.at("w").data(), taps, win.data(), out.data());
                        out.insert(out.end(), win.begin(), win.end());
                        return out;
                      }});
  reg.add(std::move(op));
}

const DeltaNetShape kDeltaShapes[] = {{1, 1, 16, 16}, {2, 4, 32, 32}, {1, 2, 48, 40}, {2, 4, 128, 128}};

// prepare_qk: f["qkv"] [n][conv_dim] rows; out: the rows prepared (eps 1e-6).
// gates: f["alpha"], f["b"] [n][n_v], f["a"], f["dt"] [n_v]; out: g then beta.
// gated_rmsnorm: f["x"], f["z"] [n][head_v], f["w"] [head_v]; out [n][head_v].
void add_delta_small(Registry& reg) {
  uint32_t seed = 450;
  Op qk;
  qk.name = "delta_prepare_qk";
  for (const DeltaNetShape& s : kDeltaShapes)
    for (int n : {1, 9}) qk.cases.push_back(make_case(delta_label(s, n), delta_params(s, n), seed++));
  qk.make = [](const Case& c) {
    const DeltaNetShape s = delta_case_shape(c);
    const int n = static_cast<int>(c.at("n"));
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["qkv"] = uniform(static_cast<size_t>(n * s.conv_dim()), rng, -2.f, 2.f);
    std::vector<float> x = p.f["qkv"];
    const float qscale = 1.0f / std::sqrt(static_cast<float>(s.head_k));
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < s.n_k_heads; ++h) {
        float* row = x.data() + t * s.conv_dim();
        l2norm_scale_ref(row + h * s.head_k, s.head_k, 1e-6f, qscale);
        l2norm_scale_ref(row + s.key_dim() + h * s.head_k, s.head_k, 1e-6f, 1.0f);
      }
    p.ref = to_double(x);
    return p;
  };
  qk.tol = 1e-6;
  qk.impls.push_back({"cpu", false, nullptr, [](const Case& c, const Problem& p) {
                        const DeltaNetShape s = delta_case_shape(c);
                        std::vector<float> x = p.f.at("qkv");
                        for (int t = 0; t < c.at("n"); ++t) delta_prepare_qk(s, x.data() + t * s.conv_dim(), 1e-6f);
                        return x;
                      }});
  reg.add(std::move(qk));

  Op gates;
  gates.name = "delta_gates";
  for (int n_v : {1, 4, 32, 48})
    for (int n : {1, 7}) gates.cases.push_back(make_case("n_v=" + std::to_string(n_v) + " n=" + std::to_string(n), {{"n_v", n_v}, {"n", n}}, seed++));
  gates.make = [](const Case& c) {
    const int n_v = static_cast<int>(c.at("n_v")), n = static_cast<int>(c.at("n"));
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["alpha"] = uniform(static_cast<size_t>(n * n_v), rng, -30.f, 30.f);  // softplus both linear and saturated
    p.f["b"] = uniform(static_cast<size_t>(n * n_v), rng, -6.f, 6.f);
    p.f["a"] = uniform(static_cast<size_t>(n_v), rng, -4.f, -0.1f);
    p.f["dt"] = uniform(static_cast<size_t>(n_v), rng, -1.f, 1.f);
    std::vector<float> g(static_cast<size_t>(n * n_v)), beta(g.size());
    for (int t = 0; t < n; ++t)
      delta_gates_ref(p.f["alpha"].data() + t * n_v, p.f["b"].data() + t * n_v, p.f["a"].data(), p.f["dt"].data(), n_v,
                      g.data() + t * n_v, beta.data() + t * n_v);
    g.insert(g.end(), beta.begin(), beta.end());
    p.ref = to_double(g);
    // g reaches ~100 and beta stays in (0, 1): each half has its own scale
    p.scale.assign(p.ref.size(), 1.0);
    for (size_t k = 0; k < p.ref.size() / 2; ++k) p.scale[k] = std::max(1.0, std::fabs(p.ref[k]));
    return p;
  };
  gates.tol = 1e-5;
  gates.impls.push_back({"cpu", false, nullptr, [](const Case& c, const Problem& p) {
                           const int n_v = static_cast<int>(c.at("n_v")), n = static_cast<int>(c.at("n"));
                           std::vector<float> g = poisoned(static_cast<size_t>(n * n_v)), beta = poisoned(g.size());
                           for (int t = 0; t < n; ++t)
                             delta_gates(p.f.at("alpha").data() + t * n_v, p.f.at("b").data() + t * n_v,
                                         p.f.at("a").data(), p.f.at("dt").data(), n_v, g.data() + t * n_v,
                                         beta.data() + t * n_v);
                           g.insert(g.end(), beta.begin(), beta.end());
                           return g;
                         }});
  reg.add(std::move(gates));

  Op grn;
  grn.name = "gated_rmsnorm";
  for (int hv : {16, 40, 128})
    for (int n : {1, 6}) grn.cases.push_back(make_case("head_v=" + std::to_string(hv) + " rows=" + std::to_string(n), {{"head_v", hv}, {"n", n}}, seed++));
  grn.make = [](const Case& c) {
    const int hv = static_cast<int>(c.at("head_v")), n = static_cast<int>(c.at("n"));
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["x"] = uniform(static_cast<size_t>(n * hv), rng, -3.f, 3.f);
    p.f["z"] = uniform(static_cast<size_t>(n * hv), rng, -4.f, 4.f);
    p.f["w"] = uniform(static_cast<size_t>(hv), rng, 0.5f, 1.5f);
    std::vector<float> out(p.f["x"].size());
    for (int t = 0; t < n; ++t)
      gated_rmsnorm_ref(p.f["x"].data() + t * hv, p.f["z"].data() + t * hv, p.f["w"].data(), out.data() + t * hv, hv, 1e-6f);
    p.ref = to_double(out);
    return p;
  };
  grn.tol = 1e-5;
  grn.impls.push_back({"cpu", false, nullptr, [](const Case& c, const Problem& p) {
                         const int hv = static_cast<int>(c.at("head_v")), n = static_cast<int>(c.at("n"));
                         std::vector<float> out = poisoned(p.ref.size());
                         for (int t = 0; t < n; ++t)
                           gated_rmsnorm(p.f.at("x").data() + t * hv, p.f.at("z").data() + t * hv, p.f.at("w").data(),
                                         out.data() + t * hv, hv, 1e-6f);
                         return out;
                       }});
  reg.add(std::move(grn));
}

// The delta rule: f["qkv"] [n][ld] prepared rows (ld = conv_dim + 5),
// f["g"], f["beta"] [n][n_v], f["S"] the initial state; out: [n][value_dim]
// then the final state.
Problem make_delta_rule(const Case& c) {
  const DeltaNetShape s = delta_case_shape(c);
  const int n = static_cast<int>(c.at("n"));
  const int64_t ld = s.conv_dim() + 5;
  std::mt19937 rng(c.seed);
  Problem p;
  p.f["qkv"] = uniform(static_cast<size_t>(n * ld), rng, -1.f, 1.f);
  for (int t = 0; t < n; ++t) delta_prepare_qk(s, p.f["qkv"].data() + t * ld, 1e-6f);
  p.f["g"] = uniform(static_cast<size_t>(n * s.n_v_heads), rng, -2.f, -0.01f);
  p.f["beta"] = uniform(static_cast<size_t>(n * s.n_v_heads), rng, 0.f, 1.f);
  p.f["S"] = uniform(static_cast<size_t>(s.state_elems()), rng, -0.5f, 0.5f);
  std::vector<float> S = p.f["S"], out(static_cast<size_t>(n * s.value_dim()));
  delta_rule_ref(s, p.f["qkv"].data(), ld, p.f["g"].data(), p.f["beta"].data(), n, S.data(), out.data());
  out.insert(out.end(), S.begin(), S.end());
  p.ref = to_double(out);
  return p;
}

using DeltaFn = std::function<void(const DeltaNetShape&, const float* qkv, int64_t ld, const float* g,
                                   const float* beta, int n, float* S, float* out)>;
std::vector<float> run_delta(const Case& c, const Problem& p, const DeltaFn& fn) {
  const DeltaNetShape s = delta_case_shape(c);
  const int n = static_cast<int>(c.at("n"));
  std::vector<float> S = p.f.at("S"), out = poisoned(static_cast<size_t>(n * s.value_dim()));
  fn(s, p.f.at("qkv").data(), s.conv_dim() + 5, p.f.at("g").data(), p.f.at("beta").data(), n, S.data(), out.data());
  out.insert(out.end(), S.begin(), S.end());
  return out;
}

void add_delta_rule(Registry& reg) {
  uint32_t seed = 500;
  Op tok;
  tok.name = "delta_rule_token";
  for (const DeltaNetShape& s : kDeltaShapes)
    for (int n : {1, 3, 17}) tok.cases.push_back(make_case(delta_label(s, n), delta_params(s, n), seed++));
  tok.make = make_delta_rule;
  tok.tol = 1e-5;
  tok.impls.push_back({"cpu", false, nullptr, [](const Case& c, const Problem& p) {
                         return run_delta(c, p, [](const DeltaNetShape& s, const float* qkv, int64_t ld, const float* g,
                                                   const float* beta, int n, float* S, float* out) {
                           delta_rule_recurrent(&pool(), s, qkv, ld, g, beta, n, S, out);
                         });
                       }});
  reg.add(std::move(tok));

  Op ch;
  ch.name = "delta_rule_chunked";
  for (const DeltaNetShape& s : kDeltaShapes)
    for (int n : {64, 100, 130}) ch.cases.push_back(make_case(delta_label(s, n), delta_params(s, n), seed++));
  ch.make = make_delta_rule;
  ch.tol = 1e-4;
  ch.impls.push_back({"cpu", false, nullptr, [](const Case& c, const Problem& p) {
                        return run_delta(c, p, [](const DeltaNetShape& s, const float* qkv, int64_t ld, const float* g,
                                                  const float* beta, int n, float* S, float* out) {
                          delta_rule_chunked(&pool(), s, qkv, ld, g, beta, n, S, out);
                        });
                      }});
  reg.add(std::move(ch));
}

// ---------------------------------------------------------------- expert_ffn
// b["gate"], b["up"] [n_expert][d_ff][d_model], b["down"] [n_expert][d_model][d_ff]
// (types gate_type, down_type), f["x"] [n_tok][d_model], i["ids"] and
// f["weights"] [n_tok][k], f["res"] [n_tok][d_model] (empty: none). Output
// out[t] = res[t] + sum_j weights[t][j] * ffn_{ids[t][j]}(x[t]).
// Q8 activations (each impl's) carry ~1e-3 of rounding: the tolerance is
// set by that, not by float summation.
struct FfnView {
  std::vector<const uint8_t*> gate, up, down;
  ExpertFfnWeights w;
};

FfnView ffn_view(const Case& c, const Problem& p) {
  FfnView v;
  const int64_t d_model = c.at("d_model"), d_ff = c.at("d_ff");
  const DType gt = static_cast<DType>(c.at("gate_type")), dt = static_cast<DType>(c.at("down_type"));
  const int n_expert = static_cast<int>(c.at("n_expert"));
  for (int e = 0; e < n_expert; ++e) {
    v.gate.push_back(p.b.at("gate").data() + e * d_ff * row_bytes(gt, d_model));
    v.up.push_back(p.b.at("up").data() + e * d_ff * row_bytes(gt, d_model));
    v.down.push_back(p.b.at("down").data() + e * d_model * row_bytes(dt, d_ff));
  }
  v.w.n_embd = d_model;
  v.w.n_ff = d_ff;
  v.w.gate_type = v.w.up_type = gt;
  v.w.down_type = dt;
  v.w.gate = v.gate;
  v.w.up = v.up;
  v.w.down = v.down;
  return v;
}

// One expert on one token with the activations rounded as `rounding` says,
// composed from the scalar row dots: Native rounds x and h to each weight
// type's vec_dot_type (vec_dot_ref), Gpu to the GPU's Q8 per 32
// (vec_dot_gpu_q8_ref) for the types the GPU runs that way; float weights
// take f32 activations either way.
std::vector<float> rounded_dots(DType t, const uint8_t* w, int64_t rows, int64_t n, const float* x, ActRounding r) {
  // Native is the CPU backend's default form: the GPU's Q8 for Q8_0 too.
  const bool gpu = (r == ActRounding::Gpu && gpu_q8_supported(t)) || input_takes_gpu_q8(t);
  const DType at = type_info(t).vec_dot_type;
  std::vector<uint8_t> a(static_cast<size_t>(gpu ? gpu_q8_row_bytes(n) : row_bytes(at, n)));
  if (gpu) quantize_row_gpu_q8_ref(x, a.data(), n);
  else quantize_row_ref(at, x, a.data(), n);
  std::vector<float> y(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i)
    y[i] = gpu ? vec_dot_gpu_q8_ref(t, n, w + i * row_bytes(t, n), a.data()) : vec_dot_ref(t, n, w + i * row_bytes(t, n), a.data());
  return y;
}

std::vector<float> expert_rounded(const ExpertFfnWeights& w, int e, const float* x, ActRounding r) {
  const std::vector<float> g = rounded_dots(w.gate_type, w.gate[e], w.n_ff, w.n_embd, x, r);
  const std::vector<float> u = rounded_dots(w.up_type, w.up[e], w.n_ff, w.n_embd, x, r);
  std::vector<float> h(g.size());
  silu_mul_ref(g.data(), u.data(), h.data(), static_cast<int64_t>(h.size()));
  return rounded_dots(w.down_type, w.down[e], w.n_embd, w.n_ff, h.data(), r);
}

Problem make_expert_ffn(const Case& c) {
  const int64_t d_model = c.at("d_model"), d_ff = c.at("d_ff");
  const int n_expert = static_cast<int>(c.at("n_expert")), n_tok = static_cast<int>(c.at("n_tok"));
  const int k = static_cast<int>(c.at("k"));
  const DType gt = static_cast<DType>(c.at("gate_type")), dt = static_cast<DType>(c.at("down_type"));
  std::mt19937 rng(c.seed);
  Problem p;
  p.b["gate"] = weights(gt, n_expert * d_ff, d_model, row_bytes(gt, d_model), rng, false);
  p.b["up"] = weights(gt, n_expert * d_ff, d_model, row_bytes(gt, d_model), rng, false);
  p.b["down"] = weights(dt, n_expert * d_model, d_ff, row_bytes(dt, d_ff), rng, false);
  p.f["x"] = normal(static_cast<size_t>(n_tok * d_model), rng);
  for (int t = 0; t < n_tok; ++t) {
    std::vector<int32_t> all(n_expert);
    for (int e = 0; e < n_expert; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    p.i["ids"].insert(p.i["ids"].end(), all.begin(), all.begin() + k);
  }
  p.f["weights"] = uniform(static_cast<size_t>(n_tok * k), rng, 0.05f, 1.f);
  p.f["res"] = c.at("res") ? uniform(static_cast<size_t>(n_tok * d_model), rng, -1.f, 1.f) : std::vector<float>{};
  const FfnView v = ffn_view(c, p);
  const ActRounding r = c.at("gpu_q8") ? ActRounding::Gpu : ActRounding::Native;
  p.ref.assign(static_cast<size_t>(n_tok * d_model), 0.0);
  if (c.at("res")) p.ref.assign(p.f["res"].begin(), p.f["res"].end());
  for (int t = 0; t < n_tok; ++t)
    for (int j = 0; j < k; ++j) {
      const std::vector<float> y = expert_rounded(v.w, p.i["ids"][t * k + j], p.f["x"].data() + t * d_model, r);
      for (int64_t i = 0; i < d_model; ++i) p.ref[t * d_model + i] += p.f["weights"][t * k + j] * static_cast<double>(y[i]);
    }
  return p;
}

std::vector<float> run_cpu_ffn(const Case& c, const Problem& p, ActRounding rounding) {
  const int64_t d_model = c.at("d_model");
  const int n_tok = static_cast<int>(c.at("n_tok")), k = static_cast<int>(c.at("k"));
  const FfnView v = ffn_view(c, p);
  const auto work = group_by_expert(p.i.at("ids").data(), n_tok, k, v.w.n_expert());
  std::vector<float> y = poisoned(static_cast<size_t>(n_tok * k * d_model));
  ExpertFfn ffn(pool(), rounding);
  ffn.compute(v.w, p.f.at("x").data(), n_tok, work, y.data());
  std::vector<float> out = p.f.at("res");
  out.resize(static_cast<size_t>(n_tok * d_model), 0.f);
  for (int t = 0; t < n_tok; ++t)
    for (int j = 0; j < k; ++j)
      for (int64_t r = 0; r < d_model; ++r) out[t * d_model + r] += p.f.at("weights")[t * k + j] * y[(t * k + j) * d_model + r];
  return out;
}

// expert_ffn: the CPU's own activation rounding; expert_ffn_gpu_q8: the
// GPU's (the CUDA kernels, and the CPU's ActRounding::Gpu of the hybrid
// mode). A rounding flip of one element of h between two summation orders
// moves an output by ~1e-4 of the largest: the tolerance allows a few.
void add_expert_ffn(Registry& reg) {
  uint32_t seed = 600;
  const std::pair<DType, DType> types[] = {{DType::Q4_K, DType::Q6_K}, {DType::Q8_0, DType::Q8_0},
                                           {DType::MXFP4, DType::Q5_K}, {DType::F16, DType::F16},
                                           {DType::Q4_0, DType::IQ4_XS}, {DType::Q8_0, DType::F16}};
  for (int gpu : {0, 1}) {
    Op op;
    op.name = gpu ? "expert_ffn_gpu_q8" : "expert_ffn";
    for (auto [gt, dt] : types)
      for (auto [n_tok, k] : {std::pair<int, int>{1, 4}, {5, 2}, {20, 3}, {gpu ? 100 : 0, 4}}) {
        if (n_tok == 0 || (n_tok == 100 && gt != DType::Q4_K)) continue;  // 100: 50 pairs an expert, 64-vector tiles
        op.cases.push_back(make_case(std::string(type_name(gt)) + "/" + type_name(dt) + " tokens=" +
                                         std::to_string(n_tok) + " k=" + std::to_string(k),
                                     {{"gate_type", static_cast<int64_t>(gt)}, {"down_type", static_cast<int64_t>(dt)},
                                      {"d_model", 256}, {"d_ff", 256}, {"n_expert", 8}, {"n_tok", n_tok}, {"k", k},
                                      {"gpu_q8", gpu}, {"res", n_tok != 1}},
                                     seed++));
      }
    op.make = make_expert_ffn;
    op.tol = 1e-3;
    const ActRounding r = gpu ? ActRounding::Gpu : ActRounding::Native;
    op.impls.push_back({gpu ? "cpu_gpu_rounding" : "cpu", false, nullptr,
                        [r](const Case& c, const Problem& p) { return run_cpu_ffn(c, p, r); }});
    reg.add(std::move(op));
  }
}

}  // namespace

RopeScaling rope_case_scaling(const Case& c) { return case_scaling_impl(c); }
AttentionShape attention_case_shape(const Case& c) { return attention_shape_impl(c); }
DeltaNetShape delta_case_shape(const Case& c) { return delta_shape_impl(c); }

void register_cpu_ops(Registry& reg) {
  add_rms_norm(reg);
  add_rope(reg);
  add_softmax_silu(reg);
  add_attention(reg);
  add_delta_conv(reg);
  add_delta_small(reg);
  add_delta_rule(reg);
  add_expert_ffn(reg);
}

}  // namespace ms::backend_ops
