// The chunked (WY) form of the Gated DeltaNet recurrence on the GPU, for
// prompts (see delta_net.h). The algebra is the CPU's head_chunked
// (src/cpu/delta_net.cpp); per chunk of kC tokens, with G_i the cumulative
// log decay up to token i of the chunk and S the state before it:
//   L[i][j] = beta_i (k_i . k_j) exp(G_i - G_j)   (j < i), T = I + L
//   R_i     = beta_i (v_i - exp(G_i) S k_i)
//   Vn      = T^-1 R                        (the corrected values)
//   o_i     = exp(G_i) S q_i + sum_{j<=i} (q_i . k_j) exp(G_i - G_j) Vn_j
//   S'      = exp(G_C) S + sum_i (exp(G_C - G_i) Vn_i) k_i^T
// (R folds the CPU's W = T^-1 [beta exp(G) k] into the right-hand side, so
// only the value columns are solved for, not the key columns as well.)
//
// One block per (value head, slice of kBV value channels): rows of S evolve
// independently, so the slice's rows stay in shared memory for the whole
// prompt and the block walks the chunks in order. The chunk's products
// (K K^T, Q K^T, K S^T, Q S^T, the intra-chunk output, the state update) run
// on the tensor cores through WMMA in tf32 with f32 accumulators; by default
// each operand is split into two tf32 parts (hi + lo, three products:
// "3xTF32"), which keeps f32 accuracy over thousands of tokens of carried
// state. The triangular solve is f32 on the CUDA cores: the four 16x16
// diagonal blocks of T are inverted in parallel, then four block steps.
#include <mma.h>

#include <algorithm>
#include <string>

#include "cuda/common.cuh"
#include "cuda/delta_net.h"
#include "cuda/device.h"
#include "util/error.h"

// tf32 WMMA needs sm_80: for older targets (the default build includes
// sm_75) the kernel's body is left out and delta_rule_chunked_supported says
// no, so the layer keeps the token-by-token kernel there.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define MS_DELTA_TENSOR_CORES 0
#else
#define MS_DELTA_TENSOR_CORES 1
#endif

namespace ms::cuda {
namespace {

using namespace nvcuda;

constexpr int kC = 64;                 // tokens per chunk
constexpr int kBV = 32;                // value channels (state rows) per block
constexpr int kThreads = 256;          // 8 warps
constexpr int kLdA = kC + 4;           // row stride of the chunk x chunk matrices (padded: banks)
constexpr int kLdV = kBV + 4;          // row stride of the chunk x slice matrices
constexpr int kMaxHeadK = 192;         // the largest padded head_k whose tiles fit shared memory

// Shared memory, in floats; every region starts on a 32-byte boundary (WMMA
// loads and stores need it: all sizes below are multiples of 8 floats).
struct Layout {
  int ldk;  // row stride of K, Q and S tiles: padded head_k + 4
  int K, Q, S, Akk, Aqk, R, X, KS, O, Dinv, G, eG, B, F, total;
  __host__ __device__ explicit Layout(int hkp) : ldk(hkp + 4) {
    K = 0;
    Q = K + kC * ldk;
    S = Q + kC * ldk;
    Akk = S + kBV * ldk;     // K K^T, then L (strictly lower)
    Aqk = Akk + kC * kLdA;   // Q K^T, then its decayed lower triangle
    R = Aqk + kC * kLdA;     // v, then R
    X = R + kC * kLdV;       // Vn
    KS = X + kC * kLdV;      // K S^T, then the solve's right-hand sides
    O = KS + kC * kLdV;      // Q S^T, then the chunk's outputs
    Dinv = O + kC * kLdV;    // the inverses of T's four 16x16 diagonal blocks
    G = Dinv + 4 * 16 * 16;  // cumulative log decay within the chunk
    eG = G + kC;             // exp(G_i)
    B = eG + kC;             // beta_i (0 past the prompt's end)
    F = B + kC;              // exp(G_C - G_i): the weight of k_i in the state update
    total = F + kC;
  }
};

size_t smem_bytes(int hkp) { return sizeof(float) * static_cast<size_t>(Layout(hkp).total); }
int padded_head_k(int head_k) { return (head_k + 15) / 16 * 16; }

#if MS_DELTA_TENSOR_CORES
constexpr int kWarps = kThreads / 32;
constexpr int kLoads = kC * kMaxHeadK / 4 / kThreads;  // 16-byte loads of q (and of k) per thread and chunk

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragAT = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragBT = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major>;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;

// f's elements rounded to tf32; with kSplit, lo gets what the rounding lost
// (itself rounded: x = hi + lo to about 2^-21 relative).
template <bool kSplit, class Frag>
__device__ __forceinline__ void to_tf32(Frag& f, Frag& lo) {
#pragma unroll
  for (int e = 0; e < f.num_elements; ++e) {
    const float x = f.x[e], hi = wmma::__float_to_tf32(x);
    if constexpr (kSplit) lo.x[e] = wmma::__float_to_tf32(x - hi);
    f.x[e] = hi;
  }
}

// acc += A B for tf32 fragments; with kSplit, A = a + a_lo, B = b + b_lo,
// the small terms a_hi b_lo + a_lo b_hi going to `corr` (the lo * lo term is
// below f32's rounding). Two accumulators: two independent mma chains.
template <bool kSplit, class FA, class FB>
__device__ __forceinline__ void mma_frags(Acc& acc, Acc& corr, const FA& a, const FA& a_lo, const FB& b,
                                          const FB& b_lo) {
  if constexpr (kSplit) {
    wmma::mma_sync(corr, a_lo, b, corr);
    wmma::mma_sync(corr, a, b_lo, corr);
  }
  wmma::mma_sync(acc, a, b, acc);
}

// acc += A (16x8 at a, stride lda) * B (8x16 at b, stride ldb) (see mma_frags).
template <bool kSplit, class FA, class FB>
__device__ __forceinline__ void mma_step(Acc& acc, Acc& corr, const float* a, int lda, const float* b, int ldb) {
  FA fa, fa_lo;
  FB fb, fb_lo;
  wmma::load_matrix_sync(fa, a, lda);
  wmma::load_matrix_sync(fb, b, ldb);
  to_tf32<kSplit>(fa, fa_lo);
  to_tf32<kSplit>(fb, fb_lo);
  mma_frags<kSplit>(acc, corr, fa, fa_lo, fb, fb_lo);
}

// acc += the other accumulators' sums.
__device__ __forceinline__ void add_into(Acc& acc, const Acc& a, const Acc& b, const Acc& c) {
#pragma unroll
  for (int e = 0; e < acc.num_elements; ++e) acc.x[e] += (a.x[e] + b.x[e]) + c.x[e];
}

// acc (initialised by the caller) += sum over `steps` (even) k-steps of
// A_s B_s, A_s at a + s * a_step, B_s at b + s * b_step: even and odd steps
// in separate accumulators (four independent chains with the corrections).
template <bool kSplit, class FA, class FB>
__device__ __forceinline__ void mma_run(Acc& acc, int steps, const float* a, int lda, int a_step, const float* b,
                                        int ldb, int b_step) {
  Acc acc1, corr0, corr1;
  wmma::fill_fragment(acc1, 0.f);
  wmma::fill_fragment(corr0, 0.f);
  wmma::fill_fragment(corr1, 0.f);
  for (int s = 0; s < steps; s += 2) {
    mma_step<kSplit, FA, FB>(acc, corr0, a + s * a_step, lda, b + s * b_step, ldb);
    mma_step<kSplit, FA, FB>(acc1, corr1, a + (s + 1) * a_step, lda, b + (s + 1) * b_step, ldb);
  }
  add_into(acc, acc1, corr0, corr1);
}

// Tile t (0..9) of a 4x4 grid's lower triangle, row by row.
__device__ __forceinline__ void lower_tile(int t, int& mi, int& ni) {
  mi = 0;
  while ((mi + 1) * (mi + 2) / 2 <= t) ++mi;
  ni = t - mi * (mi + 1) / 2;
}
#endif  // MS_DELTA_TENSOR_CORES

template <bool kSplit>
__global__ void __launch_bounds__(kThreads)
    delta_chunked_kernel(const float* __restrict__ qkv, int64_t ld, const float* __restrict__ g,
                         const float* __restrict__ beta, int n, int n_k, int n_v, int hk, int hv, int hkp, float* S,
                         float* out) {
#if MS_DELTA_TENSOR_CORES
  extern __shared__ __align__(128) float sm[];
  const Layout Ly(hkp);
  const int ldk = Ly.ldk;
  float *Ks = sm + Ly.K, *Qs = sm + Ly.Q, *Ss = sm + Ly.S, *Akk = sm + Ly.Akk, *Aqk = sm + Ly.Aqk;
  float *Rs = sm + Ly.R, *Xs = sm + Ly.X, *KSs = sm + Ly.KS, *Os = sm + Ly.O, *Dinv = sm + Ly.Dinv;
  float *Gs = sm + Ly.G, *eGs = sm + Ly.eG, *Bs = sm + Ly.B, *Fs = sm + Ly.F;

  const int h = blockIdx.x, c0 = blockIdx.y * kBV, kh = h % n_k;
  const int bv = min(kBV, hv - c0);  // this block's value channels
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t key_dim = static_cast<int64_t>(n_k) * hk, value_dim = static_cast<int64_t>(n_v) * hv;
  float* Sg = S + (static_cast<int64_t>(h) * hv + c0) * hk;
  const bool vec4 = hk % 4 == 0 && ld % 4 == 0 && reinterpret_cast<uintptr_t>(qkv) % 16 == 0;

  // The state slice in; padding (rows past bv, columns past hk) is zero and stays zero.
  for (int idx = tid; idx < kBV * hkp; idx += kThreads) {
    const int c = idx / hkp, x = idx % hkp;
    Ss[c * ldk + x] = c < bv && x < hk ? Sg[static_cast<int64_t>(c) * hk + x] : 0.f;
  }

  for (int t0 = 0; t0 < n; t0 += kC) {
    const int C = min(kC, n - t0);
    const float* base = qkv + static_cast<int64_t>(t0) * ld;
    // ---- load the chunk: q and k of the key head, v of the slice; rows past
    // the prompt are zero (beta 0, g 0: they change nothing).
    if (vec4) {  // 16-byte loads (rows and heads start on 4-float boundaries), all in flight before the stores
      const int hk4 = hkp / 4;
      float4 q[kLoads], k[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int idx = tid + u * kThreads, i = idx / hk4, x = 4 * (idx % hk4);
        q[u] = k[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (idx < kC * hk4 && i < C && x < hk) {
          const float* p = base + static_cast<int64_t>(i) * ld + static_cast<int64_t>(kh) * hk + x;
          q[u] = __ldg(reinterpret_cast<const float4*>(p));
          k[u] = __ldg(reinterpret_cast<const float4*>(p + key_dim));
        }
      }
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int idx = tid + u * kThreads, i = idx / hk4, x = 4 * (idx % hk4);
        if (idx < kC * hk4) {
          *reinterpret_cast<float4*>(Qs + i * ldk + x) = q[u];
          *reinterpret_cast<float4*>(Ks + i * ldk + x) = k[u];
        }
      }
    } else {
      for (int idx = tid; idx < kC * hkp; idx += kThreads) {
        const int i = idx / hkp, x = idx % hkp;
        const bool ok = i < C && x < hk;
        const float* p = base + static_cast<int64_t>(i) * ld + static_cast<int64_t>(kh) * hk + x;
        Qs[i * ldk + x] = ok ? p[0] : 0.f;
        Ks[i * ldk + x] = ok ? p[key_dim] : 0.f;
      }
    }
    for (int idx = tid; idx < kC * kBV; idx += kThreads) {
      const int i = idx / kBV, c = idx % kBV;
      Rs[i * kLdV + c] = i < C && c < bv ? base[static_cast<int64_t>(i) * ld + 2 * key_dim + static_cast<int64_t>(h) * hv + c0 + c] : 0.f;
    }
    if (warp == 0) {  // the cumulative decay: two tokens per lane, a scan over the lanes
      const int i0 = 2 * lane, i1 = i0 + 1;
      const float g0 = i0 < C ? g[static_cast<int64_t>(t0 + i0) * n_v + h] : 0.f;
      const float g1 = i1 < C ? g[static_cast<int64_t>(t0 + i1) * n_v + h] : 0.f;
      float s = g0 + g1;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(dev::kFullMask, s, o);
        if (lane >= o) s += y;
      }
      const float G1 = s, G0 = s - g1, GC = __shfl_sync(dev::kFullMask, s, 31);
      Gs[i0] = G0;
      Gs[i1] = G1;
      eGs[i0] = expf(G0);
      eGs[i1] = expf(G1);
      Fs[i0] = expf(GC - G0);
      Fs[i1] = expf(GC - G1);
      Bs[i0] = i0 < C ? beta[static_cast<int64_t>(t0 + i0) * n_v + h] : 0.f;
      Bs[i1] = i1 < C ? beta[static_cast<int64_t>(t0 + i1) * n_v + h] : 0.f;
    }
    __syncthreads();

    // ---- tensor-core products: K K^T and Q K^T (lower tiles only), K S^T and
    // Q S^T; a job makes the K and the Q tile of one (row, column) pair, which
    // share the right-hand fragment (K^T or S^T, read column-major).
    const int ksteps = hkp / 8;
    for (int job = warp; job < 18; job += kWarps) {
      int mi, ni, ldd;
      const float* b;
      float *dk, *dq;
      if (job < 10) {
        lower_tile(job, mi, ni);
        b = Ks + 16 * ni * ldk;
        dk = Akk + 16 * mi * kLdA + 16 * ni;
        dq = Aqk + 16 * mi * kLdA + 16 * ni;
        ldd = kLdA;
      } else {
        mi = (job - 10) / 2;
        ni = (job - 10) % 2;
        b = Ss + 16 * ni * ldk;
        dk = KSs + 16 * mi * kLdV + 16 * ni;
        dq = Os + 16 * mi * kLdV + 16 * ni;
        ldd = kLdV;
      }
      const float *ak = Ks + 16 * mi * ldk, *aq = Qs + 16 * mi * ldk;
      Acc ck, cq, ek, eq;
      wmma::fill_fragment(ck, 0.f);
      wmma::fill_fragment(cq, 0.f);
      wmma::fill_fragment(ek, 0.f);
      wmma::fill_fragment(eq, 0.f);
      for (int s = 0; s < ksteps; ++s) {
        FragBT fb, fb_lo;
        FragA fa, fa_lo;
        wmma::load_matrix_sync(fb, b + 8 * s, ldk);
        to_tf32<kSplit>(fb, fb_lo);
        wmma::load_matrix_sync(fa, ak + 8 * s, ldk);
        to_tf32<kSplit>(fa, fa_lo);
        mma_frags<kSplit>(ck, ek, fa, fa_lo, fb, fb_lo);
        wmma::load_matrix_sync(fa, aq + 8 * s, ldk);
        to_tf32<kSplit>(fa, fa_lo);
        mma_frags<kSplit>(cq, eq, fa, fa_lo, fb, fb_lo);
      }
      if constexpr (kSplit) {
#pragma unroll
        for (int e = 0; e < ck.num_elements; ++e) {
          ck.x[e] += ek.x[e];
          cq.x[e] += eq.x[e];
        }
      }
      wmma::store_matrix_sync(dk, ck, ldd, wmma::mem_row_major);
      wmma::store_matrix_sync(dq, cq, ldd, wmma::mem_row_major);
    }
    __syncthreads();

    // ---- decays and gates: L, the decayed Q K^T, R, exp(G) Q S^T. Only the
    // 10 lower tiles: those above the diagonal are never read.
    for (int idx = tid; idx < 10 * 256; idx += kThreads) {
      int mi, ni;
      lower_tile(idx / 256, mi, ni);
      const int i = 16 * mi + (idx % 256) / 16, j = 16 * ni + idx % 16;
      const float d = j <= i ? expf(Gs[i] - Gs[j]) : 0.f;  // no exp of a growth above the diagonal
      Akk[i * kLdA + j] = j < i ? Bs[i] * d * Akk[i * kLdA + j] : 0.f;
      Aqk[i * kLdA + j] = d * Aqk[i * kLdA + j];
    }
    for (int idx = tid; idx < kC * kBV; idx += kThreads) {
      const int i = idx / kBV, c = idx % kBV;
      Rs[i * kLdV + c] = Bs[i] * (Rs[i * kLdV + c] - eGs[i] * KSs[i * kLdV + c]);
      Os[i * kLdV + c] *= eGs[i];
    }
    __syncthreads();

    // ---- the diagonal blocks of T = I + L inverted, a column per thread.
    if (tid < 64) {
      const int b = tid / 16, j = tid % 16;
      const float* Lb = Akk + 16 * b * kLdA + 16 * b;
      float x[16];
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        float v = r == j ? 1.f : 0.f;
#pragma unroll
        for (int m = 0; m < r; ++m) v -= Lb[r * kLdA + m] * x[m];
        x[r] = v;
      }
#pragma unroll
      for (int r = 0; r < 16; ++r) Dinv[b * 256 + r * 16 + j] = x[r];
    }
    __syncthreads();

    // ---- Vn = T^-1 R by blocks of 16 rows: Y_b = R_b - L[b][<b] Vn_<b, Vn_b =
    // Dinv_b Y_b; R_b, read by then, makes room for F Vn_b (the state update's).
    for (int b = 0; b < 4; ++b) {
      for (int idx = tid; idx < 16 * kBV; idx += kThreads) {
        const int i = 16 * b + idx / kBV, c = idx % kBV;
        const float* Li = Akk + i * kLdA;
        float y = Rs[i * kLdV + c];
        for (int m = 0; m < 16 * b; ++m) y -= Li[m] * Xs[m * kLdV + c];
        KSs[i * kLdV + c] = y;
      }
      __syncthreads();
      for (int idx = tid; idx < 16 * kBV; idx += kThreads) {
        const int r = idx / kBV, c = idx % kBV;
        const float* D = Dinv + b * 256 + r * 16;
        float x = 0.f;
        for (int m = 0; m <= r; ++m) x += D[m] * KSs[(16 * b + m) * kLdV + c];
        Xs[(16 * b + r) * kLdV + c] = x;
        Rs[(16 * b + r) * kLdV + c] = Fs[16 * b + r] * x;
      }
      __syncthreads();
    }

    // ---- tensor cores again: O = exp(G) Q S^T + A_qk Vn; S = exp(G_C) S + (F Vn)^T K.
    const float eC = eGs[kC - 1];
    const int jobs = 8 + 2 * (hkp / 16);
    for (int job = warp; job < jobs; job += kWarps) {
      Acc acc;
      if (job < 8) {
        const int mi = job / 2, ni = job % 2;
        float* o = Os + 16 * mi * kLdV + 16 * ni;
        wmma::load_matrix_sync(acc, o, kLdV, wmma::mem_row_major);
        // A_qk is lower triangular: the k-steps up to the diagonal tile.
        mma_run<kSplit, FragA, FragB>(acc, 2 * (mi + 1), Aqk + 16 * mi * kLdA, kLdA, 8, Xs + 16 * ni, kLdV, 8 * kLdV);
        wmma::store_matrix_sync(o, acc, kLdV, wmma::mem_row_major);
      } else {
        const int t = job - 8, mi = t % 2, ni = t / 2;
        float* st = Ss + 16 * mi * ldk + 16 * ni;
        wmma::load_matrix_sync(acc, st, ldk, wmma::mem_row_major);
#pragma unroll
        for (int e = 0; e < acc.num_elements; ++e) acc.x[e] *= eC;
        // (F Vn)^T: F Vn (in Rs) read column-major.
        mma_run<kSplit, FragAT, FragB>(acc, kC / 8, Rs + 16 * mi, kLdV, 8 * kLdV, Ks + 16 * ni, ldk, 8 * ldk);
        wmma::store_matrix_sync(st, acc, ldk, wmma::mem_row_major);
      }
    }
    __syncthreads();

    // ---- the chunk's outputs. (The next chunk's loads touch none of Os.)
    for (int idx = tid; idx < C * kBV; idx += kThreads) {
      const int i = idx / kBV, c = idx % kBV;
      if (c < bv) out[static_cast<int64_t>(t0 + i) * value_dim + static_cast<int64_t>(h) * hv + c0 + c] = Os[i * kLdV + c];
    }
  }
  __syncthreads();
  for (int idx = tid; idx < kBV * hkp; idx += kThreads) {
    const int c = idx / hkp, x = idx % hkp;
    if (c < bv && x < hk) Sg[static_cast<int64_t>(c) * hk + x] = Ss[c * ldk + x];
  }
#else
  __trap();  // never launched: delta_rule_chunked_supported is false for such code
#endif
}

// The device's opt-in shared memory per block (queried once).
int smem_optin() {
  static const int v = [] {
    int dev = 0, bytes = 0;
    MS_CUDA_CHECK(cudaGetDevice(&dev));
    MS_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return bytes;
  }();
  return v;
}

// The PTX version the chunked kernel runs from on this device (below 80:
// code without tensor cores, see MS_DELTA_TENSOR_CORES).
int kernel_ptx_version() {
  static const int v = [] {
    cudaFuncAttributes a{};
    MS_CUDA_CHECK(cudaFuncGetAttributes(&a, delta_chunked_kernel<true>));
    return a.ptxVersion;
  }();
  return v;
}

template <bool kSplit>
void launch(const float* qkv, int64_t ld, const float* g, const float* beta, int n, const DeltaNetShape& s, float* S,
            float* out, cudaStream_t stream) {
  const int hkp = padded_head_k(s.head_k);
  const size_t smem = smem_bytes(hkp);
  // Beyond the default 48 KB: opt in once, for the largest head this file takes.
  static const bool opted_in = [] {
    MS_CUDA_CHECK(cudaFuncSetAttribute(delta_chunked_kernel<kSplit>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(std::min<size_t>(smem_bytes(kMaxHeadK), smem_optin()))));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(static_cast<unsigned>(s.n_v_heads), static_cast<unsigned>((s.head_v + kBV - 1) / kBV));
  delta_chunked_kernel<kSplit><<<grid, kThreads, smem, stream>>>(qkv, ld, g, beta, n, s.n_k_heads, s.n_v_heads,
                                                                 s.head_k, s.head_v, hkp, S, out);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool delta_rule_chunked_supported(const DeltaNetShape& s) {
  if (s.head_k <= 0 || s.head_v <= 0 || s.n_k_heads <= 0 || s.n_v_heads % s.n_k_heads != 0) return false;
  const int hkp = padded_head_k(s.head_k);
  return hkp <= kMaxHeadK && smem_bytes(hkp) <= static_cast<size_t>(smem_optin()) && kernel_ptx_version() >= 80;
}

void delta_rule_chunked(const float* qkv, int64_t ld, const float* g, const float* beta, int n, const DeltaNetShape& s,
                        float* S, float* out, cudaStream_t stream, DeltaPrecision precision) {
  if (!delta_rule_chunked_supported(s))
    throw Error("delta_rule_chunked (CUDA): unsupported shape or device (head_k " + std::to_string(s.head_k) +
                " must be 1.." + std::to_string(kMaxHeadK) +
                ", value heads a multiple of key heads, code built for sm_80 or newer)");
  if (n <= 0) return;
  if (precision == DeltaPrecision::kTf32) launch<false>(qkv, ld, g, beta, n, s, S, out, stream);
  else launch<true>(qkv, ld, g, beta, n, s, S, out, stream);
}

void delta_rule_prompt(const float* qkv, int64_t ld, const float* g, const float* beta, int n, const DeltaNetShape& s,
                       float* S, float* out, cudaStream_t stream) {
  if (n >= kDeltaChunkedMinTokens && delta_rule_chunked_supported(s))
    delta_rule_chunked(qkv, ld, g, beta, n, s, S, out, stream);
  else
    delta_rule(qkv, ld, g, beta, n, s, S, out, stream);
}

}  // namespace ms::cuda
