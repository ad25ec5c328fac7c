// Random quantized blocks for the CUDA tests (host only): every quant and
// scale bit pattern, with each float scale field of the format set to a sane
// value, sized so that weights stay of order 1.
#pragma once
#include <cstdint>
#include <cstring>
#include <random>

#include "quant/half.h"
#include "quant/types.h"

namespace ms::cuda::test {

inline void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Sets the scale fields of one block of type t (its other bytes random).
inline void sane_block_scales(DType t, uint8_t* blk, std::mt19937& rng) {
  std::uniform_real_distribution<float> scale(0.5f, 1.5f);
  switch (t) {
    case DType::Q4_0: case DType::Q8_0: put_f16(blk, 0.01f * scale(rng)); break;
    case DType::Q4_K: case DType::Q5_K:
      put_f16(blk, 0.002f * scale(rng));
      put_f16(blk + 2, 0.002f * scale(rng));
      break;
    case DType::Q6_K: put_f16(blk + 208, 0.001f * scale(rng)); break;
    case DType::MXFP4: blk[0] = static_cast<uint8_t>(118 + rng() % 12); break;
    case DType::Q4_1: case DType::Q5_1:
      put_f16(blk, 0.01f * scale(rng));
      put_f16(blk + 2, -0.1f * scale(rng));
      break;
    case DType::Q5_0: case DType::IQ4_NL: put_f16(blk, 0.01f * scale(rng)); break;
    case DType::Q2_K:
      put_f16(blk + 80, 0.01f * scale(rng));
      put_f16(blk + 82, 0.01f * scale(rng));
      break;
    case DType::Q3_K: put_f16(blk + 108, 0.005f * scale(rng)); break;
    case DType::TQ1_0:
      for (int i = 0; i < 52; ++i) blk[i] = static_cast<uint8_t>(blk[i] % 243);  // valid base-3 digits
      put_f16(blk + 52, 0.05f * scale(rng));
      break;
    case DType::TQ2_0: put_f16(blk + 64, 0.05f * scale(rng)); break;
    case DType::IQ4_XS: put_f16(blk, 0.0003f * scale(rng)); break;
    case DType::IQ2_XXS: case DType::IQ2_XS: case DType::IQ2_S: put_f16(blk, 0.01f * scale(rng)); break;
    case DType::IQ3_XXS: case DType::IQ3_S: put_f16(blk, 0.003f * scale(rng)); break;
    case DType::IQ1_S: put_f16(blk, 0.05f * scale(rng)); break;
    case DType::IQ1_M: {  // the f16 scale is the top nibbles of the 4 u16 scale words
      const uint16_t h = f32_to_f16(0.05f * scale(rng));
      for (int k = 0; k < 4; ++k)
        blk[49 + 2 * k] = static_cast<uint8_t>((blk[49 + 2 * k] & 0x0f) | (((h >> (4 * k)) & 15) << 4));
      break;
    }
    default: break;
  }
}

// n_blocks random blocks of t (quantized types only).
inline void random_blocks(DType t, uint8_t* dst, int64_t n_blocks, std::mt19937& rng) {
  const TypeInfo& info = type_info(t);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t i = 0; i < n_blocks * info.type_size; ++i) dst[i] = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < n_blocks; ++b) sane_block_scales(t, dst + b * info.type_size, rng);
}

}  // namespace ms::cuda::test
