// Lookup tables of the IQ ("importance") formats: facts of the GGUF format,
// since a block's indices point into them (generated: iq_grids.cpp).
//
// A grid entry packs 8 (or 4) element magnitudes, one per byte, element j in
// byte j (little-endian). Signs are stored separately by the formats that use
// them (see blocks.h). GPU code copies these tables to device memory.
#pragma once
#include <cstdint>

namespace ms {

extern const uint64_t* const kIQ2XXSGrid;  // [256]  bytes in {8, 25, 43}
extern const uint64_t* const kIQ2XSGrid;   // [512]  bytes in {8, 25, 43}
extern const uint64_t* const kIQ2SGrid;    // [1024] bytes in {8, 25, 43}
extern const uint32_t* const kIQ3XXSGrid;  // [256]  bytes in {4, 12, ..., 52, 62}
extern const uint32_t* const kIQ3SGrid;    // [512]  bytes in {1, 3, 5, ..., 15}
extern const uint64_t* const kIQ1SGrid;    // [2048] bytes are int8 in {-1, 0, +1}
// 7-bit sign index -> 8 sign bits (bit j set = element j negative); bit 7 is
// implied: it makes the number of negative elements even.
extern const uint8_t* const kIQ2Signs;     // [128]
// The 16 non-linear levels of IQ4_NL and IQ4_XS.
extern const int8_t kIQ4NLValues[16];

constexpr int kIQ2XXSGridSize = 256, kIQ2XSGridSize = 512, kIQ2SGridSize = 1024;
constexpr int kIQ3XXSGridSize = 256, kIQ3SGridSize = 512, kIQ1SGridSize = 2048;
// IQ1_S / IQ1_M: every element is shifted by +-kIQ1Delta before scaling.
constexpr float kIQ1Delta = 0.125f;

}  // namespace ms
