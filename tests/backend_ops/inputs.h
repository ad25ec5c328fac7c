// Random inputs and poisoned outputs for the registry's ops (host only).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda/random_blocks.h"  // random_blocks, sane_block_scales (host-only helpers)
#include "quant/half.h"
#include "quant/quant.h"
#include "quant/types.h"

namespace ms::backend_ops {

inline std::vector<float> poisoned(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

inline std::vector<float> uniform(size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

inline std::vector<float> normal(size_t n, std::mt19937& rng, float sigma = 1.f) {
  std::normal_distribution<float> d(0.f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Activations for the quantized dots: normal values with every fifth block
// of 32 scaled by 1000 and every seventh all zero (amax 0: d = 0); with
// `extreme`, blocks alternate 0, +7.5 and -7.5 (every quant at +-127).
inline std::vector<float> activations(int64_t n, std::mt19937& rng, bool extreme) {
  std::vector<float> x = normal(static_cast<size_t>(n), rng);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = i / 32;
    if (extreme) x[i] = b % 3 == 0 ? 0.f : (b % 3 == 1 ? 7.5f : -7.5f);
    else if (b % 5 == 1) x[i] *= 1000.f;
    else if (b % 7 == 3) x[i] = 0.f;
  }
  return x;
}

// `rows` rows of n elements of type t, `stride` bytes apart (>= row_bytes;
// padding bytes 0xCD). Float types: normal values (extreme: +-60000, near
// f16's limit); quantized types: random bytes with sane scales, and with
// `extreme` every third block all ones (every quant and packed scale at its
// maximum) before its scales are set.
inline std::vector<uint8_t> weights(DType t, int64_t rows, int64_t n, int64_t stride, std::mt19937& rng,
                                    bool extreme) {
  std::vector<uint8_t> w(static_cast<size_t>(stride * rows), 0xCD);
  std::normal_distribution<float> nd(0.f, 1.f);
  const TypeInfo& info = type_info(t);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = w.data() + r * stride;
    if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
      for (int64_t i = 0; i < n; ++i) {
        const float v = extreme ? (i % 2 ? -60000.f : 60000.f) : nd(rng);
        if (t == DType::F32) std::memcpy(row + 4 * i, &v, 4);
        if (t == DType::F16) cuda::test::put_f16(row + 2 * i, v);
        if (t == DType::BF16) {
          const uint16_t h = f32_to_bf16(v);
          std::memcpy(row + 2 * i, &h, 2);
        }
      }
      continue;
    }
    const int64_t nb = n / info.block_size;
    cuda::test::random_blocks(t, row, nb, rng);
    if (extreme)
      for (int64_t b = 0; b < nb; b += 3) {
        uint8_t* blk = row + b * info.type_size;
        std::memset(blk, 0xFF, static_cast<size_t>(info.type_size));
        cuda::test::sane_block_scales(t, blk, rng);
      }
  }
  return w;
}

inline std::vector<float> dequant(DType t, const uint8_t* row, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  dequantize_row_ref(t, row, v.data(), n);
  return v;
}

}  // namespace ms::backend_ops
