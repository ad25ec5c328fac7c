// Decode attention at long contexts: flash-decoding on tensor cores.
//
// At depth a decode step is a stream of K and V (Qwen3-30B-A3B at 32k: 64 MiB
// of f16 per layer), so the kernel's job is to keep HBM busy. The CUDA-core
// split-K kernel (attention_decode.cu) spends 2 FMA per element and query
// head in f32 (G = 8 heads share a KV head) and keeps too few bytes in flight
// (its bandwidth: bench/results/long_context.md, decode attention). Here:
//  - grid (split, KV head), 4 warps a block; each warp streams its own
//    16-position tiles of K and V into shared memory with cp.async, kStages
//    deep, so that several tiles per warp are on their way while it computes
//    one (no block-wide barrier in the loop); splits fill the device once
//    (blocks per SM from the occupancy of the shared memory they take);
//  - S = Q K^T and O += P V on mma.sync m16n8k16 (f16 inputs, f32 sums),
//    K and V fragments by ldmatrix from an XOR-swizzled tile (conflict-free).
//    The 16 rows of the A operand carry 8 query heads twice: rows 0-7 the f16
//    value of q (or of the softmax weight p), rows 8-15 the remainder x - hi
//    as f16, and the two rows' results are added: ~22 bits of q and p, so the
//    results keep the f32 kernels' error bounds. G = 16: two such m-tiles.
//    Rows of heads past G are zeros and never written.
//  - q8_0 caches: the raw blocks copied as they lie (one contiguous span per
//    tile, from its start rounded down to 16 bytes), then dequantised by the
//    warp into an f16 tile (d * q rounded once, as the prefill kernel does)
//    read by the same ldmatrix/mma code.
//  - each warp keeps its own online softmax (exp2 domain, scores pre-scaled by
//    scale * log2 e); the block merges its 4 warps in shared memory and
//    writes one partial per query head; attention_decode's merge kernel
//    combines the splits (and the sinks).
// The positions each split covers follow the device kv_len (a captured graph
// replays one launch while the sequence grows); a window starts them at
// kv_len - window. Tile rows past the end are zeros (P V multiplies every
// row: a NaN there must not get in).
#include "cuda/attention_decode_long.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/mma_ptx.cuh"
#include "cuda/pdl.cuh"

namespace ms::cuda::decode_long {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 16;                    // positions per warp tile: the k16 of P V
constexpr int kBlockStep = kWarps * kTile;   // positions a block covers per round of its warps
constexpr int kMaxBlocksPerSm = 4;           // bounds splits() (and so the scratch)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegBig = -1e30f;  // "no score yet": finite, so 2^(kNegBig - m) is 0, never NaN

// Shared memory of one block: the q fragments, then per warp kStages tiles
// of K and V as copied (f16 rows, or raw q8_0 spans), plus for q8_0 one f16 K
// and V tile the warp dequantises into. After the loop the warps' partial
// outputs overlay the tiles.
template <class T, int HD>
struct Layout {
  static constexpr bool kQ8 = std::is_same_v<T, BlockQ8_0>;
  // Stages in flight per warp: enough bytes on their way (~16 KB a warp,
  // 2 or more blocks of 4 warps per SM at head_dim 128) within the SM's 228 KB.
  static constexpr int kStages = kQ8 ? 4 : 3;
  static constexpr int kF16Tile = kTile * HD * 2;
  static constexpr int kRowBytes = HD / QK * static_cast<int>(sizeof(BlockQ8_0));
  static constexpr int kRawTile = (kTile * kRowBytes + 31) / 16 * 16;  // + up to 15 bytes before the span
  static constexpr int kStage = kQ8 ? 2 * kRawTile : 2 * kF16Tile;
  static constexpr int kWarpBytes = kStages * kStage + (kQ8 ? 2 * kF16Tile : 0);
  template <int MT>
  static constexpr int q_bytes() {
    return MT * (HD / 16) * 32 * 16;
  }
  template <int MT>
  static constexpr int smem() {
    return q_bytes<MT>() + kWarps * kWarpBytes;
  }
};

// Byte offset of 16-byte chunk c of row r in an f16 tile of HD halves a row:
// chunks XOR-ed with r % 8, so the 8 rows an ldmatrix phase reads hit 8
// distinct bank groups.
template <int HD>
__device__ __forceinline__ int swz(int r, int c) {
  return r * HD * 2 + ((c ^ (r & 7)) << 4);
}

using namespace ptx;

__device__ __forceinline__ uint32_t half2_bits(__half2 h) { return *reinterpret_cast<const uint32_t*>(&h); }

// {a, b} as f16 (hi) and the remainders {a - hi, b - hi} as f16 (lo).
__device__ __forceinline__ void split_hi_lo(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(a, b);
  const float2 hf = __half22float2(h);
  hi = half2_bits(h);
  lo = half2_bits(__floats2half2_rn(a - hf.x, b - hf.y));
}

// Rows p0 .. p0+15 of an f16 KV head into a swizzled tile; rows at or past t1 zeros.
template <int HD>
__device__ __forceinline__ void copy_f16_tile(const __half* head, int p0, int t1, unsigned char* dst, int lane) {
  constexpr int kChunks = HD / 8;
#pragma unroll
  for (int k = 0; k < kTile * kChunks / 32; ++k) {
    const int i = lane + 32 * k, r = i / kChunks, c = i % kChunks;
    const bool ok = p0 + r < t1;
    const __half* src = head + static_cast<int64_t>(ok ? p0 + r : p0) * HD + c * 8;
    cp_async16(smem_addr(dst + swz<HD>(r, c)), src, ok ? 16 : 0);
  }
}

// Where the raw span of rows p0.. starts within its first 16-byte piece.
template <int HD>
__device__ __forceinline__ int raw_offset(const BlockQ8_0* head, int p0) {
  return static_cast<int>(reinterpret_cast<uintptr_t>(head + static_cast<int64_t>(p0) * (HD / QK)) & 15);
}

// The raw q8_0 blocks of rows p0 .. min(p0+15, t1-1): one contiguous span,
// copied in 16-byte pieces from its start rounded down to 16 bytes (bytes of
// earlier rows of the same cache allocation), the last piece cut at its end.
template <int HD>
__device__ __forceinline__ void copy_raw_tile(const BlockQ8_0* head, int p0, int t1, unsigned char* dst, int lane) {
  constexpr int kRow = Layout<BlockQ8_0, HD>::kRowBytes;
  const int mis = raw_offset<HD>(head, p0);
  const int end = mis + min(kTile, t1 - p0) * kRow;
  const unsigned char* from = reinterpret_cast<const unsigned char*>(head + static_cast<int64_t>(p0) * (HD / QK)) - mis;
  for (int i = lane; i * 16 < end; i += 32) cp_async16(smem_addr(dst + i * 16), from + i * 16, min(16, end - i * 16));
}

// The raw tile -> a swizzled f16 tile: d * q rounded once (exact int8 -> f16
// through 0x64XX = 1024 + XX, then one f16 multiply). Rows past t1 zeros.
template <int HD>
__device__ __forceinline__ void dequant_tile(const BlockQ8_0* head, int p0, int t1, const unsigned char* raw,
                                             unsigned char* dst, int lane) {
  constexpr int kChunks = HD / 8;
  constexpr int kRow = Layout<BlockQ8_0, HD>::kRowBytes;
  const unsigned char* base = raw + raw_offset<HD>(head, p0);
  const int rows = min(kTile, t1 - p0);
  const __half2 bias = __float2half2_rn(1152.f);
#pragma unroll
  for (int k = 0; k < kTile * kChunks / 32; ++k) {
    const int i = lane + 32 * k, r = i / kChunks, c = i % kChunks;
    {
      // 34-byte blocks: 2-byte aligned, read by halves. Rows past the copy
      // hold stale bytes: computed anyway (no branch, so that the loads of
      // every item can go out together), then replaced by zeros.
      const unsigned char* blk = base + r * kRow + (c / 4) * static_cast<int>(sizeof(BlockQ8_0));
      const auto* qs = reinterpret_cast<const unsigned short*>(blk + 2 + (c % 4) * 8);
      const __half d = __ushort_as_half(*reinterpret_cast<const unsigned short*>(blk));
      const __half2 d2 = __halves2half2(d, d);
      const uint32_t w0 = (static_cast<uint32_t>(qs[0]) | static_cast<uint32_t>(qs[1]) << 16) ^ 0x80808080u;
      const uint32_t w1 = (static_cast<uint32_t>(qs[2]) | static_cast<uint32_t>(qs[3]) << 16) ^ 0x80808080u;
      uint32_t h[4] = {__byte_perm(w0, 0x64646464u, 0x4140), __byte_perm(w0, 0x64646464u, 0x4342),
                       __byte_perm(w1, 0x64646464u, 0x4140), __byte_perm(w1, 0x64646464u, 0x4342)};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        h[e] = half2_bits(__hmul2(__hsub2(*reinterpret_cast<const __half2*>(&h[e]), bias), d2));
      const uint4 packed = r < rows ? make_uint4(h[0], h[1], h[2], h[3]) : make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(dst + swz<HD>(r, c)) = packed;
    }
  }
}

// Block (split, KV head): MT m-tiles of 8 query heads (MT = 2 for G = 16).
// Fragment layouts (mma.sync m16n8k16; g = lane / 4, t = lane % 4):
//   A (q or p): rows g / g+8 = head g's hi / lo, columns 2t, 2t+1 (+8);
//   S: c0,c1 hi and c2,c3 lo of head g at positions 2t, 2t+1 of an n8 step;
//   O: c0,c1 hi and c2,c3 lo of head g at dims 2t, 2t+1 of an n8 step.
template <class T, int MT, int HD>
__global__ void __launch_bounds__(kThreads) decode_long_kernel(
    const float* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc, int group, int64_t ctx,
    int max_kv_len, const int32_t* __restrict__ kv_len_dev, float scale_log2, int window, int n_split,
    float* __restrict__ part_o, float2* __restrict__ part_ml) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using Lay = Layout<T, HD>;
  constexpr int KC = HD / 16, DT = HD / 8, S = Lay::kStages;
  constexpr int U = Lay::kQ8 ? HD / QK : HD;  // units of T per row
  static_assert(kWarps * MT * 8 * HD * 4 <= kWarps * Lay::kWarpBytes, "partial outputs overlay the tiles");
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float m_s[kWarps][MT * 8], l_s[kWarps][MT * 8];
  uint4* q_frag = reinterpret_cast<uint4*>(smem);  // [MT][KC][lane]
  unsigned char* warps_area = smem + Lay::template q_bytes<MT>();

  const int split = blockIdx.x, kvh = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gq = lane / 4, tq = lane % 4;
  const int kv_len = kv_len_dev ? max(0, min(__ldg(kv_len_dev), max_kv_len)) : max_kv_len;
  const int start = window > 0 ? max(0, kv_len - window) : 0;
  const int chunk = ((kv_len - start + n_split - 1) / n_split + kBlockStep - 1) / kBlockStep * kBlockStep;
  const int t0 = start + split * chunk, t1 = min(kv_len, t0 + chunk);
  const int h0 = kvh * group;

  // This warp's tiles: j-th at t0 + (warp + 4 j) * 16.
  unsigned char* wbuf = warps_area + warp * Lay::kWarpBytes;
  const int n_tiles = t1 > t0 ? (t1 - t0 + kTile - 1) / kTile : 0;
  const int my_tiles = n_tiles > warp ? (n_tiles - warp + kWarps - 1) / kWarps : 0;
  const T* khead = kc + static_cast<int64_t>(kvh) * ctx * U;
  const T* vhead = vc + static_cast<int64_t>(kvh) * ctx * U;
  auto tile_pos = [&](int j) { return t0 + (warp + j * kWarps) * kTile; };
  auto issue = [&](int j) {  // one commit group per call, empty past the last tile
    if (j < my_tiles) {
      const int p0 = tile_pos(j);
      unsigned char* st = wbuf + (j % S) * Lay::kStage;
      if constexpr (Lay::kQ8) {
        copy_raw_tile<HD>(khead, p0, t1, st, lane);
        copy_raw_tile<HD>(vhead, p0, t1, st + Lay::kRawTile, lane);
      } else {
        copy_f16_tile<HD>(khead, p0, t1, st, lane);
        copy_f16_tile<HD>(vhead, p0, t1, st + Lay::kF16Tile, lane);
      }
    }
    cp_async_commit();
  };
  // The first tiles go out before q is read and before the wait for the
  // kernel before (programmatic dependent launch: it may still be running).
  // That kernel may write q and this step's own K and V row (kv_len - 1),
  // nothing else this kernel reads: a tile holding that row waits (it is the
  // last of its split, so the ones after it are empty). kv_len itself was
  // written before the step's kernels began.
  int pre = 0;
  while (pre < S - 1 && (pre >= my_tiles || tile_pos(pre) + kTile <= kv_len - 1)) issue(pre++);
  dev::pdl_wait();
  dev::pdl_trigger();

  // q as A fragments (hi rows, lo rows), pre-scaled into the exp2 domain
  for (int i = threadIdx.x; i < MT * KC * 32; i += kThreads) {
    const int l = i % 32, c = (i / 32) % KC, mt = i / (32 * KC);
    const int g = mt * 8 + l / 4, d = c * 16 + (l % 4) * 2;
    uint4 f = make_uint4(0, 0, 0, 0);
    if (g < group) {
      const float* qh = q + static_cast<int64_t>(h0 + g) * HD;
      split_hi_lo(qh[d] * scale_log2, qh[d + 1] * scale_log2, f.x, f.y);
      split_hi_lo(qh[d + 8] * scale_log2, qh[d + 9] * scale_log2, f.z, f.w);
    }
    q_frag[i] = f;
  }
  for (int j = pre; j < S - 1; ++j) issue(j);
  __syncthreads();

  float o[MT][DT][4], m[MT], l[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    m[mt] = kNegBig;
    l[mt] = 0.f;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
  }
  // ldmatrix row and chunk per lane: matrix lane / 8, its row lane % 8
  const int mi = lane / 8, mr = lane % 8;

  for (int j = 0; j < my_tiles; ++j) {
    issue(j + S - 1);
    cp_async_wait<S - 1>();  // tile j's group is complete (for this lane's copies)
    __syncwarp();            // ... and every lane's
    const int p0 = tile_pos(j);
    const unsigned char* st = wbuf + (j % S) * Lay::kStage;
    const unsigned char* kt = st;
    const unsigned char* vt = st + Lay::kF16Tile;
    if constexpr (Lay::kQ8) {
      unsigned char* f16 = wbuf + S * Lay::kStage;
      dequant_tile<HD>(khead, p0, t1, st, f16, lane);
      dequant_tile<HD>(vhead, p0, t1, st + Lay::kRawTile, f16 + Lay::kF16Tile, lane);
      __syncwarp();
      kt = f16;
      vt = f16 + Lay::kF16Tile;
    }
    const uint32_t kaddr = smem_addr(kt), vaddr = smem_addr(vt);

    // S = Q K^T. K is B (col): matrices (pos 0-7, dims 16c..+7), (0-7, +8..15),
    // (8-15, 16c..), (8-15, +8..): b[0..1] for positions 0-7, b[2..3] for 8-15.
    float sc[MT][2][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[mt][0][e] = sc[mt][1][e] = 0.f;
#pragma unroll
    for (int c = 0; c < KC; ++c) {
      uint32_t b[4];
      ldsm_x4(b, kaddr + swz<HD>((mi >> 1) * 8 + mr, 2 * c + (mi & 1)));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint4 a4 = q_frag[(mt * KC + c) * 32 + lane];
        const uint32_t a[4] = {a4.x, a4.y, a4.z, a4.w};
        mma_16816(sc[mt][0], a, b[0], b[1]);
        mma_16816(sc[mt][1], a, b[2], b[3]);
      }
    }

    // online softmax: this lane's head gq at positions 2t, 2t+1, 8+2t, 9+2t;
    // the 4 lanes of a head (xor 1, 2) share its max
    uint32_t pa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float s[4] = {sc[mt][0][0] + sc[mt][0][2], sc[mt][0][1] + sc[mt][0][3], sc[mt][1][0] + sc[mt][1][2],
                    sc[mt][1][1] + sc[mt][1][3]};
      float mx = kNegBig;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int pos = p0 + (e >> 1) * 8 + 2 * tq + (e & 1);
        if (pos >= t1) s[e] = -INFINITY;
        mx = fmaxf(mx, s[e]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mn = fmaxf(m[mt], mx);
      const float corr = exp2f(m[mt] - mn);
      m[mt] = mn;
      float p[4], sum = 0.f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        p[e] = exp2f(s[e] - mn);
        sum += p[e];
      }
      l[mt] = l[mt] * corr + sum;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mt][dt][e] *= corr;
      split_hi_lo(p[0], p[1], pa[mt][0], pa[mt][1]);
      split_hi_lo(p[2], p[3], pa[mt][2], pa[mt][3]);
    }

    // O += P V. V is B (col) through ldmatrix.trans: matrices (pos 0-7, dims
    // 8dt..), (8-15, 8dt..), (0-7, 8dt+8..), (8-15, 8dt+8..).
#pragma unroll
    for (int dt = 0; dt < DT; dt += 2) {
      uint32_t b[4];
      ldsm_x4_trans(b, vaddr + swz<HD>((mi & 1) * 8 + mr, dt + (mi >> 1)));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_16816(o[mt][dt], pa[mt], b[0], b[1]);
        mma_16816(o[mt][dt + 1], pa[mt], b[2], b[3]);
      }
    }
    __syncwarp();  // every lane is done with this stage before it is refilled
  }
  cp_async_wait<0>();

  // Merge the 4 warps: sums over a head's 4 lanes, outputs hi + lo rows.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    l[mt] += __shfl_xor_sync(0xffffffffu, l[mt], 1);
    l[mt] += __shfl_xor_sync(0xffffffffu, l[mt], 2);
  }
  __syncthreads();  // every warp is done with its tiles: the partials overlay them
  float* o_s = reinterpret_cast<float*>(warps_area);  // [warp][MT * 8][HD]
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int hr = mt * 8 + gq;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
      *reinterpret_cast<float2*>(o_s + (warp * MT * 8 + hr) * HD + dt * 8 + 2 * tq) =
          make_float2(o[mt][dt][0] + o[mt][dt][2], o[mt][dt][1] + o[mt][dt][3]);
    if (tq == 0) {
      m_s[warp][hr] = m[mt];
      l_s[warp][hr] = l[mt];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < group * HD; i += kThreads) {
    const int g = i / HD, d = i % HD;
    float M = kNegBig;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, m_s[w][g]);
    float acc = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) acc += o_s[(w * MT * 8 + g) * HD + d] * exp2f(m_s[w][g] - M);
    part_o[(static_cast<int64_t>(h0 + g) * n_split + split) * HD + d] = acc;
  }
  if (threadIdx.x < group) {
    const int g = threadIdx.x;
    float M = kNegBig, L = 0.f;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, m_s[w][g]);
    for (int w = 0; w < kWarps; ++w) L += l_s[w][g] * exp2f(m_s[w][g] - M);
    part_ml[static_cast<int64_t>(h0 + g) * n_split + split] = make_float2(M, L);
  }
#else
  __trap();  // never launched: usable() is false for such devices
#endif
}

// The splits' partials -> out: block (query head, 32 dims), 8 warps each
// summing a strided share of the splits for its lane's dim (weights
// 2^(m_s - M), M over every split and the sink), then the warps' sums.
// Launched as a dependent of the split kernel: waits for it, then lets the
// kernel after it launch.
constexpr int kMergeWarps = 8;
__global__ void __launch_bounds__(kMergeWarps * 32) merge_kernel(const float* __restrict__ part_o,
                                                                 const float2* __restrict__ part_ml, int hd,
                                                                 int n_split, const float* __restrict__ sinks,
                                                                 float* __restrict__ out) {
  __shared__ float acc_s[kMergeWarps][32], l_s[kMergeWarps];
  dev::pdl_wait();
  dev::pdl_trigger();
  const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int d = blockIdx.y * 32 + lane;
  const float2* ml = part_ml + static_cast<int64_t>(h) * n_split;
  const float sink = sinks ? __ldg(sinks + h) * kLog2e : kNegBig;
  float M = sink;
  for (int s = lane; s < n_split; s += 32) M = fmaxf(M, ml[s].x);
  M = dev::warp_max(M);
  const float* po = part_o + static_cast<int64_t>(h) * n_split * hd + d;
  float acc = 0.f, L = 0.f;
#pragma unroll 4
  for (int s = warp; s < n_split; s += kMergeWarps) {
    const float2 v = ml[s];
    const float w = exp2f(v.x - M);
    L += v.y * w;
    acc += po[static_cast<int64_t>(s) * hd] * w;
  }
  acc_s[warp][lane] = acc;
  if (lane == 0) l_s[warp] = L;
  __syncthreads();
  if (warp == 0) {
    float a = 0.f, l = sinks ? exp2f(sink - M) : 0.f;
#pragma unroll
    for (int w = 0; w < kMergeWarps; ++w) {
      a += acc_s[w][lane];
      l += l_s[w];
    }
    out[static_cast<int64_t>(h) * hd + d] = l > 0.f ? a / l : 0.f;
  }
}

// ------------------------------------------------------------------ host side
template <int V>
using Int = std::integral_constant<int, V>;

int mtiles(int group) { return group > 8 ? 2 : 1; }

bool shape_ok(const AttentionShape& s) {
  if (s.n_head <= 0 || s.n_kv <= 0 || s.n_head % s.n_kv != 0) return false;
  const int g = s.n_head / s.n_kv;
  const bool g_ok = g == 1 || g == 2 || g == 4 || g == 8 || g == 16;
  const bool hd_ok = s.head_dim == 64 || s.head_dim == 128 || s.head_dim == 256;
  return g_ok && hd_ok && mtiles(g) * s.head_dim <= 256;  // o[MT][HD/8][4] in registers
}

// f(Int<MT>, Int<HD>) for the instantiation serving s (shape_ok(s) holds).
template <class F>
void dispatch(const AttentionShape& s, F&& f) {
  if (mtiles(s.n_head / s.n_kv) == 2) {
    if (s.head_dim == 64) f(Int<2>{}, Int<64>{});
    else f(Int<2>{}, Int<128>{});
  } else if (s.head_dim == 64) {
    f(Int<1>{}, Int<64>{});
  } else if (s.head_dim == 128) {
    f(Int<1>{}, Int<128>{});
  } else {
    f(Int<1>{}, Int<256>{});
  }
}

// Opts the kernel into its shared memory (once) and returns how many of its
// blocks an SM holds, at most kMaxBlocksPerSm.
template <class T, int MT, int HD>
int blocks_per_sm() {
  static const int n = [] {
    constexpr int smem = Layout<T, HD>::template smem<MT>();
    MS_CUDA_CHECK(
        cudaFuncSetAttribute(decode_long_kernel<T, MT, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int v = 0;
    MS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, decode_long_kernel<T, MT, HD>, kThreads, smem));
    return std::clamp(v, 1, kMaxBlocksPerSm);
  }();
  return n;
}

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      v = 132;
    return v > 0 ? v : 132;
  }();
  return n;
}

// sm_80+ code for this device (mma.sync f16 and cp.async)
bool device_ok() {
  static const bool v = [] {
    cudaFuncAttributes a{};
    MS_CUDA_CHECK(cudaFuncGetAttributes(&a, decode_long_kernel<__half, 1, 128>));
    return a.ptxVersion >= 80;
  }();
  return v;
}

int splits_for(const AttentionShape& s, int len, int blocks_sm) {
  const int by_len = (std::max(len, 1) + kBlockStep - 1) / kBlockStep;
  const int by_sm = blocks_sm * sm_count() / s.n_kv;
  return std::max(1, std::min(by_len, by_sm));
}

template <class T>
int splits_t(const AttentionShape& s, int len) {
  int n = 1;
  dispatch(s, [&](auto mt, auto hd) {
    n = splits_for(s, len, blocks_per_sm<T, decltype(mt)::value, decltype(hd)::value>());
  });
  return n;
}

template <class T>
void launch_impl(const AttentionShape& s, const float* q, const T* kc, const T* vc, int max_kv_len,
                 const int32_t* kv_len, int window, int n_split, float* part_o, float2* part_ml,
                 cudaStream_t stream) {
  dispatch(s, [&](auto mt, auto hd) {
    constexpr int MT = decltype(mt)::value, HD = decltype(hd)::value;
    blocks_per_sm<T, MT, HD>();  // the shared-memory opt-in
    constexpr int smem = Layout<T, HD>::template smem<MT>();
    MS_CUDA_CHECK(launch_pdl(decode_long_kernel<T, MT, HD>, dim3(n_split, s.n_kv), dim3(kThreads), smem, stream, q,
                             kc, vc, s.n_head / s.n_kv, s.ctx, max_kv_len, kv_len, s.scale * kLog2e, window,
                             n_split, part_o, part_ml));
  });
}

}  // namespace

bool usable(const AttentionShape& s, const uint16_t* k_cache, const uint16_t* v_cache) {
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  return shape_ok(s) && aligned(k_cache) && aligned(v_cache) && device_ok();
}

bool usable(const AttentionShape& s, const BlockQ8_0* k_cache, const BlockQ8_0* v_cache) {
  (void)k_cache;
  (void)v_cache;
  return shape_ok(s) && device_ok();
}

int splits(const AttentionShape& s, int len, bool q8_0) {
  return q8_0 ? splits_t<BlockQ8_0>(s, len) : splits_t<__half>(s, len);
}

int max_splits(const AttentionShape& s, int len) {
  if (s.n_kv <= 0) return 1;
  return splits_for(s, len, kMaxBlocksPerSm);
}

void launch(const AttentionShape& s, const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
            int max_kv_len, const int32_t* kv_len, int window, int n_split, float* part_o, float2* part_ml,
            cudaStream_t stream) {
  launch_impl(s, q, reinterpret_cast<const __half*>(k_cache), reinterpret_cast<const __half*>(v_cache), max_kv_len,
              kv_len, window, n_split, part_o, part_ml, stream);
}

void launch(const AttentionShape& s, const float* q, const BlockQ8_0* k_cache, const BlockQ8_0* v_cache,
            int max_kv_len, const int32_t* kv_len, int window, int n_split, float* part_o, float2* part_ml,
            cudaStream_t stream) {
  launch_impl(s, q, k_cache, v_cache, max_kv_len, kv_len, window, n_split, part_o, part_ml, stream);
}

void merge(const AttentionShape& s, const float* part_o, const float2* part_ml, int n_split, const float* sinks,
           float* out, cudaStream_t stream) {
  MS_CUDA_CHECK(launch_pdl(merge_kernel, dim3(s.n_head, s.head_dim / 32), dim3(kMergeWarps * 32), 0, stream, part_o,
                           part_ml, s.head_dim, n_split, sinks, out));
}

}  // namespace ms::cuda::decode_long
