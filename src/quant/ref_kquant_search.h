// Internal: the scale searches of the reference K-format quantizers.
//
// A K format quantizes a sub-block of 16 or 32 values with one scale (and, for
// the affine formats, one offset) and integer levels L. The naive choice sets
// the scale from the max-abs (or min..max) value; the search below tries a
// range of candidate scales around it, re-fits scale and offset by weighted
// least squares for the levels each candidate gives, and keeps the fit of
// least weighted squared error. Weights w may be nullptr (all 1).
#pragma once
#include <cstdint>

namespace ms::ref {

// x ~= scale * L - offset with L in 0..nmax, scale >= 0, offset >= 0
// (the offset is what the formats store as a non-negative "min").
struct AffineFit {
  float scale = 0;
  float offset = 0;
};
AffineFit fit_affine(const float* x, const float* w, int n, int nmax, bool search);

// x ~= scale * L with L in -nneg..npos; the scale may be negative, so that the
// largest-magnitude value can use the longer side of an asymmetric range.
float fit_symmetric(const float* x, const float* w, int n, int nneg, int npos, bool search);

// Levels for a given (dequantized) scale/offset: clamp(round((x+offset)/scale)).
// A zero scale gives level lo (affine) or 0 (symmetric).
void levels_affine(const float* x, int n, float scale, float offset, int nmax, int8_t* L);
void levels_symmetric(const float* x, int n, float scale, int nneg, int npos, int8_t* L);

// Second level: quantizes per-sub-block values v[0..count) (all >= 0) to
// integers 0..qmax against one super-block factor d = max(v)/qmax, which is
// rounded to f16 first (as stored); q[i] = clamp(round(v[i]/d)). Returns the
// f16 bits of d.
uint16_t quantize_unsigned_scales(const float* v, int count, int qmax, uint8_t* q);
// Same for signed values to -qneg..qpos: the value of largest magnitude maps to
// -qneg (d takes its sign). Returns the f16 bits of d.
uint16_t quantize_signed_scales(const float* v, int count, int qneg, int qpos, int* q);

// Round half to even (the rounding of SIMD conversions in the default mode).
int round_even(float v);

}  // namespace ms::ref
