// The per-head attention prologue shared by the fused decode kernel (one
// token, q|k|v in one row) and the fused prompt-batch kernel (n tokens,
// separate q, k, v): q/k RMSNorm, RoPE at the token's position, and the K/V
// cache append. Same formulas as the separate ops (ops_norm.cu, ops_rope.cu,
// ops_embed_kv.cu), so fused and unfused steps agree to float reassociation.
#pragma once

#include <cstdint>
#include <string>

#include "cuda/common.cuh"
#include "cuda/kv_elem.cuh"
#include "model/rope_router.h"
#include "util/error.h"

namespace ms::cuda {

constexpr int kHeadPrologueThreads = 128;
constexpr int kHeadPrologueMaxDim = 256;

// Host-side argument checks of both launchers; `who` names the caller.
inline void check_head_prologue_args(const char* who, int head_dim, int n_rot) {
  if (head_dim <= 0 || head_dim > kHeadPrologueMaxDim)
    throw Error(std::string(who) + ": head_dim " + std::to_string(head_dim) + " outside 1.." +
                std::to_string(kHeadPrologueMaxDim));
  if (n_rot <= 0 || n_rot > head_dim || n_rot % 2 != 0)
    throw Error(std::string(who) + ": n_rot " + std::to_string(n_rot) + " must be even and within head_dim");
}

namespace dev {

// One v head of one token: its row into cache row `pos` of kv head j.
template <class T>
__device__ __forceinline__ void head_store_v(const float* row, int hd, T* v_cache, int j, int pos, int64_t ctx) {
  for (int d = threadIdx.x; d < hd; d += kHeadPrologueThreads)
    v_cache[(static_cast<int64_t>(j) * ctx + pos) * hd + d] = KvElem<T>::from_float(row[d]);
}

// One q or k head of one token, by the whole block (kHeadPrologueThreads
// threads): RMSNorm with weights w (none: skipped), RoPE on the first n_rot
// dims (the angle and its sine/cosine in double, as rope()), written back to
// `row`; a k head (k_cache set) also goes into cache row `pos` of kv head j.
template <class T>
__device__ __forceinline__ void head_norm_rope(float* row, int hd, const float* __restrict__ w, float eps, int n_rot,
                                               int pos, double log2_base, RopeScaling scaling, bool neox, T* k_cache,
                                               int j, int64_t ctx) {
  __shared__ float buf[kHeadPrologueMaxDim];
  __shared__ float scratch[32];
  float ss = 0.f;
  for (int d = threadIdx.x; d < hd; d += kHeadPrologueThreads) {
    const float x = row[d];
    buf[d] = x;
    ss += x * x;
  }
  if (w != nullptr) {
    ss = block_sum(ss, scratch);  // synchronises: buf is complete
    const float inv = rsqrtf(ss / static_cast<float>(hd) + eps);
    for (int d = threadIdx.x; d < hd; d += kHeadPrologueThreads) buf[d] = buf[d] * inv * w[d];
  }
  __syncthreads();
  const int half = n_rot / 2;
  for (int i = threadIdx.x; i < half; i += kHeadPrologueThreads) {
    const double inv_freq = exp2(-2.0 * i / n_rot * log2_base);
    const double theta = static_cast<double>(pos) * rope_pair_scale(scaling, i) * inv_freq;
    double sd, cd;
    sincos(theta, &sd, &cd);
    const float s = static_cast<float>(sd) * scaling.mscale, c = static_cast<float>(cd) * scaling.mscale;
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float x0 = buf[a], x1 = buf[b];
    buf[a] = x0 * c - x1 * s;
    buf[b] = x0 * s + x1 * c;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += kHeadPrologueThreads) {
    row[d] = buf[d];
    if (k_cache != nullptr) k_cache[(static_cast<int64_t>(j) * ctx + pos) * hd + d] = KvElem<T>::from_float(buf[d]);
  }
}

}  // namespace dev
}  // namespace ms::cuda
