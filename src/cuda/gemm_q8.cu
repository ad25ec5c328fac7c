// Int8 tensor-core GEMM for quantized weights x a batch of Q8 activations
// (prompt batches, grouped expert FFN). See gemm.h.
//
// Block tile: 128 weight rows x BN vectors (BN 32 or 64), K step 256 (one
// K-quant super-block, or 8 blocks of a 32-element format). 8 warps as 4 (rows)
// x 2 (vectors); a warp owns 32 rows x BN/2 vectors = 2 x BN/16 mma tiles.
//
// Per K step each thread reads half a super-block of one weight row (raw bytes
// into registers, issued before the tensor-core work on the previous step, so
// the loads overlap it), then unpacks it to signed int8 quants in shared
// memory with one float scale per 32 (Q6_K: 16) elements and, for Q4_K/Q5_K,
// one float min per 32 (Q2_K: two, per 16, see FmtQ2K). Activations are Q8Act:
// int8 quants plus {d, d*sum q} per 32, copied as they are (Q2_K also keeps
// d * sum q of each 16). Two shared-memory stages, one barrier per step.
//
// For each 32-element slice the warps multiply with mma.sync m16n8k32
// (s8 x s8 -> s32; Q6_K: two m16n8k16, one per 16-element scale) starting
// from zero, and fold the int32 sums into f32 accumulators:
//   acc += sum_int * w_scale[row] * x_d[vec] - w_min[row] * x_dsum[vec]
// (the min term: sum_k (-m) x_k = -m * d_x * sum q_x; Q2_K subtracts one such
// term per 16-element group).
// Fragments come from shared memory by ldmatrix (rows 272 bytes apart: the 8
// rows of a phase fall on distinct banks).
#include <algorithm>
#include <string>

#include "cuda/common.cuh"
#include "cuda/device.h"
#include "cuda/expert_groups.cuh"
#include "cuda/gemm_q8.cuh"
#include "cuda/quant_dot.cuh"
#include "cuda/quant_sub32_iq.cuh"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int BM = 128, BK = 256, kThreads = 256;
constexpr int LDQ = BK + 16;  // bytes per row of an int8 tile in shared memory

struct Q8GemmParams {
  const void* const* table[2];
  int64_t offset[2];
  const uint8_t* base[2];
  int64_t stride[2];
  float* y[2];
  const float* residual[2];
  int64_t rows, row_bytes;
  int nb32;    // 32-element blocks per row (cols / 32)
  int ktiles;  // K steps of 256
  int per_group, x_div, n_expert;
  const int32_t* x_rows;  // XRows: a position's input vector (null: from its output vector, or the position)
  int x_by_position;
  const int32_t* n_groups;
  const int32_t* expert;
  const int32_t* offsets;
  const int32_t* list;
  const int8_t* xq;
  const float2* xds;
  int64_t xn;
  int64_t y_stride;
  int parts, zsplit;
  int nseg;             // > 1: row segments (RowSegments), parts == 1
  int64_t seg_end[3];   // cumulative row ends
  float* seg_y[3];
};

__device__ __forceinline__ float h2f(uint32_t h) { return dev::f16_bits_to_f32(h); }
__device__ __forceinline__ uint32_t byte_of(uint32_t w, int k) { return (w >> (8 * k)) & 0xffu; }
__device__ __forceinline__ void st16(int8_t* dst, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  *reinterpret_cast<uint4*>(dst) = make_uint4(a, b, c, d);
}

// ------------------------------------------------------------------ formats
// load(): raw bytes of half `h` of K step `kt` of a weight row into registers.
// unpack(): int8 quants of those 128 elements to dst (16-byte aligned), and
// the scales of its 4 (Q6_K: 8) scale groups to sc[] (and mins to mn[]).

// 6-bit scale / min of sub-block j of Q4_K / Q5_K from the 12 bytes s[0..2].
__device__ __forceinline__ void k_scale_min(const uint32_t* s, int j, float d, float dmin, float& sc, float& mn) {
  uint32_t a, m;
  if (j < 4) {
    a = byte_of(s[0], j) & 63;
    m = byte_of(s[1], j) & 63;
  } else {
    a = (byte_of(s[2], j - 4) & 15) | ((byte_of(s[0], j - 4) >> 6) << 4);
    m = (byte_of(s[2], j - 4) >> 4) | ((byte_of(s[1], j - 4) >> 6) << 4);
  }
  sc = d * static_cast<float>(a);
  mn = dmin * static_cast<float>(m);
}

struct FmtQ4K {
  static constexpr int kSG = 32, kRaw = 20;
  static constexpr bool kMin = true, kMin16 = false;
  static __device__ __forceinline__ void load(const uint8_t* row, int kt, int h, int, uint32_t* r) {
    const uint8_t* blk = row + static_cast<int64_t>(kt) * 144;
    const uint4 hd = dev::ld16(blk);
    r[0] = hd.x; r[1] = hd.y; r[2] = hd.z; r[3] = hd.w;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint4 q = dev::ld16(blk + 16 + 64 * h + 16 * i);
      r[4 + 4 * i] = q.x; r[5 + 4 * i] = q.y; r[6 + 4 * i] = q.z; r[7 + 4 * i] = q.w;
    }
  }
  static __device__ __forceinline__ void unpack(const uint32_t* r, int h, int8_t* dst, float* sc, float* mn) {
    const float d = h2f(r[0]), dmin = h2f(r[0] >> 16);
#pragma unroll
    for (int i = 0; i < 4; ++i) k_scale_min(r + 1, 4 * h + i, d, dmin, sc[i], mn[i]);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int w = 0; w < 8; w += 4) {
        const uint32_t* q = r + 4 + 8 * i + w;
        st16(dst + 64 * i + 4 * w, q[0] & 0x0f0f0f0fu, q[1] & 0x0f0f0f0fu, q[2] & 0x0f0f0f0fu, q[3] & 0x0f0f0f0fu);
        st16(dst + 64 * i + 32 + 4 * w, (q[0] >> 4) & 0x0f0f0f0fu, (q[1] >> 4) & 0x0f0f0f0fu,
             (q[2] >> 4) & 0x0f0f0f0fu, (q[3] >> 4) & 0x0f0f0f0fu);
      }
  }
};

struct FmtQ5K {
  static constexpr int kSG = 32, kRaw = 28;
  static constexpr bool kMin = true, kMin16 = false;
  static __device__ __forceinline__ void load(const uint8_t* row, int kt, int h, int, uint32_t* r) {
    const uint8_t* blk = row + static_cast<int64_t>(kt) * 176;
#pragma unroll
    for (int i = 0; i < 3; ++i) {  // d, dmin, scales, qh[32]
      const uint4 q = dev::ld16(blk + 16 * i);
      r[4 * i] = q.x; r[4 * i + 1] = q.y; r[4 * i + 2] = q.z; r[4 * i + 3] = q.w;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint4 q = dev::ld16(blk + 48 + 64 * h + 16 * i);
      r[12 + 4 * i] = q.x; r[13 + 4 * i] = q.y; r[14 + 4 * i] = q.z; r[15 + 4 * i] = q.w;
    }
  }
  static __device__ __forceinline__ void unpack(const uint32_t* r, int h, int8_t* dst, float* sc, float* mn) {
    const float d = h2f(r[0]), dmin = h2f(r[0] >> 16);
#pragma unroll
    for (int i = 0; i < 4; ++i) k_scale_min(r + 1, 4 * h + i, d, dmin, sc[i], mn[i]);
    const uint32_t* qh = r + 4;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int p = 2 * h + i;  // sub-blocks 2p (low nibbles) and 2p+1 (high)
      uint32_t lo[8], hi[8];
#pragma unroll
      for (int w = 0; w < 8; ++w) {
        const uint32_t q = r[12 + 8 * i + w];
        lo[w] = (q & 0x0f0f0f0fu) | (((qh[w] >> (2 * p)) & 0x01010101u) << 4);
        hi[w] = ((q >> 4) & 0x0f0f0f0fu) | (((qh[w] >> (2 * p + 1)) & 0x01010101u) << 4);
      }
      st16(dst + 64 * i, lo[0], lo[1], lo[2], lo[3]);
      st16(dst + 64 * i + 16, lo[4], lo[5], lo[6], lo[7]);
      st16(dst + 64 * i + 32, hi[0], hi[1], hi[2], hi[3]);
      st16(dst + 64 * i + 48, hi[4], hi[5], hi[6], hi[7]);
    }
  }
};

// Q6_K blocks are 210 bytes: only 2-byte alignment.
struct FmtQ6K {
  static constexpr int kSG = 16, kRaw = 27;
  static constexpr bool kMin = false, kMin16 = false;
  static __device__ __forceinline__ void load(const uint8_t* row, int kt, int h, int, uint32_t* r) {
    const uint8_t* blk = row + static_cast<int64_t>(kt) * 210;
#pragma unroll
    for (int i = 0; i < 16; ++i) r[i] = dev::ld4_a2(blk + 64 * h + 4 * i);
#pragma unroll
    for (int i = 0; i < 8; ++i) r[16 + i] = dev::ld4_a2(blk + 128 + 32 * h + 4 * i);
    r[24] = dev::ld4_a2(blk + 192 + 8 * h);
    r[25] = dev::ld4_a2(blk + 196 + 8 * h);
    r[26] = dev::ld2(blk + 208);
  }
  static __device__ __forceinline__ void unpack(const uint32_t* r, int, int8_t* dst, float* sc, float*) {
    const float d = h2f(r[26]);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      sc[i] = d * static_cast<float>(static_cast<int8_t>(byte_of(r[24 + i / 4], i % 4)));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uint32_t v[8];
#pragma unroll
      for (int w = 0; w < 8; ++w) {
        const uint32_t l4 = r[8 * (k & 1) + w], h2 = r[16 + w];
        const uint32_t lo = (k >> 1) ? (l4 >> 4) & 0x0f0f0f0fu : l4 & 0x0f0f0f0fu;
        v[w] = __vsub4(lo | (((h2 >> (2 * k)) & 0x03030303u) << 4), 0x20202020u);
      }
      st16(dst + 32 * k, v[0], v[1], v[2], v[3]);
      st16(dst + 32 * k + 16, v[4], v[5], v[6], v[7]);
    }
  }
};

// 32-element formats: 4 blocks per half step, each a scale (f16, or one
// E8M0 byte) then kWords 32-bit words of quants, kept as kWords + 1
// registers per block; blocks past the row's end (cols not a multiple of
// 256) read as a zero scale and `kPad` quant words (the format's zero).
template <int kBlockBytes, int kScaleBytes, int kWords, uint32_t kPad>
__device__ __forceinline__ void load_blocks32(const uint8_t* row, int kt, int h, int nb, uint32_t* r) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int b = kt * 8 + 4 * h + i;
    uint32_t* ri = r + (kWords + 1) * i;
    if (b < nb) {
      const uint8_t* blk = row + static_cast<int64_t>(b) * kBlockBytes;
      if constexpr (kScaleBytes == 2) {
        ri[0] = dev::ld2(blk);
#pragma unroll
        for (int w = 0; w < kWords; ++w) ri[1 + w] = dev::ld4_a2(blk + 2 + 4 * w);
      } else {
        ri[0] = __ldg(blk);
#pragma unroll
        for (int w = 0; w < kWords; ++w) ri[1 + w] = dev::ld4_a1(blk + 1 + 4 * w);
      }
    } else {
      ri[0] = 0;
#pragma unroll
      for (int w = 0; w < kWords; ++w) ri[1 + w] = kPad;
    }
  }
}

struct FmtQ8_0 {
  static constexpr int kSG = 32, kRaw = 36;
  static constexpr bool kMin = false, kMin16 = false;
  static __device__ __forceinline__ void load(const uint8_t* row, int kt, int h, int nb, uint32_t* r) {
    load_blocks32<34, 2, 8, 0u>(row, kt, h, nb, r);
  }
  static __device__ __forceinline__ void unpack(const uint32_t* r, int, int8_t* dst, float* sc, float*) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      sc[i] = h2f(r[9 * i]);
      st16(dst + 32 * i, r[9 * i + 1], r[9 * i + 2], r[9 * i + 3], r[9 * i + 4]);
      st16(dst + 32 * i + 16, r[9 * i + 5], r[9 * i + 6], r[9 * i + 7], r[9 * i + 8]);
    }
  }
};

struct FmtQ4_0 {
  static constexpr int kSG = 32, kRaw = 20;
  static constexpr bool kMin = false, kMin16 = false;
  static __device__ __forceinline__ void load(const uint8_t* row, int kt, int h, int nb, uint32_t* r) {
    load_blocks32<18, 2, 4, 0x08080808u>(row, kt, h, nb, r);  // quants 8: value 0
  }
  static __device__ __forceinline__ void unpack(const uint32_t* r, int, int8_t* dst, float* sc, float*) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      sc[i] = h2f(r[5 * i]);
      const uint32_t* q = r + 5 * i + 1;
      st16(dst + 32 * i, __vsub4(q[0] & 0x0f0f0f0fu, 0x08080808u), __vsub4(q[1] & 0x0f0f0f0fu, 0x08080808u),
           __vsub4(q[2] & 0x0f0f0f0fu, 0x08080808u), __vsub4(q[3] & 0x0f0f0f0fu, 0x08080808u));
      st16(dst + 32 * i + 16, __vsub4((q[0] >> 4) & 0x0f0f0f0fu, 0x08080808u),
           __vsub4((q[1] >> 4) & 0x0f0f0f0fu, 0x08080808u), __vsub4((q[2] >> 4) & 0x0f0f0f0fu, 0x08080808u),
           __vsub4((q[3] >> 4) & 0x0f0f0f0fu, 0x08080808u));
    }
  }
};

// MXFP4: E2M1 codes kept as doubled integers (-12..12), scale 2^(e-127)/2;
// 4 codes (low nibbles of 4 bytes) at a time by byte permutes, as the matvec.
__device__ __forceinline__ uint32_t e2m1x4(uint32_t codes) {
  return static_cast<uint32_t>(dev::mxfp4_to_int8x4(codes));
}
struct FmtMXFP4 {
  static constexpr int kSG = 32, kRaw = 20;
  static constexpr bool kMin = false, kMin16 = false;
  static __device__ __forceinline__ void load(const uint8_t* row, int kt, int h, int nb, uint32_t* r) {
    load_blocks32<17, 1, 4, 0u>(row, kt, h, nb, r);
  }
  static __device__ __forceinline__ void unpack(const uint32_t* r, int, int8_t* dst, float* sc, float*) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      sc[i] = dev::e8m0_half(r[5 * i]);  // blocks past the end: codes 0, values 0
      const uint32_t* q = r + 5 * i + 1;
      st16(dst + 32 * i, e2m1x4(q[0] & 0x0f0f0f0fu), e2m1x4(q[1] & 0x0f0f0f0fu), e2m1x4(q[2] & 0x0f0f0f0fu),
           e2m1x4(q[3] & 0x0f0f0f0fu));
      st16(dst + 32 * i + 16, e2m1x4((q[0] >> 4) & 0x0f0f0f0fu), e2m1x4((q[1] >> 4) & 0x0f0f0f0fu),
           e2m1x4((q[2] >> 4) & 0x0f0f0f0fu), e2m1x4((q[3] >> 4) & 0x0f0f0f0fu));
    }
  }
};

// Q2_K: 84-byte blocks {scales[16], qs[64], d, dmin} (layout: DecQ2K in
// quant_sub32.cuh), x = d * sc * q - dmin * m per 16-element group. The 4-bit
// scale is folded into the int8 quants (q * sc <= 45), which leaves one scale
// d per super-block, so a 32-element slice is one m16n8k32 as for Q4_K. The
// per-16 mins cannot ride in that int32 sum; the kernel subtracts
// dmin*m (kept per 16 in the scale slots) times d_x * (the group's sum of
// activation quants), those sums taken when the activation tile is staged.
struct FmtQ2K {
  static constexpr int kSG = 32, kRaw = 11;
  static constexpr bool kMin = false, kMin16 = true;
  static __device__ __forceinline__ void load(const uint8_t* row, int kt, int h, int, uint32_t* r) {
    const uint8_t* blk = row + static_cast<int64_t>(kt) * 84;
#pragma unroll
    for (int i = 0; i < 8; ++i) r[i] = dev::ld4_a2(blk + 16 + 32 * h + 4 * i);  // qs of sub-blocks 4h..4h+3
    r[8] = dev::ld4_a2(blk + 8 * h);                                           // their 8 scale bytes
    r[9] = dev::ld4_a2(blk + 8 * h + 4);
    r[10] = dev::ld4_a2(blk + 80);  // d, dmin
  }
  // sc[0]: d; mn[i]: dmin * m of the half's 16-element group i.
  static __device__ __forceinline__ void unpack(const uint32_t* r, int, int8_t* dst, float* sc, float* mn) {
    const float d = h2f(r[10]), dmin = h2f(r[10] >> 16);
    sc[0] = d;
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // sub-block 4h + j: bits 2j of each qs byte
      const uint32_t b0 = byte_of(r[8 + j / 2], 2 * (j % 2)), b1 = byte_of(r[8 + j / 2], 2 * (j % 2) + 1);
      mn[2 * j] = dmin * static_cast<float>(b0 >> 4);
      mn[2 * j + 1] = dmin * static_cast<float>(b1 >> 4);
      const uint32_t s0 = b0 & 15, s1 = b1 & 15;  // byte-wise products stay below 256: no carries
      st16(dst + 32 * j, ((r[0] >> (2 * j)) & 0x03030303u) * s0, ((r[1] >> (2 * j)) & 0x03030303u) * s0,
           ((r[2] >> (2 * j)) & 0x03030303u) * s0, ((r[3] >> (2 * j)) & 0x03030303u) * s0);
      st16(dst + 32 * j + 16, ((r[4] >> (2 * j)) & 0x03030303u) * s1, ((r[5] >> (2 * j)) & 0x03030303u) * s1,
           ((r[6] >> (2 * j)) & 0x03030303u) * s1, ((r[7] >> (2 * j)) & 0x03030303u) * s1);
    }
  }
};

// The sub-block formats (quant_sub32.cuh): load() decodes the half step's 4
// sub-blocks straight into registers (8 quant words each, then the scales
// s[0] and s[1] and the offset m[0] as float bits); sub-blocks past the
// row's end read as zero. Per-16 offsets (Q2_K) have no slot here: FmtQ2K.
template <class D>
struct FmtSub32 {
  static_assert(D::kMin != 2, "the int8 GEMM keeps one offset per 32 elements");
  static constexpr int kSG = D::kTwoScales ? 16 : 32, kRaw = 44;
  static constexpr bool kMin = D::kMin == 1, kMin16 = false;
  static constexpr int kSubs = D::kBlockElems / 32;
  static __device__ __forceinline__ void load(const uint8_t* row, int kt, int h, int nb, uint32_t* r) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int sb = kt * 8 + 4 * h + i;
      dev::Sub32 u;
      if (sb < nb) {
        D::decode(row + static_cast<int64_t>(sb / kSubs) * D::kBlockBytes, sb % kSubs, u);
      } else {
#pragma unroll
        for (int w = 0; w < 8; ++w) u.q[w] = 0;
        u.s[0] = u.s[1] = u.m[0] = u.m[1] = 0.f;
      }
#pragma unroll
      for (int w = 0; w < 8; ++w) r[8 * i + w] = static_cast<uint32_t>(u.q[w]);
      r[32 + i] = __float_as_uint(u.s[0]);
      r[36 + i] = __float_as_uint(u.s[1]);
      r[40 + i] = __float_as_uint(u.m[0]);
    }
  }
  static __device__ __forceinline__ void unpack(const uint32_t* r, int, int8_t* dst, float* sc, float* mn) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      st16(dst + 32 * i, r[8 * i], r[8 * i + 1], r[8 * i + 2], r[8 * i + 3]);
      st16(dst + 32 * i + 16, r[8 * i + 4], r[8 * i + 5], r[8 * i + 6], r[8 * i + 7]);
      if constexpr (kSG == 16) {
        sc[2 * i] = __uint_as_float(r[32 + i]);
        sc[2 * i + 1] = __uint_as_float(r[36 + i]);
      } else {
        sc[i] = __uint_as_float(r[32 + i]);
      }
      mn[i] = -__uint_as_float(r[40 + i]);  // the kernel subtracts mins (K formats' x = d*sc*q - dmin*m)
    }
  }
};

// ------------------------------------------------------------------ mma
__device__ __forceinline__ void ldsm_x4(const void* p, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(a));
}
__device__ __forceinline__ void mma_k32(const uint32_t* a, const uint32_t* b, int* d) {
#if __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
#else
  __trap();
#endif
}
__device__ __forceinline__ void mma_k16(uint32_t a0, uint32_t a1, uint32_t b0, int* d) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(a0), "r"(a1), "r"(b0), "r"(0));
#else
  __trap();
#endif
}

// Shared memory of one stage.
template <int BN, bool kMin16 = false>
struct Stage {
  static constexpr int kAq = 0;                    // int8 [BM][LDQ]
  static constexpr int kBq = kAq + BM * LDQ;       // int8 [BN][LDQ]
  // Scales are stored slot-major ([slot][row], [block][vector]) so that the
  // lanes of a warp, which read 8 consecutive rows / vectors of one slot in
  // the mma loop, hit distinct banks.
  // Per 32-element slot c: {scale, min}, or for Q6_K the two 16-element scales.
  static constexpr int kAs = kBq + BN * LDQ;       // float2 [8][BM]
  static constexpr int kBds = kAs + BM * 16 * 4;   // float2 [8][BN]
  // Per-16 mins (Q2_K): the slots of kAs hold the two mins, and the K step's
  // one weight scale is kAd; kXs has d_x * (sum of quants) of each half of a
  // 32-element activation block.
  static constexpr int kAd = kBds + BN * 8 * 8;     // float [BM]
  static constexpr int kXs = kAd + BM * 4;          // float2 [8][BN]
  static constexpr int kBytes = kMin16 ? kXs + BN * 8 * 8 : kAd;
};

template <class F, int BN>
__global__ void __launch_bounds__(kThreads, BN == 32 ? 2 : 1) gemm_q8_kernel(const Q8GemmParams p) {
  using S = Stage<BN, F::kMin16>;
  constexpr int NI = BN / 16;     // n8 tiles per warp
  constexpr int TPV = kThreads / BN;  // threads per activation row of a step
  constexpr int BV = BK / TPV;        // bytes of it per thread (BN)
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int vec_out[BN];  // each position's output vector (-1: none)
  __shared__ int vec_in[BN];   // and its input vector

  const int g = blockIdx.y;
  if (p.n_groups != nullptr && g >= __ldg(p.n_groups)) return;
  const int part = blockIdx.z % p.parts, zi = blockIdx.z / p.parts;
  const int e = dev::group_expert(p, g);
  const uint8_t* mat = dev::expert_matrix(p, part, e);
  const int2 vr = dev::group_vectors(p, g);
  const int begin = vr.x, end = vr.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * BM;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp % 4, wn = warp / 4;
  const int gq = lane / 4, tq = lane % 4;

  // this thread's weight row / half and activation slice
  const int ar = tid / 2, ah = tid % 2;
  const uint8_t* wrow = mat + min(r0 + ar, p.rows - 1) * p.row_bytes;
  const int bv = tid / TPV, bo = (tid % TPV) * BV;
  float* const y = p.y[part];
  const float* const res = p.residual[part];

  for (int c0 = begin + zi * BN; c0 < end; c0 += p.zsplit * BN) {
    const int nv = min(BN, end - c0);
    __syncthreads();  // vec_out and the stages are free
    if (tid < BN) {
      int vo = -1, vi = -1;
      if (tid < nv) {
        vo = p.list != nullptr ? __ldg(p.list + c0 + tid) : c0 + tid;
        vi = p.x_rows != nullptr ? __ldg(p.x_rows + c0 + tid) : (p.x_by_position ? c0 + tid : vo / p.x_div);
      }
      vec_out[tid] = vo;
      vec_in[tid] = vi;
    }
    __syncthreads();
    const int myv = vec_in[bv];
    const int8_t* xrow = myv >= 0 ? p.xq + static_cast<int64_t>(myv) * p.xn : nullptr;
    const float2* xdrow = nullptr;

    uint32_t ra[F::kRaw];
    uint4 rb[BV / 16];
    float2 rd[BN / 32];
    float rdx[F::kMin16 ? BV / 32 : 1];  // d_x of the blocks in rb (per-16 mins)
    auto load = [&](int kt) {
      F::load(wrow, kt, ah, p.nb32, ra);
#pragma unroll
      for (int i = 0; i < BV / 16; ++i) {
        const int64_t k = static_cast<int64_t>(kt) * BK + bo + 16 * i;
        rb[i] = (xrow != nullptr && k < p.xn) ? dev::ld16(xrow + k) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < BN / 32; ++i) {
        const int ent = tid + kThreads * i, v = ent / 8, b = ent % 8;
        const int vi = vec_in[v];
        const int kb = kt * 8 + b;
        rd[i] = (vi >= 0 && kb < p.nb32)
                    ? __ldg(p.xds + static_cast<int64_t>(vi) * (p.xn / 32) + kb)
                    : make_float2(0.f, 0.f);
      }
      if constexpr (F::kMin16) {
#pragma unroll
        for (int q = 0; q < BV / 32; ++q) {
          const int kb = kt * 8 + bo / 32 + q;
          rdx[q] = (xrow != nullptr && kb < p.nb32)
                       ? __ldg(reinterpret_cast<const float*>(p.xds + static_cast<int64_t>(myv) * (p.xn / 32) + kb))
                       : 0.f;
        }
      }
    };
    auto store = [&](int st) {
      uint8_t* s = smem + st * S::kBytes;
      float sc[8], mn[8];
      F::unpack(ra, ah, reinterpret_cast<int8_t*>(s + S::kAq + ar * LDQ + ah * 128), sc, mn);
      float2* as = reinterpret_cast<float2*>(s + S::kAs) + ar;
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // this half's slots 4 ah + i
        if constexpr (F::kSG == 16)
          as[(4 * ah + i) * BM] = make_float2(sc[2 * i], sc[2 * i + 1]);
        else if constexpr (F::kMin16)
          as[(4 * ah + i) * BM] = make_float2(mn[2 * i], mn[2 * i + 1]);
        else
          as[(4 * ah + i) * BM] = make_float2(sc[i], F::kMin ? mn[i] : 0.f);
      }
#pragma unroll
      for (int i = 0; i < BV / 16; ++i) *reinterpret_cast<uint4*>(s + S::kBq + bv * LDQ + bo + 16 * i) = rb[i];
#pragma unroll
      for (int i = 0; i < BN / 32; ++i) {
        const int ent = tid + kThreads * i;  // vector ent / 8, block ent % 8, as loaded
        reinterpret_cast<float2*>(s + S::kBds)[(ent % 8) * BN + ent / 8] = rd[i];
      }
      if constexpr (F::kMin16) {
        if (ah == 0) reinterpret_cast<float*>(s + S::kAd)[ar] = sc[0];
        constexpr int k1 = 0x01010101;  // dp4a with ones: the sum of 4 int8
#pragma unroll
        for (int q = 0; q < BV / 32; ++q) {
          const uint4 lo = rb[2 * q], hi = rb[2 * q + 1];
          const int s0 = __dp4a(static_cast<int>(lo.w), k1, __dp4a(static_cast<int>(lo.z), k1,
                         __dp4a(static_cast<int>(lo.y), k1, __dp4a(static_cast<int>(lo.x), k1, 0))));
          const int s1 = __dp4a(static_cast<int>(hi.w), k1, __dp4a(static_cast<int>(hi.z), k1,
                         __dp4a(static_cast<int>(hi.y), k1, __dp4a(static_cast<int>(hi.x), k1, 0))));
          reinterpret_cast<float2*>(s + S::kXs)[(bo / 32 + q) * BN + bv] =
              make_float2(rdx[q] * static_cast<float>(s0), rdx[q] * static_cast<float>(s1));
        }
      }
    };
    (void)xdrow;

    float acc[2][NI][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

    load(0);
    store(0);
    __syncthreads();
    for (int kt = 0; kt < p.ktiles; ++kt) {
      const bool more = kt + 1 < p.ktiles;
      if (more) load(kt + 1);
      const uint8_t* s = smem + (kt & 1) * S::kBytes;
      const int8_t* aq = reinterpret_cast<const int8_t*>(s + S::kAq);
      const int8_t* bq = reinterpret_cast<const int8_t*>(s + S::kBq);
      const float2* as = reinterpret_cast<const float2*>(s + S::kAs);
      const float2* bds = reinterpret_cast<const float2*>(s + S::kBds);
      float wd[2][2] = {};  // per-16 mins: the K step's weight scale of this lane's rows
      if constexpr (F::kMin16) {
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr)
            wd[mi][hr] = reinterpret_cast<const float*>(s + S::kAd)[wm * 32 + mi * 16 + gq + 8 * hr];
      }
#pragma unroll 2
      for (int c = 0; c < BK / 32; ++c) {
        // K not a multiple of 256 (gpt-oss: 2880): the last step's slices
        // past the row's end hold zeros; skip their tensor-core work.
        if (kt * (BK / 32) + c >= p.nb32) break;
        uint32_t a[2][4], b[NI][2];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          const int row = wm * 32 + mi * 16 + (lane % 8) + ((lane / 8) & 1) * 8;
          ldsm_x4(aq + row * LDQ + c * 32 + (lane / 16) * 16, a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
        }
#pragma unroll
        for (int ni = 0; ni < NI; ni += 2) {
          const int v = wn * (BN / 2) + ni * 8 + (lane % 8) + (lane / 16) * 8;
          ldsm_x4(bq + v * LDQ + c * 32 + ((lane / 8) & 1) * 16, b[ni][0], b[ni][1], b[ni + 1][0], b[ni + 1][1]);
        }
        // scales of this lane's rows (gq, gq+8 of each m tile) and vectors (2tq, 2tq+1 of each n tile)
        float ws[2][2][2], wmn[2][2];
        float2 wm16[2][2];  // per-16 mins: the two of this slot
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const float2 t = as[c * BM + wm * 32 + mi * 16 + gq + 8 * hr];
            ws[mi][hr][0] = F::kMin16 ? wd[mi][hr] : t.x;
            ws[mi][hr][1] = F::kSG == 16 ? t.y : 0.f;
            wmn[mi][hr] = F::kMin ? t.y : 0.f;
            wm16[mi][hr] = t;
          }
        float2 xd[NI][2], xs[NI][2];
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {  // vectors 2tq, 2tq+1: adjacent, one 16-byte load
          const float4 t = *reinterpret_cast<const float4*>(bds + c * BN + wn * (BN / 2) + ni * 8 + 2 * tq);
          xd[ni][0] = make_float2(t.x, t.y);
          xd[ni][1] = make_float2(t.z, t.w);
          if constexpr (F::kMin16) {
            const float4 u = *reinterpret_cast<const float4*>(reinterpret_cast<const float2*>(s + S::kXs) + c * BN +
                                                              wn * (BN / 2) + ni * 8 + 2 * tq);
            xs[ni][0] = make_float2(u.x, u.y);
            xs[ni][1] = make_float2(u.z, u.w);
          }
        }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) {
            if constexpr (F::kSG == 16) {
              int d0[4], d1[4];
              mma_k16(a[mi][0], a[mi][1], b[ni][0], d0);
              mma_k16(a[mi][2], a[mi][3], b[ni][1], d1);
#pragma unroll
              for (int r = 0; r < 4; ++r) {
                const int hr = r / 2, hv = r % 2;
                const float dsum = ws[mi][hr][0] * static_cast<float>(d0[r]) + ws[mi][hr][1] * static_cast<float>(d1[r]);
                acc[mi][ni][r] = fmaf(dsum, xd[ni][hv].x, acc[mi][ni][r]);
              }
            } else {
              int d[4];
              mma_k32(a[mi], b[ni], d);
#pragma unroll
              for (int r = 0; r < 4; ++r) {
                const int hr = r / 2, hv = r % 2;
                float v = fmaf(static_cast<float>(d[r]), ws[mi][hr][0] * xd[ni][hv].x, acc[mi][ni][r]);
                if constexpr (F::kMin) v = fmaf(-wmn[mi][hr], xd[ni][hv].y, v);
                if constexpr (F::kMin16) {  // sum over the two groups of -dmin*m * d_x * sum q_x
                  v = fmaf(-wm16[mi][hr].x, xs[ni][hv].x, v);
                  v = fmaf(-wm16[mi][hr].y, xs[ni][hv].y, v);
                }
                acc[mi][ni][r] = v;
              }
            }
          }
      }
      if (more) store((kt + 1) & 1);
      __syncthreads();
    }

    // epilogue: rows of 8 consecutive lanes with equal tq are contiguous (32-byte segments)
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int64_t row = r0 + wm * 32 + mi * 16 + gq + 8 * (r / 2);
          const int vl = wn * (BN / 2) + ni * 8 + 2 * tq + (r % 2);
          const int vo = vec_out[vl];
          if (row < p.rows && vo >= 0) {
            float v = acc[mi][ni][r];
            if (p.nseg > 1) {
              const int si = row < p.seg_end[0] ? 0 : (row < p.seg_end[1] ? 1 : 2);
              const int64_t first = si == 0 ? 0 : p.seg_end[si - 1];
              p.seg_y[si][static_cast<int64_t>(vo) * (p.seg_end[si] - first) + (row - first)] = v;
            } else {
              const int64_t o = static_cast<int64_t>(vo) * p.y_stride + row;
              if (res != nullptr) v += res[o];
              y[o] = v;
            }
          }
        }
  }
}

template <class F, int BN>
void launch_one(const Q8GemmParams& p, dim3 grid, cudaStream_t stream) {
  constexpr int smem = 2 * Stage<BN, F::kMin16>::kBytes;
  static bool configured = false;  // the attribute is per kernel; setting it twice is harmless
  if (!configured) {
    MS_CUDA_CHECK(cudaFuncSetAttribute(gemm_q8_kernel<F, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    configured = true;
  }
  gemm_q8_kernel<F, BN><<<grid, kThreads, smem, stream>>>(p);
}

template <class F>
void launch_fmt(const Q8GemmParams& p, int bn, dim3 grid, cudaStream_t stream) {
  if (bn == 32) launch_one<F, 32>(p, grid, stream);
  else launch_one<F, 64>(p, grid, stream);
}

}  // namespace

namespace detail {

bool gemm_q8_supported(DType t) {
  switch (t) {
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: case DType::Q8_0: case DType::Q4_0: case DType::MXFP4:
    case DType::Q2_K:
      return true;
#define MS_SUB32_CASE(T, D) case DType::T:
    MS_SUB32_BASIC_TYPES_NO_Q2K(MS_SUB32_CASE) MS_SUB32_IQ_TYPES(MS_SUB32_CASE)
#undef MS_SUB32_CASE
      return true;
    default:
      return false;
  }
}

void gemm_q8_launch(const MatrixSet* w, int parts, const Q8Act& x, const MatvecGroups& g, float* const* y,
                    int64_t y_stride, const float* const* residual, int bn, int zcap, cudaStream_t stream,
                    const RowSegments* seg, const XRows* xr) {
  const MatrixSet& w0 = w[0];
  if (!gemm_q8_supported(w0.type))
    throw Error(std::string("CUDA int8 GEMM: weight type ") + type_name(w0.type) + " is not supported");
  if (parts < 1 || parts > 2) throw Error("CUDA int8 GEMM: 1 or 2 matrices");
  for (int z = 0; z < parts; ++z) {
    if (w[z].type != w0.type || w[z].rows != w0.rows || w[z].cols != w0.cols)
      throw Error("CUDA int8 GEMM: paired matrices differ in type or shape");
    if (w[z].table == nullptr && w[z].base == nullptr) throw Error("CUDA int8 GEMM: no weights given");
  }
  if (w0.rows <= 0 || w0.cols <= 0 || w0.cols % 32 != 0)
    throw Error("CUDA int8 GEMM: cols " + std::to_string(w0.cols) + " must be a positive multiple of 32");
  if (x.q == nullptr || x.ds == nullptr || x.n != w0.cols)
    throw Error("CUDA int8 GEMM: Q8 activations of n = cols (" + std::to_string(w0.cols) + ") needed");
  if (g.max_groups <= 0 || g.max_groups > 65535 || g.per_group <= 0 || g.x_div <= 0)
    throw Error("CUDA int8 GEMM: bad group layout");
  Q8GemmParams p{};
  for (int z = 0; z < parts; ++z) {
    dev::set_matrix(p, z, w[z]);
    p.y[z] = y[z];
    p.residual[z] = residual != nullptr ? residual[z] : nullptr;
  }
  p.rows = w0.rows;
  p.row_bytes = row_bytes(w0.type, w0.cols);
  p.nb32 = static_cast<int>(w0.cols / 32);
  p.ktiles = static_cast<int>((w0.cols + BK - 1) / BK);
  dev::set_groups(p, g);
  if (xr != nullptr) {
    p.x_rows = xr->rows;
    p.x_by_position = xr->by_position ? 1 : 0;
  }
  p.xq = x.q;
  p.xds = reinterpret_cast<const float2*>(x.ds);
  p.xn = x.n;
  p.y_stride = y_stride > 0 ? y_stride : w0.rows;
  p.parts = parts;
  if (seg != nullptr && seg->n > 1) {
    if (parts != 1 || seg->n > 3) throw Error("CUDA int8 GEMM: row segments need one matrix and at most 3 segments");
    int64_t end = 0;
    for (int i = 0; i < seg->n; ++i) {
      if (seg->rows[i] <= 0 || seg->y[i] == nullptr) throw Error("CUDA int8 GEMM: empty row segment");
      end += seg->rows[i];
      p.seg_end[i] = end;
      p.seg_y[i] = seg->y[i];
    }
    for (int i = seg->n; i < 3; ++i) p.seg_end[i] = end;
    if (end != w0.rows) throw Error("CUDA int8 GEMM: row segments do not add up to the matrix's rows");
    p.nseg = seg->n;
  }
  if (bn != 32 && bn != 64) bn = (g.max_groups > 1 || g.per_group <= 32) ? 32 : 64;
  const int tiles = (g.per_group + bn - 1) / bn;
  p.zsplit = std::max(1, zcap > 0 ? std::min(zcap, tiles) : tiles);
  if (static_cast<int64_t>(p.zsplit) * parts > 65535) p.zsplit = 65535 / parts;
  const dim3 grid(static_cast<unsigned>((w0.rows + BM - 1) / BM), static_cast<unsigned>(g.max_groups),
                  static_cast<unsigned>(p.zsplit * parts));
  switch (w0.type) {
    case DType::Q4_K: launch_fmt<FmtQ4K>(p, bn, grid, stream); break;
    case DType::Q5_K: launch_fmt<FmtQ5K>(p, bn, grid, stream); break;
    case DType::Q6_K: launch_fmt<FmtQ6K>(p, bn, grid, stream); break;
    case DType::Q8_0: launch_fmt<FmtQ8_0>(p, bn, grid, stream); break;
    case DType::Q4_0: launch_fmt<FmtQ4_0>(p, bn, grid, stream); break;
    case DType::MXFP4: launch_fmt<FmtMXFP4>(p, bn, grid, stream); break;
    case DType::Q2_K: launch_fmt<FmtQ2K>(p, bn, grid, stream); break;
#define MS_SUB32_CASE(T, D) \
  case DType::T: launch_fmt<FmtSub32<dev::D>>(p, bn, grid, stream); break;
    MS_SUB32_BASIC_TYPES_NO_Q2K(MS_SUB32_CASE)
#undef MS_SUB32_CASE
#define MS_SUB32_CASE(T, D)      \
  case DType::T:                 \
    dev::iq_tables_ready(stream); \
    launch_fmt<FmtSub32<dev::D>>(p, bn, grid, stream); \
    break;
    MS_SUB32_IQ_TYPES(MS_SUB32_CASE)
#undef MS_SUB32_CASE
    default: break;
  }
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace ms::cuda
