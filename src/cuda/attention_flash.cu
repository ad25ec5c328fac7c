// Causal prefill attention on tensor cores, in the flash-attention manner
// (FlashAttention-2's loop order), for f16 and q8_0 KV caches.
//
// A block of 4 warps takes 64 consecutive query tokens of one query head;
// warp w owns 16 of them (the m16 of mma.sync m16n8k16: f16 inputs, f32
// accumulators). The block walks the keys 0 .. its last token's position in
// tiles of BK (64, or 32 for head_dim > 128, which keeps two blocks per SM in
// shared memory), copied with cp.async so that the copy of tile j+1 overlaps
// the work on tile j: f16 caches into double-buffered f16 tiles; q8_0 caches
// as their raw blocks (a tile of one KV head is one contiguous span of
// memory) into double-buffered byte buffers, dequantized from there into one
// f16 K and V tile (d * q rounded once to f16) at the start of the tile's
// turn (issue #29: dequantizing from global memory on the way left the loads
// exposed, several times f16's time: bench/results/long_context.md, "Attention
// kernels: flash prefill on tensor cores, q8_0 K/V (fattn)"). Per tile and warp: S = Q K^T (ldmatrix fragments), the causal mask on tiles that
// cross the warp's diagonal (tiles wholly past the warp's last token are
// skipped), the online softmax in registers (exp2 domain: q is pre-scaled by
// scale * log2 e), P rounded to f16 straight from the S accumulators into
// the A fragments, O += P V (V fragments by ldmatrix.trans). No n^2 scratch:
// scores live in registers only.
//
// Sliding window (gpt-oss): the walk starts at the tile holding the block's
// first visible key, warps skip tiles wholly before their rows' windows and
// mask the keys before each row's window in the tiles that cross it; so a
// window layer costs O(n * window), not O(n^2). Sinks: one more logit per
// head folded into the final normalisation (max and denominator rescaled).
//
// head_dim is padded up to HDP = 64, 128 or 256 (zeros in q, k and v, never
// written out), so any head_dim that is a multiple of 8 runs. Q comes as f32
// and is converted to f16 in the tile load (as llama.cpp does). Blocks are
// launched head-fastest, so the query heads sharing a KV head (GQA) read the
// same K/V tiles at about the same time and the second reads hit L2; the
// query tiles nearest the end of the prompt (the most keys) start first.
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/attention.h"
#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/kv_elem.cuh"
#include "cuda/mma_ptx.cuh"
#include "util/error.h"

// mma.sync m16n8k16 with f16 inputs and cp.async need sm_80: for older
// targets (the default build includes sm_75) the kernel's body is left out
// and flash_usable() says no, so f16 caches take the tiled kernel there.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define MS_FLASH_TENSOR_CORES 0
#else
#define MS_FLASH_TENSOR_CORES 1
#endif
#if !MS_FLASH_TENSOR_CORES
#pragma nv_diag_suppress 177  // the helpers below serve only the left-out body
#endif

namespace ms::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBQ = 16 * kWarps;  // query tokens per block
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegBig = -1e30f;  // initial row max: finite, so 2^(kNegBig - m) is 0, never NaN

template <int HDP>
constexpr int key_tile() {
  return HDP > 128 ? 32 : 64;
}
// Shared-memory row stride in halves: 16 bytes of padding put the 8 rows an
// ldmatrix phase reads on distinct bank groups.
template <int HDP>
constexpr int row_stride() {
  return HDP + 8;
}
// Bytes of one raw q8_0 K or V tile: BK rows of up to HDP/32 blocks, plus
// room for the 16-byte alignment of the copy (the tile's start rounded down).
template <int HDP>
constexpr int raw_tile_bytes() {
  return (key_tile<HDP>() * (HDP / QK) * static_cast<int>(sizeof(BlockQ8_0)) + 31) / 16 * 16;
}
// q, then f16: K and V tiles double-buffered [2][BK][S] each; q8_0: one f16 K
// and V tile each [BK][S], then raw K and V tiles double-buffered.
template <class T, int HDP>
constexpr size_t smem_bytes() {
  constexpr size_t f16_tiles = std::is_same_v<T, BlockQ8_0> ? 2 : 4;
  constexpr size_t raw = std::is_same_v<T, BlockQ8_0> ? 4 * raw_tile_bytes<HDP>() : 0;
  return sizeof(__half) * static_cast<size_t>(kBQ + f16_tiles * key_tile<HDP>()) * row_stride<HDP>() + raw;
}

using namespace ptx;

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// One K or V tile: rows t0 .. t0+BK-1 of a KV head (row = position) into
// dst [BK][HDP + 8] halves. Rows outside kmin .. kmax (the keys the block
// sees) and dims past hd are zeros: P V multiplies every row, so a NaN in a
// row no query sees must not get in (0 * NaN).
template <int HDP, int BK, bool WIN>
__device__ __forceinline__ void load_tile(const __half* head, int t0, int kmin, int kmax, int hd, __half* dst) {
  constexpr int kChunks = HDP / 8;  // 16-byte pieces per row
  for (int i = threadIdx.x; i < BK * kChunks; i += kThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const bool ok = (!WIN || t0 + r >= kmin) && t0 + r <= kmax && c < hd;
    const __half* src = ok ? head + static_cast<int64_t>(t0 + r) * hd + c : head;
    cp_async16(smem_addr(dst + r * row_stride<HDP>() + c), src, ok ? 16 : 0);
  }
}

// The raw q8_0 blocks of rows t0 .. min(t0+BK-1, kmax) of a KV head: one
// contiguous span, copied in 16-byte pieces from its start rounded down to 16
// bytes (the bytes before it belong to earlier rows of the same cache, or to
// the 16-byte aligned allocation's first piece), the last piece cut at the
// span's end. dequant_tile finds the tile at raw + raw_offset(...).
__device__ __forceinline__ const unsigned char* raw_span(const BlockQ8_0* head, int t0, int units) {
  return reinterpret_cast<const unsigned char*>(head + static_cast<int64_t>(t0) * units);
}
__device__ __forceinline__ int raw_offset(const BlockQ8_0* head, int t0, int units) {
  return static_cast<int>(reinterpret_cast<uintptr_t>(raw_span(head, t0, units)) & 15);
}

template <int BK>
__device__ __forceinline__ void copy_raw_tile(const BlockQ8_0* head, int t0, int kmax, int hd, unsigned char* raw) {
  const int units = hd / QK;
  const unsigned char* span = raw_span(head, t0, units);
  const int mis = raw_offset(head, t0, units);
  const int end = mis + min(BK, kmax - t0 + 1) * units * static_cast<int>(sizeof(BlockQ8_0));
  const unsigned char* from = span - mis;
  for (int i = threadIdx.x; i * 16 < end; i += kThreads)
    cp_async16(smem_addr(raw + i * 16), from + i * 16, min(16, end - i * 16));
}

// Dequantization in half2 arithmetic (kDequantHalf2: about half the
// instructions) or through f32; both give the same bits.
constexpr bool kDequantHalf2 = true;

// The raw tile -> dst [BK][HDP + 8] halves (d * q rounded once to f16, as the
// CPU's and the decode kernels' d * q in f32 then rounded). Rows outside
// kmin .. kmax and dims past hd are zeros (as load_tile's; the rows past kmax
// were not copied).
template <int HDP, int BK, bool WIN>
__device__ __forceinline__ void dequant_tile(const unsigned char* raw, int mis, int t0, int kmin, int kmax, int hd,
                                             __half* dst) {
  constexpr int kChunks = HDP / 8;
  const int units = hd / QK;
  for (int i = threadIdx.x; i < BK * kChunks; i += kThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    uint4 packed = make_uint4(0, 0, 0, 0);
    if ((!WIN || t0 + r >= kmin) && t0 + r <= kmax && c < hd) {
      // a block is 34 bytes: 2-byte aligned (the cache is), read by halves
      const unsigned char* blk = raw + mis + (r * units + c / QK) * static_cast<int>(sizeof(BlockQ8_0));
      const auto* qs = reinterpret_cast<const unsigned short*>(blk + 2 + c % QK);
      if constexpr (kDequantHalf2) {
        // int8 -> half exactly: 0x64XX is 1024 + XX, XX = q + 128 (q ^ 0x80);
        // then q * d in half arithmetic: the exact product rounded once, as
        // the f32 product (exact: 11 x 8 bits) rounded to f16 below.
        const __half d = __ushort_as_half(*reinterpret_cast<const unsigned short*>(blk));
        const __half2 d2 = __halves2half2(d, d), bias = __float2half2_rn(1152.f);
        const uint32_t w0 = (static_cast<uint32_t>(qs[0]) | static_cast<uint32_t>(qs[1]) << 16) ^ 0x80808080u;
        const uint32_t w1 = (static_cast<uint32_t>(qs[2]) | static_cast<uint32_t>(qs[3]) << 16) ^ 0x80808080u;
        uint32_t h[4] = {__byte_perm(w0, 0x64646464u, 0x4140), __byte_perm(w0, 0x64646464u, 0x4342),
                         __byte_perm(w1, 0x64646464u, 0x4140), __byte_perm(w1, 0x64646464u, 0x4342)};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const __half2 x = __hmul2(__hsub2(*reinterpret_cast<const __half2*>(&h[k]), bias), d2);
          h[k] = *reinterpret_cast<const uint32_t*>(&x);
        }
        packed = make_uint4(h[0], h[1], h[2], h[3]);
      } else {
        const float d = __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(blk)));
        uint32_t h[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const unsigned short u = qs[k];
          h[k] = pack_half2(d * static_cast<float>(static_cast<int8_t>(u & 0xff)),
                            d * static_cast<float>(static_cast<int8_t>(u >> 8)));
        }
        packed = make_uint4(h[0], h[1], h[2], h[3]);
      }
    }
    *reinterpret_cast<uint4*>(dst + r * row_stride<HDP>() + c) = packed;
  }
}

// WIN: a sliding window (window > 0); without it the window's code is left
// out, so calls without a window run the kernel as it was (as run-time checks
// they slowed it measurably: bench/results/long_context.md, section attn).
template <class T, int HDP, bool WIN>
__global__ void __launch_bounds__(kThreads) flash_prefill_kernel(const float* __restrict__ q,
                                                                  const T* __restrict__ kc,
                                                                  const T* __restrict__ vc, int n_tokens,
                                                                  int n_head, int group, int hd, int64_t ctx,
                                                                  int pos0, float scale_log2,
                                                                  const float* __restrict__ sinks, int window,
                                                                  float* __restrict__ out) {
#if MS_FLASH_TENSOR_CORES
  constexpr int BK = key_tile<HDP>(), S = row_stride<HDP>();
  constexpr int KS = HDP / 16;         // k-steps of Q K^T
  constexpr int NT = BK / 8;           // n-tiles of S (8 keys each)
  constexpr int DT = HDP / 8;          // n-tiles of O (8 dims each)
  constexpr bool kQInRegs = HDP <= 128;  // else re-read from shared memory (registers: O is 128 floats)
  constexpr bool kRaw = std::is_same_v<T, BlockQ8_0>;  // raw q8_0 tiles, dequantized in shared memory
  constexpr int kF16Bufs = kRaw ? 1 : 2;
  constexpr int RB = kRaw ? raw_tile_bytes<HDP>() : 0;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* q_s = reinterpret_cast<__half*>(smem_raw);  // [kBQ][S]
  __half* k_s = q_s + kBQ * S;                          // [kF16Bufs][BK][S]
  __half* v_s = k_s + kF16Bufs * BK * S;                // [kF16Bufs][BK][S]
  unsigned char* raw_k = reinterpret_cast<unsigned char*>(v_s + kF16Bufs * BK * S);  // q8_0: [2][RB]
  unsigned char* raw_v = raw_k + 2 * RB;                                              // q8_0: [2][RB]

  const int h = blockIdx.x, kvh = h / group;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kBQ;  // the last tiles (most keys) first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int units = dev::kv_row_units<T>(hd);
  const T* kh = kc + static_cast<int64_t>(kvh) * ctx * units;
  const T* vh = vc + static_cast<int64_t>(kvh) * ctx * units;
  const int kmax = pos0 + min(q0 + kBQ, n_tokens) - 1;  // the last key any token of the block sees
  const int n_kt = kmax / BK + 1;
  const int kmin = WIN ? max(0, pos0 + q0 - window + 1) : 0;  // the first key any token of the block sees
  const int kt0 = kmin / BK;

  // Copies tile j into buffer slot b (f16: the f16 tiles; q8_0: the raw ones).
  auto issue_tile = [&](int j, int b) {
    if constexpr (kRaw) {
      copy_raw_tile<BK>(kh, j * BK, kmax, hd, raw_k + b * RB);
      copy_raw_tile<BK>(vh, j * BK, kmax, hd, raw_v + b * RB);
    } else {
      load_tile<HDP, BK, WIN>(kh, j * BK, kmin, kmax, hd, k_s + b * BK * S);
      load_tile<HDP, BK, WIN>(vh, j * BK, kmin, kmax, hd, v_s + b * BK * S);
    }
    cp_async_commit();
  };
  issue_tile(kt0, 0);

  // Q: f32 -> f16, pre-scaled; rows past the prompt and dims past hd are zeros.
  for (int i = threadIdx.x; i < kBQ * (HDP / 4); i += kThreads) {
    const int r = i / (HDP / 4), c = (i % (HDP / 4)) * 4;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (q0 + r < n_tokens && c < hd)
      x = __ldg(reinterpret_cast<const float4*>(q + (static_cast<int64_t>(q0 + r) * n_head + h) * hd + c));
    *reinterpret_cast<uint2*>(q_s + r * S + c) =
        make_uint2(pack_half2(x.x * scale_log2, x.y * scale_log2), pack_half2(x.z * scale_log2, x.w * scale_log2));
  }
  __syncthreads();

  const int wr0 = q0 + warp * 16;  // the warp's first token
  const bool warp_active = wr0 < n_tokens;
  const int warp_last = pos0 + min(wr0 + 15, n_tokens - 1);  // the last key the warp's tokens see
  const int lim0 = pos0 + wr0 + g, lim1 = lim0 + 8;           // the last keys of this thread's two rows
  // With a window: the first key the warp's first token sees, the largest
  // first key of its rows (tiles reaching below it need the mask), and this
  // thread's rows' first keys. Without: 0 and no mask.
  const int warp_first = WIN ? max(0, pos0 + wr0 - window + 1) : 0;
  const int warp_first_max = WIN ? pos0 + wr0 + 15 - window + 1 : 0;
  const int first0 = lim0 - window + 1, first1 = lim1 - window + 1;
  const uint32_t q_frag_addr =
      smem_addr(q_s + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + (lane >> 4) * 8);
  uint32_t qf[kQInRegs ? KS : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) ldsm_x4(qf[kk], q_frag_addr + kk * 32);
  }

  float o[DT][4];
#pragma unroll
  for (int d = 0; d < DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  float m0 = kNegBig, m1 = kNegBig, l0 = 0.f, l1 = 0.f;

  // ldmatrix row addresses within a tile (bytes): K as B of Q K^T (keys
  // nn*16 + lane%8 (+8 for lanes 16..31), dims kk*16 (+8 for lanes 8..15 and
  // 24..31)); V as B of P V, transposed (keys kk*16 + lane%8 (+8 for lanes
  // 8..15, 24..31), dims dn*16 (+8 for lanes 16..31)).
  const uint32_t k_off = ((((lane & 7) + (lane >> 4) * 8) * S) + ((lane >> 3) & 1) * 8) * 2;
  const uint32_t v_off = ((((lane & 7) + ((lane >> 3) & 1) * 8) * S) + (lane >> 4) * 8) * 2;

  for (int j = kt0; j < n_kt; ++j) {
    const int slot = (j - kt0) & 1;
    const int t0 = j * BK;
    if constexpr (kRaw) {
      // raw tile j in; every warp done with the f16 tiles of j-1 and with raw slot^1
      cp_async_wait<0>();
      __syncthreads();
      if (j + 1 < n_kt) issue_tile(j + 1, slot ^ 1);  // overlaps the dequantization and the MMAs of tile j
      dequant_tile<HDP, BK, WIN>(raw_k + slot * RB, raw_offset(kh, t0, units), t0, kmin, kmax, hd, k_s);
      dequant_tile<HDP, BK, WIN>(raw_v + slot * RB, raw_offset(vh, t0, units), t0, kmin, kmax, hd, v_s);
    } else if (j + 1 < n_kt) {
      issue_tile(j + 1, slot ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int buf = kRaw ? 0 : slot;
    if (warp_active && t0 <= warp_last && (!WIN || t0 + BK > warp_first)) {
      const uint32_t kb = smem_addr(k_s + buf * BK * S) + k_off;
      const uint32_t vb = smem_addr(v_s + buf * BK * S) + v_off;
      float sc[NT][4];
#pragma unroll
      for (int n = 0; n < NT; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        uint32_t a[4];
        if constexpr (kQInRegs) {
          a[0] = qf[kk][0]; a[1] = qf[kk][1]; a[2] = qf[kk][2]; a[3] = qf[kk][3];
        } else {
          ldsm_x4(a, q_frag_addr + kk * 32);
        }
#pragma unroll
        for (int nn = 0; nn < NT / 2; ++nn) {
          uint32_t b[4];
          ldsm_x4(b, kb + (nn * 16 * S + kk * 16) * 2);
          mma_16816(sc[2 * nn], a, b[0], b[1]);
          mma_16816(sc[2 * nn + 1], a, b[2], b[3]);
        }
      }
      // causal mask (and the zero rows past the block's last key), where
      // the tile reaches past the warp's first token
      if (t0 + BK - 1 > pos0 + wr0) {
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          const int key = t0 + n * 8 + 2 * t;
          if (key > lim0) sc[n][0] = -INFINITY;
          if (key + 1 > lim0) sc[n][1] = -INFINITY;
          if (key > lim1) sc[n][2] = -INFINITY;
          if (key + 1 > lim1) sc[n][3] = -INFINITY;
        }
      }
      // the window's lower edge, where the tile reaches below a row's first key
      if (WIN && t0 < warp_first_max) {
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          const int key = t0 + n * 8 + 2 * t;
          if (key < first0) sc[n][0] = -INFINITY;
          if (key + 1 < first0) sc[n][1] = -INFINITY;
          if (key < first1) sc[n][2] = -INFINITY;
          if (key + 1 < first1) sc[n][3] = -INFINITY;
        }
      }
      // online softmax: rows g (c0, c1) and g + 8 (c2, c3), a row spread over the 4 lanes of a quad
      float mx0 = m0, mx1 = m1;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        mx0 = fmaxf(mx0, fmaxf(sc[n][0], sc[n][1]));
        mx1 = fmaxf(mx1, fmaxf(sc[n][2], sc[n][3]));
      }
      mx0 = fmaxf(mx0, __shfl_xor_sync(dev::kFullMask, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(dev::kFullMask, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(dev::kFullMask, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(dev::kFullMask, mx1, 2));
      const float c0 = exp2f(m0 - mx0), c1 = exp2f(m1 - mx1);
      m0 = mx0;
      m1 = mx1;
      float rs0 = 0.f, rs1 = 0.f;
      uint32_t pf[NT / 2][4];  // P as the A fragments of P V, one per 16 keys
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const float p0 = exp2f(sc[n][0] - mx0), p1 = exp2f(sc[n][1] - mx0);
        const float p2 = exp2f(sc[n][2] - mx1), p3 = exp2f(sc[n][3] - mx1);
        rs0 += p0 + p1;
        rs1 += p2 + p3;
        pf[n / 2][(n & 1) * 2] = pack_half2(p0, p1);
        pf[n / 2][(n & 1) * 2 + 1] = pack_half2(p2, p3);
      }
      l0 = l0 * c0 + rs0;  // per thread: its columns only, the quad is summed at the end
      l1 = l1 * c1 + rs1;
#pragma unroll
      for (int d = 0; d < DT; ++d) {
        o[d][0] *= c0; o[d][1] *= c0;
        o[d][2] *= c1; o[d][3] *= c1;
      }
#pragma unroll
      for (int kk = 0; kk < NT / 2; ++kk) {
#pragma unroll
        for (int dn = 0; dn < DT / 2; ++dn) {
          uint32_t b[4];
          ldsm_x4_trans(b, vb + (kk * 16 * S + dn * 16) * 2);
          mma_16816(o[2 * dn], pf[kk], b[0], b[1]);
          mma_16816(o[2 * dn + 1], pf[kk], b[2], b[3]);
        }
      }
    }
    if constexpr (!kRaw) __syncthreads();  // the buffer of tile j is refilled by the next iteration
  }
  if (!warp_active) return;
  l0 += __shfl_xor_sync(dev::kFullMask, l0, 1);
  l0 += __shfl_xor_sync(dev::kFullMask, l0, 2);
  l1 += __shfl_xor_sync(dev::kFullMask, l1, 1);
  l1 += __shfl_xor_sync(dev::kFullMask, l1, 2);
  float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
  if (sinks) {  // denominator l 2^(m - M) + 2^(sink - M), M = max(m, sink); o carries 2^m
    const float sk = __ldg(sinks + h) * kLog2e;
    const float M0 = fmaxf(m0, sk), M1 = fmaxf(m1, sk), c0 = exp2f(m0 - M0), c1 = exp2f(m1 - M1);
    inv0 = c0 / (l0 * c0 + exp2f(sk - M0));
    inv1 = c1 / (l1 * c1 + exp2f(sk - M1));
  }
  const int tok0 = wr0 + g, tok1 = tok0 + 8;
  float* out0 = out + (static_cast<int64_t>(tok0) * n_head + h) * hd;
  float* out1 = out + (static_cast<int64_t>(tok1) * n_head + h) * hd;
#pragma unroll
  for (int d = 0; d < DT; ++d) {
    const int col = d * 8 + 2 * t;
    if (col >= hd) continue;
    if (tok0 < n_tokens) *reinterpret_cast<float2*>(out0 + col) = make_float2(o[d][0] * inv0, o[d][1] * inv0);
    if (tok1 < n_tokens) *reinterpret_cast<float2*>(out1 + col) = make_float2(o[d][2] * inv1, o[d][3] * inv1);
  }
#else
  __trap();  // never launched: flash_usable() is false for such code
#endif
}

// Whether this device runs the kernel from sm_80+ code (queried once).
bool flash_usable() {
  static const bool v = [] {
    cudaFuncAttributes a{};
    MS_CUDA_CHECK(cudaFuncGetAttributes(&a, flash_prefill_kernel<__half, 64, false>));
    return a.ptxVersion >= 80;
  }();
  return v;
}

template <class T, int HDP, bool WIN>
void launch_kernel(const AttentionShape& s, const float* q, const T* kc, const T* vc, int n_tokens, int pos0,
                   float* out, cudaStream_t stream, const AttentionExtras& x) {
  constexpr size_t smem = smem_bytes<T, HDP>();
  static const bool opted_in = [] {  // beyond the default 48 KB of dynamic shared memory
    MS_CUDA_CHECK(cudaFuncSetAttribute(flash_prefill_kernel<T, HDP, WIN>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  }();
  (void)opted_in;
  const int n_qt = (n_tokens + kBQ - 1) / kBQ;
  const dim3 grid(static_cast<unsigned>(s.n_head), static_cast<unsigned>(n_qt));
  flash_prefill_kernel<T, HDP, WIN><<<grid, kThreads, smem, stream>>>(q, kc, vc, n_tokens, s.n_head,
                                                                      s.n_head / s.n_kv, s.head_dim, s.ctx, pos0,
                                                                      s.scale * kLog2e, x.sinks, x.window, out);
  MS_CUDA_CHECK_LAUNCH();
}

template <class T, int HDP>
void launch(const AttentionShape& s, const float* q, const T* kc, const T* vc, int n_tokens, int pos0, float* out,
            cudaStream_t stream, const AttentionExtras& x) {
  if (x.window > 0)
    launch_kernel<T, HDP, true>(s, q, kc, vc, n_tokens, pos0, out, stream, x);
  else
    launch_kernel<T, HDP, false>(s, q, kc, vc, n_tokens, pos0, out, stream, x);
}

void check_prefill(const AttentionShape& s, int n_tokens, int pos0, const AttentionExtras& x) {
  if (x.window < 0) throw Error("attention_prefill: sliding window " + std::to_string(x.window) + " must be >= 0");
  if (s.n_head <= 0 || s.n_kv <= 0 || s.n_head % s.n_kv != 0)
    throw Error("attention_prefill: n_head " + std::to_string(s.n_head) + " is not a multiple of n_kv " +
                std::to_string(s.n_kv));
  if (s.head_dim <= 0 || s.head_dim % 2 != 0 || s.head_dim > 256)
    throw Error("attention_prefill: head_dim " + std::to_string(s.head_dim) + " must be even and at most 256");
  if (pos0 < 0 || static_cast<int64_t>(pos0) + n_tokens > s.ctx)
    throw Error("attention_prefill: positions " + std::to_string(pos0) + ".." + std::to_string(pos0 + n_tokens - 1) +
                " do not fit the cache of " + std::to_string(s.ctx));
  if (static_cast<int64_t>(n_tokens + kBQ - 1) / kBQ > 65535)
    throw Error("attention_prefill: " + std::to_string(n_tokens) + " tokens in one call is too many");
}

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

template <class T>
void flash(const AttentionShape& s, const float* q, const T* kc, const T* vc, int n_tokens, int pos0, float* out,
           cudaStream_t stream, const AttentionExtras& x) {
  if (s.head_dim <= 64)
    launch<T, 64>(s, q, kc, vc, n_tokens, pos0, out, stream, x);
  else if (s.head_dim <= 128)
    launch<T, 128>(s, q, kc, vc, n_tokens, pos0, out, stream, x);
  else
    launch<T, 256>(s, q, kc, vc, n_tokens, pos0, out, stream, x);
}

}  // namespace

void check_q8_0_head_dim(const char* who, int head_dim) {
  if (head_dim <= 0 || head_dim % QK != 0 || head_dim > 256)
    throw Error(std::string(who) + ": a q8_0 KV cache needs head_dim a multiple of 32 (at most 256), not " +
                std::to_string(head_dim) + "; use --kv-type f16");
}

void attention_prefill(const AttentionShape& s, const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                       int n_tokens, int pos0, float* out, cudaStream_t stream, const AttentionExtras& x) {
  if (n_tokens <= 0) return;
  check_prefill(s, n_tokens, pos0, x);
  // float4 loads of q, 16-byte copies of K/V rows, float2 stores of out
  const bool fits = s.head_dim % 8 == 0 && aligned(q, 16) && aligned(k_cache, 16) && aligned(v_cache, 16) &&
                    aligned(out, 8);
  if (!fits || !flash_usable()) {
    attention_prefill_tiled(s, q, k_cache, v_cache, n_tokens, pos0, out, stream, x);
    return;
  }
  flash(s, q, reinterpret_cast<const __half*>(k_cache), reinterpret_cast<const __half*>(v_cache), n_tokens, pos0,
        out, stream, x);
}

void attention_prefill(const AttentionShape& s, const float* q, const BlockQ8_0* k_cache, const BlockQ8_0* v_cache,
                       int n_tokens, int pos0, float* out, cudaStream_t stream, const AttentionExtras& x) {
  if (n_tokens <= 0) return;
  check_q8_0_head_dim("attention_prefill", s.head_dim);
  check_prefill(s, n_tokens, pos0, x);
  if (!aligned(q, 16) || !aligned(out, 8) || !aligned(k_cache, 2) || !aligned(v_cache, 2))
    throw Error("attention_prefill: q must be 16-byte aligned, out 8-byte aligned (q8_0 cache)");
  if (!flash_usable())
    throw Error("attention_prefill: a q8_0 KV cache needs a GPU of compute capability 8.0 or newer (and code "
                "built for it); use --kv-type f16");
  flash(s, q, k_cache, v_cache, n_tokens, pos0, out, stream, x);
}

}  // namespace ms::cuda
