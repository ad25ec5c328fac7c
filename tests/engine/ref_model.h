// A plain reimplementation of the forward pass for tests: reads the GGUF by
// tensor name (not through ModelWeights), dequantizes every weight to f32,
// computes in double where it sums, keeps K/V in f32, no threads. Slow and
// obviously right; the engine is checked against it.
#pragma once
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "model/tensor_table.h"
#include "quant/half.h"
#include "quant/quant.h"

namespace ms::testref {

// How a matrix's input is rounded before the product (emulating an integer
// dot product's activation format; None: exact). Q8F32: blocks of 32,
// d = amax / 127 in f32, q = round-half-even(x / d) (the CUDA kernels'
// rule, quant/gpu_q8.h). Q8F16: the same with d then rounded to f16 (the
// Q8_0 block of the CPU's activation rows, ref_simple.cpp).
enum class InputRounding { None, Q8F32, Q8F16 };

struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<float> w;  // row-major
  bool quantized = false;  // stored in a block format (its input is rounded by `rounding`)
  InputRounding rounding = InputRounding::None;
  bool empty() const { return w.empty(); }
};

// x rounded as m's rounding says (in blocks of 32 along x).
inline std::vector<double> round_input(const Mat& m, const std::vector<double>& x) {
  if (m.rounding == InputRounding::None || x.size() % 32 != 0) return x;
  std::vector<double> y(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float xf[32], amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xf[j] = static_cast<float>(x[b + j])));
    const float d = amax / 127.0f;
    float dq = d;
    if (m.rounding == InputRounding::Q8F16) dq = f16_to_f32(f32_to_f16(d));
    for (int j = 0; j < 32; ++j) {
      const float q = d > 0 ? std::nearbyint(xf[j] / d) : 0.0f;
      y[b + j] = static_cast<double>(q) * dq;
    }
  }
  return y;
}

inline Mat load(const GgufFile& f, const std::string& name, int64_t matrix = 0) {
  Mat m;
  const GgufTensorInfo* t = f.find_tensor(name);
  if (!t) return m;
  m.cols = t->shape[0];
  m.rows = t->shape.size() > 1 ? t->shape[1] : 1;
  const int64_t rb = row_bytes(t->type, m.cols);
  m.w.resize(static_cast<size_t>(m.rows * m.cols));
  m.quantized = type_info(t->type).block_size > 1;
  for (int64_t r = 0; r < m.rows; ++r)
    dequantize_row_ref(t->type, t->data + (matrix * m.rows + r) * rb, m.w.data() + r * m.cols, m.cols);
  return m;
}

inline std::vector<double> mul(const Mat& m, const std::vector<double>& x_in) {
  const std::vector<double> x = round_input(m, x_in);
  std::vector<double> y(static_cast<size_t>(m.rows));
  for (int64_t r = 0; r < m.rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < m.cols; ++c) s += static_cast<double>(m.w[r * m.cols + c]) * x[c];
    y[r] = s;
  }
  return y;
}

inline std::vector<double> norm(const std::vector<double>& x, const Mat& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double s = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w.w[i];
  return y;
}

struct RefModel {
  std::string arch;
  int n_layer, n_head, n_kv, hd, n_rot, n_expert = 0, k = 0;
  // qwen35moe: Gated DeltaNet shape (value head h reads key head h % nk, the
  // GGUF's tiled order) and whether attention has an output gate.
  int conv_k = 0, nk = 0, nv = 0, dk = 0, dv = 0;
  bool gated_attn = false;
  int64_t D, V;
  double eps, base;
  bool neox, renorm = true, softmax_first;
  Mat embd, out_norm, out;
  struct Layer {
    Mat attn_norm, wq, wk, wv, wo, bq, bk, bv, qn, kn, ffn_norm, router, gate, up, down;
    std::vector<Mat> eg, eu, ed;
    Mat qkv, z, beta, alpha, a, dt, conv, snorm, sout;  // Gated DeltaNet
    Mat sh_gate, sh_up, sh_down, sh_router;              // shared expert
    bool linear() const { return !qkv.empty(); }
  };
  std::vector<Layer> layers;
  std::vector<std::vector<std::vector<double>>> K, Vc;  // [layer][pos][kv_dim]
  // Linear layers: all inputs of the conv so far ([pos][conv_dim]) and the
  // state S[h][i][j] (key dim i, value dim j), as the Hugging Face recurrence keeps it.
  std::vector<std::vector<std::vector<double>>> conv_in;
  std::vector<std::vector<double>> S;
  int64_t pos = 0;
  std::vector<double> last_hidden;  // step()'s token's final hidden state (after the output norm)
  std::vector<std::vector<double>> last_layer_inputs;  // [layer]: the residual stream entering it (step()'s token)

  explicit RefModel(const GgufFile& f) {
    arch = f.get_string("general.architecture");
    const std::string p = arch + ".";
    n_layer = static_cast<int>(f.get_int(p + "block_count") - f.get_int(p + "nextn_predict_layers", 0));
    D = f.get_int(p + "embedding_length");
    n_head = static_cast<int>(f.get_int(p + "attention.head_count"));
    n_kv = static_cast<int>(f.get_int(p + "attention.head_count_kv"));
    hd = static_cast<int>(f.get_int(p + "attention.key_length", D / n_head));
    eps = f.get_float(p + "attention.layer_norm_rms_epsilon");
    base = f.get_float(p + "rope.freq_base");
    n_expert = static_cast<int>(f.get_int(p + "expert_count", 0));
    k = static_cast<int>(f.get_int(p + "expert_used_count", 0));
    n_rot = static_cast<int>(f.get_int(p + "rope.dimension_count", hd));
    if (arch == "qwen35moe") {
      gated_attn = true;
      conv_k = static_cast<int>(f.get_int(p + "ssm.conv_kernel"));
      nk = static_cast<int>(f.get_int(p + "ssm.group_count"));
      nv = static_cast<int>(f.get_int(p + "ssm.time_step_rank"));
      dk = static_cast<int>(f.get_int(p + "ssm.state_size"));
      dv = static_cast<int>(f.get_int(p + "ssm.inner_size")) / nv;
    }
    neox = arch != "llama";
    softmax_first = arch != "llama";
    embd = load(f, "token_embd.weight");
    V = embd.rows;
    out_norm = load(f, "output_norm.weight");
    out = f.find_tensor("output.weight") ? load(f, "output.weight") : embd;
    for (int il = 0; il < n_layer; ++il) layers.push_back(load_layer(f, il));
    K.assign(n_layer, {});
    Vc.assign(n_layer, {});
    conv_in.assign(n_layer, {});
    S.assign(n_layer, std::vector<double>(static_cast<size_t>(nv) * dk * dv, 0.0));
  }

  // Block il's tensors (il >= n_layer: an MTP block's layer).
  Layer load_layer(const GgufFile& f, int il) const {
    const std::string b = "blk." + std::to_string(il) + ".";
    // Dense tensors by the tensor table's spelling (model/tensor_table.h);
    // absent ones load empty. Routed experts by their layouts' names.
    auto name = [&](TensorView LayerWeights::*field) { return layer_tensor_name(il, field, arch_info(arch)); };
    Layer L;
    L.attn_norm = load(f, name(&LayerWeights::attn_norm));
    L.wq = load(f, name(&LayerWeights::wq));
    L.wk = load(f, name(&LayerWeights::wk));
    L.wv = load(f, name(&LayerWeights::wv));
    L.wo = load(f, name(&LayerWeights::wo));
    L.bq = load(f, name(&LayerWeights::bq));
    L.bk = load(f, name(&LayerWeights::bk));
    L.bv = load(f, name(&LayerWeights::bv));
    L.qn = load(f, name(&LayerWeights::q_norm));
    L.kn = load(f, name(&LayerWeights::k_norm));
    L.ffn_norm = load(f, name(&LayerWeights::ffn_norm));
    L.qkv = load(f, name(&LayerWeights::ssm_qkv));
    L.z = load(f, name(&LayerWeights::ssm_z));
    L.beta = load(f, name(&LayerWeights::ssm_beta));
    L.alpha = load(f, name(&LayerWeights::ssm_alpha));
    L.a = load(f, name(&LayerWeights::ssm_a));
    L.dt = load(f, name(&LayerWeights::ssm_dt));
    L.conv = load(f, name(&LayerWeights::ssm_conv));
    L.snorm = load(f, name(&LayerWeights::ssm_norm));
    L.sout = load(f, name(&LayerWeights::ssm_out));
    L.sh_gate = load(f, name(&LayerWeights::shexp_gate));
    L.sh_up = load(f, name(&LayerWeights::shexp_up));
    L.sh_down = load(f, name(&LayerWeights::shexp_down));
    L.sh_router = load(f, name(&LayerWeights::shexp_router));
    if (n_expert) {
      L.router = load(f, name(&LayerWeights::router));
      for (int e = 0; e < n_expert; ++e) {
        if (f.find_tensor(b + "ffn_gate_exps.weight")) {
          L.eg.push_back(load(f, b + "ffn_gate_exps.weight", e));
          L.eu.push_back(load(f, b + "ffn_up_exps.weight", e));
        } else if (f.find_tensor(b + "ffn_gate_up_exps.weight")) {
          Mat gu = load(f, b + "ffn_gate_up_exps.weight", e);
          Mat g, u;
          g.rows = u.rows = gu.rows / 2;
          g.cols = u.cols = gu.cols;
          g.w.assign(gu.w.begin(), gu.w.begin() + g.rows * g.cols);
          u.w.assign(gu.w.begin() + g.rows * g.cols, gu.w.end());
          L.eg.push_back(g);
          L.eu.push_back(u);
        } else {
          L.eg.push_back(load(f, b + "ffn_gate." + std::to_string(e) + ".weight"));
          L.eu.push_back(load(f, b + "ffn_up." + std::to_string(e) + ".weight"));
        }
        L.ed.push_back(f.find_tensor(b + "ffn_down_exps.weight") ? load(f, b + "ffn_down_exps.weight", e)
                                                                 : load(f, b + "ffn_down." + std::to_string(e) + ".weight"));
      }
    } else {
      L.gate = load(f, name(&LayerWeights::ffn_gate));
      L.up = load(f, name(&LayerWeights::ffn_up));
      L.down = load(f, name(&LayerWeights::ffn_down));
    }
    return L;
  }

  // Every matrix stored in a block format takes its input rounded by r (the
  // token embedding is a table, not a product: never rounded).
  void round_inputs(InputRounding r) {
    auto set = [r](Mat& m) { m.rounding = m.quantized ? r : InputRounding::None; };
    set(out);
    for (Layer& L : layers) {
      for (Mat* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.router, &L.gate, &L.up, &L.down, &L.qkv, &L.z, &L.beta,
                     &L.alpha, &L.sout, &L.sh_gate, &L.sh_up, &L.sh_down, &L.sh_router})
        set(*m);
      for (auto* experts : {&L.eg, &L.eu, &L.ed})
        for (Mat& m : *experts) set(m);
    }
  }

  // RoPE on the first n_rot dims of each head (all of them but in qwen35moe).
  void rope(std::vector<double>& x, int heads, int64_t pos) const {
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < n_rot / 2; ++i) {
        const double ang = pos * std::pow(base, -2.0 * i / n_rot);
        const int a = neox ? h * hd + i : h * hd + 2 * i;
        const int b = neox ? h * hd + i + n_rot / 2 : h * hd + 2 * i + 1;
        const double x0 = x[a], x1 = x[b];
        x[a] = x0 * std::cos(ang) - x1 * std::sin(ang);
        x[b] = x0 * std::sin(ang) + x1 * std::cos(ang);
      }
  }

  static std::vector<double> ffn(const Mat& g, const Mat& u, const Mat& d, const std::vector<double>& x) {
    auto a = mul(g, x), b = mul(u, x);
    for (size_t i = 0; i < a.size(); ++i) a[i] = a[i] / (1 + std::exp(-a[i])) * b[i];
    return mul(d, a);
  }

  static double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
  static double silu(double x) { return x * sigmoid(x); }

  // Gated DeltaNet, one token, written as the Hugging Face recurrence states
  // it: conv over the last conv_k inputs, silu, l2norm(q, k), q / sqrt(dk),
  // S *= exp(g); S += k (beta (v - S^T k))^T; o = S^T q; rmsnorm(o) * silu(z).
  std::vector<double> delta_net(int il, const std::vector<double>& x) {
    const Layer& L = layers[il];
    const int64_t cd = 2 * int64_t{nk} * dk + int64_t{nv} * dv;
    conv_in[il].push_back(mul(L.qkv, x));
    const auto& in = conv_in[il];
    std::vector<double> c(static_cast<size_t>(cd));
    for (int64_t ch = 0; ch < cd; ++ch) {
      double acc = 0;
      for (int j = 0; j < conv_k; ++j) {
        const int64_t t = static_cast<int64_t>(in.size()) - conv_k + j;  // inputs before the first are zero
        if (t >= 0) acc += L.conv.w[ch * conv_k + j] * in[t][ch];
      }
      c[ch] = silu(acc);
    }
    auto l2 = [](double* v, int n, double scale) {
      double ss = 0;
      for (int i = 0; i < n; ++i) ss += v[i] * v[i];
      for (int i = 0; i < n; ++i) v[i] *= scale / std::sqrt(ss + 1e-6);
    };
    for (int h = 0; h < nk; ++h) {
      l2(&c[h * dk], dk, 1 / std::sqrt(static_cast<double>(dk)));
      l2(&c[nk * dk + h * dk], dk, 1);
    }
    const auto z = mul(L.z, x), bb = mul(L.beta, x), aa = mul(L.alpha, x);
    std::vector<double> o(static_cast<size_t>(nv) * dv);
    for (int h = 0; h < nv; ++h) {
      const double* q = &c[(h % nk) * dk];
      const double* k = &c[nk * dk + (h % nk) * dk];
      const double* v = &c[2 * nk * dk + h * dv];
      const double sp = aa[h] + L.dt.w[h];
      const double g = L.a.w[h] * (sp > 20 ? sp : std::log1p(std::exp(sp)));
      const double beta = sigmoid(bb[h]);
      double* Sh = &S[il][static_cast<size_t>(h) * dk * dv];
      for (int i = 0; i < dk * dv; ++i) Sh[i] *= std::exp(g);
      for (int j = 0; j < dv; ++j) {
        double mem = 0;
        for (int i = 0; i < dk; ++i) mem += Sh[i * dv + j] * k[i];
        const double delta = beta * (v[j] - mem);
        for (int i = 0; i < dk; ++i) Sh[i * dv + j] += k[i] * delta;
      }
      for (int j = 0; j < dv; ++j) {
        double acc = 0;
        for (int i = 0; i < dk; ++i) acc += Sh[i * dv + j] * q[i];
        o[h * dv + j] = acc;
      }
      std::vector<double> head(o.begin() + h * dv, o.begin() + (h + 1) * dv);
      head = norm(head, L.snorm, eps);
      for (int j = 0; j < dv; ++j) o[h * dv + j] = head[j] * silu(z[h * dv + j]);
    }
    return mul(L.sout, o);
  }

  // Softmax attention of x at position p against the layer's cache (Kc, Vv:
  // [pos][kv_dim], this token's appended), through the output projection.
  std::vector<double> attend(const Layer& L, std::vector<std::vector<double>>& Kc,
                             std::vector<std::vector<double>>& Vv, const std::vector<double>& x, int64_t p) const {
    auto q = mul(L.wq, x), kk = mul(L.wk, x), v = mul(L.wv, x);
    std::vector<double> gate;
    if (gated_attn) {  // [q | gate] per head
      std::vector<double> qq;
      for (int hh = 0; hh < n_head; ++hh) {
        qq.insert(qq.end(), q.begin() + 2 * hh * hd, q.begin() + (2 * hh + 1) * hd);
        gate.insert(gate.end(), q.begin() + (2 * hh + 1) * hd, q.begin() + (2 * hh + 2) * hd);
      }
      q = qq;
    }
    if (!L.bq.empty())
      for (size_t i = 0; i < q.size(); ++i) q[i] += L.bq.w[i];
    if (!L.bk.empty())
      for (size_t i = 0; i < kk.size(); ++i) kk[i] += L.bk.w[i];
    if (!L.bv.empty())
      for (size_t i = 0; i < v.size(); ++i) v[i] += L.bv.w[i];
    if (!L.qn.empty()) {
      for (int hh = 0; hh < n_head; ++hh) {
        std::vector<double> s(q.begin() + hh * hd, q.begin() + (hh + 1) * hd);
        s = norm(s, L.qn, eps);
        std::copy(s.begin(), s.end(), q.begin() + hh * hd);
      }
      for (int hh = 0; hh < n_kv; ++hh) {
        std::vector<double> s(kk.begin() + hh * hd, kk.begin() + (hh + 1) * hd);
        s = norm(s, L.kn, eps);
        std::copy(s.begin(), s.end(), kk.begin() + hh * hd);
      }
    }
    rope(q, n_head, p);
    rope(kk, n_kv, p);
    Kc.push_back(kk);
    Vv.push_back(v);
    std::vector<double> att(static_cast<size_t>(n_head) * hd, 0.0);
    for (int hh = 0; hh < n_head; ++hh) {
      const int g = hh / (n_head / n_kv);
      std::vector<double> sc(Kc.size());
      double mx = -1e300;
      for (size_t j = 0; j < sc.size(); ++j) {
        double d = 0;
        for (int i = 0; i < hd; ++i) d += q[hh * hd + i] * Kc[j][g * hd + i];
        sc[j] = d / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, sc[j]);
      }
      double sum = 0;
      for (double& s : sc) sum += (s = std::exp(s - mx));
      for (size_t j = 0; j < sc.size(); ++j)
        for (int i = 0; i < hd; ++i) att[hh * hd + i] += sc[j] / sum * Vv[j][g * hd + i];
    }
    for (size_t i = 0; i < gate.size(); ++i) att[i] *= sigmoid(gate[i]);
    return mul(L.wo, att);
  }

  // One token at the next position; returns its logits.
  std::vector<double> step(int32_t token) {
    std::vector<double> h(embd.w.begin() + token * D, embd.w.begin() + (token + 1) * D);
    last_layer_inputs.clear();
    for (int il = 0; il < n_layer; ++il) {
      const Layer& L = layers[il];
      last_layer_inputs.push_back(h);
      auto x = norm(h, L.attn_norm, eps);
      if (L.linear()) {
        const auto o = delta_net(il, x);
        for (int64_t i = 0; i < D; ++i) h[i] += o[i];
        moe_ffn(L, h);
        continue;
      }
      auto o = attend(L, K[il], Vc[il], x, pos);
      for (int64_t i = 0; i < D; ++i) h[i] += o[i];
      moe_ffn(L, h);
    }
    ++pos;
    last_hidden = norm(h, out_norm, eps);
    return mul(out, last_hidden);
  }

  // h += the layer's FFN (dense, or routed experts plus any shared expert).
  void moe_ffn(const Layer& L, std::vector<double>& h) const {
    {
      const auto x = norm(h, L.ffn_norm, eps);
      if (!n_expert) {
        auto y = ffn(L.gate, L.up, L.down, x);
        for (int64_t i = 0; i < D; ++i) h[i] += y[i];
        return;
      }
      if (!L.sh_gate.empty()) {
        const auto y = ffn(L.sh_gate, L.sh_up, L.sh_down, x);
        const double g = sigmoid(mul(L.sh_router, x)[0]);
        for (int64_t i = 0; i < D; ++i) h[i] += g * y[i];
      }
      auto logits = mul(L.router, x);
      std::vector<int> ids(n_expert);
      for (int e = 0; e < n_expert; ++e) ids[e] = e;
      std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return logits[a] > logits[b]; });
      double mx = logits[ids[0]], sum_all = 0, sum_k = 0;
      for (int e = 0; e < n_expert; ++e) sum_all += std::exp(logits[e] - mx);
      for (int j = 0; j < k; ++j) sum_k += std::exp(logits[ids[j]] - mx);
      for (int j = 0; j < k; ++j) {
        const double w = std::exp(logits[ids[j]] - mx) / (softmax_first && !renorm ? sum_all : sum_k);
        auto y = ffn(L.eg[ids[j]], L.eu[ids[j]], L.ed[ids[j]], x);
        for (int64_t i = 0; i < D; ++i) h[i] += w * y[i];
      }
    }
  }
};

}  // namespace ms::testref
