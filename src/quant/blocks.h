// Block layouts of the quantized formats, byte-for-byte as GGUF files store
// them (the layouts are facts of the file format: a file written by another
// tool must decode to the same numbers). All multi-byte fields little-endian.
// `f16` fields are IEEE half floats stored as raw uint16_t.
#pragma once
#include <cstdint>

namespace ms {

constexpr int QK = 32;     // elements per block of the 32-wide formats
constexpr int QK_K = 256;  // elements per super-block of the K formats
constexpr int K_SCALE_SIZE = 12;

// Q4_0: x = d * (q - 8), q in 0..15. qs[j] low nibble = element j, high = j+16.
struct BlockQ4_0 { uint16_t d; uint8_t qs[QK / 2]; };
// Q4_1: x = d * q + m.
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[QK / 2]; };
// Q5_0: 5th bit of element j in bit j of qh (little-endian u32); x = d * (q - 16).
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK / 2]; };
// Q5_1: x = d * q + m.
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[QK / 2]; };
// Q8_0: x = d * q.
struct BlockQ8_0 { uint16_t d; int8_t qs[QK]; };
// Q8_1 (activations): x = d * q; s = d * sum(q), kept for the Q4_1/Q5_1 dots.
struct BlockQ8_1 { uint16_t d; uint16_t s; int8_t qs[QK]; };

// Q2_K: 16 sub-blocks of 16; scales[i] low nibble = scale, high = min;
// x = d * sc * q - dmin * m, q in 0..3.
struct BlockQ2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d; uint16_t dmin; };
// Q3_K: 16 sub-blocks of 16 with 6-bit signed scales (offset 32) packed in 12
// bytes; low 2 bits in qs, high bit in hmask (set = no -4 offset).
struct BlockQ3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; };
// Q4_K: 8 sub-blocks of 32, 6-bit scales and mins packed in 12 bytes;
// x = d * sc * q - dmin * m.
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
// Q5_K: as Q4_K plus a 5th bit per element in qh.
struct BlockQ5_K { uint16_t d; uint16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
// Q6_K: 16 sub-blocks of 16 with int8 scales; x = d * sc * (q - 32).
struct BlockQ6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };
// Q8_K (activations): float scale, and sums of each 16 quants for the K dots.
struct BlockQ8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };
// MXFP4 (OCP microscaling): e is an E8M0 exponent (scale 2^(e-127)); each
// nibble an E2M1 value. qs[j] low nibble = element j, high = j+16.
struct BlockMXFP4 { uint8_t e; uint8_t qs[QK / 2]; };

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockMXFP4) == 17);

}  // namespace ms
