// Routed-expert FFN: device-side grouping by expert, then gate/up (SwiGLU
// fused) -> down -> weighted sum, all on one stream with no host round trip.
//
// Batches of at least ExpertWeights::gemm_min_tokens tokens take the int8 tensor-core GEMM
// (gemm_q8.cu) over (row tile, expert group, vector tile) grids: gate and up
// in one launch -> SwiGLU + Q8 quantization (one kernel) -> down -> combine.
// Smaller batches and decode take the multi-vector matvec.
#include <algorithm>
#include <string>

#include "cuda/common.cuh"
#include "cuda/warp_q8.cuh"
#include "cuda/device.h"
#include "cuda/expert_ffn.h"
#include "cuda/expert_gate.h"
#include "cuda/gemm_q8.cuh"
#include "cuda/ops.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kGroupThreads = 1024;
constexpr int kMaxExperts = 4096;

// Exclusive prefix sum over `n` ints in shared memory (n <= kMaxExperts), by a
// block of kGroupThreads threads; returns the total. Each thread scans a run
// of consecutive entries; the run totals are scanned with warp shuffles.
__device__ int block_exclusive_scan(int* a, int n, int* warp_tot) {
  const int per = (n + kGroupThreads - 1) / kGroupThreads;
  const int begin = min(n, static_cast<int>(threadIdx.x) * per), end = min(n, begin + per);
  int local = 0;
  for (int i = begin; i < end; ++i) local += a[i];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(dev::kFullMask, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) warp_tot[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int w = warp_tot[lane];
    int wi = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(dev::kFullMask, wi, o);
      if (lane >= o) wi += v;
    }
    warp_tot[lane] = wi - w;  // exclusive offset of each warp
    if (lane == 31) warp_tot[32] = wi;
  }
  __syncthreads();
  int run = warp_tot[warp] + incl - local;
  for (int i = begin; i < end; ++i) {
    const int v = a[i];
    a[i] = run;
    run += v;
  }
  const int total = warp_tot[32];
  __syncthreads();
  return total;
}

// tile: an expert's pairs are cut into groups of at most `tile` (consecutive
// in the list), so a launch over groups does the same work per block however
// the tokens spread over the experts.
__global__ void __launch_bounds__(kGroupThreads) group_kernel(const int32_t* __restrict__ ids, int n_pairs,
                                                              int n_expert, int tile, int32_t* n_groups,
                                                              int32_t* group_expert, int32_t* offsets,
                                                              int32_t* list) {
  __shared__ int start[kMaxExperts];   // counts, then exclusive offsets, then cursors
  __shared__ int gidx[kMaxExperts];    // groups of each expert, then its first group index
  __shared__ int warp_tot[33];
  for (int e = threadIdx.x; e < n_expert; e += kGroupThreads) start[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n_pairs; i += kGroupThreads) {
    const int e = min(max(ids[i], 0), n_expert - 1);
    atomicAdd(&start[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < n_expert; e += kGroupThreads) gidx[e] = (start[e] + tile - 1) / tile;
  __syncthreads();
  block_exclusive_scan(start, n_expert, warp_tot);
  const int ng = block_exclusive_scan(gidx, n_expert, warp_tot);
  for (int e = threadIdx.x; e < n_expert; e += kGroupThreads) {
    const int next = e + 1 < n_expert ? start[e + 1] : n_pairs;
    for (int i = 0, o = start[e]; o < next; ++i, o += tile) {
      group_expert[gidx[e] + i] = e;
      offsets[gidx[e] + i] = o;
    }
  }
  if (threadIdx.x == 0) {
    offsets[ng] = n_pairs;
    *n_groups = ng;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n_pairs; i += kGroupThreads) {
    const int e = min(max(ids[i], 0), n_expert - 1);
    list[atomicAdd(&start[e], 1)] = i;
  }
}

size_t al(size_t v) { return (v + 255) & ~size_t{255}; }

bool device_has_int8_mma() {
  static const bool yes = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major >= 8;
  }();
  return yes;
}

// h = silu(gate) * up for `n_blocks` blocks of 32 (a warp each), written as
// f32 over `gate` and, when q is set, quantized like quantize_q8act.
__global__ void swiglu_q8_kernel(float* __restrict__ gate, const float* __restrict__ up, int64_t n_blocks,
                                 int8_t* __restrict__ q, float2* __restrict__ ds) {
  const int64_t blk = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (blk >= n_blocks) return;  // whole warps exit together
  const int lane = threadIdx.x % 32;
  const int64_t i = blk * 32 + lane;
  const float v = dev::silu(gate[i]) * up[i];
  gate[i] = v;
  if (q == nullptr) return;
  dev::warp_q8(v, q + i, ds + blk, lane);
}

// gpt-oss's experts: h = act(gate + bg[e], up + bu[e]) per pair p (expert
// ids[p], clamped into range as the matvec does), act silu(g) * u or the
// clamped SwiGLU; one warp per block of 32, as swiglu_q8_kernel.
__global__ void bias_act_q8_kernel(float* __restrict__ gate, const float* __restrict__ up,
                                   const int32_t* __restrict__ ids, int n_expert, int64_t d_ff, int64_t n_blocks,
                                   const float* __restrict__ bg, const float* __restrict__ bu, bool clamped,
                                   float alpha, float limit, int8_t* __restrict__ q, float2* __restrict__ ds) {
  const int64_t blk = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (blk >= n_blocks) return;  // whole warps exit together
  const int lane = threadIdx.x % 32;
  const int64_t i = blk * 32 + lane;
  const int64_t p = i / d_ff, r = i % d_ff;
  const int64_t e = min(max(ids[p], 0), n_expert - 1);
  float g = gate[i], u = up[i];
  if (bg != nullptr) g += bg[e * d_ff + r];
  if (bu != nullptr) u += bu[e * d_ff + r];
  float v;
  if (clamped) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
    v = g / (1.f + expf(-alpha * g)) * (u + 1.f);
  } else {
    v = dev::silu(g) * u;
  }
  gate[i] = v;
  if (q == nullptr) return;
  dev::warp_q8(v, q + i, ds + blk, lane);
}

// y[p] += bd[ids[p]] for every pair (the down projection's bias).
__global__ void add_expert_bias_kernel(float* __restrict__ y, const int32_t* __restrict__ ids, int n_expert,
                                       int64_t d_model, int64_t n, const float* __restrict__ bd) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t p = i / d_model;
  const int64_t e = min(max(ids[p], 0), n_expert - 1);
  y[i] += bd[e * d_model + i % d_model];
}

struct Layout {
  size_t x_q8 = 0, h = 0, u = 0, h_q8 = 0, y = 0, groups = 0, total = 0;
};

Layout layout(const ExpertWeights& w, int n_tokens, int k) {
  const int64_t d_model = w.gate.cols, d_ff = w.gate.rows;
  const int64_t pairs = static_cast<int64_t>(n_tokens) * k;
  Layout L;
  size_t off = 0;
  L.x_q8 = off; off += al(matvec_takes_q8(w.gate.type) ? q8act_bytes(d_model, n_tokens) : 0);
  L.h = off;    off += al(sizeof(float) * pairs * d_ff);
  // the GEMM path keeps gate and up apart until the SwiGLU kernel
  const bool gemm_possible = n_tokens > 1 && detail::gemm_q8_supported(w.gate.type);
  L.u = off;    off += al(gemm_possible || w.biased_or_clamped() ? sizeof(float) * pairs * d_ff : 0);
  L.h_q8 = off; off += al(matvec_takes_q8(w.down.type) ? q8act_bytes(d_ff, pairs) : 0);
  L.y = off;    off += al(sizeof(float) * pairs * d_model);
  L.groups = off; off += al(sizeof(int32_t) * (1 + 3 * pairs + 1));
  L.total = off;
  return L;
}

}  // namespace

void moe_group_by_expert(const int32_t* ids, int n_pairs, int n_expert, int32_t* n_groups, int32_t* group_expert,
                         int32_t* offsets, int32_t* list, cudaStream_t stream) {
  if (n_expert <= 0 || n_expert > kMaxExperts)
    throw Error("moe_group_by_expert: n_expert " + std::to_string(n_expert) + " outside 1.." +
                std::to_string(kMaxExperts));
  if (n_pairs <= 0) return;
  group_kernel<<<1, kGroupThreads, 0, stream>>>(ids, n_pairs, n_expert, n_pairs, n_groups, group_expert, offsets,
                                                 list);
  MS_CUDA_CHECK_LAUNCH();
}

namespace {
// As moe_group_by_expert, with each expert's pairs cut into groups of at most
// `tile`; at most n_pairs / tile + min(n_pairs, n_expert) groups.
void group_by_expert_tiled(const int32_t* ids, int n_pairs, int n_expert, int tile, int32_t* n_groups,
                           int32_t* group_expert, int32_t* offsets, int32_t* list, cudaStream_t stream) {
  group_kernel<<<1, kGroupThreads, 0, stream>>>(ids, n_pairs, n_expert, tile, n_groups, group_expert, offsets, list);
  MS_CUDA_CHECK_LAUNCH();
}

// GEMM vectors per block tile: 64 once groups average 48 vectors (a tile
// of 64 then runs mostly full and unpacks each weight tile for twice the
// vectors), else 32.
int vectors_per_tile(int64_t vectors, int64_t groups) { return vectors >= 48 * groups ? 64 : 32; }
}  // namespace

bool grouped_rows_ffn_supported(const ExpertWeights& w) {
  return device_has_int8_mma() && !w.biased_or_clamped() && w.gate.type == w.up.type && w.gate.rows % 32 == 0 &&
         detail::gemm_q8_supported(w.gate.type) && detail::gemm_q8_supported(w.down.type);
}

void grouped_rows_ffn(const ExpertWeights& w, const GroupedRows& a, cudaStream_t stream) {
  if (!grouped_rows_ffn_supported(w)) throw Error("grouped_rows_ffn: these experts do not take the int8 GEMM");
  if (a.rows <= 0) return;
  if (a.groups.offsets == nullptr || a.token_of == nullptr || a.out_of == nullptr)
    throw Error("grouped_rows_ffn: group offsets and row maps are needed");
  const int64_t d_model = w.gate.cols, d_ff = w.gate.rows;
  MatvecGroups g = a.groups;
  g.list = nullptr;
  g.x_div = 1;
  const int bn = vectors_per_tile(a.rows, g.max_groups);
  // zcap 0: a block per (row tile, group, vector tile), as the tiled groups
  // of expert_ffn give the all-resident step.
  const MatrixSet gu[2] = {w.gate, w.up};
  float* hu[2] = {a.h, a.u};
  detail::XRows tokens;
  tokens.rows = a.token_of;
  detail::gemm_q8_launch(gu, 2, a.x, g, hu, d_ff, nullptr, bn, 0, stream, nullptr, &tokens);
  const int64_t first = a.first, n_blocks = static_cast<int64_t>(a.rows) * d_ff / 32;
  const Q8Act hq = q8act_rows(a.h_q8, first);
  swiglu_q8_kernel<<<static_cast<unsigned>((n_blocks + 7) / 8), 256, 0, stream>>>(
      a.h + first * d_ff, a.u + first * d_ff, n_blocks, hq.q, reinterpret_cast<float2*>(hq.ds));
  MS_CUDA_CHECK_LAUNCH();
  g.list = a.out_of;
  detail::XRows positions;
  positions.by_position = true;
  float* y[1] = {a.y};
  detail::gemm_q8_launch(&w.down, 1, a.h_q8, g, y, d_model, nullptr, bn, 0, stream, nullptr, &positions);
}

size_t expert_ffn_scratch_bytes(const ExpertWeights& w, int n_tokens, int k) { return layout(w, n_tokens, k).total; }

void expert_ffn(const ExpertWeights& w, const float* x, const Q8Act* x_q8, int n_tokens, int k, const int32_t* ids,
                const float* weights, const float* residual, float* out, void* scratch, size_t scratch_bytes,
                cudaStream_t stream, const HostRows* host) {
  if (n_tokens <= 0) return;
  if (host != nullptr && n_tokens != 1) throw Error("expert_ffn: host rows are for one token");
  const int64_t d_model = w.gate.cols, d_ff = w.gate.rows;
  if (w.up.rows != d_ff || w.up.cols != d_model || w.down.rows != d_model || w.down.cols != d_ff)
    throw Error("expert_ffn: gate/up must be [d_ff x d_model] and down [d_model x d_ff]");
  if (k <= 0 || k > w.n_expert) throw Error("expert_ffn: k " + std::to_string(k) + " outside 1..n_expert");
  const bool biased = w.biased_or_clamped();
  if (biased && d_ff % 32 != 0)
    throw Error("expert_ffn: expert biases / clamped SwiGLU need d_ff a multiple of 32 (got " + std::to_string(d_ff) +
                ")");
  const Layout L = layout(w, n_tokens, k);
  if (scratch_bytes < L.total)
    throw Error("expert_ffn: scratch of " + std::to_string(scratch_bytes) + " bytes, needs " +
                std::to_string(L.total));
  char* s = static_cast<char*>(scratch);
  const int pairs = n_tokens * k;

  // Inputs of gate/up
  MatvecInput xin;
  xin.f32 = x;
  if (matvec_takes_q8(w.gate.type)) {
    if (x_q8 != nullptr) {
      xin.q8 = *x_q8;
    } else {
      xin.q8 = q8act_view(s + L.x_q8, d_model, n_tokens);
      quantize_q8act(x, d_model, n_tokens, xin.q8, stream);
    }
  }

  // Groups
  MatvecGroups g;
  g.n_expert = w.n_expert;  // clamps ids into range on the device
  auto* gi = reinterpret_cast<int32_t*>(s + L.groups);
  const int min_tok = w.gemm_min_tokens;
  // vector tile: 64 when experts average 48+ pairs, else 32
  const int active = std::min(pairs, w.n_expert);
  // Pairs spread thin over the experts (decode steps of several sequences:
  // about one pair an expert) leave a GEMM tile mostly empty: the matvec
  // path, one vector at a time.
  const bool thin = one_vector_groups(pairs, active);
  const bool gemm_ok = n_tokens > 1 && min_tok > 0 && n_tokens >= min_tok && !thin && device_has_int8_mma();
  const bool gemm_gu = gemm_ok && detail::gemm_q8_supported(w.gate.type) && d_ff % 32 == 0;
  const bool gemm_down = gemm_ok && detail::gemm_q8_supported(w.down.type);
  const int bn = vectors_per_tile(pairs, active);

  if (n_tokens == 1) {
    g.max_groups = k;  // group j = slot j, its expert read straight from ids
    g.per_group = 1;
    g.expert = ids;
  } else {
    int32_t* n_groups = gi;
    int32_t* group_expert = gi + 1;
    int32_t* offsets = group_expert + pairs;
    int32_t* list = offsets + pairs + 1;
    if (gemm_gu || gemm_down) {
      // One group per GEMM tile of bn vectors: every block of the launch has
      // at most one tile to do, however unevenly the tokens chose experts.
      group_by_expert_tiled(ids, pairs, w.n_expert, bn, n_groups, group_expert, offsets, list, stream);
      g.max_groups = std::min(pairs, pairs / bn + active);
      g.per_group = bn;
    } else {
      moe_group_by_expert(ids, pairs, w.n_expert, n_groups, group_expert, offsets, list, stream);
      g.max_groups = active;
      g.per_group = n_tokens;  // upper bound: a token picks an expert at most once
      if (thin) g.typical_per_group = 1;
    }
    g.n_groups = n_groups;
    g.expert = group_expert;
    g.offsets = offsets;
    g.list = list;
  }

  // gate/up + SwiGLU -> h [pairs][d_ff] (and its Q8 copy when down takes Q8)
  auto* h = reinterpret_cast<float*>(s + L.h);
  MatvecInput hin;
  hin.f32 = h;
  const bool down_q8 = matvec_takes_q8(w.down.type);
  if (down_q8) hin.q8 = q8act_view(s + L.h_q8, d_ff, pairs);
  g.x_div = k;
  if (gemm_gu || biased) {
    // gate and up apart, then the activation (+ biases) and Q8 in one kernel.
    auto* u = reinterpret_cast<float*>(s + L.u);
    if (gemm_gu) {
      const MatrixSet gu[2] = {w.gate, w.up};
      float* ys[2] = {h, u};
      detail::gemm_q8_launch(gu, 2, xin.q8, g, ys, d_ff, nullptr, bn, 2, stream);
    } else {
      matvec(w.gate, xin, g, h, d_ff, nullptr, stream);
      matvec(w.up, xin, g, u, d_ff, nullptr, stream);
    }
    const int64_t n_blocks = static_cast<int64_t>(pairs) * d_ff / 32;
    int8_t* hq = down_q8 ? hin.q8.q : nullptr;
    float2* hds = down_q8 ? reinterpret_cast<float2*>(hin.q8.ds) : nullptr;
    if (biased)
      bias_act_q8_kernel<<<static_cast<unsigned>((n_blocks + 7) / 8), 256, 0, stream>>>(
          h, u, ids, w.n_expert, d_ff, n_blocks, w.gate_bias, w.up_bias, w.clamped_swiglu, w.alpha, w.limit, hq, hds);
    else
      swiglu_q8_kernel<<<static_cast<unsigned>((n_blocks + 7) / 8), 256, 0, stream>>>(h, u, n_blocks, hq, hds);
    MS_CUDA_CHECK_LAUNCH();
  } else {
    matvec_glu(w.gate, w.up, xin, g, h, d_ff, stream);
    if (down_q8) quantize_q8act(h, d_ff, pairs, hin.q8, stream);
  }

  // One token, nothing from the host, no down bias: down and the weighted
  // sum in one launch (the same sums in the same order as below).
  if (n_tokens == 1 && w.fused_decode && host == nullptr && w.down_bias == nullptr && matvec_combine_supported(k)) {
    matvec_combine(w.down, hin, k, ids, w.n_expert, weights, residual, out, stream);
    return;
  }

  // down -> y [pairs][d_model]
  auto* y = reinterpret_cast<float*>(s + L.y);
  g.x_div = 1;
  if (gemm_down) {
    float* ys[1] = {y};
    detail::gemm_q8_launch(&w.down, 1, hin.q8, g, ys, d_model, nullptr, bn, 2, stream);
  } else {
    matvec(w.down, hin, g, y, d_model, nullptr, stream);
  }
  if (w.down_bias != nullptr) {
    const int64_t n = static_cast<int64_t>(pairs) * d_model;
    add_expert_bias_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(y, ids, w.n_expert, d_model, n,
                                                                                       w.down_bias);
    MS_CUDA_CHECK_LAUNCH();
  }

  if (host != nullptr && host->gate != nullptr) gate_wait_rows(*host->gate, stream);
  if (host != nullptr) moe_combine_host_rows(y, host->y, host->mask, weights, k, d_model, residual, out, stream);
  else moe_combine(y, weights, n_tokens, k, d_model, residual, out, stream);
}

}  // namespace ms::cuda
