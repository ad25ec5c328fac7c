#include "engine/synthetic_model.h"
#include "engine/synthetic_dflash.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <tuple>
#include <string>
#include <variant>
#include <vector>

#include "engine/quant_presets.h"
#include "engine/router_locality.h"
#include "engine/synthetic_vocab.h"
#include "format/gguf.h"
#include "model/recipe.h"
#include "model/rope_yarn.h"
#include "model/tensor_table.h"
#include "quant/quant.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace ms {
namespace {

// The constant hidden channel that carries the router bias (see synthetic_model.h).
constexpr float kChannel = 2.0f;

// ---------------------------------------------------------------- random numbers
// Counter-based: every row has its own stream keyed by what the row *is*
// (layer, role, expert, row), so a seed gives the same weights whatever the
// thread count, chunking or expert layout.
inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t row_key(uint64_t seed, int layer, int role, int64_t expert, int64_t row) {
  uint64_t s = seed;
  uint64_t k = splitmix(s);
  s = k ^ (static_cast<uint64_t>(layer + 1) << 48) ^ (static_cast<uint64_t>(role) << 40);
  k = splitmix(s);
  s = k ^ static_cast<uint64_t>(expert) * 0x100000001b3ull;
  k = splitmix(s);
  s = k ^ static_cast<uint64_t>(row);
  return splitmix(s);
}

// ---------------------------------------------------------------- tensor plans
enum Role {
  kEmbd, kOutput, kNorm, kAttnQ, kAttnK, kAttnV, kAttnO, kBias, kGate, kUp, kDown, kRouter, kQkNorm,
  // qwen35moe: Gated DeltaNet's decay rate (ssm_a < 0), its conv taps and
  // small f32 projections (alpha, beta, the shared expert's gate vector).
  kSsmA, kConv, kSmallF32,
  // gpt-oss: biases that write into the residual stream (attn_output.bias,
  // ffn_down_exps.bias: element 0, the constant channel, stays zero), and the
  // attention sinks (one logit per head, O(1)).
  kResBias, kSinks,
};

struct Plan {
  std::string name;
  std::vector<int64_t> shape;
  DType type = DType::F32;
  Role role = kNorm;
  int layer = -1;
  int64_t expert0 = 0;      // expert of the first matrix (per-expert tensors)
  int64_t rows_per_mat = 1; // rows of one matrix (3-D tensors hold n_expert of them)
  int64_t merged_ff = 0;    // > 0: gate rows [0, F) then up rows [F, 2F) per expert
  float stddev = 0;
  bool zero_row0 = false;   // rows writing to the constant channel (and the context channels, with locality)
  char bias_of = 0;         // 'q', 'k', 'v': the attention's bias of that projection; 'r': the router's (gpt-oss)
  uint64_t nbytes() const { return static_cast<uint64_t>(row_bytes(type, shape[0])) * rows(); }
  int64_t rows() const {
    int64_t r = 1;
    for (size_t i = 1; i < shape.size(); ++i) r *= shape[i];
    return r;
  }
};

struct RouterBias {
  std::vector<std::vector<float>> per_layer;  // [layer][expert] bias / kChannel
  // Output head, column 0 (the constant channel), per token: a negative bias
  // for tokens that make unreadable text (stray UTF-8 continuation bytes,
  // filler tokens), so the tiny model's random text reads as words.
  std::vector<float> output_col0;
  // --router-locality (engine/router_locality.h): channels [1, ctx_end) hold
  // the context that head 0 of layer ctx_layer writes; empty without locality.
  int64_t ctx_end = 1;
  int64_t tok_end = 1;  // [ctx_end, tok_end): the embedding alone, what routers read of the token
  int64_t head_dim = 0;
  // The first layer with softmax attention over a window of tens of tokens
  // or more: 0, but for a hybrid's linear layers and gpt-oss's short windows.
  int ctx_layer = 0;
  // Where the context head's constant q and k come from: the q/k norms'
  // weight (qwen3moe, qwen35moe), a weight on the constant channel (no norm:
  // Mixtral), or the q/k biases (gpt-oss, exact whatever the input's scale).
  enum class QkFrom { Norm, Weight, Bias } qk_from = QkFrom::Norm;
  float qk_value = 1;   // on each window dim: that weight, or that bias
  bool gated_q = false;  // attn_q holds [q | output gate] per head (qwen35moe)
  // The residual's rms at the context layer's input over layer 0's: attn_norm
  // divides v by it, so the context head's output rows make up for it.
  float ctx_growth = 1;
  LocalityDesign loc;
  std::vector<uint8_t> window_dim;  // [head_dim]: the context head's q and k use this dim
  std::vector<float> value_rows;    // [head_dim][token channels]: orthonormal rows of the context head's v
  bool locality() const { return ctx_end > 1; }
  bool context_layer(const Plan& p) const { return locality() && p.layer == ctx_layer; }
  // Rows gen builds by hand (not from a row pool): the zeroed rows of the
  // residual writers and the context head.
  bool custom_row(const Plan& p, int64_t row) const {
    if (p.zero_row0 && row < tok_end) return true;
    if (!context_layer(p)) return false;
    if (p.role == kAttnQ) return row < (gated_q ? 2 : 1) * head_dim;
    if (p.role == kAttnK || p.role == kAttnV) return row < head_dim;
    return false;
  }
};

// The output gate of the context head (qwen35moe) reads the constant channel
// with this weight: sigmoid of the gate is then within 1e-3 of 1.
constexpr float kOpenGateWeight = 4.0f;
// The context head's sink logit (gpt-oss): far below any score, so the
// head's weights stay the window's.
constexpr float kClosedSinkLogit = -30.0f;

// n orthonormal rows of length m (n <= m), by Gram-Schmidt on uniform random rows.
std::vector<float> orthonormal_rows(int64_t n, int64_t m, uint64_t key) {
  std::vector<double> q(static_cast<size_t>(n * m));
  for (int64_t i = 0; i < n; ++i) {
    double* r = q.data() + i * m;
    for (int64_t j = 0; j < m; ++j) r[j] = static_cast<double>(splitmix(key) >> 11) * 0x1.0p-53 - 0.5;
    for (int pass = 0; pass < 2; ++pass)  // twice: orthogonal to rounding
      for (int64_t k = 0; k < i; ++k) {
        const double* o = q.data() + k * m;
        double dot = 0;
        for (int64_t j = 0; j < m; ++j) dot += r[j] * o[j];
        for (int64_t j = 0; j < m; ++j) r[j] -= dot * o[j];
      }
    double norm = 0;
    for (int64_t j = 0; j < m; ++j) norm += r[j] * r[j];
    for (int64_t j = 0; j < m; ++j) r[j] /= std::sqrt(norm);
  }
  return std::vector<float>(q.begin(), q.end());
}

// The context head (router_locality.h): q and k are constant on the
// window's dims (from the constant channel, or from their biases), v skips
// the constant channel, and attn_output copies the head into the context
// channels.
void fill_context_head_row(const Plan& p, int64_t row, const RouterBias& rb, float* out) {
  const int64_t n = p.shape[0];
  const int64_t hd = rb.head_dim;
  if (p.role == kAttnQ && row >= (rb.gated_q ? 2 : 1) * hd) return;
  if ((p.role == kAttnK || p.role == kAttnV) && row >= hd) return;
  if (p.role == kAttnQ && row >= hd) {  // head 0's output gate: open
    std::fill(out, out + n, 0.0f);
    out[0] = kOpenGateWeight;
  } else if (p.role == kAttnQ || p.role == kAttnK) {
    std::fill(out, out + n, 0.0f);
    if (rb.window_dim[static_cast<size_t>(row)] && rb.qk_from != RouterBias::QkFrom::Bias) out[0] = rb.qk_value;
  } else if (p.role == kBias && (p.bias_of == 'q' || p.bias_of == 'k' || p.bias_of == 'v')) {  // head 0's elements
    for (int64_t i = 0; i < std::min(n, hd); ++i)
      out[i] = p.bias_of != 'v' && rb.qk_from == RouterBias::QkFrom::Bias && rb.window_dim[static_cast<size_t>(i)]
                   ? rb.qk_value
                   : 0.0f;
  } else if (p.role == kSinks) {
    out[0] = kClosedSinkLogit;
  } else if (p.role == kAttnV) {
    // The token channels only, through an orthogonal matrix: the context is
    // then an isotropic average, and every expert's share of it is the same
    // (a random matrix's spread of singular values gave some experts several
    // times the design's context share).
    std::fill(out, out + n, 0.0f);
    const int64_t m = rb.tok_end - rb.ctx_end;
    if (row < rb.ctx_end - 1) std::copy_n(rb.value_rows.data() + row * m, m, out + rb.ctx_end);
  } else if (p.role == kAttnO && row >= 1 && row < rb.ctx_end) {
    std::fill(out, out + n, 0.0f);
    out[row - 1] = rb.loc.out_scale * rb.ctx_growth;
  }
}

void fill_row(const Plan& p, int64_t r, uint64_t seed, const RouterBias& rb, float* out) {
  const int64_t n = p.shape[0];
  if (p.role == kNorm || p.role == kQkNorm) {
    std::fill(out, out + n, 1.0f);
    // Layer 0's q/k norms set the context head's window amplitude (the
    // other heads see the same gain on those few dims; it is near 1).
    if (p.role == kQkNorm && rb.context_layer(p) && rb.qk_from == RouterBias::QkFrom::Norm && n == rb.head_dim)
      for (int64_t i = 0; i < n; ++i)
        if (rb.window_dim[static_cast<size_t>(i)]) out[i] = rb.loc.qk_norm_gain;
    return;
  }
  int64_t expert = p.expert0 + r / p.rows_per_mat, row = r % p.rows_per_mat;
  Role role = p.role;
  if (p.merged_ff > 0) {
    role = row < p.merged_ff ? kGate : kUp;
    row %= p.merged_ff;
  }
  if (p.zero_row0 && row < rb.tok_end && !(row > 0 && row < rb.ctx_end && rb.context_layer(p) && p.role == kAttnO)) {
    std::fill(out, out + n, 0.0f);
    return;
  }
  uint64_t s = row_key(seed, p.layer, role, expert, row);
  const float a = p.stddev * 1.7320508f;  // U(-a, a) has standard deviation a / sqrt(3)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits = splitmix(s);
    out[i] = a * (static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
  // ssm_a = -A with A in (0.05, 4.05): decays from slow to fast per head.
  if (role == kSsmA)
    for (int64_t i = 0; i < n; ++i) out[i] = -(2.05f + out[i] / a * 2.0f);
  if (role == kResBias) out[0] = 0.0f;
  if (role == kEmbd) out[0] = kChannel;
  if (rb.locality()) {
    if (role == kEmbd || role == kOutput) std::fill(out + 1, out + rb.ctx_end, 0.0f);
    // Biases that add to the residual (gpt-oss) leave the context and token
    // channels alone, as the output projections' rows do.
    if (role == kResBias) std::fill(out, out + std::min(n, rb.tok_end), 0.0f);
    // The static skew is --router-skew's (the design counts it); a random
    // router bias (gpt-oss) would add more, growing with depth as the
    // normalised logits shrink.
    if (p.bias_of == 'r') std::fill(out, out + n, 0.0f);
    // Token pairs (2j, 2j+1) have opposite token channels, so those channels
    // average to zero over the vocabulary: a mean would be a constant part of
    // every token's router input and of the context's average (static skew
    // and extra repeats that the design does not count).
    if (role == kEmbd && row % 2 == 1) {
      std::vector<float> even(static_cast<size_t>(n));
      fill_row(p, r - 1, seed, rb, even.data());
      for (int64_t i = rb.ctx_end; i < rb.tok_end; ++i) out[i] = -even[static_cast<size_t>(i)];
    }
    if (role == kRouter) {
      // Each part scaled to the design's norm exactly: experts whose context
      // part happened to be larger would repeat more than the design says
      // (and the overlap grows faster than linearly with that share).
      double ctx2 = 0, tok2 = 0;
      for (int64_t i = 1; i < rb.ctx_end; ++i) ctx2 += double(out[i]) * out[i];
      for (int64_t i = rb.ctx_end; i < rb.tok_end; ++i) tok2 += double(out[i]) * out[i];
      const double m_ctx = double(rb.ctx_end - 1), m_tok = double(rb.tok_end - rb.ctx_end);
      // Before the context head's layer there is no context to read.
      const bool has_ctx = p.layer >= rb.ctx_layer;
      const double tok_std = has_ctx ? rb.loc.router_tok_std : rb.loc.router_tok_std_alone;
      const float ctx = has_ctx && ctx2 > 0 ? static_cast<float>(rb.loc.router_ctx_std * std::sqrt(m_ctx / ctx2)) : 0.0f;
      const float tok = tok2 > 0 ? static_cast<float>(tok_std * std::sqrt(m_tok / tok2)) : 0.0f;
      for (int64_t i = 1; i < n; ++i) out[i] *= i < rb.ctx_end ? ctx : i < rb.tok_end ? tok : 0.0f;
    }
    if (rb.context_layer(p)) fill_context_head_row(p, row, rb, out);
  }
  if (role == kRouter) out[0] = rb.per_layer[static_cast<size_t>(p.layer)][static_cast<size_t>(row)];
  if (role == kOutput && !rb.output_col0.empty()) out[0] += rb.output_col0[static_cast<size_t>(row)];
}

// How gen draws a dense tensor of the table, by the field it binds to:
// norms are ones, projections uniform with the standard deviation that keeps
// activations O(1), and the rows that write the residual's constant channel
// (row 0 of every output projection) zero.
struct Draw {
  Role role = kNorm;
  float stddev = 0;
  bool zero_row0 = false;
  char bias_of = 0;  // Plan::bias_of
};

Draw draw_of_field(TensorView LayerWeights::*f, const GenShape& s, float res_scale, float inv_d, float down_std) {
  using W = LayerWeights;
  const int64_t q_dim = s.n_head * int64_t{s.head_dim};
  const int64_t value_dim = int64_t{s.ssm_v_heads} * s.ssm_head_v;
  if (f == &W::attn_norm || f == &W::ffn_norm || f == &W::ssm_dt) return {kNorm, 0};  // ssm_dt: ones, as the reference initialises dt_bias
  if (f == &W::q_norm || f == &W::k_norm || f == &W::ssm_norm) return {kQkNorm, 0};
  if (f == &W::wq || f == &W::ssm_qkv) return {kAttnQ, inv_d};
  if (f == &W::wk) return {kAttnK, inv_d};
  if (f == &W::wv || f == &W::ssm_z) return {kAttnV, inv_d};
  if (f == &W::wo) return {kAttnO, res_scale / std::sqrt(static_cast<float>(q_dim)), true};
  if (f == &W::ssm_out) return {kAttnO, res_scale / std::sqrt(static_cast<float>(value_dim)), true};
  if (f == &W::bq) return {kBias, 0.02f, false, 'q'};
  if (f == &W::bk) return {kBias, 0.02f, false, 'k'};
  if (f == &W::bv) return {kBias, 0.02f, false, 'v'};
  if (f == &W::bo) return {kResBias, 0.02f};
  if (f == &W::attn_sinks) return {kSinks, 1.0f};
  if (f == &W::ssm_beta || f == &W::ssm_alpha || f == &W::shexp_router) return {kSmallF32, inv_d};
  if (f == &W::ssm_a) return {kSsmA, 1.0f};
  if (f == &W::ssm_conv) return {kConv, 1.0f / std::sqrt(static_cast<float>(s.ssm_conv_kernel))};
  if (f == &W::ffn_gate || f == &W::shexp_gate) return {kGate, inv_d};
  if (f == &W::ffn_up || f == &W::shexp_up) return {kUp, inv_d};
  if (f == &W::ffn_down) return {kDown, down_std, true};
  if (f == &W::shexp_down) return {kDown, res_scale / std::sqrt(static_cast<float>(s.n_ff_shexp)), true};
  if (f == &W::router) return {kRouter, inv_d};
  if (f == &W::router_b) return {kBias, 0.1f, false, 'r'};
  throw Error("gen: no way to draw a tensor the tensor table lists (a new field in model/tensor_table.cpp?)");
}

// How gen draws any tensor of the table: globals, routed experts (as the
// dense FFN's gate, up and down; gpt-oss's biases one row per expert) and an
// MTP block's nextn tensors (eh_proj maps 2 * n_embd inputs to the residual).
Draw draw_of(const LayerTensorSpec& t, const GenShape& s, float res_scale, float inv_d, float down_std) {
  using K = LayerTensorSpec::Kind;
  switch (t.kind) {
    case K::Dense:
      return draw_of_field(t.field, s, res_scale, inv_d, down_std);
    case K::Global:
      if (t.global == &ModelWeights::token_embd) return {kEmbd, 1.0f};
      if (t.global == &ModelWeights::output) return {kOutput, inv_d};
      return {kNorm, 0};
    case K::Expert:
      switch (t.part) {
        case ExpertPart::Gate:
        case ExpertPart::GateUp: return {kGate, inv_d};
        case ExpertPart::Up: return {kUp, inv_d};
        case ExpertPart::Down: return {kDown, down_std, true};
        case ExpertPart::GateBias:
        case ExpertPart::UpBias: return {kBias, 0.1f};
        case ExpertPart::DownBias: return {kResBias, 0.02f};
      }
      break;
    case K::Mtp:
      if (t.mtp == &MtpWeights::eh_proj) return {kAttnO, 1.0f / std::sqrt(2.0f * static_cast<float>(s.n_embd))};
      if (t.mtp == &MtpWeights::enorm || t.mtp == &MtpWeights::hnorm || t.mtp == &MtpWeights::shared_head_norm)
        return {kNorm, 0};
      break;
  }
  throw Error("gen: no way to draw '" + t.name + "', a tensor the tensor table lists (model/tensor_table.cpp)");
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

namespace {

// gpt-oss-20b / -120b as published (config.json of openai/gpt-oss-*), and a
// tiny one with every part of the recipe: biases everywhere, sinks, a window
// of 8 on the even layers (short prompts cross it), YaRN.
GenShape gpt_oss_preset(const std::string& preset, const std::string& preset_in) {
  GenShape s;
  s.gguf_arch = "gpt-oss";
  s.rms_eps = 1e-5f;
  s.rope_base = 150000.0f;
  s.yarn_factor = 32.0f;
  s.yarn_orig_ctx = 4096;
  if (preset == "tiny") {
    s.name = "tiny-gpt-oss";
    s.n_layer = 4;
    s.n_embd = 128;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.head_dim = 64;  // q_dim 256 != n_embd, as in the real ones (4096 vs 2880)
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 128;
    s.n_vocab = 512;
    s.n_ctx = 2048;
    s.sliding_window = 8;
  } else if (preset == "gpt-oss-20b" || preset == "gpt-oss-120b") {
    const bool big = preset == "gpt-oss-120b";
    s.name = big ? "synthetic gpt-oss-120b" : "synthetic gpt-oss-20b";
    s.n_layer = big ? 36 : 24;
    s.n_embd = 2880;
    s.n_head = 64;
    s.n_head_kv = 8;
    s.head_dim = 64;
    s.n_expert = big ? 128 : 32;
    s.n_expert_used = 4;
    s.n_ff_exp = 2880;
    s.n_vocab = 201088;
    s.n_ctx = 131072;
    s.sliding_window = 128;
  } else {
    throw Error("gen: gpt-oss presets are tiny, gpt-oss-20b and gpt-oss-120b (not '" + preset_in + "')");
  }
  s.n_ff = s.n_ff_exp;
  return s;
}

}  // namespace

GenShape gen_preset(const std::string& arch_in, const std::string& preset_in) {
  const std::string arch = lower(arch_in), preset = lower(preset_in);
  const bool moe = arch == "qwen3moe" || arch == "mixtral" || arch == "qwen35moe" || arch == "gpt-oss";
  if (!moe && arch != "qwen3" && arch != "qwen2" && arch != "llama")
    throw Error("gen: unknown --arch '" + arch_in +
                "' (qwen3moe, qwen35moe, mixtral, gpt-oss, or dense qwen3, qwen2, llama)");
  GenShape s;
  s.gguf_arch = arch == "mixtral" ? "llama" : arch;
  if (arch == "gpt-oss") return gpt_oss_preset(preset, preset_in);
  if (preset == "gpt-oss-20b" || preset == "gpt-oss-120b")
    throw Error("gen: preset " + preset + " is a gpt-oss model (use --arch gpt-oss)");
  if (arch == "qwen35moe" && preset != "tiny" && preset != "qwen3.6-35b-a3b")
    throw Error("gen: qwen35moe presets are tiny and qwen3.6-35b-a3b");
  if (arch == "qwen35moe" && preset == "tiny") {
    // Every part of the real recipe at test size: 4 layers (3 Gated DeltaNet,
    // 1 attention), 16 experts (top 4) plus a shared expert, 2 key heads
    // serving 4 value heads, partial RoPE, one MTP block.
    s.name = "tiny-qwen35moe";
    s.n_layer = 4;
    s.n_embd = 256;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.head_dim = 64;
    s.n_rot = 16;
    s.n_ff = 256;
    s.n_vocab = 512;
    s.n_ctx = 2048;
    s.rope_base = 1e7f;
    s.n_expert = 16;
    s.n_expert_used = 4;
    s.n_ff_exp = 256;
    s.n_ff_shexp = 256;
    s.full_attn_interval = 4;
    s.ssm_conv_kernel = 4;
    s.ssm_k_heads = 2;
    s.ssm_v_heads = 4;
    s.ssm_head_k = 32;
    s.ssm_head_v = 32;
    s.n_mtp = 1;
    return s;
  }
  if (preset == "qwen3.6-35b-a3b") {
    if (arch != "qwen35moe") throw Error("gen: preset qwen3.6-35b-a3b is a qwen35moe model (use --arch qwen35moe)");
    // Qwen3.6-35B-A3B's text model (Qwen3.5-35B-A3B has the same shapes).
    s.name = "synthetic Qwen3.6-35B-A3B";
    s.n_layer = 40;
    s.n_embd = 2048;
    s.n_head = 16;
    s.n_head_kv = 2;
    s.head_dim = 256;
    s.n_rot = 64;
    s.n_ff = 512;
    s.n_expert = 256;
    s.n_expert_used = 8;
    s.n_ff_exp = 512;
    s.n_ff_shexp = 512;
    s.n_vocab = 248320;
    s.n_ctx = 262144;
    s.rope_base = 1e7f;
    s.full_attn_interval = 4;
    s.ssm_conv_kernel = 4;
    s.ssm_k_heads = 16;
    s.ssm_v_heads = 32;
    s.ssm_head_k = 128;
    s.ssm_head_v = 128;
    s.n_mtp = 1;
    return s;
  }
  if (preset == "tiny") {
    s.name = "tiny-" + arch;
    s.n_layer = 4;
    s.n_embd = 256;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.head_dim = 64;
    s.n_ff = 512;
    s.n_vocab = 512;
    s.n_ctx = 2048;
    s.rope_base = 1e6f;
    s.rms_eps = 1e-6f;
    if (moe) {
      s.n_expert = 8;
      s.n_expert_used = 2;
      s.n_ff_exp = 256;
    }
  } else if (preset == "qwen3-30b-a3b") {
    if (arch != "qwen3moe") throw Error("gen: preset qwen3-30b-a3b is a qwen3moe model (use --arch qwen3moe)");
    s.name = "synthetic Qwen3-30B-A3B";
    s.n_layer = 48;
    s.n_embd = 2048;
    s.n_head = 32;
    s.n_head_kv = 4;
    s.head_dim = 128;
    s.n_ff = 6144;
    s.n_expert = 128;
    s.n_expert_used = 8;
    s.n_ff_exp = 768;
    s.n_vocab = 151936;
    s.n_ctx = 40960;
    s.rope_base = 1e6f;
    s.rms_eps = 1e-6f;
  } else if (preset == "mixtral-8x7b") {
    if (arch != "mixtral") throw Error("gen: preset mixtral-8x7b is a mixtral model (use --arch mixtral)");
    s.name = "synthetic Mixtral-8x7B";
    s.n_layer = 32;
    s.n_embd = 4096;
    s.n_head = 32;
    s.n_head_kv = 8;
    s.head_dim = 128;
    s.n_ff = 14336;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 14336;
    s.n_vocab = 32000;
    s.n_ctx = 32768;
    s.rope_base = 1e6f;
    s.rms_eps = 1e-5f;
  } else {
    throw Error("gen: unknown --preset '" + preset_in +
                "' (tiny, qwen3-30b-a3b, qwen3.6-35b-a3b, mixtral-8x7b, gpt-oss-20b, gpt-oss-120b)");
  }
  return s;
}

ModelConfig gen_model_config(const GenShape& s) {
  ModelConfig c;
  c.arch_name = s.gguf_arch;
  c.arch = &arch_info(s.gguf_arch);
  c.n_layer = s.n_layer;
  c.n_layer_mtp = s.n_mtp;
  c.n_embd = s.n_embd;
  c.n_head = s.n_head;
  c.n_head_kv = s.n_head_kv;
  c.head_dim = s.head_dim;
  c.n_rot = s.n_rot > 0 ? s.n_rot : s.head_dim;
  c.n_vocab = s.n_vocab;
  c.n_ctx_train = s.n_ctx;
  c.n_ff = s.n_ff;
  c.n_expert = s.n_expert;
  c.n_expert_used = s.n_expert_used;
  c.n_ff_exp = s.n_ff_exp;
  c.n_ff_shexp = s.n_ff_shexp;
  c.rms_eps = s.rms_eps;
  c.rope_base = s.rope_base;
  if (c.arch->linear_attention) {
    for (int il = 0; il < s.n_layer; ++il) c.linear_layer.push_back((il + 1) % s.full_attn_interval != 0);
    c.lin.conv_kernel = s.ssm_conv_kernel;
    c.lin.n_k_heads = s.ssm_k_heads;
    c.lin.n_v_heads = s.ssm_v_heads;
    c.lin.head_k = s.ssm_head_k;
    c.lin.head_v = s.ssm_head_v;
  }
  if (c.arch->swa_pattern > 0 && s.sliding_window > 0) {
    c.n_swa = s.sliding_window;
    for (int il = 0; il < s.n_layer; ++il) c.swa_layer.push_back(il % c.arch->swa_pattern < c.arch->swa_pattern - 1);
  }
  return c;
}

namespace {

// The layer whose head 0 is --router-locality's context head: the first with
// softmax attention whose window (if any) spans the context's tens of tokens.
int context_head_layer(const ModelConfig& c) {
  constexpr int64_t kMinWindow = 128;
  for (int il = 0; il < c.n_layer; ++il)
    if (!c.is_linear(il) && (!c.is_swa(il) || c.n_swa >= kMinWindow)) return il;
  throw Error("gen: --router-locality: no layer has softmax attention over a long enough window");
}

}  // namespace

GenResult generate_model(const GenOptions& opt, const std::string& path, ThreadPool& pool) {
  if (opt.arch == "dflash") return generate_dflash(opt, path);  // a drafter, not a target
  GenShape s = gen_preset(opt.arch, opt.preset);
  if (opt.n_layer > 0) s.n_layer = opt.n_layer;
  if (opt.n_ctx > 0) s.n_ctx = opt.n_ctx;
  if (opt.n_expert > 0 || opt.n_expert_used > 0) {
    if (s.n_expert == 0) throw Error("gen: --experts/--experts-used need an MoE architecture");
    if (opt.n_expert > 0) s.n_expert = opt.n_expert;
    if (opt.n_expert_used > 0) s.n_expert_used = opt.n_expert_used;
    if (s.n_expert > 1024 || s.n_expert_used > s.n_expert)
      throw Error("gen: --experts must be in 1..1024 and --experts-used at most --experts");
  }
  if (!(opt.router_skew >= 0.0) || opt.router_skew > 16.0) throw Error("gen: --router-skew must be in [0, 16]");
  if (!(opt.router_locality >= 0.0 && opt.router_locality <= 1.0))
    throw Error("gen: --router-locality must be in [0, 1]");
  const std::string layout = lower(opt.layout);
  if (layout != "stacked" && layout != "merged" && layout != "per-expert")
    throw Error("gen: unknown --layout '" + opt.layout + "' (stacked, merged, per-expert)");
  const QuantScheme scheme = parse_quant_scheme(opt.quant, opt.pure);  // validates the name early
  const bool gpt_oss = s.gguf_arch == "gpt-oss";
  if (gpt_oss && layout != "stacked")
    throw Error("gen: gpt-oss files have stacked experts (--layout stacked), not " + layout);

  const bool moe = s.n_expert > 0;
  const std::string A = s.gguf_arch;
  const int L = s.n_layer;
  const int64_t D = s.n_embd, V = s.n_vocab, hd = s.head_dim;
  const bool hybrid = A == "qwen35moe";
  const float res_scale = 1.0f / std::sqrt(2.0f * static_cast<float>(L));
  const float inv_d = 1.0f / std::sqrt(static_cast<float>(D));

  // ---- the tensors, in file order
  std::vector<Plan> plans;
  auto add = [&](std::string name, std::vector<int64_t> shape, Role role, int layer, float stddev) -> Plan& {
    Plan p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.role = role;
    p.layer = layer;
    p.stddev = stddev;
    p.rows_per_mat = p.shape.size() > 1 ? p.shape[1] : 1;  // 3-D: n_expert matrices of shape[1] rows
    plans.push_back(p);
    return plans.back();
  };
  // Every tensor, its name, shape and place in the file from the tensor table
  // (model/tensor_table.h: the blocks the recipe runs, the experts in the
  // chosen layout, the MTP blocks' nextn tensors); gen chooses only how each
  // is drawn.
  const ModelConfig cfg = gen_model_config(s);
  const ExpertLayout expert_layout = layout == "merged"       ? ExpertLayout::Merged
                                     : layout == "per-expert" ? ExpertLayout::PerExpert
                                                              : ExpertLayout::Stacked;
  const float down_std = res_scale / std::sqrt(static_cast<float>(moe ? s.n_ff_exp : s.n_ff));
  std::vector<LayerTensorSpec> table;
  try {
    table = model_tensor_table(cfg, expert_layout, s.tied_output);
  } catch (const Error& e) {
    throw Error(std::string("gen: ") + e.what());
  }
  for (const LayerTensorSpec& t : table) {
    const Draw d = draw_of(t, s, res_scale, inv_d, down_std);
    Plan& p = add(t.name, t.shape, d.role, t.layer, d.stddev);
    p.zero_row0 = d.zero_row0;
    p.bias_of = d.bias_of;
    p.expert0 = std::max(t.expert, 0);  // a per-expert matrix draws as its expert
    if (t.kind == LayerTensorSpec::Kind::Expert && t.part == ExpertPart::GateUp) p.merged_ff = s.n_ff_exp;
  }

  // ---- types: the scheme's choice per tensor, in file order (some rules count tensors)
  {
    std::vector<std::string> names;
    for (const Plan& p : plans) names.push_back(p.name);
    MixModel mm;
    mm.n_layer = L + s.n_mtp;
    mm.n_expert = s.n_expert;
    mm.n_head = s.n_head;
    mm.n_head_kv = s.n_head_kv;
    MixPlanner planner(scheme, mm, names);
    for (Plan& p : plans) {
      p.type = planner.choose(p.name, p.shape, DType::F32).type;
      if (!type_info(p.type).computable)
        throw Error("gen: --quant " + opt.quant + " stores " + p.name + " as " + type_name(p.type) +
                    ", which moestream cannot compute with (yet)");
    }
  }

  // ---- router bias: Zipf(S) over a random ranking of each layer's experts
  RouterBias rb;
  if (moe) {
    rb.per_layer.resize(static_cast<size_t>(L + s.n_mtp));
    for (int il = 0; il < L + s.n_mtp; ++il) {
      std::vector<int> rank(static_cast<size_t>(s.n_expert));
      std::iota(rank.begin(), rank.end(), 0);
      uint64_t st = row_key(opt.seed, il, 99, 0, 0);
      for (size_t i = rank.size() - 1; i > 0; --i) std::swap(rank[i], rank[splitmix(st) % (i + 1)]);
      auto& bias = rb.per_layer[static_cast<size_t>(il)];
      bias.resize(rank.size());
      for (size_t e = 0; e < rank.size(); ++e)
        bias[e] = static_cast<float>(-opt.router_skew * std::log(rank[e] + 1.0) / kChannel);
    }
  }

  if (opt.router_locality > 0) {
    LocalityShape ls;
    ls.n_expert = s.n_expert;
    ls.k = s.n_expert_used;
    ls.skew = opt.router_skew;
    ls.head_dim = s.head_dim;
    ls.n_rot = s.n_rot > 0 ? s.n_rot : s.head_dim;
    ls.rope_base = s.rope_base;
    if (s.yarn_factor > 0) {  // as the loader reads the file's rope.scaling keys (model/rope_scaling.h)
      YarnParams y;
      y.factor = s.yarn_factor;
      y.n_rot = ls.n_rot;
      y.n_ctx_orig = s.yarn_orig_ctx;
      y.theta_base = s.rope_base;
      ls.rope_scaling = yarn_scaling(y);
    }
    ls.n_embd = s.n_embd;
    rb.loc = design_router_locality(opt.router_locality, ls);
    rb.ctx_layer = context_head_layer(cfg);
    const auto has = [&](TensorView LayerWeights::*f) {
      return std::any_of(table.begin(), table.end(), [&](const LayerTensorSpec& t) {
        return t.kind == LayerTensorSpec::Kind::Dense && t.field == f && t.layer == rb.ctx_layer;
      });
    };
    const double per_dim = std::sqrt(static_cast<double>(s.head_dim) / static_cast<double>(rb.loc.rope_dims.size())) *
                           rb.loc.qk_norm_gain;  // q and k on a window dim, as the norm would leave them
    if (has(&LayerWeights::q_norm)) {
      rb.qk_from = RouterBias::QkFrom::Norm;
      rb.qk_value = 1.0f;
    } else if (has(&LayerWeights::bq)) {
      rb.qk_from = RouterBias::QkFrom::Bias;
      rb.qk_value = static_cast<float>(per_dim);
    } else {  // the constant channel after attn_norm reads kChannel / rms
      rb.qk_from = RouterBias::QkFrom::Weight;
      rb.qk_value = static_cast<float>(per_dim * rb.loc.attn_input_rms / kChannel);
    }
    for (const Plan& p : plans)
      if (p.role == kAttnQ && p.layer == rb.ctx_layer) rb.gated_q = p.rows() == 2 * int64_t{s.n_head} * s.head_dim;
    // The layers before it grow the residual: a linear-attention layer's
    // output is RMS-normalised (not an average of values, as attention's is)
    // and adds about kLinearLayerVariance x res_scale^2 per channel, which
    // dominates; fitted on the tiny hybrid (its fourth layer then repeats at
    // the asked rate). gpt-oss's first layer adds too little to count.
    constexpr double kLinearLayerVariance = 2.2;
    int linear_before = 0;
    for (int il = 0; il < rb.ctx_layer; ++il) linear_before += cfg.is_linear(il) ? 1 : 0;
    rb.ctx_growth = static_cast<float>(
        std::sqrt(1.0 + kLinearLayerVariance * linear_before * double(res_scale) * res_scale));
    rb.ctx_end = 1 + rb.loc.ctx_channels;
    rb.tok_end = rb.ctx_end + rb.loc.tok_channels;
    rb.head_dim = s.head_dim;
    rb.window_dim.assign(static_cast<size_t>(s.head_dim), 0);
    // Pair i's first dim: i (NeoX, halves) or 2i (adjacent pairs: llama, Mixtral).
    for (int i : rb.loc.rope_dims)
      rb.window_dim[static_cast<size_t>(cfg.arch->rope_mode == RopeMode::Neox ? i : 2 * i)] = 1;
    rb.value_rows = orthonormal_rows(rb.loc.ctx_channels, rb.loc.tok_channels, row_key(opt.seed, 0, 98, 0, 0));
  }

  const Vocab vocab = make_synthetic_vocab(static_cast<int32_t>(V));
  rb.output_col0.assign(static_cast<size_t>(V), 0.0f);
  for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
    const bool high_byte = id >= 128 && id < 256;  // ids 0..255 are the bytes
    const bool filler = vocab.tokens[static_cast<size_t>(id)].rfind("\xC4\xA0w", 0) == 0 &&  // "Ġw<N>"
                        vocab.tokens[static_cast<size_t>(id)].size() > 3 &&
                        std::isdigit(static_cast<unsigned char>(vocab.tokens[static_cast<size_t>(id)][3]));
    if (high_byte) rb.output_col0[static_cast<size_t>(id)] = -3.0f;
    if (filler) rb.output_col0[static_cast<size_t>(id)] = -1.5f;
  }

  // ---- metadata
  GgufWriter w(path);
  w.set("general.architecture", GgufValue::of_string(A));
  w.set("general.name", GgufValue::of_string(s.name));
  w.set("general.quantization_version", GgufValue::of_u32(2));
  w.set("general.file_type", GgufValue::of_u32(static_cast<uint32_t>(scheme.ftype)));
  w.set(A + ".block_count", GgufValue::of_u32(static_cast<uint32_t>(L + s.n_mtp)));
  w.set(A + ".context_length", GgufValue::of_u32(static_cast<uint32_t>(s.n_ctx)));
  w.set(A + ".embedding_length", GgufValue::of_u32(static_cast<uint32_t>(D)));
  w.set(A + ".feed_forward_length", GgufValue::of_u32(static_cast<uint32_t>(moe && A == "llama" ? s.n_ff_exp : s.n_ff)));
  w.set(A + ".attention.head_count", GgufValue::of_u32(static_cast<uint32_t>(s.n_head)));
  w.set(A + ".attention.head_count_kv", GgufValue::of_u32(static_cast<uint32_t>(s.n_head_kv)));
  w.set(A + ".attention.key_length", GgufValue::of_u32(static_cast<uint32_t>(hd)));
  w.set(A + ".attention.value_length", GgufValue::of_u32(static_cast<uint32_t>(hd)));
  w.set(A + ".attention.layer_norm_rms_epsilon", GgufValue::of_f32(s.rms_eps));
  w.set(A + ".rope.freq_base", GgufValue::of_f32(s.rope_base));
  w.set(A + ".rope.dimension_count", GgufValue::of_u32(static_cast<uint32_t>(s.n_rot > 0 ? s.n_rot : hd)));
  w.set(A + ".vocab_size", GgufValue::of_u32(static_cast<uint32_t>(V)));
  if (moe) {
    w.set(A + ".expert_count", GgufValue::of_u32(static_cast<uint32_t>(s.n_expert)));
    w.set(A + ".expert_used_count", GgufValue::of_u32(static_cast<uint32_t>(s.n_expert_used)));
    if (A == "qwen3moe" || hybrid || gpt_oss)
      w.set(A + ".expert_feed_forward_length", GgufValue::of_u32(static_cast<uint32_t>(s.n_ff_exp)));
  }
  if (s.sliding_window > 0)
    w.set(A + ".attention.sliding_window", GgufValue::of_u32(static_cast<uint32_t>(s.sliding_window)));
  if (s.yarn_factor > 0) {
    w.set(A + ".rope.scaling.type", GgufValue::of_string("yarn"));
    w.set(A + ".rope.scaling.factor", GgufValue::of_f32(s.yarn_factor));
    w.set(A + ".rope.scaling.original_context_length", GgufValue::of_u32(static_cast<uint32_t>(s.yarn_orig_ctx)));
  }
  if (hybrid) {
    w.set(A + ".expert_shared_feed_forward_length", GgufValue::of_u32(static_cast<uint32_t>(s.n_ff_shexp)));
    w.set(A + ".full_attention_interval", GgufValue::of_u32(static_cast<uint32_t>(s.full_attn_interval)));
    w.set(A + ".ssm.conv_kernel", GgufValue::of_u32(static_cast<uint32_t>(s.ssm_conv_kernel)));
    w.set(A + ".ssm.state_size", GgufValue::of_u32(static_cast<uint32_t>(s.ssm_head_k)));
    w.set(A + ".ssm.group_count", GgufValue::of_u32(static_cast<uint32_t>(s.ssm_k_heads)));
    w.set(A + ".ssm.time_step_rank", GgufValue::of_u32(static_cast<uint32_t>(s.ssm_v_heads)));
    w.set(A + ".ssm.inner_size", GgufValue::of_u32(static_cast<uint32_t>(s.ssm_v_heads * s.ssm_head_v)));
    // MRoPE sections as the real files carry them (text positions make them
    // plain RoPE: every section sees the same position).
    const int half = (s.n_rot > 0 ? s.n_rot : static_cast<int>(hd)) / 2;
    const int32_t a = half * 11 / 32, b = half * 11 / 32;
    w.set(A + ".rope.dimension_sections", GgufValue::of_i32s({a, b, half - a - b, 0}));
    if (s.n_mtp > 0) w.set(A + ".nextn_predict_layers", GgufValue::of_u32(static_cast<uint32_t>(s.n_mtp)));
  }
  w.set("moestream.synthetic.seed", GgufValue::of_u64(opt.seed));
  w.set("moestream.synthetic.router_skew", GgufValue::of_f32(static_cast<float>(opt.router_skew)));
  if (opt.router_locality > 0)
    w.set("moestream.synthetic.router_locality", GgufValue::of_f32(static_cast<float>(opt.router_locality)));
  w.set("moestream.synthetic.quant", GgufValue::of_string(scheme.name));
  if (scheme.pure) w.set("moestream.synthetic.pure", GgufValue::of_bool(true));
  w.set("moestream.synthetic.layout", GgufValue::of_string(layout));
  write_vocab_metadata(w, vocab);

  GenResult res;
  res.shape = s;
  std::map<std::string, int> type_count;
  for (const Plan& p : plans) {
    w.add_tensor(p.name, p.type, p.shape);
    ++type_count[type_name(p.type)];
    res.file_bytes += p.nbytes();
  }
  for (const auto& [t, n] : type_count) res.mix += (res.mix.empty() ? "" : ", ") + t + " " + std::to_string(n);
  res.n_tensors = plans.size();
  const uint64_t total = res.file_bytes;
  w.write_header();

  // ---- row pools (large models): quantizing 30 billion weights with the
  // reference quantizer would take an hour, so big quantized tensors draw
  // their rows from a pool of pre-quantized random rows per (role, type,
  // width), picked by the row's key. Memory traffic and shapes are what
  // matter for benchmarks; each expert is still a different matrix.
  int64_t total_elements = 0;
  for (const Plan& p : plans) total_elements += p.rows() * p.shape[0];
  const int64_t pool_rows = opt.pool_rows >= 0 ? opt.pool_rows : (total_elements > (int64_t{1} << 28) ? 4096 : 0);
  // Keyed by what decides a row's distribution: role, type, width and scale
  // (an MTP projection shares attn_output's role and width, not its scale).
  std::map<std::tuple<int, DType, int64_t, float>, std::vector<uint8_t>> row_pools;
  // Every tensor of a few hundred rows or more: attention too (a layer's
  // attn_q has as many rows as a pool, and quantizing it afresh in each of 48
  // layers was 90% of the time of a Qwen3-30B-A3B file).
  auto pooled = [&](const Plan& p) {
    return pool_rows > 0 && p.role != kRouter && p.role != kNorm && p.role != kQkNorm && p.role != kBias &&
           p.type != DType::F32 && p.rows() >= std::min<int64_t>(pool_rows, 256);
  };
  auto pool_for = [&](const Plan& p) -> const std::vector<uint8_t>& {
    const int role = p.merged_ff > 0 ? kGate : p.role;  // gate and up share a distribution
    auto key = std::make_tuple(role == kUp ? int{kGate} : role, p.type, p.shape[0], p.stddev);
    auto it = row_pools.find(key);
    if (it != row_pools.end()) return it->second;
    std::vector<uint8_t>& buf = row_pools[key];
    const int64_t n = p.shape[0], rb_out = row_bytes(p.type, n);
    buf.resize(static_cast<size_t>(pool_rows * rb_out));
    Plan proto = p;
    proto.layer = -2;
    proto.expert0 = 0;
    proto.rows_per_mat = pool_rows;
    proto.merged_ff = 0;
    proto.zero_row0 = false;
    proto.role = static_cast<Role>(role == kUp ? int{kGate} : role);
    pool.parallel_for(pool_rows, 16, [&](int64_t b, int64_t e) {
      std::vector<float> row(static_cast<size_t>(n));
      for (int64_t r = b; r < e; ++r) {
        fill_row(proto, r, opt.seed, rb, row.data());
        quantize_row_ref(p.type, row.data(), buf.data() + r * rb_out, n);
      }
    });
    return buf;
  };

  // ---- data, a chunk of rows at a time
  constexpr int64_t kChunkBytes = 32 << 20;
  std::vector<uint8_t> chunk;
  uint64_t written = 0;
  for (const Plan& p : plans) {
    const int64_t n = p.shape[0], rows = p.rows(), rb_out = row_bytes(p.type, n);
    const int64_t per_chunk = std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(rb_out, 1));
    const std::vector<uint8_t>* row_pool = pooled(p) ? &pool_for(p) : nullptr;
    for (int64_t r0 = 0; r0 < rows; r0 += per_chunk) {
      const int64_t nr = std::min(per_chunk, rows - r0);
      chunk.resize(static_cast<size_t>(nr * rb_out));
      pool.parallel_for(nr, std::max<int64_t>(1, nr / (8 * pool.size())), [&](int64_t b, int64_t e) {
        std::vector<float> row(static_cast<size_t>(n));
        for (int64_t r = b; r < e; ++r) {
          const int64_t fr = r0 + r;
          if (row_pool) {
            const int64_t expert = p.expert0 + fr / p.rows_per_mat, in_mat = fr % p.rows_per_mat;
            // The same key as fill_row's, so every expert layout picks the same rows.
            const int role = p.merged_ff > 0 ? (in_mat < p.merged_ff ? kGate : kUp) : p.role;
            const int64_t row = p.merged_ff > 0 ? in_mat % p.merged_ff : in_mat;
            if (!rb.custom_row(p, row)) {
              const uint64_t pick = row_key(opt.seed, p.layer, role, expert, row) % static_cast<uint64_t>(pool_rows);
              std::copy_n(row_pool->data() + pick * rb_out, rb_out, chunk.data() + r * rb_out);
              continue;
            }
          }
          fill_row(p, fr, opt.seed, rb, row.data());
          quantize_row_ref(p.type, row.data(), chunk.data() + r * rb_out, n);
        }
      });
      w.write_tensor_data(chunk.data(), chunk.size());
      written += chunk.size();
      if (opt.progress) opt.progress(written, total);
    }
  }
  w.finish();
  res.file_bytes = std::filesystem::file_size(path);
  return res;
}

}  // namespace ms
