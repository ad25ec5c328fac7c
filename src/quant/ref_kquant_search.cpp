// Scale searches of the reference K-format quantizers (see ref_kquant_search.h).
#include "quant/ref_kquant_search.h"

#include <algorithm>
#include <cmath>

#include "quant/half.h"

namespace ms::ref {
namespace {

inline float weight(const float* w, int i) { return w ? w[i] : 1.0f; }

// Candidate scales are spread over +-1 level around the max-abs one (where the
// largest value lands exactly on the last level), in tenths of a level: wide
// enough to let a 2- or 3-bit format trade clipping against resolution, fine
// enough to matter for 6 bits. Then a few rounds of "assign levels, re-fit".
constexpr int kSteps = 10;
constexpr int kRefineRounds = 3;

struct Sums {
  double sw = 0, sl = 0, sll = 0, sx = 0, slx = 0, sxx = 0;
};

Sums sums_for(const float* x, const float* w, const int8_t* L, int n) {
  Sums s;
  for (int i = 0; i < n; ++i) {
    const double wi = weight(w, i), l = L[i], xi = x[i];
    s.sw += wi;
    s.sl += wi * l;
    s.sll += wi * l * l;
    s.sx += wi * xi;
    s.slx += wi * l * xi;
    s.sxx += wi * xi * xi;
  }
  return s;
}

double affine_error(const float* x, const float* w, const int8_t* L, int n, AffineFit f) {
  double e = 0;
  for (int i = 0; i < n; ++i) {
    const double d = static_cast<double>(f.scale) * L[i] - f.offset - x[i];
    e += weight(w, i) * d * d;
  }
  return e;
}

// Least-squares scale and offset for fixed levels, with scale >= 0 and
// offset >= 0. False when the levels do not determine a usable fit.
bool refit_affine(const Sums& s, AffineFit* out) {
  if (s.sll <= 0) return false;  // all levels zero: the scale is free
  const double det = s.sw * s.sll - s.sl * s.sl;
  double scale, bias;  // x ~= scale*L + bias, bias = -offset
  if (det > 1e-12 * s.sw * s.sll) {
    scale = (s.sw * s.slx - s.sl * s.sx) / det;
    bias = (s.sll * s.sx - s.sl * s.slx) / det;
  } else {
    scale = s.slx / s.sll;
    bias = 0;
  }
  if (bias > 0) {  // the formats cannot add a positive offset
    bias = 0;
    scale = s.slx / s.sll;
  }
  if (!(scale >= 0) || !std::isfinite(scale) || !std::isfinite(bias)) return false;
  out->scale = static_cast<float>(scale);
  out->offset = static_cast<float>(-bias);
  return true;
}

}  // namespace

int round_even(float v) {
  if (!(v == v)) return 0;                // NaN: level 0 rather than undefined behaviour
  v = std::clamp(v, -1.0e9f, 1.0e9f);     // callers clamp to the level range anyway
  return static_cast<int>(std::nearbyint(v));
}

void levels_affine(const float* x, int n, float scale, float offset, int nmax, int8_t* L) {
  const float inv = scale > 0 ? 1.0f / scale : 0.0f;
  for (int i = 0; i < n; ++i) {
    const float v = (x[i] + offset) * inv;
    L[i] = static_cast<int8_t>(std::clamp(round_even(std::isfinite(v) ? v : 0.0f), 0, nmax));
  }
}

void levels_symmetric(const float* x, int n, float scale, int nneg, int npos, int8_t* L) {
  const float inv = scale != 0 ? 1.0f / scale : 0.0f;
  for (int i = 0; i < n; ++i) {
    const float v = x[i] * inv;
    L[i] = static_cast<int8_t>(std::clamp(round_even(std::isfinite(v) ? v : 0.0f), -nneg, npos));
  }
}

AffineFit fit_affine(const float* x, const float* w, int n, int nmax, bool search) {
  float lo = 0, hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (!(hi > lo)) return {0.0f, -lo};  // constant block (<= 0): the offset alone
  AffineFit best{(hi - lo) / nmax, -lo};
  if (!search) return best;

  int8_t L[64];
  levels_affine(x, n, best.scale, best.offset, nmax, L);
  double best_err = affine_error(x, w, L, n, best);
  auto consider = [&](const AffineFit& f) {
    levels_affine(x, n, f.scale, f.offset, nmax, L);
    AffineFit g;
    if (!refit_affine(sums_for(x, w, L, n), &g)) return false;
    const double e = affine_error(x, w, L, n, g);
    if (e < best_err) {
      best_err = e;
      best = g;
      return true;
    }
    return false;
  };
  for (int k = -kSteps; k <= kSteps; ++k) {
    const float target = nmax + static_cast<float>(k) / kSteps;  // level of hi
    if (target <= 0) continue;
    consider({(hi - lo) / target, -lo});
  }
  for (int r = 0; r < kRefineRounds; ++r)
    if (!consider(best)) break;
  return best;
}

float fit_symmetric(const float* x, const float* w, int n, int nneg, int npos, bool search) {
  float vmax = 0;  // the value of largest magnitude, with its sign
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(vmax)) vmax = x[i];
  if (vmax == 0) return 0.0f;
  float best = vmax / -static_cast<float>(nneg);  // naive: vmax on level -nneg
  if (!search) return best;

  int8_t L[64];
  auto error_of = [&](float scale) {
    double e = 0;
    for (int i = 0; i < n; ++i) {
      const double d = static_cast<double>(scale) * L[i] - x[i];
      e += weight(w, i) * d * d;
    }
    return e;
  };
  levels_symmetric(x, n, best, nneg, npos, L);
  double best_err = error_of(best);
  auto consider = [&](float scale) {
    levels_symmetric(x, n, scale, nneg, npos, L);
    const Sums s = sums_for(x, w, L, n);
    if (s.sll <= 0) return false;
    const float fitted = static_cast<float>(s.slx / s.sll);
    const double e = error_of(fitted);
    if (e < best_err && std::isfinite(fitted)) {
      best_err = e;
      best = fitted;
      return true;
    }
    return false;
  };
  // vmax on the negative side (level -nneg +- 1) and on the positive side.
  for (int k = -kSteps; k <= kSteps; ++k) {
    const float dk = static_cast<float>(k) / kSteps;
    consider(vmax / -(nneg + dk));
    if (npos + dk > 0) consider(vmax / (npos + dk));
  }
  for (int r = 0; r < kRefineRounds; ++r)
    if (!consider(best)) break;
  return best;
}

namespace {
// f16 bits of the super-block factor v = vmax/qmax (signed), rounded so that
// |vmax/d| <= qmax still holds: plain rounding may lower |d| below v, and then
// the largest sub-block scale would be clipped (which matters where d is an
// f16 subnormal, 2^-24 steps: small weights). Saturates at the largest half.
uint16_t factor_to_f16(float v, float vmax, int qmax) {
  const float lim = 65504.0f;
  uint16_t h = f32_to_f16(std::clamp(v, -lim, lim));
  const float d = f16_to_f32(h);
  if (d != 0 && (h & 0x7fff) < 0x7bff && std::fabs(vmax / d) > static_cast<float>(qmax))
    ++h;  // one half-ulp step away from zero (sign-magnitude encoding)
  return h;
}
}  // namespace

uint16_t quantize_unsigned_scales(const float* v, int count, int qmax, uint8_t* q) {
  float vmax = 0;
  for (int i = 0; i < count; ++i) vmax = std::max(vmax, v[i]);
  const uint16_t dh = factor_to_f16(vmax / qmax, vmax, qmax);
  const float d = f16_to_f32(dh);
  const float inv = d > 0 ? 1.0f / d : 0.0f;
  for (int i = 0; i < count; ++i) q[i] = static_cast<uint8_t>(std::clamp(round_even(v[i] * inv), 0, qmax));
  return dh;
}

uint16_t quantize_signed_scales(const float* v, int count, int qneg, int qpos, int* q) {
  float vmax = 0;
  for (int i = 0; i < count; ++i)
    if (std::fabs(v[i]) > std::fabs(vmax)) vmax = v[i];
  const uint16_t dh = factor_to_f16(vmax / -static_cast<float>(qneg), vmax, qneg);
  const float d = f16_to_f32(dh);
  const float inv = d != 0 ? 1.0f / d : 0.0f;
  for (int i = 0; i < count; ++i) q[i] = std::clamp(round_even(v[i] * inv), -qneg, qpos);
  return dh;
}

}  // namespace ms::ref
