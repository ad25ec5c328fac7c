// CudaBackend's blocks (model/blocks.h) built from the kernels of src/cuda —
// attention (output-gated for hybrids; the fused decode and prefill
// prologues are this backend's way of running its first half), dense FFN, MoE
// FFN (routed experts resident or tiered, plus the shared expert of hybrids)
// — the output head, and the drivers that run the architecture's recipe
// (model/recipe.h, the same one CpuBackend runs) over them: the decode step
// (graph-replayed: the recipe runs while the graph is captured) and prefill
// batches. The Gated DeltaNet block of hybrids is in qwen35_blocks.cpp.
// Host code only: every kernel is reached through the launchers of src/cuda.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <variant>

#include "cuda/attention.h"
#include "cuda/attention_multi.h"
#include "cuda/backend/cuda_backend_impl.h"
#include "cuda/backend/decode_fused.h"
#include "cuda/backend/prefill_fused.h"
#include "cuda/backend/resident_tier.h"
#include "cuda/expert_ffn.h"
#include "cuda/gemm.h"
#include "cuda/gated_ops.h"
#include "cuda/kv_multi.h"
#include "cuda/matvec.h"
#include "cuda/ops.h"
#include "util/error.h"

namespace ms {
namespace {

bool uses_q8(const cuda::DevMat& m) { return cuda::matvec_takes_q8(m.type); }

// The fused q/k prologues write f16 or f32 caches; a q8_0 cache takes the
// separate launches (kv_append quantizes each block of 32 as it writes).
template <class P>
constexpr bool fused_prologue_cache = !std::is_same_v<std::remove_cv_t<std::remove_pointer_t<P>>, BlockQ8_0>;

}  // namespace

// ---------------------------------------------------------------- blocks
void CudaBackend::Impl::bind_recipe() {
  // Every optional part of model/blocks.h (gpt-oss's: biases, sinks, the
  // window, the clamped SwiGLU); tiered experts with biases are refused by
  // the constructor (the hybrid step does not carry them yet).
  BlockSupport has;
  has.attention_output_bias = has.attention_sinks = has.attention_window = true;
  has.router_bias = has.expert_bias = has.clamped_swiglu = true;
  check_blocks(c, has, "CUDA backend");
  moe_blocks.assign(static_cast<size_t>(c.n_layer), MoeFfnBlock{});
  const auto plan = plan_layers(c);
  for (size_t il = 0; il < plan.size(); ++il)
    for (const BlockCall& call : plan[il]) {
      if (const auto* m = std::get_if<MoeFfnBlock>(&call)) moe_blocks[il] = *m;
      if (const auto* a = std::get_if<AttentionBlock>(&call)) output_gate |= a->output_gate;
    }
}

void CudaBackend::Impl::attention(int il, const AttentionBlock& b) {
  const BlockPass& p = block_pass;
  attention_block(il, b, p.n, p.positions, p.decode, p.max_kv_len, p.kv_len, p.pos0);
}

void CudaBackend::Impl::linear_attention(int il, const LinearAttentionBlock&) {
  linear_attention_block(il, block_pass.n);
}

void CudaBackend::Impl::dense_ffn(int il, const DenseFfnBlock&) { dense_ffn_block(il, block_pass.n); }

void CudaBackend::Impl::moe_ffn(int il, const MoeFfnBlock& b) { moe_ffn_block(il, b, block_pass.n, block_pass.part); }

// ---------------------------------------------------------------- pieces
// y[t] = W x[t] (+ residual) for n tokens: tensor-core matmul for batches,
// the fused-dequant matvec (Q8 activations) otherwise.
void CudaBackend::Impl::project(const cuda::DevMat& m, const float* xf, const cuda::Q8Act* xq, int n, float* y,
                                const float* residual) {
  cudaStream_t s = stream;
  if (n >= opt.gemm_min_batch) {
    cuda::MatvecInput in;
    in.f32 = xf;
    if (cuda::matvec_takes_q8(m.type)) in.q8 = *xq;  // the int8 tensor-core path where there is one
    cuda::MatvecGroups g;
    g.max_groups = 1;
    g.per_group = n;
    cuda::matmul(m.set(), in, g, y, m.rows, residual, s);
    return;
  }
  cuda::MatvecInput in;
  in.f32 = xf;
  if (cuda::matvec_takes_q8(m.type)) in.q8 = *xq;
  cuda::linear(m.type, m.data, m.rows, m.cols, in, n, y, residual, s);
}

// RMSNorm of n rows of the hidden state into x (and xq8).
void CudaBackend::Impl::norm_rows(const float* src, const float* weight, int n) {
  if (n == 1 && opt.fused_decode && cuda::rmsnorm_row_supported(c.n_embd))
    cuda::rmsnorm_row_q8(src, weight, x, c.n_embd, c.rms_eps, xq8, stream);
  else
    cuda::rmsnorm(src, weight, x, n, c.n_embd, c.rms_eps, stream, &xq8);
}

// ---------------------------------------------------------------- attention
// positions: device [n]; decode: kv_len device and max_kv_len for the
// split-K launch; prefill: pos0 on the host.
void CudaBackend::Impl::attention_block(int il, const AttentionBlock& b, int n, const int32_t* positions,
                                        bool decode, int max_kv_len, const int32_t* kv_len, int pos0) {
  cudaStream_t s = stream;
  const cuda::DevLayer& L = weights.layer(il);
  const int64_t hd = c.head_dim;
  const int64_t qd = c.n_head * hd, kvd = c.n_head_kv * hd;
  const int64_t kv_ctx = kv.ctx();
  norm_rows(h, L.attn_norm, n);
  // Output-gated attention (hybrids): Wq yields [q | gate] per head, into
  // q_gate; split_q_gate then packs q where the ungated recipe has it (and,
  // for one stacked row, k and v after it) and keeps the gates aside.
  const bool gated = b.output_gate;
  // One token with stacked Wq|Wk|Wv: one launch (two when Wv has another
  // type than Wq|Wk), and q, k, v adjacent so one rope launch turns q and k.
  const bool one_qkv = n == 1 && (L.wqkv || L.wqk);
  float* qp = one_qkv ? qkv : q;
  float* kp = one_qkv ? qkv + qd : k;
  float* vp = one_qkv ? qkv + qd + kvd : v;
  if (one_qkv) {
    float* dst = gated ? q_gate : qkv;
    if (L.wqkv) {
      project(L.wqkv, x, &xq8, 1, dst, nullptr);
    } else {
      project(L.wqk, x, &xq8, 1, dst, nullptr);
      project(L.wv, x, &xq8, 1, dst + L.wqk.rows, nullptr);
    }
    if (gated) cuda::split_q_gate(q_gate, 1, c.n_head, c.head_dim, 2 * kvd, qkv, gate, s);
  } else if (L.wqkv && n >= opt.gemm_min_batch && cuda::matmul_int8_supported(L.wqkv.type)) {
    // Batches: Wq|Wk|Wv as one int8 GEMM launch writing q, k and v.
    cuda::MatvecInput in;
    in.f32 = x;
    in.q8 = xq8;
    const int64_t rows[3] = {L.wq.rows, L.wk.rows, L.wv.rows};
    float* outs[3] = {gated ? q_gate : q, k, v};
    cuda::matmul_stacked(L.wqkv.set(), in, n, 3, rows, outs, stream);
    if (gated) cuda::split_q_gate(q_gate, n, c.n_head, c.head_dim, 0, q, gate, s);
  } else {
    project(L.wq, x, &xq8, n, gated ? q_gate : q, nullptr);
    project(L.wk, x, &xq8, n, k, nullptr);
    project(L.wv, x, &xq8, n, v, nullptr);
    if (gated) cuda::split_q_gate(q_gate, n, c.n_head, c.head_dim, 0, q, gate, s);
  }
  if (block_pass.runs == nullptr) {
    attend(il, b, block_pass.slot, 0, n, positions, decode, max_kv_len, kv_len, pos0, one_qkv, qp, kp, vp);
  } else {
    // Several sequences: each run's rows against its own slot (prompt chunks:
    // the prefill attention; one token: the decode attention, as forward()).
    const std::vector<SeqRun>& rs = *block_pass.runs;
    const bool rows_done = !one_qkv && static_cast<int>(rs.size()) == n &&
                           attend_decode_rows(il, b, n, positions, qp, kp, vp);
    for (size_t i = 0; i < rs.size() && !rows_done; ++i) {
      const SeqRun& r = rs[i];
      attend(il, b, r.slot, r.row0, r.n, positions + r.row0, r.n == 1, cuda::decode_kv_span(r.pos0, kv_ctx),
             run_kv_len + i, static_cast<int>(r.pos0), one_qkv, qp, kp, vp);
    }
  }
  if (gated) cuda::mul_sigmoid(att, gate, static_cast<int64_t>(n) * qd, s);
  if (uses_q8(L.wo)) cuda::quantize_q8act(att, qd, n, attq8, s);
  project(L.wo, att, &attq8, n, h, h);
  if (b.output_bias) cuda::add_row_bias(h, L.bo, n, c.n_embd, s);
}

// n rows, one token of a different sequence each (row t: slot row_slot[t],
// attention length run_kv_len[t]): the q/k prologue and the decode
// attention in one launch each (src/cuda/kv_multi.h, attention_multi.h).
// False (nothing launched) where those kernels do not serve this layer: the
// caller then runs a launch pair per sequence.
bool CudaBackend::Impl::attend_decode_rows(int il, const AttentionBlock& b, int n, const int32_t* positions,
                                           float* qp, float* kp, float* vp) {
  const cuda::DevLayer& L = weights.layer(il);
  if (multi_attn_scratch == nullptr || n > multi_rows || L.bq || !opt.fused_prefill ||
      (L.q_norm == nullptr) != (L.k_norm == nullptr))
    return false;
  int span = 0;
  for (const SeqRun& r : runs) span = std::max(span, cuda::decode_kv_span(r.pos0, kv.ctx()));
  const cuda::AttentionShape shape = attn_shape();
  cuda::AttentionExtras extras;
  extras.sinks = b.sinks ? L.attn_sinks : nullptr;
  extras.window = b.window;
  kv.with_layer(il, 0, [&](auto* kc, auto* vc) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(kc)>>;
    const auto stride = static_cast<int64_t>(kv.slot_stride() / sizeof(T));
    cuda::batch_qk_prologue_multi(qp, kp, vp, n, c.n_head, c.n_head_kv, c.head_dim, L.q_norm, L.k_norm, c.rms_eps,
                                  c.n_rot, row_slot, positions, c.rope_base, c.rope_scaling, b.rope_mode, kc, vc,
                                  stride, kv.n_seq(), kv.ctx(), stream);
    cuda::attention_decode_multi(shape, qp, kc, vc, stride, kv.n_seq(), n, row_slot, run_kv_len, span, att,
                                 multi_attn_scratch, stream, extras);
  });
  return true;
}

// Rows row0 .. row0+n-1 of q/k/v (one sequence, at slot `slot`): q/k norms,
// rope, the cache append, then attention into the same rows of att.
void CudaBackend::Impl::attend(int il, const AttentionBlock& b, int slot, int row0, int n, const int32_t* positions,
                               bool decode, int max_kv_len, const int32_t* kv_len, int pos0, bool one_qkv, float* qp,
                               float* kp, float* vp) {
  cudaStream_t s = stream;
  const cuda::DevLayer& L = weights.layer(il);
  const int64_t qd = c.n_head * c.head_dim, kvd = c.n_head_kv * c.head_dim;
  const int64_t kv_ctx = kv.ctx();
  qp += row0 * qd;
  kp += row0 * kvd;
  vp += row0 * kvd;
  float* out = att + row0 * qd;
  const bool fusable_cache = kv.type() != KvType::Q8_0;
  if (one_qkv && !L.bq && opt.fused_decode && fusable_cache) {
    kv.with_layer(il, slot, [&](auto* kc, auto* vc) {
      if constexpr (fused_prologue_cache<decltype(kc)>)
        cuda::decode_qk_prologue(qkv, c.n_head, c.n_head_kv, c.head_dim, L.q_norm, L.k_norm, c.rms_eps, c.n_rot,
                                 positions, c.rope_base, c.rope_scaling, b.rope_mode, kc, vc, kv_ctx, s);
    });
  } else if (!one_qkv && !L.bq && opt.fused_prefill && fusable_cache &&
             (L.q_norm == nullptr) == (L.k_norm == nullptr)) {
    kv.with_layer(il, slot, [&](auto* kc, auto* vc) {
      if constexpr (fused_prologue_cache<decltype(kc)>)
        cuda::batch_qk_prologue(qp, kp, vp, n, c.n_head, c.n_head_kv, c.head_dim, L.q_norm, L.k_norm, c.rms_eps,
                                c.n_rot, positions, c.rope_base, c.rope_scaling, b.rope_mode, kc, vc, kv_ctx,
                                s);
    });
  } else {
    prologue(il, slot, n, qp, kp, vp, positions, one_qkv, b.rope_mode);
  }
  const cuda::AttentionShape shape = attn_shape();
  cuda::AttentionExtras extras;  // gpt-oss: sinks, and the window on its sliding layers
  extras.sinks = b.sinks ? L.attn_sinks : nullptr;
  extras.window = b.window;
  kv.with_layer(il, slot, [&](const auto* kc, const auto* vc) {
    if (decode)
      cuda::attention_decode(shape, qp, kc, vc, max_kv_len, kv_len, out, attn_scratch, s, extras);
    else
      cuda::attention_prefill(shape, qp, kc, vc, n, pos0, out, s, extras);
  });
}

// Biases, q/k norms, rope and the cache append as separate launches.
void CudaBackend::Impl::prologue(int il, int slot, int n, float* qp, float* kp, float* vp,
                                 const int32_t* positions, bool one_qkv, RopeMode rm) {
  cudaStream_t s = stream;
  const cuda::DevLayer& L = weights.layer(il);
  const int64_t hd = c.head_dim;
  const int64_t qd = c.n_head * hd, kvd = c.n_head_kv * hd;
  // Biases (gpt-oss): one launch per tensor for the whole batch, not three
  // per token (a 512-token pass launched 1536 adds a layer this way).
  constexpr int kRows = 65535;  // add_row_bias's rows per launch
  for (int t = 0; t < n && L.bq; t += kRows) {
    const int m = std::min(kRows, n - t);
    cuda::add_row_bias(qp + t * qd, L.bq, m, qd, s);
    if (L.bk) cuda::add_row_bias(kp + t * kvd, L.bk, m, kvd, s);
    if (L.bv) cuda::add_row_bias(vp + t * kvd, L.bv, m, kvd, s);
  }
  if (L.q_norm) {
    cuda::rmsnorm(qp, L.q_norm, qp, static_cast<int64_t>(n) * c.n_head, hd, c.rms_eps, s);
    cuda::rmsnorm(kp, L.k_norm, kp, static_cast<int64_t>(n) * c.n_head_kv, hd, c.rms_eps, s);
  }
  if (one_qkv) {
    cuda::rope(qp, 1, c.n_head + c.n_head_kv, c.head_dim, c.n_rot, positions, c.rope_base, c.rope_scaling, rm, s);
  } else {
    cuda::rope(qp, n, c.n_head, c.head_dim, c.n_rot, positions, c.rope_base, c.rope_scaling, rm, s);
    cuda::rope(kp, n, c.n_head_kv, c.head_dim, c.n_rot, positions, c.rope_base, c.rope_scaling, rm, s);
  }
  kv.with_layer(il, slot, [&](auto* kc, auto* vc) {
    cuda::kv_append(kp, vp, n, c.n_head_kv, c.head_dim, positions, kc, vc, kv.ctx(), s);
  });
}

// ---------------------------------------------------------------- FFN
// Router logits of n tokens (x / xq8) into router_logits. Several tokens:
// launched as groups of 8 vectors (one block row per group), not one group
// of n that a few blocks would walk through 8 vectors at a time.
void CudaBackend::Impl::router_logits_rows(const cuda::DevMat& R, int n) {
  const int64_t D = c.n_embd, E = c.n_expert;
  const bool q8 = cuda::matvec_takes_q8(R.type);
  auto input = [&](int first) {
    cuda::MatvecInput in;
    in.f32 = x + static_cast<int64_t>(first) * D;
    if (q8) in.q8 = cuda::q8act_rows(xq8, first);
    return in;
  };
  constexpr int kVec = 8;
  const int full = n >= 2 * kVec ? n / kVec * kVec : 0;
  if (full > 0) {
    cuda::MatvecGroups g;
    g.max_groups = full / kVec;
    g.per_group = kVec;
    cuda::matvec(R.set(), input(0), g, router_logits, E, nullptr, stream);
  }
  if (n > full)
    cuda::linear(R.type, R.data, R.rows, R.cols, input(full), n - full, router_logits + full * E, nullptr, stream);
}

// Backend::set_route_hook: the layer's ids and weights (and, when asked, the
// FFN input rows) back to the host, the stream synchronised, the hook called.
void CudaBackend::Impl::report_routes(int il, int n) {
  cudaStream_t s = stream;
  const int64_t D = c.n_embd;
  const int K = c.n_expert_used;
  route_host.resize(static_cast<size_t>(n) * K);
  route_w_host.resize(static_cast<size_t>(n) * K);
  MS_CUDA_CHECK(cudaMemcpyAsync(route_host.data(), route_ids, sizeof(int32_t) * n * K, cudaMemcpyDeviceToHost, s));
  MS_CUDA_CHECK(cudaMemcpyAsync(route_w_host.data(), route_w, sizeof(float) * n * K, cudaMemcpyDeviceToHost, s));
  if (route_hook_hidden) {  // x: the FFN input, made by every router path
    hidden_host.resize(static_cast<size_t>(n) * D);
    MS_CUDA_CHECK(cudaMemcpyAsync(hidden_host.data(), x, sizeof(float) * n * D, cudaMemcpyDeviceToHost, s));
  }
  MS_CUDA_CHECK(cudaStreamSynchronize(s));
  route_hook({il, n, K, route_host.data(), route_w_host.data(), route_hook_hidden ? hidden_host.data() : nullptr});
}

// Tiered layer il holds every expert for good (policy "layers") and the
// all-resident expert kernels can take n tokens in the scratch they have.
bool CudaBackend::Impl::pinned_experts(int il, int n) const { return pinned_batch(il, n) > 0; }

// A long prompt pass can need more scratch for the all-resident expert
// kernels than the hybrid step lends (its buffers grow by row chunks, the
// kernels' by tokens): the pinned layer then runs them on sub-batches of
// halves, rather than taking the tiered step with its host round trip.
int CudaBackend::Impl::pinned_batch(int il, int n) const {
  if (!hybrid || !hybrid->layer_pinned(il)) return 0;
  const cuda::ExpertWeights ew = hybrid->weights(il);
  auto fits = [&](int m) { return cuda::expert_ffn_scratch_bytes(ew, m, c.n_expert_used) <= exp_scratch_bytes; };
  const int cap = opt.tiered.pinned_batch_cap > 0 ? std::min(n, opt.tiered.pinned_batch_cap) : n;
  if (fits(cap)) return cap;
  int m = cap;
  while (m > kMinPinnedBatch && !fits(m)) m = (m + 1) / 2;
  return m >= kMinPinnedBatch && fits(m) ? m : 0;
}

int CudaBackend::Impl::predicted_layer(int il) {
  if (!hybrid || !hybrid->prefetching()) return -1;
  if (next_tiered.size() != static_cast<size_t>(c.n_layer)) {
    next_tiered.assign(static_cast<size_t>(c.n_layer), -1);
    int next = -1;
    for (int l = c.n_layer - 1; l >= 0; --l) {
      next_tiered[static_cast<size_t>(l)] = next;
      if (w.layers[static_cast<size_t>(l)].experts.n_expert > 0 && !pinned_experts(l, 1)) next = l;
    }
  }
  return next_tiered[static_cast<size_t>(il)];
}

// Decode prefetch: layer `target`'s router on this layer's FFN input (x),
// its top k after the routes (route_ids + K), to be read back with them.
// The residual stream changes little from one layer to the next, so this
// predicts most of what `target` will route.
void CudaBackend::Impl::predict_routes(int target) {
  const int K = c.n_expert_used;
  route(moe_blocks[static_cast<size_t>(target)], weights.layer(target).router, 1, route_ids + K, route_w + K,
        weights.layer(target).router_b);
}

void CudaBackend::Impl::route(const MoeFfnBlock& b, const cuda::DevMat& R, int n, int32_t* ids, float* wts,
                              const float* router_b) {
  const int E = c.n_expert, K = c.n_expert_used;
  const int64_t D = c.n_embd;
  if (n == 1 && opt.fused_decode && !b.router_bias && cuda::router_decode_supported(R.type, E, D, K)) {
    cuda::router_decode_f32(static_cast<const float*>(R.data), x, E, D, K, b.router_mode, b.renorm,
                            router_logits, ids, wts, router_counter, stream);
  } else {  // always the exact matvec (f32 weights, no f16 rounding), so batch and decode choose alike
    router_logits_rows(R, n);
    if (b.router_bias) {  // gpt-oss: the bias joins the logits before the top k
      if (router_b == nullptr) throw Error("CUDA backend: the recipe asks for a router bias the layer lacks");
      cuda::add_row_bias(router_logits, router_b, n, E, stream);
    }
    cuda::router_topk(router_logits, n, E, K, b.router_mode, b.renorm, ids, wts, stream);
  }
}

void CudaBackend::Impl::dense_ffn_block(int il, int n) {
  cudaStream_t s = stream;
  const cuda::DevLayer& L = weights.layer(il);
  norm_rows(h, L.ffn_norm, n);
  const int64_t F = c.n_ff;
  if (n >= opt.gemm_min_batch) {
    project(L.ffn_gate, x, &xq8, n, ffg, nullptr);
    project(L.ffn_up, x, &xq8, n, ffu, nullptr);
    cuda::silu_mul(ffg, ffu, ffg, static_cast<int64_t>(n) * F, s);
  } else {
    cuda::MatvecInput in;
    in.f32 = x;
    if (cuda::matvec_takes_q8(L.ffn_gate.type)) in.q8 = xq8;
    cuda::MatvecGroups g;
    g.per_group = n;
    cuda::matvec_glu(L.ffn_gate.set(), L.ffn_up.set(), in, g, ffg, F, s);
  }
  if (uses_q8(L.ffn_down)) cuda::quantize_q8act(ffg, F, n, ffq8, s);
  project(L.ffn_down, ffg, &ffq8, n, h, h);
}

void CudaBackend::Impl::moe_ffn_block(int il, const MoeFfnBlock& b, int n, FfnPart part) {
  cudaStream_t s = stream;
  const cuda::DevLayer& L = weights.layer(il);
  const int K = c.n_expert_used;
  if (part == FfnPart::Experts) goto experts;  // the route half ran (captured) before
  norm_rows(h, L.ffn_norm, n);
  route(b, L.router, n, route_ids, route_w, L.router_b);
  if (route_hook) report_routes(il, n);
  // Prefetch: the next tiered layer's router on this input, read back with
  // the routes (the span path's Route half, or a gated step's tiered layer).
  if (n == 1 && predicted_layer(il) >= 0 &&
      (part == FfnPart::Route || (gated_step && part == FfnPart::All && !pinned_experts(il, 1))))
    predict_routes(predicted_layer(il));
  // Hybrids: the shared expert adds to h first (x is ready: every router
  // path above made it).
  if (b.shared_expert) shared_expert(il, n);
  if (part == FfnPart::Route) return;
experts:
  if (hybrid && !pinned_experts(il, n) && gated_step) {
    const int target = predicted_layer(il);
    hybrid->enqueue_gated(il, x, xq8, route_ids, route_w, h, target >= 0 ? route_ids + K : nullptr, target);
    return;
  }
  if (hybrid && !pinned_experts(il, n)) {
    // The span path (Route, then Experts) predicted the next tiered layer.
    HybridPrediction pred;
    if (part == FfnPart::Experts && n == 1 && predicted_layer(il) >= 0) pred = {predicted_layer(il), route_ids + K, K};
    hybrid->run(il, n, x, xq8, route_ids, route_w, h, pred.layer >= 0 ? &pred : nullptr);
    return;
  }
  // All-resident experts: the resident model's, or a tiered layer whose
  // every expert stays in its slots (the slot table then never changes).
  cuda::ExpertWeights ex = hybrid ? hybrid->weights(il) : experts.weights(il);
  if (b.expert_bias) {  // gpt-oss: the experts' biases live with the dense weights
    ex.gate_bias = L.exp_gate_b;
    ex.up_bias = L.exp_up_b;
    ex.down_bias = L.exp_down_b;
  }
  ex.fused_decode = opt.fused_decode;
  ex.gemm_min_tokens = opt.gemm_min_batch;
  ex.clamped_swiglu = b.act.kind == GluActivation::Kind::ClampedSwiGLU;
  ex.alpha = b.act.alpha;
  ex.limit = b.act.limit;
  // Through the engine's step: its resident plan runs the fused kernel
  // (resident_tier.h) over the device's routes. A pinned layer's pass may run in sub-batches
  // (pinned_batch); each token's rows are computed the same whatever the
  // batch around them.
  const int sub = hybrid ? pinned_batch(il, n) : n;
  if (sub < n) ++pinned_splits;
  if (!resident_step) resident_step = std::make_unique<MoeStep>(c.n_expert, K, nullptr);
  ResidentTier::Inputs in;
  in.experts = &ex;
  in.x = x;
  in.x_q8 = &xq8;
  in.ids = route_ids;
  in.weights = route_w;
  in.h = h;
  in.scratch = exp_scratch;
  in.scratch_bytes = exp_scratch_bytes;
  in.k = K;
  in.d = c.n_embd;
  in.batch = sub;
  in.stream = s;
  ResidentTier tier(in);
  resident_step->run(0, il, n, tier);
}

// ---------------------------------------------------------------- head
// logits[0..m) of hidden rows first..first+m-1 (m <= kLogitRows).
void CudaBackend::Impl::head(int first, int m) {
  const int64_t D = c.n_embd;
  const cuda::DevMat& output = weights.output;
  norm_rows(h + first * D, weights.output_norm, m);
  project(output, x, &xq8, m, logits, nullptr);
}

// Device logits -> pinned staging -> dst, in kCopyChunks pieces so the host
// copy of one piece overlaps the device-to-host transfer of the next (a
// decode step waits for all of it: 600 KB for a 152k vocabulary).
void CudaBackend::Impl::copy_logits(float* dst, int m) {
  const size_t n = static_cast<size_t>(m) * c.n_vocab;
  const size_t per = (n + kCopyChunks - 1) / kCopyChunks;
  auto* staging = static_cast<float*>(host_logits.get());
  for (int i = 0; i < kCopyChunks; ++i) {
    const size_t b = std::min(n, i * per), e = std::min(n, b + per);
    if (e > b)
      MS_CUDA_CHECK(cudaMemcpyAsync(staging + b, logits + b, (e - b) * sizeof(float), cudaMemcpyDeviceToHost, stream));
    copy_done[i].record(stream);
  }
  for (int i = 0; i < kCopyChunks; ++i) {
    const size_t b = std::min(n, i * per), e = std::min(n, b + per);
    copy_done[i].synchronize();
    if (e > b) std::memcpy(dst + b, staging + b, (e - b) * sizeof(float));
  }
}

// ---------------------------------------------------------------- decode
// One decode step, all on the device: token, position and attention length
// come from step_in = {token, pos, kv_len}.
void CudaBackend::Impl::enqueue_decode(int max_kv_len) {
  const cuda::DevMat& embd = weights.token_embd;
  cuda::embed_rows(embd.type, embd.data, c.n_vocab, c.n_embd, step_in, 1, h, stream);
  block_pass = {1, step_in + 1, true, max_kv_len, step_in + 2, 0, FfnPart::All, cur_slot};
  for (int il = 0; il < c.n_layer; ++il) run_layer(il);
  head(0, 1);
}

// Hybrid decode: one graph per span of layers that ends at a layer whose
// MoE step must be planned on the host: the span's pinned layers whole
// (their experts in VRAM for good), then the last layer's attention and the
// FFN's norm and router (captured at the first step of each attention span,
// like the all-resident graph); then that layer's hybrid MoE step, which
// reads the routes back and decides on the host. Every driver call sits on
// the step's critical path here, so a launch replaces dozens.
void CudaBackend::Impl::enqueue_hybrid_decode(int max_kv_len) {
  if (hybrid_graphs.size() != static_cast<size_t>(c.n_layer)) {
    hybrid_graphs.clear();
    for (int il = 0; il < c.n_layer; ++il) hybrid_graphs.push_back(std::make_unique<cuda::DecodeGraph>());
  }
  for (int first = 0; first < c.n_layer;) {
    int last = first;
    while (last + 1 < c.n_layer && pinned_experts(last, 1)) ++last;
    const bool last_whole = pinned_experts(last, 1);
    cuda::DecodeGraph& g = *hybrid_graphs[static_cast<size_t>(first)];
    auto span = [&] {
      for (int il = first; il <= last; ++il) {
        if (il == 0) {
          const cuda::DevMat& embd = weights.token_embd;
          cuda::embed_rows(embd.type, embd.data, c.n_vocab, c.n_embd, step_in, 1, h, stream);
        }
        block_pass = {1, step_in + 1, true, max_kv_len, step_in + 2, 0,
                      il < last || last_whole ? FfnPart::All : FfnPart::Route, cur_slot};
        run_layer(il);
      }
    };
    if (opt.use_graph && !g.ready(max_kv_len)) {
      try {
        g.capture(stream, max_kv_len, span);
      } catch (const Error& e) {
        cudaGetLastError();
        opt.use_graph = false;
        std::fprintf(stderr, "moestream: CUDA graph capture failed (%s); decoding without graphs\n", e.what());
      }
    }
    if (opt.use_graph) g.launch(stream);
    else span();
    if (!last_whole) moe_ffn_block(last, moe_blocks[static_cast<size_t>(last)], 1, FfnPart::Experts);
    first = last + 1;
  }
  head(0, 1);
}

void CudaBackend::Impl::decode(int32_t token, int64_t p, float* out) {
  // Hybrid: the gated step (one graph, no round trip on a hit) when it can
  // be captured; else a graph per span and a round trip per tiered layer.
  const bool gated = hybrid && !route_hook && opt.use_graph && hybrid->gated_decode();
  auto* in = host_in.as<int32_t>();
  in[0] = token;
  in[1] = static_cast<int32_t>(p);
  in[2] = static_cast<int32_t>(p + 1);
  in[3] = 0;
  MS_CUDA_CHECK(cudaMemcpyAsync(step_in, in, 4 * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  const int max_kv = cuda::decode_kv_span(p, kv.ctx());
  const bool use_graph = opt.use_graph && !route_hook && (!hybrid || gated);
  if (use_graph && !graph.ready(max_kv)) {
    try {
      gated_step = gated;
      graph.capture(stream, max_kv, [&] { enqueue_decode(max_kv); });
      gated_step = false;
    } catch (const Error& e) {
      // A launcher that cannot be captured: run the step directly from now on.
      cudaGetLastError();
      gated_step = false;
      opt.use_graph = false;
      std::fprintf(stderr, "moestream: CUDA graph capture failed (%s); decoding without graphs\n", e.what());
    }
  }
  const bool run_gated = gated && opt.use_graph;
  if (hybrid) hybrid->begin_pass(1, run_gated);
  const auto call_start = std::chrono::steady_clock::now();
  if (timing.on) timing.t0->record(stream);
  if (use_graph && opt.use_graph) {
    graph.launch(stream);
    if (run_gated) hybrid->serve_gated();
  } else if (hybrid && !route_hook) {
    enqueue_hybrid_decode(max_kv);
  } else {
    enqueue_decode(max_kv);
  }
  if (timing.on) timing.t1->record(stream);
  copy_logits(out, 1);
  if (hybrid) hybrid->end_pass();
  if (timing.on) {
    const auto now = std::chrono::steady_clock::now();
    if (timing.steps > 0)
      timing.between_ms += std::chrono::duration<double, std::milli>(call_start - timing.last_end).count();
    timing.call_ms += std::chrono::duration<double, std::milli>(now - call_start).count();
    timing.gpu_ms += timing.t1->ms_since(*timing.t0);
    timing.last_end = now;
    ++timing.steps;
  }
}

// ---------------------------------------------------------------- prefill
// n <= B tokens at positions pos0..; logits of the last token (out) or of
// every token (all).
void CudaBackend::Impl::prefill(const int32_t* tokens, int n, int64_t pos0, float* out, bool all) {
  if (hybrid) hybrid->begin_pass(n);
  prefill_batch(tokens, n, pos0, out, all);
  if (hybrid) hybrid->end_pass();
}

void CudaBackend::Impl::prefill_batch(const int32_t* tokens, int n, int64_t pos0, float* out, bool all) {
  auto* in = host_in.as<int32_t>();
  std::memcpy(in, tokens, sizeof(int32_t) * n);
  for (int t = 0; t < n; ++t) in[B + t] = static_cast<int32_t>(pos0 + t);
  MS_CUDA_CHECK(cudaMemcpyAsync(tok, in, sizeof(int32_t) * n, cudaMemcpyHostToDevice, stream));
  MS_CUDA_CHECK(cudaMemcpyAsync(pos, in + B, sizeof(int32_t) * n, cudaMemcpyHostToDevice, stream));
  const cuda::DevMat& embd = weights.token_embd;
  cuda::embed_rows(embd.type, embd.data, c.n_vocab, c.n_embd, tok, n, h, stream);
  block_pass = {n, pos, false, 0, nullptr, static_cast<int>(pos0), FfnPart::All, cur_slot};
  for (int il = 0; il < c.n_layer; ++il) run_layer(il);
  if (!out) {
    // The inputs in pinned memory must stay put until the copies ran.
    MS_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  if (!all) {
    head(n - 1, 1);
    copy_logits(out, 1);
    return;
  }
  for (int t = 0; t < n; t += kLogitRows) {
    const int m = std::min(kLogitRows, n - t);
    head(t, m);
    copy_logits(out + static_cast<int64_t>(t) * c.n_vocab, m);
  }
}

// ---------------------------------------------------------------- several sequences
void CudaBackend::Impl::enqueue_seq_layers(int n) {
  const cuda::DevMat& embd = weights.token_embd;
  cuda::embed_rows(embd.type, embd.data, c.n_vocab, c.n_embd, tok, n, h, stream);
  block_pass = {n, pos, false, 0, nullptr, 0, FfnPart::All, 0, &runs};
  for (int il = 0; il < c.n_layer; ++il) run_layer(il);
  block_pass.runs = nullptr;
}

// One forward_seqs pass: the runs' tokens embedded together, every layer's
// projections / router / experts over all n rows (the tiered step streams
// each expert once for all of them, as a prompt pass), attention and the
// recurrence per run on its slot; the head for the wanted rows only.
void CudaBackend::Impl::run_seqs(const int32_t* tokens, int n, const std::vector<int>& want, float* out,
                                 float* rows_out) {
  auto* in = host_in.as<int32_t>();
  std::memcpy(in, tokens, sizeof(int32_t) * n);
  for (const SeqRun& r : runs)
    for (int t = 0; t < r.n; ++t) in[B + r.row0 + t] = static_cast<int32_t>(r.pos0 + t);
  for (size_t i = 0; i < runs.size(); ++i) in[2 * B + static_cast<int>(i)] = static_cast<int32_t>(runs[i].pos0 + runs[i].n);
  for (const SeqRun& r : runs)
    for (int t = 0; t < r.n; ++t) in[3 * B + r.row0 + t] = r.slot;
  MS_CUDA_CHECK(cudaMemcpyAsync(tok, in, sizeof(int32_t) * n, cudaMemcpyHostToDevice, stream));
  MS_CUDA_CHECK(cudaMemcpyAsync(pos, in + B, sizeof(int32_t) * n, cudaMemcpyHostToDevice, stream));
  MS_CUDA_CHECK(
      cudaMemcpyAsync(run_kv_len, in + 2 * B, sizeof(int32_t) * runs.size(), cudaMemcpyHostToDevice, stream));
  MS_CUDA_CHECK(cudaMemcpyAsync(row_slot, in + 3 * B, sizeof(int32_t) * n, cudaMemcpyHostToDevice, stream));
  if (hybrid) hybrid->begin_pass(n);
  // One token per sequence with every expert resident: nothing in the
  // layers talks to the host, so they replay from a graph captured for this
  // shape (the decode graph's reasoning, for several sequences).
  bool decode_only = true;
  for (const SeqRun& r : runs) decode_only = decode_only && r.n == 1;
  bool replayed = false;
  if (decode_only && opt.use_graph && seq_graph_ok && !route_hook && !hybrid) {
    std::vector<int> key;
    for (const SeqRun& r : runs) {
      key.push_back(r.slot);
      key.push_back(cuda::decode_kv_span(r.pos0, kv.ctx()));
    }
    if (key != seq_graph_key || !seq_graph.ready(0)) {
      seq_graph_key.clear();
      try {
        seq_graph.capture(stream, 0, [&] { enqueue_seq_layers(n); });
        seq_graph_key = key;
      } catch (const Error& e) {
        cudaGetLastError();
        seq_graph_ok = false;
        std::fprintf(stderr, "moestream: CUDA graph capture of a multi-sequence step failed (%s); running those "
                     "steps without graphs\n", e.what());
      }
    }
    if (!seq_graph_key.empty()) {
      seq_graph.launch(stream);
      replayed = true;
    }
  }
  if (!replayed) enqueue_seq_layers(n);
  const int64_t D = c.n_embd;
  if (rows_out) {  // every row, before the gather below overwrites some
    MS_CUDA_CHECK(cudaMemcpyAsync(rows_out, h, sizeof(float) * D * n, cudaMemcpyDeviceToHost, stream));
    MS_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  // The wanted rows to the front of h, in order (row want[j] >= j, and every
  // later source lies past every earlier target), then the head over them.
  for (size_t j = 0; j < want.size(); ++j)
    if (want[j] != static_cast<int>(j))
      MS_CUDA_CHECK(cudaMemcpyAsync(h + static_cast<int64_t>(j) * D, h + static_cast<int64_t>(want[j]) * D,
                                    sizeof(float) * D, cudaMemcpyDeviceToDevice, stream));
  const int m = static_cast<int>(want.size());
  for (int t = 0; t < m; t += kLogitRows) {
    const int rows = std::min(kLogitRows, m - t);
    head(t, rows);
    copy_logits(out + static_cast<int64_t>(t) * c.n_vocab, rows);
  }
  // The inputs in pinned memory must stay put until the copies ran.
  if (m == 0) MS_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (hybrid) hybrid->end_pass();
}

}  // namespace ms
