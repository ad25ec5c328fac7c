// The blocks hybrids (qwen35moe: Qwen3.5/3.6-MoE, model/recipe_qwen35moe.cpp)
// need beyond the decoder's, as CpuBackend has them (src/engine/cpu_backend.cpp):
//  - the Gated DeltaNet layer (linear attention) in place of attention in
//    most layers, with its state (conv window, delta-rule matrix) in the
//    device cache (device_kv_cache.h);
//  - the shared expert every MoE layer adds: a resident dense SwiGLU FFN
//    scaled by sigmoid(w_s . x).
// (The third part, attention's output gate, is in layer_recipe.cpp's
// attention_block; the shared expert is a part of the MoE block.) Every launch here is asynchronous and capturable, so the
// decode step of a hybrid replays from one CUDA graph like any other.
// Host code only: every kernel is reached through the launchers of src/cuda.
#include <string>

#include "cpu/delta_net.h"
#include "cuda/backend/cuda_backend_impl.h"
#include "cuda/delta_net.h"
#include "cuda/delta_net_multi.h"
#include "cuda/gated_ops.h"
#include "cuda/matvec.h"
#include "cuda/ops.h"
#include "util/error.h"

namespace ms {
namespace {

// The eps of the q/k l2 norm (the CPU recipe's, and the reference's).
constexpr float kL2NormEps = 1e-6f;

DeltaNetShape delta_shape(const ModelConfig& c) {
  return {c.lin.n_k_heads, c.lin.n_v_heads, c.lin.head_k, c.lin.head_v};
}

}  // namespace

// The shapes the kernels take, checked once at construction (a launcher
// throwing inside a graph capture would only disable graphs).
void CudaBackend::Impl::check_hybrid_arch() const {
  if (!c.linear_layer.empty()) {
    const auto& L = c.lin;
    if (L.conv_kernel < 2 || L.conv_kernel > 16)
      throw Error("CUDA backend: ssm.conv_kernel " + std::to_string(L.conv_kernel) + " (the CUDA conv takes 2..16 taps)");
    if (L.head_k <= 0 || L.head_k > 256 || L.n_k_heads <= 0 || L.n_v_heads % L.n_k_heads != 0)
      throw Error("CUDA backend: Gated DeltaNet key heads of " + std::to_string(L.head_k) +
                  " (at most 256) and value heads a multiple of key heads are needed");
    if (L.value_dim() % 32 != 0)
      throw Error("CUDA backend: the Gated DeltaNet value width (" + std::to_string(L.value_dim()) +
                  ") must be a multiple of 32");
  }
  if (c.n_ff_shexp > 0 && c.n_ff_shexp % 32 != 0)
    throw Error("CUDA backend: the shared expert's FFN width (" + std::to_string(c.n_ff_shexp) +
                ") must be a multiple of 32");
}

// y[t] = W x[t] for a matrix of a few rows (alpha, beta, the shared expert's
// gate vector): always the exact matvec, as the router, so a batch and a
// decode step compute these gates alike.
void CudaBackend::Impl::small_projection(const cuda::DevMat& m, int n, float* y) {
  cuda::MatvecInput in;
  in.f32 = x;
  if (cuda::matvec_takes_q8(m.type)) in.q8 = xq8;
  cuda::linear(m.type, m.data, m.rows, m.cols, in, n, y, nullptr, stream);
}

// h += Wout gated_rmsnorm(delta_rule(l2norm(conv(Wqkv x))), Wz x) for n
// tokens (of one sequence, or of block_pass.runs' several), the state
// carried in the device cache. Prompts of
// kDeltaChunkedMinTokens tokens or more run the recurrence in the chunked
// (WY) form on the tensor cores; decode and shorter prompts token by token in
// one launch (a warp per state row keeps the row in registers).
void CudaBackend::Impl::linear_attention_block(int il, int n) {
  cudaStream_t s = stream;
  const cuda::DevLayer& L = weights.layer(il);
  const DeltaNetShape sh = delta_shape(c);
  const int64_t CD = sh.conv_dim(), VD = sh.value_dim();
  const int nv = sh.n_v_heads;
  norm_rows(h, L.attn_norm, n);
  project(L.ssm_qkv, x, &xq8, n, lin_qkv, nullptr);
  project(L.ssm_z, x, &xq8, n, lin_z, nullptr);
  small_projection(L.ssm_alpha, n, lin_a);
  small_projection(L.ssm_beta, n, lin_b);
  cuda::delta_gates(lin_a, lin_b, L.ssm_a, L.ssm_dt, n, nv, lin_g, lin_beta, s);
  // The conv window and the recurrence carry one sequence's state: run per
  // sequence (several in a forward_seqs pass), each on its own slot's.
  auto recur = [&](int slot, int row0, int nr) {
    const int64_t r = row0;
    cuda::conv1d_silu(lin_qkv + r * CD, CD, nr, CD, L.ssm_conv, c.lin.conv_kernel, kv.conv_state(il, slot),
                      lin_conv + r * CD, s);
    cuda::delta_prepare_qk(lin_conv + r * CD, CD, nr, sh, kL2NormEps, s);
    cuda::delta_rule_prompt(lin_conv + r * CD, CD, lin_g + r * nv, lin_beta + r * nv, nr, sh,
                            kv.delta_state(il, slot), lin_out + r * VD, s);
  };
  if (block_pass.runs == nullptr) {
    recur(block_pass.slot, 0, n);
  } else if (static_cast<int>(block_pass.runs->size()) == n && n > 1) {
    // One token per sequence: the conv and the recurrence of every row in
    // one launch each (src/cuda/delta_net_multi.h: row t on slot
    // row_slot[t], the same formulas as the one-token kernels).
    const auto stride = static_cast<int64_t>(kv.recurrent_slot_stride() / sizeof(float));
    cuda::conv1d_silu_multi(lin_qkv, CD, n, CD, L.ssm_conv, c.lin.conv_kernel, kv.conv_state(il, 0), stride,
                            kv.n_seq(), row_slot, lin_conv, s);
    cuda::delta_prepare_qk(lin_conv, CD, n, sh, kL2NormEps, s);
    cuda::delta_rule_multi(lin_conv, CD, lin_g, lin_beta, n, sh, kv.delta_state(il, 0), stride, kv.n_seq(), row_slot,
                           lin_out, s);
  } else {
    for (const SeqRun& run : *block_pass.runs) recur(run.slot, run.row0, run.n);
  }
  cuda::gated_rmsnorm(lin_out, lin_z, L.ssm_norm, lin_out, static_cast<int64_t>(n) * nv, sh.head_v, c.rms_eps, s);
  if (cuda::matvec_takes_q8(L.ssm_out.type)) cuda::quantize_q8act(lin_out, VD, n, linq8, s);
  project(L.ssm_out, lin_out, &linq8, n, h, h);
}

// h += sigmoid(w_s . x) * Wdown(silu(Wgate x) * Wup x) for n tokens of the
// FFN input x (xq8). The scale goes on the SwiGLU activations before the down
// projection (the product is linear), so the down projection adds straight
// into h. Runs before the routed experts, which may fuse the next RMSNorm
// into their last launch and so must be the last to touch h.
void CudaBackend::Impl::shared_expert(int il, int n) {
  cudaStream_t s = stream;
  const cuda::DevLayer& L = weights.layer(il);
  const int64_t F = c.n_ff_shexp;
  small_projection(L.shexp_router, n, sh_score);
  if (n >= opt.gemm_min_batch || L.shexp_gate.type != L.shexp_up.type) {
    project(L.shexp_gate, x, &xq8, n, sh_g, nullptr);
    project(L.shexp_up, x, &xq8, n, sh_u, nullptr);
    cuda::silu_mul(sh_g, sh_u, sh_g, static_cast<int64_t>(n) * F, s);
  } else {
    cuda::MatvecInput in;
    in.f32 = x;
    if (cuda::matvec_takes_q8(L.shexp_gate.type)) in.q8 = xq8;
    cuda::MatvecGroups g;
    g.per_group = n;
    cuda::matvec_glu(L.shexp_gate.set(), L.shexp_up.set(), in, g, sh_g, F, s);
  }
  cuda::scale_rows_sigmoid(sh_g, sh_score, n, F, s);
  if (cuda::matvec_takes_q8(L.shexp_down.type)) cuda::quantize_q8act(sh_g, F, n, shq8, s);
  project(L.shexp_down, sh_g, &shq8, n, h, h);
}

}  // namespace ms
