// Reference quantizers of the ternary and IQ formats (for `gen --quant` and
// conversion). They produce valid blocks with a reasonable, not optimal,
// error: per sub-block a small scan of candidate scales, each group of 8
// snapped to its nearest grid point, then the integer sub-block scales fitted
// to a few candidate super-block scales, keeping the one of least squared
// error. (llama.cpp's quantizers also weigh elements by an importance matrix;
// these do not.)
//
// Grid snapping: round each element to its nearest grid level; when that
// combination is a grid point, it is the nearest one. Otherwise the nearest
// is searched among the grid points closest to it in level steps (a list per
// combination, built once per grid on first use).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/iq_grids.h"
#include "quant/ref_formats.h"
#include "quant/ref_iquants.h"
#include "quant/ref_kquant_search.h"

namespace ms::ref {
namespace {

// ------------------------------------------------------------------ grids

class Grid {
 public:
  // `entry(i)` gives entry i's byte j at j; `levels` the distinct byte values
  // (as signed if `signed_bytes`), in increasing order.
  template <typename Word>
  Grid(const Word* table, int count, int width, std::vector<int> levels, bool signed_bytes)
      : count_(count), width_(width), levels_(std::move(levels)) {
    val_.resize(static_cast<size_t>(count) * width);
    std::vector<uint8_t> lev(val_.size());
    for (int i = 0; i < count; ++i)
      for (int j = 0; j < width; ++j) {
        const uint8_t byte = static_cast<uint8_t>(static_cast<uint64_t>(table[i]) >> (8 * j));
        const int v = signed_bytes ? static_cast<int8_t>(byte) : byte;
        val_[i * width + j] = static_cast<float>(v);
        lev[i * width + j] = static_cast<uint8_t>(std::find(levels_.begin(), levels_.end(), v) - levels_.begin());
      }
    int codes = 1;
    for (int j = 0; j < width; ++j) codes *= static_cast<int>(levels_.size());
    cand_.resize(codes);
    for (int c = 0; c < codes; ++c) {
      int idx[8];
      for (int j = 0, r = c; j < width; ++j, r /= static_cast<int>(levels_.size())) idx[j] = r % static_cast<int>(levels_.size());
      std::vector<int> dist(count);
      int best = 1 << 30;
      for (int i = 0; i < count; ++i) {
        int d2 = 0;
        for (int j = 0; j < width; ++j) d2 += (idx[j] - lev[i * width + j]) * (idx[j] - lev[i * width + j]);
        dist[i] = d2;
        best = std::min(best, d2);
      }
      const int limit = best == 0 ? 0 : best + 1;
      for (int i = 0; i < count; ++i)
        if (dist[i] <= limit) cand_[c].push_back(static_cast<uint16_t>(i));
    }
  }

  int width() const { return width_; }
  const std::vector<int>& levels() const { return levels_; }
  const float* entry(int i) const { return &val_[static_cast<size_t>(i) * width_]; }

  // Index of the grid point nearest to t[0..width) (squared distance).
  int nearest(const float* t) const {
    int code = 0;
    for (int j = width_ - 1; j >= 0; --j) {
      int k = 0;
      for (int l = 1; l < static_cast<int>(levels_.size()); ++l)
        if (std::fabs(t[j] - levels_[l]) < std::fabs(t[j] - levels_[k])) k = l;
      code = code * static_cast<int>(levels_.size()) + k;
    }
    const std::vector<uint16_t>& c = cand_[code];
    int best = c[0];
    float best_err = INFINITY;
    for (uint16_t i : c) {
      float err = 0;
      for (int j = 0; j < width_; ++j) err += (t[j] - entry(i)[j]) * (t[j] - entry(i)[j]);
      if (err < best_err) {
        best_err = err;
        best = i;
      }
    }
    return best;
  }

 private:
  int count_, width_;
  std::vector<int> levels_;
  std::vector<float> val_;
  std::vector<std::vector<uint16_t>> cand_;
};

const std::vector<int> kLevels2 = {8, 25, 43};

const Grid& grid_iq2xxs() { static const Grid g(kIQ2XXSGrid, kIQ2XXSGridSize, 8, kLevels2, false); return g; }
const Grid& grid_iq2xs() { static const Grid g(kIQ2XSGrid, kIQ2XSGridSize, 8, kLevels2, false); return g; }
const Grid& grid_iq2s() { static const Grid g(kIQ2SGrid, kIQ2SGridSize, 8, kLevels2, false); return g; }
const Grid& grid_iq3xxs() {
  static const Grid g(kIQ3XXSGrid, kIQ3XXSGridSize, 4, {4, 12, 20, 28, 36, 44, 52, 62}, false);
  return g;
}
const Grid& grid_iq3s() { static const Grid g(kIQ3SGrid, kIQ3SGridSize, 4, {1, 3, 5, 7, 9, 11, 13, 15}, false); return g; }
const Grid& grid_iq1s() { static const Grid g(kIQ1SGrid, kIQ1SGridSize, 8, {-1, 0, 1}, true); return g; }

// ------------------------------------------------------------------ groups of 8

enum class Signs { kParity, kFree, kNone };

// How a group of 8 is stored: grid indices (two for 4-wide grids), sign
// bits (bit j = element j negative), IQ1's delta sign.
struct Group {
  int idx[2] = {0, 0};
  uint8_t signs = 0;
  bool neg_delta = false;
};

// Snaps x[0..8) to the grid at scale s (x ~ s * sign * grid, or for IQ1
// x ~ s * (grid + delta)); returns the squared error.
float quantize_group(const float* x, float s, const Grid& grid, Signs mode, bool neg_delta, Group& g) {
  g = Group{};
  g.neg_delta = neg_delta;
  float t[8];
  if (mode == Signs::kNone) {
    // IQ1 levels are 8 * (grid + delta) at scale s: grid units are 8 s.
    s *= 8.0f;
    const float delta = neg_delta ? -kIQ1Delta : kIQ1Delta;
    for (int j = 0; j < 8; ++j) t[j] = s > 0 ? x[j] / s - delta : 0.0f;
  } else {
    for (int j = 0; j < 8; ++j) {
      if (x[j] < 0) g.signs = static_cast<uint8_t>(g.signs | (1 << j));
      t[j] = s > 0 ? std::fabs(x[j]) / s : 0.0f;
    }
    if (mode == Signs::kParity && (__builtin_popcount(g.signs) & 1)) {
      // An odd count of negatives cannot be stored: flip the smallest element,
      // whose target magnitude then goes below zero (toward the least level).
      int k = 0;
      for (int j = 1; j < 8; ++j)
        if (std::fabs(x[j]) < std::fabs(x[k])) k = j;
      g.signs = static_cast<uint8_t>(g.signs ^ (1 << k));
      t[k] = -t[k];
    }
  }
  for (int h = 0; h < 8 / grid.width(); ++h) g.idx[h] = grid.nearest(t + h * grid.width());
  float err = 0;
  for (int j = 0; j < 8; ++j) {
    const int h = j < grid.width() ? 0 : 1;  // 8-wide grids: one entry; 4-wide: two
    const float gv = grid.entry(g.idx[h])[j - h * grid.width()];
    float y;
    if (mode == Signs::kNone)
      y = s * (gv + (neg_delta ? -kIQ1Delta : kIQ1Delta));
    else
      y = s * gv * ((g.signs >> j) & 1 ? -1.0f : 1.0f);
    err += (x[j] - y) * (x[j] - y);
  }
  return err;
}

// ------------------------------------------------------------------ super-blocks

// One grid format's quantization parameters.
struct Spec {
  const Grid& grid;
  Signs signs;
  int sub;          // elements per stored scale: 16 or 32
  int smax;         // stored scale s in 0..smax; multiplier 2s+1
  float factor;     // x = d * (2s+1) * factor * level
  float gmax;       // largest level magnitude (for the scale scan)
  bool delta_per_sub;  // IQ1_S: one delta sign per 32 (else per group)
};

struct Quantized {
  uint16_t d = 0;
  int s[16] = {};     // per sub-block
  Group g[32];        // per group of 8
};

// Groups of one sub-block at scale dl; the IQ1 delta per sub-block or per
// group is chosen by error. Returns the squared error.
float quantize_sub(const Spec& sp, const float* x, float dl, Group* g) {
  const int ng = sp.sub / 8;
  float err = 0;
  if (sp.signs != Signs::kNone) {
    for (int k = 0; k < ng; ++k) err += quantize_group(x + 8 * k, dl, sp.grid, sp.signs, false, g[k]);
    return err;
  }
  if (sp.delta_per_sub) {
    Group a[4], b[4];
    float ea = 0, eb = 0;
    for (int k = 0; k < ng; ++k) {
      ea += quantize_group(x + 8 * k, dl, sp.grid, sp.signs, false, a[k]);
      eb += quantize_group(x + 8 * k, dl, sp.grid, sp.signs, true, b[k]);
    }
    std::copy(ea <= eb ? a : b, (ea <= eb ? a : b) + ng, g);
    return std::min(ea, eb);
  }
  for (int k = 0; k < ng; ++k) {
    Group a, b;
    const float ea = quantize_group(x + 8 * k, dl, sp.grid, sp.signs, false, a);
    const float eb = quantize_group(x + 8 * k, dl, sp.grid, sp.signs, true, b);
    g[k] = ea <= eb ? a : b;
    err += std::min(ea, eb);
  }
  return err;
}

Quantized quantize_super(const Spec& sp, const float* x) {
  const int nsub = QK_K / sp.sub;
  // Best float scale per sub-block from a scan around max-abs / gmax.
  float best_s[16] = {};
  for (int j = 0; j < nsub; ++j) {
    const float* xs = x + j * sp.sub;
    float amax = 0;
    for (int l = 0; l < sp.sub; ++l) amax = std::max(amax, std::fabs(xs[l]));
    if (!(amax > 0) || !std::isfinite(amax)) continue;
    float best_err = INFINITY;
    Group tmp[4];
    // Candidates: the max-abs element at or near the top level, or exactly
    // on each lower level (constant-ish groups may only fit those).
    std::vector<float> cands;
    for (int k = 0; k < 8; ++k) cands.push_back(amax / sp.gmax * (0.5f + 0.1f * static_cast<float>(k)));
    if (sp.signs == Signs::kNone) {  // IQ1 levels 8 * (g + delta): 9, 7 and 1 in magnitude
      cands.push_back(amax / 7.0f);
      cands.push_back(amax);
    } else {
      for (int lv : sp.grid.levels())
        if (lv > 0 && lv < sp.gmax) cands.push_back(amax / static_cast<float>(lv));
    }
    for (float s : cands) {
      const float err = quantize_sub(sp, xs, s, tmp);
      if (err < best_err) {
        best_err = err;
        best_s[j] = s;
      }
    }
  }
  const float smax_f = *std::max_element(best_s, best_s + nsub);
  Quantized best;
  for (int j = 0; j < nsub; ++j) quantize_sub(sp, x + j * sp.sub, 0.0f, best.g + j * sp.sub / 8);
  if (!(smax_f > 0)) return best;  // all zero: d = 0
  // Integer sub-block scales against a few super-block scales.
  float best_err = INFINITY;
  for (float r : {1.0f, 0.92f, 0.84f, 1.08f}) {
    Quantized q;
    q.d = f32_to_f16(std::min(smax_f / ((2 * sp.smax + 1) * sp.factor) * r, 65504.0f));
    const float d = f16_to_f32(q.d);
    if (!(d > 0)) continue;
    float err = 0;
    for (int j = 0; j < nsub; ++j) {
      const int s = round_even((best_s[j] / (d * sp.factor) - 1.0f) / 2.0f);
      q.s[j] = std::clamp(s, 0, sp.smax);
      const float dl = d * static_cast<float>(2 * q.s[j] + 1) * sp.factor;  // as dequantized
      err += quantize_sub(sp, x + j * sp.sub, dl, q.g + j * sp.sub / 8);
    }
    if (err < best_err) {
      best_err = err;
      best = q;
    }
  }
  return best;
}

// Sign index of a group of 8 with an even count of negatives: its low 7 bits.
uint32_t sign_index(const Group& g) { return g.signs & 127u; }

// ------------------------------------------------------------------ IQ4 levels

// The levels are sorted: the nearest is one of the two around t.
int nearest_iq4(float t) {
  const int8_t* v = kIQ4NLValues;
  const int hi = static_cast<int>(std::upper_bound(v, v + 16, t, [](float a, int8_t b) { return a < b; }) - v);
  if (hi == 0) return 0;
  if (hi == 16) return 15;
  return t - v[hi - 1] <= v[hi] - t ? hi - 1 : hi;
}

float iq4_error(const float* x, int n, float d) {
  float err = 0;
  for (int j = 0; j < n; ++j) {
    const float y = d == 0 ? 0.0f : d * kIQ4NLValues[nearest_iq4(x[j] / d)];
    err += (x[j] - y) * (x[j] - y);
  }
  return err;
}

// Best float scale for n values on the IQ4 levels (sign included): the
// largest magnitude on either end of the levels, scanned, then re-fitted by
// least squares for the levels it picks.
float iq4_scale(const float* x, int n) {
  float xmax = 0;
  for (int j = 0; j < n; ++j)
    if (std::fabs(x[j]) > std::fabs(xmax)) xmax = x[j];
  if (xmax == 0 || !std::isfinite(xmax)) return 0.0f;
  float best = xmax / -127.0f, best_err = INFINITY;
  for (float end : {-127.0f, 113.0f})
    for (int k = 0; k < 7; ++k) {
      const float d = xmax / end * (0.8f + 0.05f * static_cast<float>(k));
      const float err = iq4_error(x, n, d);
      if (err < best_err) {
        best_err = err;
        best = d;
      }
    }
  double sxl = 0, sll = 0;
  for (int j = 0; j < n; ++j) {
    const int l = kIQ4NLValues[nearest_iq4(x[j] / best)];
    sxl += static_cast<double>(x[j]) * l;
    sll += static_cast<double>(l) * l;
  }
  if (sll > 0) {
    const float refit = static_cast<float>(sxl / sll);
    if (refit != 0 && iq4_error(x, n, refit) < best_err) best = refit;
  }
  return best;
}

// ------------------------------------------------------------------ ternary

// Ternary levels t in 0..2 (x ~ d * (t - 1)) with d from a short scan.
uint16_t ternary_levels(const float* x, uint8_t* t) {
  float amax = 0;
  for (int j = 0; j < QK_K; ++j) amax = std::max(amax, std::fabs(x[j]));
  float best_d = 0, best_err = INFINITY;
  if (amax > 0 && std::isfinite(amax)) {
    for (int k = 0; k < 8; ++k) {
      const float d = f16_to_f32(f32_to_f16(std::min(amax * (0.3f + 0.1f * static_cast<float>(k)), 65504.0f)));
      if (!(d > 0)) continue;
      float err = 0;
      for (int j = 0; j < QK_K; ++j) {
        const float y = d * static_cast<float>(std::clamp(round_even(x[j] / d), -1, 1));
        err += (x[j] - y) * (x[j] - y);
      }
      if (err < best_err) {
        best_err = err;
        best_d = d;
      }
    }
  }
  for (int j = 0; j < QK_K; ++j)
    t[j] = static_cast<uint8_t>(best_d > 0 ? std::clamp(round_even(x[j] / best_d), -1, 1) + 1 : 1);
  return f32_to_f16(best_d);
}

// n base-3 digits (most significant first) as TQ1_0's fixed-point byte.
uint8_t pack_trits(const uint8_t* digits, int n) {
  int v = 0;
  for (int k = 0; k < 5; ++k) v = v * 3 + (k < n ? digits[k] : 0);
  return static_cast<uint8_t>((v * 256 + 242) / 243);
}

template <typename Block, typename Fn>
void for_blocks(const float* src, void* dst, int64_t n, Fn fn) {
  Block* b = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    std::memset(&b[i], 0, sizeof(Block));
    fn(src + i * QK_K, b[i]);
  }
}

}  // namespace

// ------------------------------------------------------------------ public quantizers

void quantize_tq2_0(const float* src, void* dst, int64_t n) {
  for_blocks<BlockTQ2_0>(src, dst, n, [](const float* x, BlockTQ2_0& b) {
    uint8_t t[QK_K];
    b.d = ternary_levels(x, t);
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 4; ++l)
        for (int m = 0; m < 32; ++m)
          b.qs[32 * h + m] = static_cast<uint8_t>(b.qs[32 * h + m] | (t[128 * h + 32 * l + m] << (2 * l)));
  });
}

void quantize_tq1_0(const float* src, void* dst, int64_t n) {
  for_blocks<BlockTQ1_0>(src, dst, n, [](const float* x, BlockTQ1_0& b) {
    uint8_t t[QK_K];
    b.d = ternary_levels(x, t);
    uint8_t digits[5];
    for (int m = 0; m < 32; ++m) {
      for (int k = 0; k < 5; ++k) digits[k] = t[32 * k + m];
      b.qs[m] = pack_trits(digits, 5);
    }
    for (int m = 0; m < 16; ++m) {
      for (int k = 0; k < 5; ++k) digits[k] = t[160 + 16 * k + m];
      b.qs[32 + m] = pack_trits(digits, 5);
    }
    for (int m = 0; m < 4; ++m) {
      for (int k = 0; k < 4; ++k) digits[k] = t[240 + 4 * k + m];
      b.qh[m] = pack_trits(digits, 4);
    }
  });
}

void quantize_iq2_xxs(const float* src, void* dst, int64_t n) {
  const Spec sp{grid_iq2xxs(), Signs::kParity, 32, 15, 0.125f, 43.0f, false};
  for_blocks<BlockIQ2_XXS>(src, dst, n, [&](const float* x, BlockIQ2_XXS& b) {
    const Quantized q = quantize_super(sp, x);
    b.d = q.d;
    for (int ib = 0; ib < 8; ++ib) {
      uint32_t idx = 0, aux = static_cast<uint32_t>(q.s[ib]) << 28;
      for (int l = 0; l < 4; ++l) {
        idx |= static_cast<uint32_t>(q.g[4 * ib + l].idx[0]) << (8 * l);
        aux |= sign_index(q.g[4 * ib + l]) << (7 * l);
      }
      b.qs[4 * ib] = static_cast<uint16_t>(idx);
      b.qs[4 * ib + 1] = static_cast<uint16_t>(idx >> 16);
      b.qs[4 * ib + 2] = static_cast<uint16_t>(aux);
      b.qs[4 * ib + 3] = static_cast<uint16_t>(aux >> 16);
    }
  });
}

void quantize_iq2_xs(const float* src, void* dst, int64_t n) {
  const Spec sp{grid_iq2xs(), Signs::kParity, 16, 15, 0.125f, 43.0f, false};
  for_blocks<BlockIQ2_XS>(src, dst, n, [&](const float* x, BlockIQ2_XS& b) {
    const Quantized q = quantize_super(sp, x);
    b.d = q.d;
    for (int g = 0; g < 32; ++g) b.qs[g] = static_cast<uint16_t>(q.g[g].idx[0] | (sign_index(q.g[g]) << 9));
    for (int ib = 0; ib < 8; ++ib) b.scales[ib] = static_cast<uint8_t>(q.s[2 * ib] | (q.s[2 * ib + 1] << 4));
  });
}

void quantize_iq2_s(const float* src, void* dst, int64_t n) {
  const Spec sp{grid_iq2s(), Signs::kFree, 16, 15, 0.125f, 43.0f, false};
  for_blocks<BlockIQ2_S>(src, dst, n, [&](const float* x, BlockIQ2_S& b) {
    const Quantized q = quantize_super(sp, x);
    b.d = q.d;
    for (int g = 0; g < 32; ++g) {
      b.qs[g] = static_cast<uint8_t>(q.g[g].idx[0] & 255);
      b.qh[g / 4] = static_cast<uint8_t>(b.qh[g / 4] | ((q.g[g].idx[0] >> 8) << (2 * (g % 4))));
      b.qs[32 + g] = q.g[g].signs;
    }
    for (int ib = 0; ib < 8; ++ib) b.scales[ib] = static_cast<uint8_t>(q.s[2 * ib] | (q.s[2 * ib + 1] << 4));
  });
}

void quantize_iq3_xxs(const float* src, void* dst, int64_t n) {
  const Spec sp{grid_iq3xxs(), Signs::kParity, 32, 15, 0.25f, 62.0f, false};
  for_blocks<BlockIQ3_XXS>(src, dst, n, [&](const float* x, BlockIQ3_XXS& b) {
    const Quantized q = quantize_super(sp, x);
    b.d = q.d;
    for (int ib = 0; ib < 8; ++ib) {
      uint32_t aux = static_cast<uint32_t>(q.s[ib]) << 28;
      for (int l = 0; l < 4; ++l) {
        const Group& g = q.g[4 * ib + l];
        b.qs[8 * ib + 2 * l] = static_cast<uint8_t>(g.idx[0]);
        b.qs[8 * ib + 2 * l + 1] = static_cast<uint8_t>(g.idx[1]);
        aux |= sign_index(g) << (7 * l);
      }
      std::memcpy(b.qs + 64 + 4 * ib, &aux, 4);
    }
  });
}

void quantize_iq3_s(const float* src, void* dst, int64_t n) {
  const Spec sp{grid_iq3s(), Signs::kFree, 32, 15, 1.0f, 15.0f, false};
  for_blocks<BlockIQ3_S>(src, dst, n, [&](const float* x, BlockIQ3_S& b) {
    const Quantized q = quantize_super(sp, x);
    b.d = q.d;
    for (int g = 0; g < 32; ++g) {
      for (int h = 0; h < 2; ++h) {
        const int k = 2 * g + h;  // grid index number 0..63
        b.qs[k] = static_cast<uint8_t>(q.g[g].idx[h] & 255);
        b.qh[k / 8] = static_cast<uint8_t>(b.qh[k / 8] | ((q.g[g].idx[h] >> 8) << (k % 8)));
      }
      b.signs[g] = q.g[g].signs;
    }
    for (int ib = 0; ib < 8; ++ib) b.scales[ib / 2] = static_cast<uint8_t>(b.scales[ib / 2] | (q.s[ib] << (4 * (ib % 2))));
  });
}

void quantize_iq1_s(const float* src, void* dst, int64_t n) {
  // (gmax in units of the stored levels 8 * (grid + delta): at most 9.)
  const Spec sp{grid_iq1s(), Signs::kNone, 32, 7, 0.125f, 9.0f, true};
  for_blocks<BlockIQ1_S>(src, dst, n, [&](const float* x, BlockIQ1_S& b) {
    const Quantized q = quantize_super(sp, x);
    b.d = q.d;
    for (int ib = 0; ib < 8; ++ib) {
      int qh = q.s[ib] << 12 | (q.g[4 * ib].neg_delta ? 0x8000 : 0);
      for (int l = 0; l < 4; ++l) {
        b.qs[4 * ib + l] = static_cast<uint8_t>(q.g[4 * ib + l].idx[0] & 255);
        qh |= (q.g[4 * ib + l].idx[0] >> 8) << (3 * l);
      }
      b.qh[ib] = static_cast<uint16_t>(qh);
    }
  });
}

void quantize_iq1_m(const float* src, void* dst, int64_t n) {
  const Spec sp{grid_iq1s(), Signs::kNone, 16, 7, 0.125f, 9.0f, false};
  for_blocks<BlockIQ1_M>(src, dst, n, [&](const float* x, BlockIQ1_M& b) {
    const Quantized q = quantize_super(sp, x);
    for (int g = 0; g < 32; ++g) {
      b.qs[g] = static_cast<uint8_t>(q.g[g].idx[0] & 255);
      const int nib = (q.g[g].idx[0] >> 8) | (q.g[g].neg_delta ? 8 : 0);
      b.qh[g / 2] = static_cast<uint8_t>(b.qh[g / 2] | (nib << (4 * (g % 2))));
    }
    uint16_t sc[4] = {};
    for (int ib = 0; ib < 8; ++ib)
      sc[ib / 2] = static_cast<uint16_t>(sc[ib / 2] | ((q.s[2 * ib] | (q.s[2 * ib + 1] << 3)) << (6 * (ib % 2))));
    for (int k = 0; k < 4; ++k) sc[k] = static_cast<uint16_t>(sc[k] | (((q.d >> (4 * k)) & 15) << 12));
    std::memcpy(b.scales, sc, 8);
  });
}

void quantize_iq4_nl(const float* src, void* dst, int64_t n) {
  BlockIQ4_NL* b = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t i = 0; i < n / QK; ++i) {
    const float* x = src + i * QK;
    b[i].d = f32_to_f16(std::clamp(iq4_scale(x, QK), -65504.0f, 65504.0f));
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < QK / 2; ++j) {
      const int lo = d != 0 ? nearest_iq4(x[j] / d) : 8;
      const int hi = d != 0 ? nearest_iq4(x[j + QK / 2] / d) : 8;
      b[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void quantize_iq4_xs(const float* src, void* dst, int64_t n) {
  for_blocks<BlockIQ4_XS>(src, dst, n, [](const float* x, BlockIQ4_XS& b) {
    float sc[8], smax = 0;
    for (int ib = 0; ib < 8; ++ib) {
      sc[ib] = iq4_scale(x + 32 * ib, 32);
      if (std::fabs(sc[ib]) > std::fabs(smax)) smax = sc[ib];
    }
    // The largest-magnitude sub-block scale becomes -32 * d (the longer end).
    b.d = f32_to_f16(std::clamp(smax / -32.0f, -65504.0f, 65504.0f));
    const float d = f16_to_f32(b.d);
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = d != 0 ? std::clamp(round_even(sc[ib] / d), -32, 31) : 0;
      const int u = ls + 32;
      b.scales_l[ib / 2] = static_cast<uint8_t>(b.scales_l[ib / 2] | ((u & 15) << (4 * (ib % 2))));
      b.scales_h = static_cast<uint16_t>(b.scales_h | ((u >> 4) << (2 * ib)));
      const float dl = d * static_cast<float>(ls);
      for (int j = 0; j < 16; ++j) {
        const int lo = dl != 0 ? nearest_iq4(x[32 * ib + j] / dl) : 8;
        const int hi = dl != 0 ? nearest_iq4(x[32 * ib + 16 + j] / dl) : 8;
        b.qs[16 * ib + j] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  });
}

}  // namespace ms::ref
