// DeviceWeights::upload: the dense weights of a model into one device arena.
#include "cuda/backend/device_weights.h"

#include <map>

#include "cuda/backend/arena_layout.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

// Whether Wq, Wk, Wv can be one matrix of stacked rows: same type and width,
// and each part a multiple of 16 bytes (the matvec's alignment).
// Wq, Wk and Wv go back to back when Wq and Wk share a type (Wv may have
// another: the quantizer's mixes give attn_v more bits), so decode computes
// q|k in one launch and v straight after it (or q|k|v in one when all three
// share the type).
bool fusable_qkv(const LayerWeights& L) {
  return L.wq && L.wk && L.wv && L.wq.type == L.wk.type && L.wq.cols == L.wk.cols && L.wq.cols == L.wv.cols &&
         L.wq.nbytes % 16 == 0 && L.wk.nbytes % 16 == 0 && L.wq.data != L.wk.data && L.wk.data != L.wv.data &&
         L.wq.data != L.wv.data;
}

}  // namespace

ExpertBias expert_bias(const DevLayer& L, const MoeFfnBlock& b) {
  ExpertBias x;
  if (b.expert_bias) {
    x.gate = L.exp_gate_b;
    x.up = L.exp_up_b;
    x.down = L.exp_down_b;
  }
  x.clamped_swiglu = b.act.kind == GluActivation::Kind::ClampedSwiGLU;
  x.alpha = b.act.alpha;
  x.limit = b.act.limit;
  return x;
}

DeviceWeights DeviceWeights::upload(const ModelWeights& w) {
  DeviceWeights dw;
  std::map<const void*, void*> done;
  // pass 1: measure; pass 2: allocate and copy.
  size_t total = 0;
  auto blob_size = [&](const TensorView& t) {
    if (t && !done.count(t.data)) {
      done[t.data] = nullptr;
      total += arena_align_up(t.nbytes);
    }
  };
  blob_size(w.token_embd);
  blob_size(w.output_norm);
  blob_size(w.output);
  for (const LayerWeights& L : w.layers) {
    if (fusable_qkv(L)) {
      total += arena_align_up(L.wq.nbytes + L.wk.nbytes + L.wv.nbytes);
      done[L.wq.data] = done[L.wk.data] = done[L.wv.data] = nullptr;
    }
    for (const TensorView* t : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.bq, &L.bk, &L.bv, &L.q_norm, &L.k_norm,
                                &L.ffn_norm, &L.ffn_gate, &L.ffn_up, &L.ffn_down, &L.router, &L.ssm_qkv,
                                &L.ssm_z, &L.ssm_alpha, &L.ssm_beta, &L.ssm_out, &L.ssm_a, &L.ssm_dt, &L.ssm_conv,
                                &L.ssm_norm, &L.shexp_gate, &L.shexp_up, &L.shexp_down, &L.shexp_router, &L.bo,
                                &L.attn_sinks, &L.router_b, &L.experts.gate_b_view_, &L.experts.up_b_view_,
                                &L.experts.down_b_view_})
      blob_size(*t);
  }
  done.clear();
  dw.arena = DeviceArena("weights", total);

  auto put = [&](const TensorView& t) -> const void* {
    if (!t) return nullptr;
    auto it = done.find(t.data);
    if (it != done.end()) return it->second;
    void* d = dw.arena.alloc(t.nbytes, kArenaAlign);
    MS_CUDA_CHECK(cudaMemcpy(d, t.data, t.nbytes, cudaMemcpyHostToDevice));
    done[t.data] = d;
    return d;
  };
  auto mat = [&](const TensorView& t) {
    DevMat m;
    if (!t) return m;
    m.type = t.type;
    m.rows = t.rows;
    m.cols = t.cols;
    m.data = put(t);
    return m;
  };
  auto vec = [&](const TensorView& t) { return static_cast<const float*>(put(t)); };

  dw.token_embd = mat(w.token_embd);
  dw.output_norm = vec(w.output_norm);
  dw.output = mat(w.output);
  dw.layers.resize(w.layers.size());
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const LayerWeights& L = w.layers[il];
    DevLayer& D = dw.layers[il];
    if (fusable_qkv(L)) {
      auto* d = static_cast<uint8_t*>(dw.arena.alloc(L.wq.nbytes + L.wk.nbytes + L.wv.nbytes, kArenaAlign));
      MS_CUDA_CHECK(cudaMemcpy(d, L.wq.data, L.wq.nbytes, cudaMemcpyHostToDevice));
      MS_CUDA_CHECK(cudaMemcpy(d + L.wq.nbytes, L.wk.data, L.wk.nbytes, cudaMemcpyHostToDevice));
      MS_CUDA_CHECK(cudaMemcpy(d + L.wq.nbytes + L.wk.nbytes, L.wv.data, L.wv.nbytes, cudaMemcpyHostToDevice));
      done[L.wq.data] = d;
      done[L.wk.data] = d + L.wq.nbytes;
      done[L.wv.data] = d + L.wq.nbytes + L.wk.nbytes;
      if (L.wv.type == L.wq.type) D.wqkv = DevMat{L.wq.type, d, L.wq.rows + L.wk.rows + L.wv.rows, L.wq.cols};
      else D.wqk = DevMat{L.wq.type, d, L.wq.rows + L.wk.rows, L.wq.cols};
    }
    D.attn_norm = vec(L.attn_norm);
    D.wq = mat(L.wq);
    D.wk = mat(L.wk);
    D.wv = mat(L.wv);
    D.wo = mat(L.wo);
    D.bq = vec(L.bq);
    D.bk = vec(L.bk);
    D.bv = vec(L.bv);
    D.q_norm = vec(L.q_norm);
    D.k_norm = vec(L.k_norm);
    D.ffn_norm = vec(L.ffn_norm);
    D.ffn_gate = mat(L.ffn_gate);
    D.ffn_up = mat(L.ffn_up);
    D.ffn_down = mat(L.ffn_down);
    D.router = mat(L.router);
    D.ssm_qkv = mat(L.ssm_qkv);
    D.ssm_z = mat(L.ssm_z);
    D.ssm_alpha = mat(L.ssm_alpha);
    D.ssm_beta = mat(L.ssm_beta);
    D.ssm_out = mat(L.ssm_out);
    D.ssm_a = vec(L.ssm_a);
    D.ssm_dt = vec(L.ssm_dt);
    D.ssm_conv = vec(L.ssm_conv);
    D.ssm_norm = vec(L.ssm_norm);
    D.shexp_gate = mat(L.shexp_gate);
    D.shexp_up = mat(L.shexp_up);
    D.shexp_down = mat(L.shexp_down);
    D.shexp_router = mat(L.shexp_router);
    D.bo = vec(L.bo);
    D.attn_sinks = vec(L.attn_sinks);
    D.router_b = vec(L.router_b);
    D.exp_gate_b = vec(L.experts.gate_b_view_);
    D.exp_up_b = vec(L.experts.up_b_view_);
    D.exp_down_b = vec(L.experts.down_b_view_);
  }
  return dw;
}

}  // namespace ms::cuda
