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

// ---------------------------------------------------------------- ternary
// TQ1_0: 256 values in {-1, 0, +1} (x = d * (t - 1), t in 0..2), base-3 packed
// 5 per byte (qs) or 4 per byte (qh). A byte b holds digits as a fixed-point
// fraction: digit k of b is ((uint8_t)(b * 3^k) * 3) >> 8. Element order:
// qs[0..31] digit k -> elements 32k + m (k < 5: elements 0..159);
// qs[32..47] digit k -> elements 160 + 16k + m (160..239);
// qh[0..3] digit k (k < 4) -> elements 240 + 4k + m.
struct BlockTQ1_0 { uint8_t qs[48]; uint8_t qh[4]; uint16_t d; };
// TQ2_0: x = d * (t - 1), t = 2-bit field; qs[32h + m] bits 2l..2l+1 hold
// element 128h + 32l + m.
struct BlockTQ2_0 { uint8_t qs[QK_K / 4]; uint16_t d; };

// ---------------------------------------------------------------- IQ formats
// Grids, sign table and levels: iq_grids.h. "Sign index" s (7 bits) -> sign
// byte kIQ2Signs[s]; bit j of a sign byte set = element j of its group of 8 is
// negated. Sub-blocks of 32 are numbered ib = 0..7 within a block.

// IQ2_XXS: per sub-block ib two u32 words a = qs[4ib..4ib+1], b =
// qs[4ib+2..4ib+3] (little-endian u16 pairs). Group l (0..3) of 8: grid entry
// kIQ2XXSGrid[byte l of a], signs kIQ2Signs[(b >> 7l) & 127];
// x = d * (0.5 + (b >> 28)) * 0.25 * grid * sign.
struct BlockIQ2_XXS { uint16_t d; uint16_t qs[QK_K / 8]; };
// IQ2_XS: qs[4ib + l] = 9-bit grid index (kIQ2XSGrid) | 7-bit sign index << 9;
// scale of groups l = 0,1: low nibble of scales[ib], l = 2,3: high nibble;
// x = d * (0.5 + nibble) * 0.25 * grid * sign.
struct BlockIQ2_XS { uint16_t d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; };
// IQ2_S: qs[0..31] low 8 bits of the grid indices (group 4ib + l), qs[32..63]
// the groups' sign bytes (plain, not indices); grid index = qs[4ib + l] |
// ((qh[ib] >> 2l) & 3) << 8 into kIQ2SGrid; scales as IQ2_XS.
struct BlockIQ2_S { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; };
// IQ3_XXS: qs[0..63] grid indices (kIQ3XXSGrid, 4 elements each; sub-block ib
// uses qs[8ib..8ib+7]), then 8 u32 words w (bytes 64..95): group l of 8 has
// signs kIQ2Signs[(w >> 7l) & 127]; x = d * (0.5 + (w >> 28)) * 0.5 * grid * sign.
struct BlockIQ3_XXS { uint16_t d; uint8_t qs[3 * QK_K / 8]; };
// IQ3_S: grid index k (0..63) = qs[k] | bit (k % 8) of qh[k / 8] << 8 into
// kIQ3SGrid (4 elements); signs[4ib + l] plain sign byte of group l;
// sub-block ib scale: nibble (ib % 2) of scales[ib / 2]; x = d * (1 + 2*nibble) * grid * sign.
struct BlockIQ3_S { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t signs[QK_K / 8]; uint8_t scales[QK_K / 64]; };
// IQ1_S: group 4ib + l: grid index qs[4ib + l] | ((qh[ib] >> 3l) & 7) << 8
// into kIQ1SGrid (int8 -1/0/+1); x = d * (2 * ((qh[ib] >> 12) & 7) + 1) *
// (grid + delta), delta = -kIQ1Delta if qh[ib] bit 15 else +kIQ1Delta.
struct BlockIQ1_S { uint16_t d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; };
// IQ1_M: no d field: the f16 super-block scale is the top nibbles of the 4
// u16 words sc of scales (bits 12..15 of sc[0] -> bits 0..3, ..., sc[3] ->
// bits 12..15). Group g = 4ib + l: index qs[g] | ((qh[2ib + l/2] >> 4(l%2)) & 7) << 8,
// delta sign from bit 3 of that nibble; 3-bit scale of groups 0,1 of ib:
// (sc[ib/2] >> 6(ib%2)) & 7, groups 2,3: >> 6(ib%2)+3; x = d * (2s + 1) * (grid + delta).
struct BlockIQ1_M { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; };
// IQ4_NL: as Q4_0 but x = d * kIQ4NLValues[nibble].
struct BlockIQ4_NL { uint16_t d; uint8_t qs[QK / 2]; };
// IQ4_XS: 8 sub-blocks of 32 laid out as IQ4_NL's nibbles; 6-bit scale of ib:
// nibble (ib % 2) of scales_l[ib / 2] | ((scales_h >> 2ib) & 3) << 4;
// x = d * (scale - 32) * kIQ4NLValues[nibble].
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockTQ1_0) == 54 && sizeof(BlockTQ2_0) == 66);
static_assert(sizeof(BlockIQ2_XXS) == 66 && sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98 && sizeof(BlockIQ3_S) == 110);
static_assert(sizeof(BlockIQ1_S) == 50 && sizeof(BlockIQ1_M) == 56);
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136);

}  // namespace ms
