#include "engine/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <variant>
#include <climits>
#include <string>

#include "cpu/attention.h"
#include "cpu/delta_net.h"
#include "cpu/matvec.h"
#include "cpu/matvec_many.h"
#include "cpu/ops.h"
#include "model/tensor_table.h"
#include "util/error.h"

namespace ms {
namespace {

struct Projection {
  const TensorView* w;
  float* y;  // n x w->rows
};

// y_i = x W_i^T for weights sharing the input x (n rows of cols): the input
// is quantized once per activation format, and all products run in one
// parallel region.
void project(ThreadPool& pool, const float* x, int n, int64_t cols, std::initializer_list<Projection> outs) {
  thread_local std::map<int, std::vector<uint8_t>> act_buffers;
  std::map<int, std::vector<uint8_t>>& acts = act_buffers;  // this thread's, used by the workers too
  MatmulJob jobs[8];
  int n_jobs = 0;
  std::map<int, bool> done;
  for (const Projection& p : outs) {
    // The input form (cpu/matvec_many.h: the GPU's Q8 for Q8_0, else the vec_dot_type).
    const bool gpu_q8 = input_takes_gpu_q8(p.w->type);
    const int at = gpu_q8 ? -1 : static_cast<int>(type_info(p.w->type).vec_dot_type);
    std::vector<uint8_t>& buf = acts[at];
    if (!done[at]) {
      buf.resize(static_cast<size_t>(input_row_bytes(p.w->type, cols) * n));
      quantize_inputs(pool, p.w->type, x, n, cols, buf.data());
      done[at] = true;
    }
    jobs[n_jobs++] = {p.w->type, p.w->data, p.w->rows, cols, buf.data(), nullptr, n, p.y, gpu_q8};
  }
  matmul_many(pool, jobs, n_jobs);
}

void add_bias(float* y, const TensorView& b, int n, int64_t width) {
  if (!b) return;
  for (int t = 0; t < n; ++t) add_inplace(y + t * width, b.f32(), width);
}

}  // namespace

CpuBackend::CpuBackend(const ModelWeights& w, ThreadPool& pool, Options opt)
    : w_(w), pool_(pool), opt_(opt), cpu_executor_(w, pool), recipe_(recipe_for(w.cfg)) {
  if (opt_.max_batch < 1) opt_.max_batch = 1;
  const ModelConfig& c = w_.cfg;
  BlockSupport has;  // every optional part of model/blocks.h
  has.attention_output_bias = has.attention_sinks = has.attention_window = true;
  has.router_bias = has.expert_bias = has.clamped_swiglu = true;
  check_blocks(c, has, "CPU backend");
  bool output_gate = false;
  const auto plan = plan_layers(c);
  for (size_t il = 0; il < plan.size(); ++il)
    for (const BlockCall& call : plan[il]) {
      if (const auto* a = std::get_if<AttentionBlock>(&call)) output_gate |= a->output_gate;
      // The expert executor takes the activation and biases from the bound
      // experts: they must be what the recipe asks for.
      if (const auto* m = std::get_if<MoeFfnBlock>(&call)) {
        const ExpertWeights& ex = w_.layers[il].experts;
        if ((m->act.kind == GluActivation::Kind::ClampedSwiGLU) != ex.clamped_swiglu ||
            m->expert_bias != ex.has_bias())
          throw Error("CPU backend: layer " + std::to_string(il) + "'s experts are bound with" +
                      (ex.clamped_swiglu ? "" : "out") + " the clamped SwiGLU and with" +
                      (ex.has_bias() ? "" : "out") + " biases, which the '" + c.arch_name + "' recipe does not ask for");
      }
    }
  if (!w_.mtp.empty()) mtp_calls_ = mtp_blocks(plan);
  const size_t B = static_cast<size_t>(opt_.max_batch);
  const size_t D = static_cast<size_t>(c.n_embd);
  const size_t q_dim = static_cast<size_t>(c.n_head) * c.head_dim, kv_dim = static_cast<size_t>(c.n_head_kv) * c.head_dim;
  h_.resize(B * D);
  x_.resize(B * D);
  q_.resize(B * q_dim);
  k_.resize(B * kv_dim);
  v_.resize(B * kv_dim);
  att_.resize(B * q_dim);
  tmp_.resize(B * D);
  rope_cs_.resize(B * static_cast<size_t>(c.n_rot));
  if (output_gate) q_gate_.resize(B * 2 * q_dim);
  if (!c.linear_layer.empty()) {
    const auto& L = c.lin;
    lin_qkv_.resize(B * static_cast<size_t>(L.conv_dim()));
    lin_conv_.resize(B * static_cast<size_t>(L.conv_dim()));
    lin_z_.resize(B * static_cast<size_t>(L.value_dim()));
    lin_out_.resize(B * static_cast<size_t>(L.value_dim()));
    for (auto* v : {&lin_a_, &lin_b_, &lin_g_, &lin_beta_}) v->resize(B * static_cast<size_t>(L.n_v_heads));
  }
  if (c.n_ff_shexp > 0) {
    sh_gate_.resize(B * static_cast<size_t>(c.n_ff_shexp));
    sh_up_.resize(B * static_cast<size_t>(c.n_ff_shexp));
    sh_score_.resize(B);
  }
  if (c.is_moe()) {
    router_logits_.resize(B * static_cast<size_t>(c.n_expert));
    route_ids_.resize(B * static_cast<size_t>(c.n_expert_used));
    route_w_.resize(B * static_cast<size_t>(c.n_expert_used));
    expert_y_.resize(B * static_cast<size_t>(c.n_expert_used) * D);
    expert_counts_.assign(static_cast<size_t>(c.n_layer) * c.n_expert, 0);
  } else {
    ff_gate_.resize(B * static_cast<size_t>(c.n_ff));
    ff_up_.resize(B * static_cast<size_t>(c.n_ff));
  }
}

RecurrentLayout CpuBackend::recurrent_layout() const {
  const ModelConfig& c = w_.cfg;
  RecurrentLayout rec;
  if (c.linear_layer.empty()) {
    rec.recurrent.assign(static_cast<size_t>(c.n_layer), false);
    return rec;
  }
  rec.recurrent = c.linear_layer;
  rec.conv_elems = static_cast<int64_t>(c.lin.conv_kernel - 1) * c.lin.conv_dim();
  rec.state_elems = static_cast<int64_t>(c.lin.n_v_heads) * c.lin.head_v * c.lin.head_k;
  return rec;
}

KvCache CpuBackend::make_cache(int64_t ctx, KvType type) const {
  const ModelConfig& c = w_.cfg;
  return KvCache(c.n_layer, c.n_head_kv, c.head_dim, ctx, type, recurrent_layout());
}

std::shared_ptr<KvPages> CpuBackend::make_kv_pages(int64_t total_tokens, KvType type, int32_t page_tokens) const {
  const ModelConfig& c = w_.cfg;
  check_kv_head_dim(type, c.head_dim);
  if (total_tokens < 1 || page_tokens < 1)
    throw Error("KV pages: the pool needs at least one token in pages of at least one (got " +
                std::to_string(total_tokens) + " tokens, pages of " + std::to_string(page_tokens) + ")");
  const int64_t n_pages = (total_tokens + page_tokens - 1) / page_tokens;
  if (n_pages > INT32_MAX) throw Error("KV pages: " + std::to_string(total_tokens) + " tokens are too many");
  return std::make_shared<KvPages>(
      KvCache::page_layout(c.n_layer, c.n_head_kv, c.head_dim, type, recurrent_layout(), page_tokens),
      static_cast<int32_t>(n_pages));
}

KvCache CpuBackend::make_paged_cache(std::shared_ptr<KvPages> pages, int64_t ctx, KvType type) const {
  const ModelConfig& c = w_.cfg;
  return KvCache(c.n_layer, c.n_head_kv, c.head_dim, ctx, type, recurrent_layout(), std::move(pages));
}

void CpuBackend::forward(KvCache& kv, std::span<const int32_t> tokens, std::vector<float>& logits, bool all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw Error("forward: no tokens");
  kv.check_room(n);
  for (int32_t id : tokens)
    if (id < 0 || id >= w_.cfg.n_vocab)
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(w_.cfg.n_vocab) +
                  " tokens)");
  const int64_t V = w_.cfg.n_vocab;
  logits.resize(static_cast<size_t>((all_logits ? n : 1) * V));
  std::vector<int> rows;
  kv.reserve_or_throw(n);  // pages for the pass, before any work
  kv.begin_forward();
  for (int64_t done = 0; done < n;) {
    const int nb = static_cast<int>(std::min<int64_t>(opt_.max_batch, n - done));
    const bool last = done + nb == n;
    rows.clear();
    if (all_logits)
      for (int t = 0; t < nb; ++t) rows.push_back(t);
    else if (last)
      rows.push_back(nb - 1);
    float* out = all_logits ? logits.data() + done * V : (last ? logits.data() : nullptr);
    forward_spans({{&kv, kv.n_past(), 0, nb}}, tokens.data() + done, nb, rows, out);
    done += nb;
  }
  kv.end_forward(n);
}

void CpuBackend::forward_seqs(std::span<const SeqTokens> seqs, std::vector<float>& logits) {
  const int64_t V = w_.cfg.n_vocab;
  check_seq_tokens(seqs, V, opt_.max_batch, name());
  size_t n_out = 0;
  for (const SeqTokens& s : seqs) n_out += s.logit_rows();
  logits.resize(n_out * static_cast<size_t>(V));
  // The entries packed in order into batches of at most max_batch tokens. An
  // entry longer than the room left is split: its rest opens the next batch,
  // at the position its cache has reached once this batch has run (which is
  // why a span's pos0 is read only after the batches before it ran).
  const int B = opt_.max_batch;
  std::vector<Span> spans;
  std::vector<int32_t> batch;
  std::vector<int> rows;  // the batch rows whose logits are wanted (an entry's last token, or all of a verify's)
  size_t out_first = 0, out_next = 0;  // the batch's first logits row, and the next one to hand out
  auto run_batch = [&] {
    if (batch.empty()) return;
    forward_spans(spans, batch.data(), static_cast<int>(batch.size()), rows,
                  rows.empty() ? nullptr : logits.data() + out_first * static_cast<size_t>(V));
    out_first = out_next;
    spans.clear();
    batch.clear();
    rows.clear();
  };
  // Every entry's pages before any work: entries on one shared pool may fit
  // alone (check_seq_tokens) but not together.
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t n = static_cast<int64_t>(seqs[i].tokens.size());
    if (seqs[i].kv->reserve(n) == PageStatus::Ok) continue;
    for (size_t j = 0; j < i; ++j) seqs[j].kv->release_unwritten();
    const KvPages& p = seqs[i].kv->pages();
    throw Error("KV pages exhausted: the step's sequences need more pages than the " + std::to_string(p.free_pages()) +
                " of " + std::to_string(p.n_pages()) + " free (pages of " + std::to_string(p.layout().page_tokens) +
                " tokens; --ctx is the tokens all sequences share)");
  }
  for (const SeqTokens& s : seqs) s.kv->begin_forward();
  for (const SeqTokens& s : seqs) {
    const size_t total = s.tokens.size();
    const bool tree = !s.parents.empty();
    for (size_t done = 0; done < total;) {
      // A tree runs whole in one batch (its tokens see their ancestors' keys
      // in this pass; check_seq_tokens bounded it by max_batch).
      if (static_cast<int>(batch.size()) == B || (tree && batch.size() + total > static_cast<size_t>(B))) run_batch();
      const int t0 = static_cast<int>(batch.size());
      const int take = static_cast<int>(std::min<size_t>(static_cast<size_t>(B - t0), total - done));
      spans.push_back({s.kv, s.kv->n_past(), t0, take, tree ? s.parents.data() : nullptr});
      batch.insert(batch.end(), s.tokens.begin() + static_cast<std::ptrdiff_t>(done),
                   s.tokens.begin() + static_cast<std::ptrdiff_t>(done + static_cast<size_t>(take)));
      done += static_cast<size_t>(take);
      if (s.all_logits) {
        for (int t = 0; t < take; ++t) rows.push_back(t0 + t);
        out_next += static_cast<size_t>(take);
      } else if (done == total && s.want_logits) {
        rows.push_back(t0 + take - 1);
        ++out_next;
      }
    }
  }
  run_batch();
  for (const SeqTokens& s : seqs) s.kv->end_forward(static_cast<int64_t>(s.tokens.size()));
}

void CpuBackend::forward_multi(std::span<KvCache* const> kvs, std::span<const int32_t> tokens,
                               std::vector<float>& logits) {
  if (kvs.size() != tokens.size()) throw Error("forward_multi: one cache per token");
  std::vector<SeqTokens> seqs;
  for (size_t i = 0; i < kvs.size(); ++i) seqs.push_back({kvs[i], tokens.subspan(i, 1), true});
  forward_seqs(seqs, logits);
}

void CpuBackend::forward_spans(const std::vector<Span>& spans, const int32_t* tokens, int n,
                               std::span<const int> out_rows, float* logits) {
  const ModelConfig& c = w_.cfg;
  const int64_t D = c.n_embd;
  std::vector<int32_t> depth;
  for (const Span& sp : spans) {
    // A tree's token sits at the prefix's length plus its depth; a hybrid's
    // cache holds a recurrent state per node.
    if (sp.parents) {
      check_token_tree(std::span<const int32_t>(sp.parents, static_cast<size_t>(sp.n)), static_cast<size_t>(sp.n),
                       "forward", &depth);
      sp.kv->begin_tree(sp.n);
    }
    for (int t = sp.t0; t < sp.t0 + sp.n; ++t) {
      embed_row(w_.token_embd.type, w_.token_embd.data, c.n_vocab, D, tokens[t], h_.data() + t * D);
      const int64_t pos = sp.pos0 + (sp.parents ? depth[static_cast<size_t>(t - sp.t0)] : t - sp.t0);
      rope_table(rope_cs_.data() + static_cast<int64_t>(t) * c.n_rot, c.n_rot, pos, c.rope_base, c.rope_scaling);
    }
  }
  // Token states (KvCache::keep_token_states): an entry per token for the
  // state after it, taken before the layers write into them.
  span_entries_.assign(spans.size(), {});
  for (size_t i = 0; i < spans.size(); ++i)
    if (spans[i].kv->token_states_wanted())
      for (int t = 0; t < spans[i].n; ++t) span_entries_[i].push_back(spans[i].kv->reserve_checkpoint(spans[i].pos0 + t + 1));
  spans_ = &spans;
  n_ = n;
  const size_t nl = hidden_hook_ ? hidden_layers_.size() : 0;
  if (nl) layer_rows_.resize(static_cast<size_t>(n) * nl * static_cast<size_t>(D));
  for (int il = 0; il < c.n_layer; ++il) {
    for (size_t j = 0; j < nl; ++j)  // the residual stream entering layer il
      if (hidden_layers_[j] == il)
        for (int t = 0; t < n; ++t)
          std::copy_n(h_.data() + t * D, D, layer_rows_.data() + (t * nl + j) * static_cast<size_t>(D));
    recipe_.layer(*this, c, il);
  }
  spans_ = nullptr;
  if (hidden_hook_) emit_hidden(spans, tokens);
  for (const Span& sp : spans) sp.kv->advance(sp.n);
  if (!logits || out_rows.empty()) return;
  // The output head over the rows asked for only.
  const int m = static_cast<int>(out_rows.size());
  for (int t = 0; t < m; ++t)
    rmsnorm(h_.data() + static_cast<int64_t>(out_rows[static_cast<size_t>(t)]) * D, w_.output_norm.f32(),
            x_.data() + t * D, D, c.rms_eps);
  project(pool_, x_.data(), m, D, {{&w_.output, logits}});
}

void CpuBackend::emit_hidden(const std::vector<Span>& spans, const int32_t* tokens) {
  const int64_t D = w_.cfg.n_embd;
  for (const Span& sp : spans) {
    hidden_rows_.resize(static_cast<size_t>(sp.n * D));
    for (int t = 0; t < sp.n; ++t)
      rmsnorm(h_.data() + static_cast<int64_t>(sp.t0 + t) * D, w_.output_norm.f32(), hidden_rows_.data() + t * D, D,
              w_.cfg.rms_eps);
    const int nl = static_cast<int>(hidden_layers_.size());
    const float* lr = nl ? layer_rows_.data() + static_cast<size_t>(sp.t0) * nl * static_cast<size_t>(D) : nullptr;
    hidden_hook_({sp.kv, sp.pos0, sp.n, hidden_rows_.data(), nl, lr, sp.parents, sp.parents ? tokens + sp.t0 : nullptr});
  }
}

void CpuBackend::set_hidden_layers(std::vector<int> layers) {
  for (int l : layers)
    if (l < 0 || l >= w_.cfg.n_layer)
      throw Error("hidden layer " + std::to_string(l) + " is outside the model's " + std::to_string(w_.cfg.n_layer) +
                  " layers");
  hidden_layers_ = std::move(layers);
}

const LayerWeights& CpuBackend::layer_weights(int il) const {
  const int n = w_.cfg.n_layer;
  return il < n ? w_.layers[static_cast<size_t>(il)] : w_.mtp[static_cast<size_t>(il - n)].layer;
}

void CpuBackend::attention(int il, const AttentionBlock& b) {
  const std::vector<Span>& spans = *spans_;
  const int n = n_;
  const ModelConfig& c = w_.cfg;
  const LayerWeights& L = layer_weights(il);
  const int64_t D = c.n_embd, hd = c.head_dim;
  const int64_t q_dim = c.n_head * hd, kv_dim = c.n_head_kv * hd;
  for (int t = 0; t < n; ++t) rmsnorm(h_.data() + t * D, L.attn_norm.f32(), x_.data() + t * D, D, c.rms_eps);
  const bool gated = b.output_gate;
  project(pool_, x_.data(), n, D, {{&L.wq, gated ? q_gate_.data() : q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}});
  if (gated) {
    // [q | gate] per head: q to q_, the gate stays in the second half of each
    // head's 2 * head_dim (read after attention).
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < c.n_head; ++h)
        std::copy_n(q_gate_.data() + (static_cast<int64_t>(t) * c.n_head + h) * 2 * hd, hd,
                    q_.data() + static_cast<int64_t>(t) * q_dim + h * hd);
  }
  if (b.qkv_bias) {
    add_bias(q_.data(), L.bq, n, q_dim);
    add_bias(k_.data(), L.bk, n, kv_dim);
    add_bias(v_.data(), L.bv, n, kv_dim);
  }
  // Per-token q/k norm and RoPE: serial for one token, over the pool for a
  // batch (serially, a prompt's tokens add up to a visible share of the layer:
  // bench/results/cpu_bench.md, "Figures moved from code comments").
  auto norm_rope = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* q = q_.data() + t * q_dim;
      float* k = k_.data() + t * kv_dim;
      if (b.qk_norm) {
        for (int h = 0; h < c.n_head; ++h) rmsnorm(q + h * hd, L.q_norm.f32(), q + h * hd, hd, c.rms_eps);
        for (int h = 0; h < c.n_head_kv; ++h) rmsnorm(k + h * hd, L.k_norm.f32(), k + h * hd, hd, c.rms_eps);
      }
      const float* cs = rope_cs_.data() + t * c.n_rot;
      rope_apply(q, c.n_head, c.head_dim, c.n_rot, cs, b.rope_mode);
      rope_apply(k, c.n_head_kv, c.head_dim, c.n_rot, cs, b.rope_mode);
    }
  };
  if (n == 1) norm_rope(0, 1);
  else pool_.parallel_for(n, 4, norm_rope);
  // Each sequence's tokens against its own cache.
  for (const Span& sp : spans) {
    KvCache& kv = *sp.kv;
    const int kl = cache_layer(il);
    const AttentionShape s{c.n_head, c.n_head_kv, c.head_dim, kv.ctx(), 1.0f / std::sqrt(static_cast<float>(hd))};
    AttentionExtras extras;
    extras.sinks = b.sinks ? L.attn_sinks.f32() : nullptr;
    extras.window = b.window;
    const float* q = q_.data() + sp.t0 * q_dim;
    const float* k = k_.data() + sp.t0 * kv_dim;
    const float* v = v_.data() + sp.t0 * kv_dim;
    float* att = att_.data() + sp.t0 * q_dim;
    switch (kv.type()) {
      // Rows through the block table (their pages were reserved before the pass).
      case KvType::F32: {
        const KvRows<float> kr = kv.rows_f32(kl, false), vr = kv.rows_f32(kl, true);
        kv_store(s, k, v, sp.n, sp.pos0, kr, vr);
        if (sp.parents) attention_tree(pool_, s, q, kr, vr, sp.n, sp.pos0, sp.parents, att, extras);
        else ms::attention(pool_, s, q, kr, vr, sp.n, sp.pos0, att, extras);
        break;
      }
      case KvType::Q8_0: {
        const KvRows<BlockQ8_0> kr = kv.rows_q8(kl, false), vr = kv.rows_q8(kl, true);
        kv_store(s, k, v, sp.n, sp.pos0, kr, vr);
        if (sp.parents) attention_tree(pool_, s, q, kr, vr, sp.n, sp.pos0, sp.parents, att, extras);
        else ms::attention(pool_, s, q, kr, vr, sp.n, sp.pos0, att, extras);
        break;
      }
      case KvType::F16: {
        const KvRows<uint16_t> kr = kv.rows_f16(kl, false), vr = kv.rows_f16(kl, true);
        kv_store(s, k, v, sp.n, sp.pos0, kr, vr);
        if (sp.parents) attention_tree(pool_, s, q, kr, vr, sp.n, sp.pos0, sp.parents, att, extras);
        else ms::attention(pool_, s, q, kr, vr, sp.n, sp.pos0, att, extras);
        break;
      }
    }
  }
  if (gated)  // the output gate: att *= sigmoid(gate)
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < c.n_head; ++h) {
        const float* g = q_gate_.data() + (static_cast<int64_t>(t) * c.n_head + h) * 2 * hd + hd;
        float* a = att_.data() + static_cast<int64_t>(t) * q_dim + h * hd;
        for (int64_t i = 0; i < hd; ++i) a[i] *= 1.0f / (1.0f + std::exp(-g[i]));
      }
  project(pool_, att_.data(), n, q_dim, {{&L.wo, tmp_.data()}});
  if (b.output_bias) add_bias(tmp_.data(), L.bo, n, D);
  add_inplace(h_.data(), tmp_.data(), static_cast<int64_t>(n) * D);
}

void CpuBackend::linear_attention(int il, const LinearAttentionBlock&) {
  const std::vector<Span>& spans = *spans_;
  const int n = n_;
  const ModelConfig& c = w_.cfg;
  const LayerWeights& L = layer_weights(il);
  const int64_t D = c.n_embd;
  const DeltaNetShape s{c.lin.n_k_heads, c.lin.n_v_heads, c.lin.head_k, c.lin.head_v};
  const int64_t CD = s.conv_dim(), VD = s.value_dim(), nv = s.n_v_heads;
  for (int t = 0; t < n; ++t) rmsnorm(h_.data() + t * D, L.attn_norm.f32(), x_.data() + t * D, D, c.rms_eps);
  project(pool_, x_.data(), n, D,
          {{&L.ssm_qkv, lin_qkv_.data()}, {&L.ssm_z, lin_z_.data()}, {&L.ssm_alpha, lin_a_.data()},
           {&L.ssm_beta, lin_b_.data()}});
  for (int t = 0; t < n; ++t)
    delta_gates(lin_a_.data() + t * nv, lin_b_.data() + t * nv, L.ssm_a.f32(), L.ssm_dt.f32(), static_cast<int>(nv),
                lin_g_.data() + t * nv, lin_beta_.data() + t * nv);
  // Each sequence's tokens through its conv window and delta-rule state
  // (both all zeros at position 0, whatever the cache held before).
  for (size_t si = 0; si < spans.size(); ++si) {
    const Span& sp = spans[si];
    KvCache& kv = *sp.kv;
    float* window = kv.conv_state(il);
    float* S = kv.delta_state(il);
    if (sp.pos0 == 0) {
      std::fill_n(window, kv.conv_elems(), 0.0f);
      std::fill_n(S, kv.state_elems(), 0.0f);
    }
    const float* in = lin_qkv_.data() + static_cast<int64_t>(sp.t0) * CD;
    float* conv = lin_conv_.data() + static_cast<int64_t>(sp.t0) * CD;
    const float* g = lin_g_.data() + static_cast<int64_t>(sp.t0) * nv;
    const float* beta = lin_beta_.data() + static_cast<int64_t>(sp.t0) * nv;
    float* out = lin_out_.data() + static_cast<int64_t>(sp.t0) * VD;
    const std::vector<int>& entries = span_entries_[si];
    if (sp.parents) {
      // A token tree: each node's conv window and delta-rule state start
      // from its parent's (the prefix's live state for a root) and are kept
      // per node; one token at a time, as decode runs the recurrence.
      for (int t = 0; t < sp.n; ++t) {
        const int32_t p = sp.parents[t];
        float* w = kv.tree_conv(il, t);
        float* St = kv.tree_delta(il, t);
        std::copy_n(p < 0 ? window : kv.tree_conv(il, p), kv.conv_elems(), w);
        std::copy_n(p < 0 ? S : kv.tree_delta(il, p), kv.state_elems(), St);
        conv1d_silu(in + t * CD, CD, 1, CD, L.ssm_conv.f32(), c.lin.conv_kernel, w, conv + t * CD);
        delta_prepare_qk(s, conv + t * CD, 1e-6f);
        delta_rule(&pool_, s, conv + t * CD, CD, g + t * nv, beta + t * nv, 1, St, out + t * VD);
      }
      continue;
    }
    if (entries.empty()) {
      conv1d_silu(in, CD, sp.n, CD, L.ssm_conv.f32(), c.lin.conv_kernel, window, conv);
      for (int t = 0; t < sp.n; ++t) delta_prepare_qk(s, conv + t * CD, 1e-6f);
      delta_rule(&pool_, s, conv, CD, g, beta, sp.n, S, out);
      continue;
    }
    // Token states wanted: token by token (the recurrence, as decode runs
    // it), the state after each copied to its checkpoint.
    for (int t = 0; t < sp.n; ++t) {
      conv1d_silu(in + t * CD, CD, 1, CD, L.ssm_conv.f32(), c.lin.conv_kernel, window, conv + t * CD);
      delta_prepare_qk(s, conv + t * CD, 1e-6f);
      delta_rule(&pool_, s, conv + t * CD, CD, g + t * nv, beta + t * nv, 1, S, out + t * VD);
      const int e = entries[static_cast<size_t>(t)];
      if (e < 0) continue;
      std::copy_n(window, kv.conv_elems(), kv.checkpoint_conv(il, e));
      std::copy_n(S, kv.state_elems(), kv.checkpoint_delta(il, e));
    }
  }
  // Gated RMSNorm per value head, then the output projection.
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < nv; ++h) {
      const int64_t off = static_cast<int64_t>(t) * VD + h * s.head_v;
      gated_rmsnorm(lin_out_.data() + off, lin_z_.data() + off, L.ssm_norm.f32(), lin_out_.data() + off, s.head_v,
                    c.rms_eps);
    }
  project(pool_, lin_out_.data(), n, VD, {{&L.ssm_out, tmp_.data()}});
  add_inplace(h_.data(), tmp_.data(), static_cast<int64_t>(n) * D);
}

void CpuBackend::shared_expert(int il, int n) {
  const ModelConfig& c = w_.cfg;
  const LayerWeights& L = layer_weights(il);
  const int64_t D = c.n_embd, F = c.n_ff_shexp;
  project(pool_, x_.data(), n, D,
          {{&L.shexp_gate, sh_gate_.data()}, {&L.shexp_up, sh_up_.data()}, {&L.shexp_router, sh_score_.data()}});
  silu_mul(sh_gate_.data(), sh_up_.data(), sh_gate_.data(), static_cast<int64_t>(n) * F);
  project(pool_, sh_gate_.data(), n, F, {{&L.shexp_down, tmp_.data()}});
  for (int t = 0; t < n; ++t)
    axpy(1.0f / (1.0f + std::exp(-sh_score_[static_cast<size_t>(t)])), tmp_.data() + static_cast<int64_t>(t) * D,
         h_.data() + static_cast<int64_t>(t) * D, D);
}

void CpuBackend::dense_ffn(int il, const DenseFfnBlock&) {
  const int n = n_;
  const ModelConfig& c = w_.cfg;
  const LayerWeights& L = layer_weights(il);
  const int64_t D = c.n_embd, F = c.n_ff;
  for (int t = 0; t < n; ++t) rmsnorm(h_.data() + t * D, L.ffn_norm.f32(), x_.data() + t * D, D, c.rms_eps);
  project(pool_, x_.data(), n, D, {{&L.ffn_gate, ff_gate_.data()}, {&L.ffn_up, ff_up_.data()}});
  silu_mul(ff_gate_.data(), ff_up_.data(), ff_gate_.data(), static_cast<int64_t>(n) * F);
  project(pool_, ff_gate_.data(), n, F, {{&L.ffn_down, tmp_.data()}});
  add_inplace(h_.data(), tmp_.data(), static_cast<int64_t>(n) * D);
}

// The CPU backend's one tier of the MoE step (engine/moe_tiers.h): routes
// already on the host, experts by CpuExpertExecutor into the pairs' rows.
struct CpuBackend::HostTier final : MoeTiers {
  CpuBackend& b;
  HostTier(CpuBackend& backend, int) : b(backend) {}
  MoeRoutes fetch_routes(int, int, bool) override { return {b.route_ids_.data(), nullptr, -1, 0}; }
  // Every pair is the host's, each row its pair index.
  void compute_share(const MoeShare& s) override {
    b.cpu_executor_.compute(s.layer, b.x_.data(), s.n_tokens, *s.work, b.expert_y_.data());
  }
  // In pair order, the same for every batch size and device (tokens are
  // independent: a batch splits them over the pool).
  void combine(int, int n) override {
    const int k = b.w_.cfg.n_expert_used;
    const int64_t D = b.w_.cfg.n_embd;
    auto rows = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int j = 0; j < k; ++j)
          axpy(b.route_w_[t * k + j], b.expert_y_.data() + (t * k + j) * D, b.h_.data() + t * D, D);
    };
    if (n == 1) rows(0, 1);
    else b.pool_.parallel_for(n, 4, rows);
  }
};

void CpuBackend::moe_ffn(int il, const MoeFfnBlock& b) {
  const int n = n_;
  const ModelConfig& c = w_.cfg;
  const LayerWeights& L = layer_weights(il);
  const int64_t D = c.n_embd;
  for (int t = 0; t < n; ++t) rmsnorm(h_.data() + t * D, L.ffn_norm.f32(), x_.data() + t * D, D, c.rms_eps);
  const int E = c.n_expert, k = c.n_expert_used;
  project(pool_, x_.data(), n, D, {{&L.router, router_logits_.data()}});
  if (b.router_bias) add_bias(router_logits_.data(), L.router_b, n, E);
  for (int t = 0; t < n; ++t) {
    router_topk_ref(router_logits_.data() + static_cast<int64_t>(t) * E, E, k, b.router_mode, b.renorm,
                    route_ids_.data() + t * k, route_w_.data() + t * k);
    if (il < c.n_layer)
      for (int j = 0; j < k; ++j) ++expert_counts_[static_cast<size_t>(il) * E + route_ids_[t * k + j]];
  }
  if (route_hook_ && il < c.n_layer)
    route_hook_({il, n, k, route_ids_.data(), route_w_.data(), route_hook_hidden_ ? x_.data() : nullptr});
  // The engine's MoE step with every expert on the host tier: grouped by
  // expert, computed into each pair's row, combined.
  if (!moe_step_) moe_step_ = std::make_unique<MoeStep>(E, k, nullptr);
  HostTier tier(*this, il);
  moe_step_->run(0, il, n, tier);
  if (b.shared_expert) shared_expert(il, n);
}

}  // namespace ms

namespace ms {

KvCache CpuBackend::make_mtp_cache(int64_t ctx, KvType type) const {
  const ModelConfig& c = w_.cfg;
  if (w_.mtp.empty()) throw Error(kNoMtpBlock);
  return KvCache(c.n_layer_mtp, c.n_head_kv, c.head_dim, ctx, type);
}

// Pair i: e = embedding of tokens[i], u = eh_proj [rmsnorm(e, enorm) | rmsnorm(hidden_i, hnorm)],
// then the block's attention (its own cache, position pos0 + i) and MoE FFN
// as a main-stack full-attention layer runs them, then the head norm
// (shared_head_norm, else the model's output norm) and the output head.
void CpuBackend::forward_mtp(KvCache& kv, std::span<const float> hidden, std::span<const int32_t> tokens,
                             std::vector<float>& logits, std::vector<float>& hidden_out) {
  const ModelConfig& c = w_.cfg;
  std::vector<float>& last = mtp_last_;
  forward_mtp_block(kv, hidden, tokens, last);
  const MtpWeights& b = w_.mtp.front();
  const TensorView& head_norm = b.shared_head_norm ? b.shared_head_norm : w_.output_norm;
  const TensorView& head = b.shared_head_head ? b.shared_head_head : w_.output;
  hidden_out.resize(static_cast<size_t>(c.n_embd));
  rmsnorm(last.data(), head_norm.f32(), hidden_out.data(), c.n_embd, c.rms_eps);
  logits.resize(static_cast<size_t>(c.n_vocab));
  project(pool_, hidden_out.data(), 1, c.n_embd, {{&head, logits.data()}});
}

void CpuBackend::forward_mtp_block(KvCache& kv, std::span<const float> hidden, std::span<const int32_t> tokens,
                                   std::vector<float>& last_row) {
  check_mtp_inputs(w_, kv, hidden, tokens);
  const ModelConfig& c = w_.cfg;
  const MtpWeights& m = w_.mtp.front();
  const int64_t D = c.n_embd, V = c.n_vocab;
  const int il = c.n_layer;  // the block runs as the layer after the main stack
  const TensorView& emb = m.embed_tokens ? m.embed_tokens : w_.token_embd;
  const int64_t n = static_cast<int64_t>(tokens.size());
  mtp_in_.resize(static_cast<size_t>(std::min<int64_t>(n, opt_.max_batch) * 2 * D));
  kv.reserve_or_throw(n);  // pages for the pass, before any work
  kv.begin_forward();
  for (int64_t done = 0; done < n;) {
    const int nb = static_cast<int>(std::min<int64_t>(opt_.max_batch, n - done));
    const int64_t pos0 = kv.n_past();
    for (int t = 0; t < nb; ++t) {
      float* in = mtp_in_.data() + static_cast<int64_t>(t) * 2 * D;
      embed_row(emb.type, emb.data, V, D, tokens[static_cast<size_t>(done + t)], tmp_.data());
      rmsnorm(tmp_.data(), m.enorm.f32(), in, D, c.rms_eps);
      rmsnorm(hidden.data() + (done + t) * D, m.hnorm.f32(), in + D, D, c.rms_eps);
      rope_table(rope_cs_.data() + static_cast<int64_t>(t) * c.n_rot, c.n_rot, pos0 + t, c.rope_base, c.rope_scaling);
    }
    project(pool_, mtp_in_.data(), nb, 2 * D, {{&m.eh_proj, h_.data()}});
    const std::vector<Span> spans{{&kv, pos0, 0, nb}};
    span_entries_.assign(1, {});
    spans_ = &spans;
    n_ = nb;
    for (const BlockCall& call : mtp_calls_) {
      if (const auto* a = std::get_if<AttentionBlock>(&call)) attention(il, *a);
      else if (const auto* f = std::get_if<MoeFfnBlock>(&call)) moe_ffn(il, *f);
      else if (const auto* d = std::get_if<DenseFfnBlock>(&call)) dense_ffn(il, *d);
      else throw Error("forward_mtp: the MTP block asks for a block other than attention and FFN");
    }
    spans_ = nullptr;
    kv.advance(nb);
    done += nb;
    if (done == n) last_row.assign(h_.begin() + static_cast<int64_t>(nb - 1) * D, h_.begin() + static_cast<int64_t>(nb) * D);
  }
  kv.end_forward(n);
}

}  // namespace ms
