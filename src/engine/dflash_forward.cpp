#include "engine/dflash_forward.h"

#include <cmath>
#include <string>

#include "cpu/attention.h"
#include "cpu/matvec.h"
#include "cpu/ops.h"
#include "util/error.h"

namespace ms {
namespace {

void mm(ThreadPool& pool, const TensorView& w, const float* x, int n, float* y) {
  matmul(pool, w.type, w.data, w.rows, w.cols, x, n, y);
}

// The checks run before the cache is sized from the drafter's shapes.
const DFlashWeights& fitted(const DFlashWeights& w, const ModelWeights& target, int64_t ctx) {
  check_dflash_fits(w.cfg, target.cfg);
  if (ctx < 1 || ctx > (int64_t{1} << 24)) throw Error("DFlash drafter: context of " + std::to_string(ctx) + " positions");
  return w;
}

}  // namespace

DFlashForward::DFlashForward(const DFlashWeights& w, const ModelWeights& target, ThreadPool& pool, int64_t ctx,
                             KvType type)
    : w_(fitted(w, target, ctx)),
      pool_(pool),
      embd_(w.token_embd ? w.token_embd : target.token_embd),
      head_(w.output ? w.output : target.output),
      n_vocab_(target.cfg.n_vocab),
      kv_(w.cfg.n_layer, w.cfg.n_head_kv, w.cfg.head_dim, ctx + kDFlashMaxBlock, type) {}

void DFlashForward::keys_values(int il, const float* x, int n, int64_t pos0) {
  const DFlashConfig& c = w_.cfg;
  const DFlashLayer& L = w_.layers[static_cast<size_t>(il)];
  const int64_t hd = c.head_dim, kv_dim = int64_t{c.n_head_kv} * hd;
  k_.resize(static_cast<size_t>(n * kv_dim));
  v_.resize(k_.size());
  mm(pool_, L.wk, x, n, k_.data());
  if (L.wv) {
    mm(pool_, L.wv, x, n, v_.data());
  } else {
    // Shared K/V: the values are the raw keys, RMS-normed without a weight.
    for (int64_t r = 0; r < int64_t{n} * c.n_head_kv; ++r) rmsnorm(k_.data() + r * hd, nullptr, v_.data() + r * hd, hd, c.rms_eps);
  }
  cs_.resize(static_cast<size_t>(c.n_rot));
  for (int t = 0; t < n; ++t) {
    float* k = k_.data() + t * kv_dim;
    for (int h = 0; h < c.n_head_kv; ++h) rmsnorm(k + h * hd, L.k_norm.f32(), k + h * hd, hd, c.rms_eps);
    rope_table(cs_.data(), c.n_rot, pos0 + t, c.rope_base, RopeScaling{});
    rope_apply(k, c.n_head_kv, c.head_dim, c.n_rot, cs_.data(), RopeMode::Neox);
  }
}

void DFlashForward::add_context(std::span<const float> features, int n) {
  const DFlashConfig& c = w_.cfg;
  const int64_t D = c.n_embd, F = w_.fc.cols;
  if (n <= 0) return;
  if (static_cast<int64_t>(features.size()) != n * F)
    throw Error("DFlash drafter: " + std::to_string(features.size()) + " feature values for " + std::to_string(n) +
                " positions of " + std::to_string(F));
  kv_.check_room(n + kDFlashMaxBlock);
  g_.resize(static_cast<size_t>(n * D));
  mm(pool_, w_.fc, features.data(), n, g_.data());
  for (int t = 0; t < n; ++t) rmsnorm(g_.data() + t * D, w_.enc_norm.f32(), g_.data() + t * D, D, c.rms_eps);
  const AttentionShape s{c.n_head, c.n_head_kv, c.head_dim, kv_.ctx(), 0};
  const int64_t pos0 = kv_.n_past();
  for (int il = 0; il < c.n_layer; ++il) {
    keys_values(il, g_.data(), n, pos0);
    if (kv_.type() == KvType::F32) kv_store(s, k_.data(), v_.data(), n, pos0, kv_.k_f32(il), kv_.v_f32(il));
    else if (kv_.type() == KvType::F16) kv_store(s, k_.data(), v_.data(), n, pos0, kv_.k_f16(il), kv_.v_f16(il));
    else kv_store(s, k_.data(), v_.data(), n, pos0, kv_.k_q8(il), kv_.v_q8(il));
  }
  kv_.advance(n);
}

void DFlashForward::draft_block(std::span<const int32_t> tokens, std::vector<float>& logits) {
  const DFlashConfig& c = w_.cfg;
  const int n = static_cast<int>(tokens.size());
  if (n < 2 || n > c.block_size)
    throw Error("DFlash drafter: a block of " + std::to_string(n) + " tokens (2.." + std::to_string(c.block_size) + ")");
  for (int32_t id : tokens)
    if (id < 0 || id >= n_vocab_) throw Error("DFlash drafter: token id " + std::to_string(id) + " is outside the vocabulary");
  const int64_t D = c.n_embd, hd = c.head_dim, q_dim = int64_t{c.n_head} * hd;
  const int64_t L0 = kv_.n_past();
  h_.resize(static_cast<size_t>(n * D));
  x_.resize(h_.size());
  o_.resize(h_.size());
  q_.resize(static_cast<size_t>(n * q_dim));
  att_.resize(q_.size());
  gate_.resize(static_cast<size_t>(n * c.n_ff));
  up_.resize(gate_.size());
  for (int t = 0; t < n; ++t) {
    float* row = h_.data() + t * D;
    embed_row(embd_.type, embd_.data, embd_.rows, D, tokens[static_cast<size_t>(t)], row);
    if (c.embedding_scale != 0)
      for (int64_t i = 0; i < D; ++i) row[i] *= c.embedding_scale;
  }
  const float scale = c.attn_scale > 0 ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  const AttentionShape s{c.n_head, c.n_head_kv, c.head_dim, kv_.ctx(), scale};
  for (int il = 0; il < c.n_layer; ++il) {
    const DFlashLayer& L = w_.layers[static_cast<size_t>(il)];
    for (int t = 0; t < n; ++t) rmsnorm(h_.data() + t * D, L.attn_norm.f32(), x_.data() + t * D, D, c.rms_eps);
    mm(pool_, L.wq, x_.data(), n, q_.data());
    keys_values(il, x_.data(), n, L0);
    for (int t = 0; t < n; ++t) {
      float* q = q_.data() + t * q_dim;
      for (int h = 0; h < c.n_head; ++h) rmsnorm(q + h * hd, L.q_norm.f32(), q + h * hd, hd, c.rms_eps);
      rope_table(cs_.data(), c.n_rot, L0 + t, c.rope_base, RopeScaling{});
      rope_apply(q, c.n_head, c.head_dim, c.n_rot, cs_.data(), RopeMode::Neox);
    }
    // The block's keys go past the context; a non-causal query sees up to
    // the block's last position, a causal one up to its own.
    auto attend = [&](auto* kc, auto* vc) {
      kv_store(s, k_.data(), v_.data(), n, L0, kc, vc);
      if (c.causal) {
        attention(pool_, s, q_.data(), kc, vc, n, L0, att_.data());
      } else {
        for (int t = 0; t < n; ++t)
          attention(pool_, s, q_.data() + t * q_dim, kc, vc, 1, L0 + n - 1, att_.data() + t * q_dim);
      }
    };
    if (kv_.type() == KvType::F32) attend(kv_.k_f32(il), kv_.v_f32(il));
    else if (kv_.type() == KvType::F16) attend(kv_.k_f16(il), kv_.v_f16(il));
    else attend(kv_.k_q8(il), kv_.v_q8(il));
    mm(pool_, L.wo, att_.data(), n, o_.data());
    for (int t = 0; t < n; ++t) {
      float* o = o_.data() + t * D;
      if (L.attn_post_norm) rmsnorm(o, L.attn_post_norm.f32(), o, D, c.rms_eps);
      add_inplace(h_.data() + t * D, o, D);
      rmsnorm(h_.data() + t * D, L.ffn_norm.f32(), x_.data() + t * D, D, c.rms_eps);
    }
    mm(pool_, L.ffn_gate, x_.data(), n, gate_.data());
    mm(pool_, L.ffn_up, x_.data(), n, up_.data());
    silu_mul(gate_.data(), up_.data(), gate_.data(), int64_t{n} * c.n_ff);
    mm(pool_, L.ffn_down, gate_.data(), n, o_.data());
    for (int t = 0; t < n; ++t) {
      float* o = o_.data() + t * D;
      if (L.ffn_post_norm) rmsnorm(o, L.ffn_post_norm.f32(), o, D, c.rms_eps);
      add_inplace(h_.data() + t * D, o, D);
    }
  }
  // The head over positions 1 .. n-1 only (position 0 holds the known token).
  for (int t = 1; t < n; ++t)
    rmsnorm(h_.data() + t * D, w_.output_norm.f32(), x_.data() + (t - 1) * D, D, c.rms_eps);
  logits.resize(static_cast<size_t>((n - 1) * n_vocab_));
  mm(pool_, head_, x_.data(), n - 1, logits.data());
}

}  // namespace ms
