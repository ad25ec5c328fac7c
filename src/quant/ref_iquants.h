// Internal: the integer form of a 256-element ternary or IQ block (see
// ref_iquants.cpp), for the reference dequant/dot, the quantizers and tests:
//   x[e] = (d * mult[e / 16] * factor) * q[e]
#pragma once
#include <cstdint>

#include "quant/blocks.h"

namespace ms::ref {

struct LevelsIQ {
  int8_t q[QK_K] = {};
  int mult[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};  // per 16 elements
  float d = 0;
  float factor = 1.0f;  // a power of two
};

LevelsIQ unpack(const BlockTQ1_0& b);
LevelsIQ unpack(const BlockTQ2_0& b);
LevelsIQ unpack(const BlockIQ2_XXS& b);
LevelsIQ unpack(const BlockIQ2_XS& b);
LevelsIQ unpack(const BlockIQ2_S& b);
LevelsIQ unpack(const BlockIQ3_XXS& b);
LevelsIQ unpack(const BlockIQ3_S& b);
LevelsIQ unpack(const BlockIQ1_S& b);
LevelsIQ unpack(const BlockIQ1_M& b);
LevelsIQ unpack(const BlockIQ4_XS& b);

// IQ1_M keeps its f16 super-block scale in the top nibbles of its 4 scale words.
uint16_t iq1m_scale_bits(const BlockIQ1_M& b);

}  // namespace ms::ref
