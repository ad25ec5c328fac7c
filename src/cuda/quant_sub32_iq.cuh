// The IQ formats as sub-block decoders (the form of quant_sub32.cuh): IQ4_NL,
// IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M. Layouts and
// equations as quant/blocks.h; grids, signs and levels from quant/iq_grids.h,
// copied into a device table of this file (see quant_tables.h).
//
// Grid magnitudes are small integers ({8, 25, 43}, 4..62, 1..15), so a group
// of 8 decodes to int8 quants with its signs applied; IQ1's shift of
// +-1/8 is folded in as q = 8 * grid +- 1 with the scale divided by 8 (exact).
#pragma once
#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>
#include <string>

#include "cuda/device.h"
#include "cuda/quant_sub32.cuh"
#include "cuda/quant_tables.h"
#include "quant/iq_grids.h"
#include "util/error.h"

namespace ms::cuda::dev {

struct IQTables {
  uint64_t iq2xxs[kIQ2XXSGridSize];
  uint64_t iq2xs[kIQ2XSGridSize];
  uint64_t iq2s[kIQ2SGridSize];
  uint64_t iq1s[kIQ1SGridSize];
  uint32_t iq3xxs[kIQ3XXSGridSize];
  uint32_t iq3s[kIQ3SGridSize];
  uint32_t iq4nl[4];  // the 16 int8 levels, 4 to a word
  uint8_t signs[128];
};

namespace {
// This translation unit's copy (static: no relocatable device code).
__device__ IQTables g_iq_tables;

// Host side: upload once per device.
std::mutex g_iq_upload_mutex;
uint64_t g_iq_uploaded = 0;  // bit per device ordinal (< 64)

void iq_tables_upload() {
  int dev = 0;
  MS_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = dev < 64 ? (uint64_t{1} << dev) : 0;
  std::lock_guard<std::mutex> lock(g_iq_upload_mutex);
  if (g_iq_uploaded & bit) return;
  static IQTables h;  // host image
  std::memcpy(h.iq2xxs, kIQ2XXSGrid, sizeof h.iq2xxs);
  std::memcpy(h.iq2xs, kIQ2XSGrid, sizeof h.iq2xs);
  std::memcpy(h.iq2s, kIQ2SGrid, sizeof h.iq2s);
  std::memcpy(h.iq1s, kIQ1SGrid, sizeof h.iq1s);
  std::memcpy(h.iq3xxs, kIQ3XXSGrid, sizeof h.iq3xxs);
  std::memcpy(h.iq3s, kIQ3SGrid, sizeof h.iq3s);
  std::memcpy(h.iq4nl, kIQ4NLValues, sizeof h.iq4nl);
  std::memcpy(h.signs, kIQ2Signs, sizeof h.signs);
  // A private stream and a wait on it: a copy from pageable memory may still
  // be in flight when cudaMemcpyToSymbol returns.
  cudaStream_t s = nullptr;
  MS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // The C API by the symbol's (host shadow) address; the cast keeps nvcc's
  // template overload, which would take the address of a temporary, out.
  const void* symbol = static_cast<const void*>(&g_iq_tables);
  const cudaError_t e = cudaMemcpyToSymbolAsync(symbol, &h, sizeof h, 0, cudaMemcpyHostToDevice, s);
  if (e == cudaErrorInvalidSymbol) {
    // No kernel of this file reads the tables (it includes the header for
    // other formats), so the compiler dropped its copy: nothing to fill.
    (void)cudaGetLastError();  // clears the error this call recorded
  } else {
    MS_CUDA_CHECK(e);
  }
  MS_CUDA_CHECK(cudaStreamSynchronize(s));
  MS_CUDA_CHECK(cudaStreamDestroy(s));
  g_iq_uploaded |= bit;
}
[[maybe_unused]] const bool g_iq_registered = ::ms::cuda::detail::register_table_uploader(&iq_tables_upload);

// Launchers of IQ kernels call this first.
[[maybe_unused]] void iq_tables_ready(cudaStream_t stream) {
  int dev = 0;
  MS_CUDA_CHECK(cudaGetDevice(&dev));
  {
    std::lock_guard<std::mutex> lock(g_iq_upload_mutex);
    if (dev < 64 && (g_iq_uploaded & (uint64_t{1} << dev))) return;
  }
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  MS_CUDA_CHECK(cudaStreamIsCapturing(stream, &st));
  if (st != cudaStreamCaptureStatusNone)
    throw Error("CUDA IQ kernels: lookup tables not on the device yet; call cuda::prepare_quant_tables() "
                "before capturing a graph");
  iq_tables_upload();
}
}  // namespace

// Byte mask (0xff where set) of the low 4 bits of x, one bit per byte.
__device__ __forceinline__ uint32_t bits_to_bytes(uint32_t x) {
  return (((x & 15u) * 0x00204081u) & 0x01010101u) * 0xffu;
}
// Negates the int8 lanes of g whose byte of mask m is 0xff.
__device__ __forceinline__ uint32_t apply_signs(uint32_t g, uint32_t m) { return __vsub4(g ^ m, m); }
// 8 grid magnitudes (two words) with the 8 sign bits of `sgn`.
__device__ __forceinline__ void signed8(uint64_t g, uint32_t sgn, int* q) {
  q[0] = static_cast<int>(apply_signs(static_cast<uint32_t>(g), bits_to_bytes(sgn)));
  q[1] = static_cast<int>(apply_signs(static_cast<uint32_t>(g >> 32), bits_to_bytes(sgn >> 4)));
}
__device__ __forceinline__ uint32_t sign_byte(uint32_t idx7) { return __ldg(g_iq_tables.signs + (idx7 & 127u)); }

// ---------------------------------------------------------------- IQ4_NL / IQ4_XS
// 4 nibbles (low nibbles of the bytes of nib) -> their int8 levels.
__device__ __forceinline__ int iq4_levels(uint32_t nib) {
  const uint32_t t0 = __ldg(g_iq_tables.iq4nl), t1 = __ldg(g_iq_tables.iq4nl + 1);
  const uint32_t t2 = __ldg(g_iq_tables.iq4nl + 2), t3 = __ldg(g_iq_tables.iq4nl + 3);
  const uint32_t v = nib & 0x07070707u;  // index within a half of the table
  const uint32_t sel = ((v | (v >> 4)) & 0xffu) | ((((v >> 16) | (v >> 20)) & 0xffu) << 8);
  const uint32_t lo = __byte_perm(t0, t1, sel), hi = __byte_perm(t2, t3, sel);
  const uint32_t upper = ((nib >> 3) & 0x01010101u) * 0xffu;
  return static_cast<int>((lo & ~upper) | (hi & upper));
}
// 16 bytes of nibbles: low nibbles elements 0..15, high nibbles 16..31.
__device__ __forceinline__ void iq4_nibbles(const uint8_t* qs, Sub32& u) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t w = ld4_a2(qs + 4 * i);
    u.q[i] = iq4_levels(w & 0x0f0f0f0fu);
    u.q[4 + i] = iq4_levels((w >> 4) & 0x0f0f0f0fu);
  }
}

// {d, qs[16]}: x = d * level[nibble].
struct DecIQ4_NL {
  static constexpr int kBlockElems = 32, kBlockBytes = 18, kMin = 0;
  static constexpr bool kTwoScales = false;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int, Sub32& u) {
    iq4_nibbles(blk + 2, u);
    u.s[0] = u.s[1] = f16_bits_to_f32(ld2(blk));
    u.m[0] = u.m[1] = 0.f;
  }
};

// {d, scales_h, scales_l[4], qs[128]}: 6-bit scale of sub-block j = nibble
// (j % 2) of scales_l[j / 2] | ((scales_h >> 2j) & 3) << 4; x = d * (scale - 32) * level.
// Blocks of 136 bytes in rows of whole blocks from a 16-byte aligned matrix:
// every block, and so its 8-byte header and each sub-block's 16 bytes of
// nibbles (at 8 + 16j), is 8-byte aligned, so three 8-byte loads fetch an
// item (the 2-byte-aligned reads of the other formats took twelve).
struct DecIQ4_XS {
  static constexpr int kBlockElems = 256, kBlockBytes = 136, kMin = 0;
  static constexpr bool kTwoScales = false;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int j, Sub32& u) {
    const uint2 hdr = __ldg(reinterpret_cast<const uint2*>(blk));  // d, scales_h, scales_l[4]
    const uint2 lo = __ldg(reinterpret_cast<const uint2*>(blk + 8 + 16 * j));
    const uint2 hi = __ldg(reinterpret_cast<const uint2*>(blk + 16 + 16 * j));
    const uint32_t w[4] = {lo.x, lo.y, hi.x, hi.y};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      u.q[i] = iq4_levels(w[i] & 0x0f0f0f0fu);
      u.q[4 + i] = iq4_levels((w[i] >> 4) & 0x0f0f0f0fu);
    }
    const uint32_t sl = (hdr.y >> (8 * (j / 2))) & 0xffu, sh = hdr.x >> 16;
    const uint32_t ls = ((sl >> (4 * (j % 2))) & 15u) | (((sh >> (2 * j)) & 3u) << 4);
    u.s[0] = u.s[1] = f16_bits_to_f32(hdr.x & 0xffffu) * static_cast<float>(static_cast<int>(ls) - 32);
    u.m[0] = u.m[1] = 0.f;
  }
};

// ---------------------------------------------------------------- IQ2
// IQ2_XXS {d, qs u16[32]}: sub-block j has words a, b (bytes 2+8j, 6+8j);
// group l: grid entry (byte l of a), signs sign_byte(b >> 7l);
// x = d * (0.5 + (b >> 28)) / 4 * grid * sign.
struct DecIQ2_XXS {
  static constexpr int kBlockElems = 256, kBlockBytes = 66, kMin = 0;
  static constexpr bool kTwoScales = false;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int j, Sub32& u) {
    const uint32_t a = ld4_a2(blk + 2 + 8 * j), b = ld4_a2(blk + 6 + 8 * j);
#pragma unroll
    for (int l = 0; l < 4; ++l)
      signed8(__ldg(g_iq_tables.iq2xxs + ((a >> (8 * l)) & 0xffu)), sign_byte(b >> (7 * l)), u.q + 2 * l);
    u.s[0] = u.s[1] = f16_bits_to_f32(ld2(blk)) * (0.5f + static_cast<float>(b >> 28)) * 0.25f;
    u.m[0] = u.m[1] = 0.f;
  }
};

// IQ2_XS {d, qs u16[32], scales[8]}: qs[4j + l] = 9-bit grid index | sign
// index << 9; groups 0,1 scale low nibble of scales[j], 2,3 high nibble.
struct DecIQ2_XS {
  static constexpr int kBlockElems = 256, kBlockBytes = 74, kMin = 0;
  static constexpr bool kTwoScales = true;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int j, Sub32& u) {
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t v = ld2(blk + 2 + 8 * j + 2 * l);
      signed8(__ldg(g_iq_tables.iq2xs + (v & 511u)), sign_byte(v >> 9), u.q + 2 * l);
    }
    const float d = f16_bits_to_f32(ld2(blk));
    const uint32_t sc = u8at(blk + 66 + j);
    u.s[0] = d * (0.5f + static_cast<float>(sc & 15u)) * 0.25f;
    u.s[1] = d * (0.5f + static_cast<float>(sc >> 4)) * 0.25f;
    u.m[0] = u.m[1] = 0.f;
  }
};

// IQ2_S {d, qs[64], qh[8], scales[8]}: grid index qs[4j + l] | ((qh[j] >> 2l)
// & 3) << 8, plain sign byte qs[32 + 4j + l]; scales as IQ2_XS.
struct DecIQ2_S {
  static constexpr int kBlockElems = 256, kBlockBytes = 82, kMin = 0;
  static constexpr bool kTwoScales = true;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int j, Sub32& u) {
    const uint32_t idx = ld4_a2(blk + 2 + 4 * j), sgn = ld4_a2(blk + 34 + 4 * j), qh = u8at(blk + 66 + j);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t g = ((idx >> (8 * l)) & 0xffu) | (((qh >> (2 * l)) & 3u) << 8);
      signed8(__ldg(g_iq_tables.iq2s + g), sgn >> (8 * l), u.q + 2 * l);
    }
    const float d = f16_bits_to_f32(ld2(blk));
    const uint32_t sc = u8at(blk + 74 + j);
    u.s[0] = d * (0.5f + static_cast<float>(sc & 15u)) * 0.25f;
    u.s[1] = d * (0.5f + static_cast<float>(sc >> 4)) * 0.25f;
    u.m[0] = u.m[1] = 0.f;
  }
};

// ---------------------------------------------------------------- IQ3
// IQ3_XXS {d, qs[96]}: grid indices qs[8j .. 8j+7] (4 elements each), sign
// word w at qs[64 + 4j]; group l (entries 2l, 2l+1) signs sign_byte(w >> 7l);
// x = d * (0.5 + w >> 28) / 2 * grid * sign.
struct DecIQ3_XXS {
  static constexpr int kBlockElems = 256, kBlockBytes = 98, kMin = 0;
  static constexpr bool kTwoScales = false;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int j, Sub32& u) {
    const uint32_t i0 = ld4_a2(blk + 2 + 8 * j), i1 = ld4_a2(blk + 6 + 8 * j), w = ld4_a2(blk + 66 + 4 * j);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t iw = l < 2 ? i0 : i1, sh = 16 * (l & 1);
      const uint32_t ga = __ldg(g_iq_tables.iq3xxs + ((iw >> sh) & 0xffu));
      const uint32_t gb = __ldg(g_iq_tables.iq3xxs + ((iw >> (sh + 8)) & 0xffu));
      signed8(static_cast<uint64_t>(ga) | (static_cast<uint64_t>(gb) << 32), sign_byte(w >> (7 * l)), u.q + 2 * l);
    }
    u.s[0] = u.s[1] = f16_bits_to_f32(ld2(blk)) * (0.5f + static_cast<float>(w >> 28)) * 0.5f;
    u.m[0] = u.m[1] = 0.f;
  }
};

// IQ3_S {d, qs[64], qh[8], signs[32], scales[4]}: grid index k of sub-block
// j = qs[8j + k] | bit k of qh[j] << 8; plain sign byte signs[4j + l] for
// entries 2l, 2l+1; x = d * (1 + 2 * nibble (j%2) of scales[j/2]) * grid * sign.
struct DecIQ3_S {
  static constexpr int kBlockElems = 256, kBlockBytes = 110, kMin = 0;
  static constexpr bool kTwoScales = false;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int j, Sub32& u) {
    const uint32_t i0 = ld4_a2(blk + 2 + 8 * j), i1 = ld4_a2(blk + 6 + 8 * j), qh = u8at(blk + 66 + j);
    const uint32_t sgn = ld4_a2(blk + 74 + 4 * j);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t iw = l < 2 ? i0 : i1, sh = 16 * (l & 1);
      const uint32_t ka = 2 * l, kb = 2 * l + 1;
      const uint32_t ga = __ldg(g_iq_tables.iq3s + (((iw >> sh) & 0xffu) | (((qh >> ka) & 1u) << 8)));
      const uint32_t gb = __ldg(g_iq_tables.iq3s + (((iw >> (sh + 8)) & 0xffu) | (((qh >> kb) & 1u) << 8)));
      signed8(static_cast<uint64_t>(ga) | (static_cast<uint64_t>(gb) << 32), sgn >> (8 * l), u.q + 2 * l);
    }
    const uint32_t sc = (u8at(blk + 106 + j / 2) >> (4 * (j % 2))) & 15u;
    u.s[0] = u.s[1] = f16_bits_to_f32(ld2(blk)) * static_cast<float>(1 + 2 * sc);
    u.m[0] = u.m[1] = 0.f;
  }
};

// ---------------------------------------------------------------- IQ1
// 8 int8 grid values (-1, 0, 1) as 8 * value + shift (shift +-1, i.e. the
// +-1/8 of the format times 8).
__device__ __forceinline__ void iq1_group(uint64_t g, bool minus, int* q) {
  const uint32_t sh = minus ? 0xffffffffu : 0x01010101u;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t w = static_cast<uint32_t>(g >> (32 * h));
    const uint32_t mag = (w & 0x01010101u) << 3;         // 8 where the value is +-1
    const uint32_t neg = ((w >> 7) & 0x01010101u) * 0xffu;  // -1 lanes
    q[h] = static_cast<int>(__vadd4(apply_signs(mag, neg), sh));
  }
}

// IQ1_S {d, qs[32], qh u16[8]}: group l of sub-block j: grid index
// qs[4j + l] | ((qh[j] >> 3l) & 7) << 8; x = d * (2 * ((qh[j] >> 12) & 7) + 1)
// * (grid + (qh[j] bit 15 ? -1/8 : 1/8)).
struct DecIQ1_S {
  static constexpr int kBlockElems = 256, kBlockBytes = 50, kMin = 0;
  static constexpr bool kTwoScales = false;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int j, Sub32& u) {
    const uint32_t idx = ld4_a2(blk + 2 + 4 * j), qh = ld2(blk + 34 + 2 * j);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t g = ((idx >> (8 * l)) & 0xffu) | (((qh >> (3 * l)) & 7u) << 8);
      iq1_group(__ldg(g_iq_tables.iq1s + g), (qh & 0x8000u) != 0, u.q + 2 * l);
    }
    u.s[0] = u.s[1] = f16_bits_to_f32(ld2(blk)) * static_cast<float>(2 * ((qh >> 12) & 7u) + 1) * 0.125f;
    u.m[0] = u.m[1] = 0.f;
  }
};

// IQ1_M {qs[32], qh[16], scales[8]}: the f16 block scale is the top nibbles
// of the 4 u16 scale words; group l of sub-block j: index qs[4j + l] | (nibble
// & 7) << 8 with nibble (l % 2) of qh[2j + l/2], whose bit 3 negates the
// shift; 3-bit scales of groups 0,1 / 2,3 at bits 6(j%2) / 6(j%2)+3 of word j/2.
struct DecIQ1_M {
  static constexpr int kBlockElems = 256, kBlockBytes = 56, kMin = 0;
  static constexpr bool kTwoScales = true;
  static __device__ __forceinline__ void decode(const uint8_t* blk, int j, Sub32& u) {
    const uint32_t idx = ld4_a2(blk + 4 * j), qh = ld2(blk + 32 + 2 * j);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t nib = (qh >> (4 * l)) & 15u;  // byte l/2, nibble l%2
      const uint32_t g = ((idx >> (8 * l)) & 0xffu) | ((nib & 7u) << 8);
      iq1_group(__ldg(g_iq_tables.iq1s + g), (nib & 8u) != 0, u.q + 2 * l);
    }
    const uint32_t s0 = ld2(blk + 48), s1 = ld2(blk + 50), s2 = ld2(blk + 52), s3 = ld2(blk + 54);
    const uint32_t dbits = (s0 >> 12) | ((s1 >> 8) & 0xf0u) | ((s2 >> 4) & 0xf00u) | (s3 & 0xf000u);
    const float d = f16_bits_to_f32(dbits) * 0.125f;
    const uint32_t sw = ld2(blk + 48 + 2 * (j / 2)), sh = 6 * (j % 2);
    u.s[0] = d * static_cast<float>(2 * ((sw >> sh) & 7u) + 1);
    u.s[1] = d * static_cast<float>(2 * ((sw >> (sh + 3)) & 7u) + 1);
    u.m[0] = u.m[1] = 0.f;
  }
};

}  // namespace ms::cuda::dev
