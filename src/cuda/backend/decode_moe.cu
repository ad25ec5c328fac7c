// Fused MoE decode kernels (see decode_moe.h). The dot product of one weight
// item is quant_dot.cuh's, as in the matvec kernel; the RMSNorm and Q8
// formulas are those of ops_norm.cu / matvec.cu (quantize_q8act).
#include <cfloat>
#include <string>

#include "cuda/backend/decode_moe.h"
#include "cuda/common.cuh"
#include "cuda/last_block.cuh"
#include "cuda/warp_q8.cuh"
#include "cuda/device.h"
#include "cuda/router_topk.cuh"
#include "cuda/pdl.cuh"
#include "cuda/quant_dot.cuh"
#include "cuda/quant_sub32_iq.cuh"
#include "util/error.h"

namespace ms::cuda {
namespace {

// Where one expert's matrix is (MatrixSet on the device).
struct DevMats {
  const void* const* table;
  int64_t offset;
  const uint8_t* base;
  int64_t stride;
  int64_t row_bytes;
  int n_items;  // items (quant_dot.cuh) per row
};

DevMats dev_mats(const MatrixSet& m, int item_elems) {
  DevMats d;
  d.table = m.table;
  d.offset = m.offset;
  d.base = static_cast<const uint8_t*>(m.base);
  d.stride = m.stride;
  d.row_bytes = row_bytes(m.type, m.cols);
  d.n_items = static_cast<int>(m.cols / item_elems);
  return d;
}

__device__ __forceinline__ const uint8_t* mat_of(const DevMats& m, int e) {
  return m.table != nullptr ? static_cast<const uint8_t*>(m.table[e]) + m.offset : m.base + static_cast<int64_t>(e) * m.stride;
}

// ------------------------------------------------------------------ RMSNorm as rmsnorm_row_q8
// The sum of squares of n floats in exactly the order of rmsnorm_row_q8's
// 1024-thread block (decode_fused.cu): virtual thread t sums elements
// t, t + 1024, ... in order, each virtual warp of 32 reduces by warp_sum, then
// the 32 warp sums by warp_sum. A block of nt threads plays the 32 virtual
// warps in turn, so the fused kernels normalise bit for bit as the kernel
// they replace. Every warp gets the result; scratch: 32 floats of shared
// memory, free on entry (the function syncs).
constexpr int kRowThreads = 1024;
constexpr int kRowChunksAtOnce = 2;  // 2048 floats: one round of loads
// NT: the calling block's threads. The loads of kRowChunksAtOnce chunks of
// 1024 are issued before their sums (one round trip to L2 per 2048 floats,
// not one per virtual warp); an element past n adds 0 * 0, as in the
// 1024-thread kernel.
template <int NT, bool CG>
__device__ __forceinline__ float row_sum_squares(const float* x, int n, float* scratch) {
  constexpr int kVirtualPerWarp = kRowThreads / NT;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float ss[kVirtualPerWarp];
#pragma unroll
  for (int u = 0; u < kVirtualPerWarp; ++u) ss[u] = 0.f;
  for (int c0 = 0; c0 < n; c0 += kRowChunksAtOnce * kRowThreads) {
    float v[kVirtualPerWarp][kRowChunksAtOnce];
#pragma unroll
    for (int u = 0; u < kVirtualPerWarp; ++u)
#pragma unroll
      for (int c = 0; c < kRowChunksAtOnce; ++c) {
        const int i = c0 + c * kRowThreads + (warp + u * (NT / 32)) * 32 + lane;
        v[u][c] = i < n ? (CG ? __ldcg(x + i) : x[i]) : 0.f;
      }
#pragma unroll
    for (int u = 0; u < kVirtualPerWarp; ++u)
#pragma unroll
      for (int c = 0; c < kRowChunksAtOnce; ++c)
        if (c0 + c * kRowThreads < n) ss[u] += v[u][c] * v[u][c];
  }
#pragma unroll
  for (int u = 0; u < kVirtualPerWarp; ++u) {
    const float t = dev::warp_sum(ss[u]);
    if (lane == 0) scratch[warp + u * (NT / 32)] = t;
  }
  __syncthreads();
  return dev::warp_sum(scratch[lane]);
}

// ------------------------------------------------------------------ router + norm
constexpr int kRouterThreads = 128;
constexpr int kMaxExperts = 1024;
constexpr int kRouterPre = 16;  // float4s of the router row a lane loads at once

// Block r: row r of the router. Each block normalises h itself into shared
// memory (n floats from L2: cheaper than a launch); warp w of block b writes
// the Q8 blocks b*4 + w, + 4*gridDim, ... of x. Warp 0 takes the router row
// exactly as router_decode_f32 does (lane i sums float4s i, i + 32, ...).
__global__ void __launch_bounds__(kRouterThreads) router_norm_kernel(
    const float* h, const float* __restrict__ nw, float eps, const float* __restrict__ W, int n_expert, int n, int k,
    bool softmax_first, bool renorm, float* __restrict__ x_out, int8_t* __restrict__ xq, float2* __restrict__ xds,
    float* logits, int32_t* __restrict__ ids, float* __restrict__ weights, unsigned int* counter) {
  extern __shared__ float4 xs4[];  // x, n floats
  float* xs = reinterpret_cast<float*>(xs4);
  __shared__ float scratch[32];
  __shared__ float v[kMaxExperts];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int r = blockIdx.x;
  const int n4 = n / 4;
  const float4* wr = reinterpret_cast<const float4*>(W + static_cast<int64_t>(r) * n);
  // The router row and the norm weights are no kernel's output: read them
  // before waiting for the previous kernel.
  float4 wpre[kRouterPre];
  if (warp == 0) {
#pragma unroll
    for (int u = 0; u < kRouterPre; ++u) {
      const int i = lane + 32 * u;
      wpre[u] = i < n4 ? __ldg(wr + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  if (nw != nullptr) dev::prefetch_l2(nw, static_cast<long long>(n) * 4, tid, kRouterThreads);
  dev::pdl_wait();
  dev::pdl_trigger();

  const float ss = row_sum_squares<kRouterThreads, false>(h, n, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(n) + eps);
  for (int i = tid; i < n; i += kRouterThreads) xs[i] = h[i] * inv * (nw ? nw[i] : 1.f);
  __syncthreads();
  // x and its Q8, spread over the blocks (as rmsnorm_row_q8: warp per block of 32)
  for (int b = blockIdx.x * (kRouterThreads / 32) + warp; b < n / 32; b += gridDim.x * (kRouterThreads / 32)) {
    const int i = b * 32 + lane;
    const float y = xs[i];
    if (x_out != nullptr) x_out[i] = y;
    dev::warp_q8(y, xq + i, xds + b, lane);
  }
  if (warp == 0) {
    float acc = 0.f;
#pragma unroll
    for (int u = 0; u < kRouterPre; ++u) {
      const int i = lane + 32 * u;
      if (i < n4) {
        const float4 a = wpre[u], b = xs4[i];
        acc += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
      }
    }
    for (int i = lane + 32 * kRouterPre; i < n4; i += 32) {
      const float4 a = __ldg(wr + i), b = xs4[i];
      acc += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
    }
    acc = dev::warp_sum(acc);
    if (lane == 0) logits[r] = acc;
  }

  if (!dev::last_block_to_arrive(counter, gridDim.x) || warp != 0) return;

  // The same choice as router_topk's (cuda/router_topk.cuh).
  dev::warp_router_topk(v, [&](int e) { return __ldcg(logits + e); }, n_expert, k, softmax_first, renorm, lane,
                        ids, weights);
}

// ------------------------------------------------------------------ gate/up + SwiGLU + Q8
constexpr int kGuThreads = 256;  // 8 warps x 4 rows = one Q8 block of 32 outputs
constexpr int kGuRowsPerWarp = 4;

template <class Op>
__global__ void __launch_bounds__(kGuThreads) gate_up_q8_kernel(const DevMats gate, const DevMats up,
                                                                const int8_t* __restrict__ xq,
                                                                const float2* __restrict__ xds,
                                                                const int32_t* __restrict__ ids, int n_expert, int d_ff,
                                                                int8_t* __restrict__ hq, float2* __restrict__ hds,
                                                                float* __restrict__ hf) {
  __shared__ float hs[32];
  const int c = blockIdx.x, j = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  dev::pdl_wait();  // ids and x come from the kernels just before
  dev::pdl_trigger();
  const int e = min(max(__ldg(ids + j), 0), n_expert - 1);
  const int64_t row0 = static_cast<int64_t>(c) * 32 + warp * kGuRowsPerWarp;
  const uint8_t* gm = mat_of(gate, e) + row0 * gate.row_bytes;
  const uint8_t* um = mat_of(up, e) + row0 * up.row_bytes;
  dev::Acts<1> a;
  a.q[0] = xq;
  a.ds[0] = xds;
  a.f[0] = nullptr;
  float ag[kGuRowsPerWarp], au[kGuRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kGuRowsPerWarp; ++i) ag[i] = au[i] = 0.f;
  for (int it = lane; it < gate.n_items; it += 32) {
#pragma unroll
    for (int i = 0; i < kGuRowsPerWarp; ++i) {
      Op::template dot<1>(gm + i * gate.row_bytes, it, a, &ag[i]);
      Op::template dot<1>(um + i * up.row_bytes, it, a, &au[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kGuRowsPerWarp; ++i) {
    ag[i] = dev::warp_sum(ag[i]);
    au[i] = dev::warp_sum(au[i]);
    if (lane == i) hs[warp * kGuRowsPerWarp + i] = dev::silu(ag[i]) * au[i];
  }
  __syncthreads();
  if (warp != 0) return;
  const float v = hs[lane];
  const int64_t i = static_cast<int64_t>(j) * d_ff + static_cast<int64_t>(c) * 32 + lane;
  if (hf != nullptr) hf[i] = v;
  dev::warp_q8(v, hq + i, hds + i / 32, lane);
}

// ------------------------------------------------------------------ down + combine (+ next norm)
constexpr int kDcThreads = 128;  // a warp per output row
constexpr int kMaxK = 32;

// Warp per output row r. The expert products are those of matvec_kernel<Op,
// TPR, 1, 1> (lanes in parts of TPR, a part per expert, items it = l, l + TPR,
// ... summed in order, then the xor reduction over the part), and the sum over
// experts that of moe_combine (s = sum_j w_j y_j in j order, then + residual):
// bit for bit the separate matvec + moe_combine. KPP: experts per part.
template <class Op, int TPR, int KPP>
__global__ void __launch_bounds__(kDcThreads) down_combine_kernel(
    const DevMats down, int64_t rows, int d_ff, const int8_t* __restrict__ hq, const float2* __restrict__ hds,
    const int32_t* __restrict__ ids, const float* __restrict__ wts, int k, int n_expert, const float* residual,
    float* out, const float* __restrict__ next_w, float eps, float* __restrict__ x_out, int8_t* __restrict__ xq,
    float2* __restrict__ xds, unsigned int* counter) {
  constexpr int P = 32 / TPR;
  __shared__ const uint8_t* mats[kMaxK];
  __shared__ float scratch[32];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (kDcThreads / 32) + warp;
  // ids were written two kernels back (the router): complete once the kernel
  // before (gate_up, which waits for it) let this one launch. So the rows can
  // be pulled into L2 before waiting for gate_up's output.
  if (tid < k) mats[tid] = mat_of(down, min(max(__ldg(ids + tid), 0), n_expert - 1));
  __syncthreads();
  if (r < rows) {
    const int lines = static_cast<int>((down.row_bytes + 127) / 128);
    for (int q = lane; q < k * lines; q += 32) {
      const int j = q / lines;
      dev::prefetch_l2(mats[j] + r * down.row_bytes + (q - j * lines) * 128, 1, 0, 1);
    }
  }
  dev::pdl_wait();
  dev::pdl_trigger();
  if (r < rows) {
    const int part = lane / TPR, l = lane % TPR;
    float acc[KPP];
    dev::Acts<1> a[KPP];
    const uint8_t* wrow[KPP];
#pragma unroll
    for (int jj = 0; jj < KPP; ++jj) {
      const int j = min(part + P * jj, k - 1);
      acc[jj] = 0.f;
      a[jj].q[0] = hq + static_cast<int64_t>(j) * d_ff;
      a[jj].ds[0] = hds + static_cast<int64_t>(j) * (d_ff / 32);
      a[jj].f[0] = nullptr;
      wrow[jj] = mats[j] + r * down.row_bytes;
    }
    for (int it = l; it < down.n_items; it += TPR) {
#pragma unroll
      for (int jj = 0; jj < KPP; ++jj)
        if (part + P * jj < k) Op::template dot<1>(wrow[jj], it, a[jj], &acc[jj]);
    }
#pragma unroll
    for (int jj = 0; jj < KPP; ++jj)
#pragma unroll
      for (int o = TPR / 2; o > 0; o >>= 1) acc[jj] += __shfl_xor_sync(dev::kFullMask, acc[jj], o);
    // lane 0 gathers y_j (part p's lane p*TPR holds experts p, p + P, ...) and sums in j order
    float s = 0.f;
#pragma unroll
    for (int jj = 0; jj < KPP; ++jj)
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const float y = __shfl_sync(dev::kFullMask, acc[jj], p * TPR);
        const int j = p + P * jj;
        if (j < k) s += __ldg(wts + j) * y;
      }
    if (lane == 0) {
      if (residual != nullptr) s += residual[r];
      out[r] = s;
    }
  }
  if (counter == nullptr) return;

  // The block that finishes last normalises the whole of out (as rmsnorm_row_q8).
  if (!dev::last_block_to_arrive(counter, gridDim.x)) return;
  const int n = static_cast<int>(rows);
  const float ss = row_sum_squares<kDcThreads, true>(out, n, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(n) + eps);
  for (int b = warp; b < n / 32; b += kDcThreads / 32) {
    const int i = b * 32 + lane;
    const float y = __ldcg(out + i) * inv * (next_w != nullptr ? next_w[i] : 1.f);
    if (x_out != nullptr) x_out[i] = y;
    dev::warp_q8(y, xq + i, xds + b, lane);
  }
}

// ------------------------------------------------------------------ dispatch
bool quant_type(DType t) {
  switch (t) {
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: case DType::Q8_0: case DType::Q4_0: case DType::MXFP4:
      return true;
#define MS_SUB32_CASE(T, D) case DType::T:
    MS_SUB32_TYPES(MS_SUB32_CASE)
#undef MS_SUB32_CASE
      return true;
    default:
      return false;
  }
}
// Elements per item of the type's Op (sub-block formats: 32).
int item_elems(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K ? 64 : 32; }
int block_elems(DType t) {
  if (t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K) return 256;
  const TypeInfo& info = type_info(t);
  return static_cast<int>(info.block_size);
}

template <class F>
void by_type(DType t, cudaStream_t stream, F&& f) {
  switch (t) {
    case DType::Q4_K: f(dev::OpQ4K{}); break;
    case DType::Q5_K: f(dev::OpQ5K{}); break;
    case DType::Q6_K: f(dev::OpQ6K{}); break;
    case DType::Q8_0: f(dev::OpQ8_0{}); break;
    case DType::Q4_0: f(dev::OpQ4_0{}); break;
    case DType::MXFP4: f(dev::OpMXFP4{}); break;
#define MS_SUB32_CASE(T, D) \
  case DType::T: f(dev::OpSub32<dev::D>{}); break;
    MS_SUB32_BASIC_TYPES(MS_SUB32_CASE)
#undef MS_SUB32_CASE
#define MS_SUB32_CASE(T, D)         \
  case DType::T:                    \
    dev::iq_tables_ready(stream);   \
    f(dev::OpSub32<dev::D>{});      \
    break;
    MS_SUB32_IQ_TYPES(MS_SUB32_CASE)
#undef MS_SUB32_CASE
    default: throw Error(std::string("fused MoE decode: weight type ") + type_name(t) + " not supported");
  }
}

bool has_weights(const MatrixSet& m) { return m.table != nullptr || m.base != nullptr; }

}  // namespace

bool router_norm_decode_supported(DType w_type, int n_expert, int64_t n, int k) {
  return w_type == DType::F32 && n_expert > 0 && n_expert <= kMaxExperts && k > 0 && k <= 32 && k <= n_expert &&
         n > 0 && n % 32 == 0 && n <= 8192;
}

void router_norm_decode(const float* h, const float* norm_w, float eps, const float* w, int n_expert, int64_t n,
                        int k, RouterMode mode, bool renorm, float* x_out, const Q8Act& x_q8, float* logits,
                        int32_t* ids, float* weights, uint32_t* counter, cudaStream_t stream) {
  if (!router_norm_decode_supported(DType::F32, n_expert, n, k))
    throw Error("router_norm_decode: need 0 < k <= 32, k <= n_expert <= 1024, n a multiple of 32 up to 8192");
  if (x_q8.n != n) throw Error("router_norm_decode: the Q8 output is laid out for another width");
  MS_CUDA_CHECK(launch_pdl(router_norm_kernel, dim3(n_expert), dim3(kRouterThreads), sizeof(float) * n, stream, h,
                           norm_w, eps, w, n_expert, static_cast<int>(n), k, mode == RouterMode::SoftmaxTopK, renorm,
                           x_out, x_q8.q, reinterpret_cast<float2*>(x_q8.ds), logits, ids, weights, counter));
}

bool gate_up_q8_decode_supported(const ExpertWeights& w) {
  return quant_type(w.gate.type) && w.up.type == w.gate.type && w.up.rows == w.gate.rows &&
         w.up.cols == w.gate.cols && w.gate.rows > 0 && w.gate.rows % 32 == 0 && w.gate.cols > 0 &&
         w.gate.cols % block_elems(w.gate.type) == 0 && w.n_expert > 0 && has_weights(w.gate) && has_weights(w.up);
}

void gate_up_q8_decode(const ExpertWeights& w, const Q8Act& x_q8, const int32_t* ids, int k, const Q8Act& h_q8,
                       float* h_f32, cudaStream_t stream) {
  if (!gate_up_q8_decode_supported(w)) throw Error("gate_up_q8_decode: unsupported expert weights");
  if (k <= 0 || k > 65535) throw Error("gate_up_q8_decode: bad k");
  if (x_q8.n != w.gate.cols || h_q8.n != w.gate.rows) throw Error("gate_up_q8_decode: Q8 widths do not match");
  const int ie = item_elems(w.gate.type);
  const DevMats g = dev_mats(w.gate, ie), u = dev_mats(w.up, ie);
  const int d_ff = static_cast<int>(w.gate.rows);
  const dim3 grid(static_cast<unsigned>(d_ff / 32), static_cast<unsigned>(k));
  by_type(w.gate.type, stream, [&](auto op) {
    using Op = decltype(op);
    MS_CUDA_CHECK(launch_pdl(gate_up_q8_kernel<Op>, grid, dim3(kGuThreads), 0, stream, g, u, x_q8.q,
                             reinterpret_cast<const float2*>(x_q8.ds), ids, w.n_expert, d_ff, h_q8.q,
                             reinterpret_cast<float2*>(h_q8.ds), h_f32));
  });
}

bool down_combine_decode_supported(const ExpertWeights& w) {
  return quant_type(w.down.type) && w.down.rows > 0 && w.down.cols > 0 && w.down.cols % 32 == 0 &&
         w.down.cols % block_elems(w.down.type) == 0 && w.n_expert > 0 && has_weights(w.down);
}

void down_combine_decode(const ExpertWeights& w, const Q8Act& h_q8, const int32_t* ids, const float* weights, int k,
                         const float* residual, float* out, const NextNorm* next, cudaStream_t stream) {
  if (!down_combine_decode_supported(w)) throw Error("down_combine_decode: unsupported expert weights");
  if (k <= 0 || k > kMaxK) throw Error("down_combine_decode: k must be in 1..32");
  if (h_q8.n != w.down.cols) throw Error("down_combine_decode: the Q8 activations are laid out for another width");
  const int64_t rows = w.down.rows;
  if (next != nullptr) {
    if (next->counter == nullptr || next->x_q8.q == nullptr || next->x_q8.n != rows || rows % 32 != 0)
      throw Error("down_combine_decode: the next norm needs a counter and Q8 output of d_model (a multiple of 32)");
  }
  const DevMats d = dev_mats(w.down, item_elems(w.down.type));
  const unsigned grid = static_cast<unsigned>((rows + kDcThreads / 32 - 1) / (kDcThreads / 32));
  const bool wide = d.n_items > 16;  // the matvec's choice of lanes per row
  const int parts = wide ? 1 : 2;
  const int kpp = (k + parts - 1) / parts;
  by_type(w.down.type, stream, [&](auto op) {
    using Op = decltype(op);
    auto go = [&](auto kernel) {
      MS_CUDA_CHECK(launch_pdl(kernel, dim3(grid), dim3(kDcThreads), 0, stream, d, rows, static_cast<int>(w.down.cols),
                               h_q8.q, reinterpret_cast<const float2*>(h_q8.ds), ids, weights, k, w.n_expert,
                               residual, out, next ? next->w : nullptr, next ? next->eps : 0.f,
                               next ? next->x_out : nullptr, next ? next->x_q8.q : nullptr,
                               next ? reinterpret_cast<float2*>(next->x_q8.ds) : nullptr,
                               next ? next->counter : nullptr));
    };
#define MS_DC(TPR, KPP) go(down_combine_kernel<Op, TPR, KPP>)
    if (wide) {
      if (kpp <= 1) MS_DC(32, 1); else if (kpp <= 2) MS_DC(32, 2); else if (kpp <= 4) MS_DC(32, 4);
      else if (kpp <= 8) MS_DC(32, 8); else if (kpp <= 16) MS_DC(32, 16); else MS_DC(32, 32);
    } else {
      if (kpp <= 1) MS_DC(16, 1); else if (kpp <= 2) MS_DC(16, 2); else if (kpp <= 4) MS_DC(16, 4);
      else if (kpp <= 8) MS_DC(16, 8); else MS_DC(16, 16);
    }
#undef MS_DC
  });
}

}  // namespace ms::cuda
