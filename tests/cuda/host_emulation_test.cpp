// The device-side decoders, run on the host: quant_dot.cuh (the per-item dp4a
// dots of the matvec kernels), quant_sub32*.cuh (the sub-block decoders of
// the other formats) and quant_dequant.cuh (element decoders of the
// embedding / GEMM paths) compiled by the host compiler, with the few CUDA
// intrinsics they use emulated below. Checks the bit layouts against the CPU
// reference (dequantize_row_ref) on random blocks -- and runs on machines
// without a GPU, so CI checks the layouts too.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

// ---- host stand-ins for the device intrinsics (defined before the headers use them)
namespace host_emu {
template <class T>
T ldg(const T* p) { return *p; }
inline int dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) c += int(int8_t(a >> (8 * i))) * int(int8_t(b >> (8 * i)));
  return c;
}
inline unsigned vsub4(unsigned a, unsigned b) {
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (((a >> (8 * i)) - (b >> (8 * i))) & 0xffu) << (8 * i);
  return r;
}
inline unsigned vadd4(unsigned a, unsigned b) {
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (((a >> (8 * i)) + (b >> (8 * i))) & 0xffu) << (8 * i);
  return r;
}
inline unsigned byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t v = (uint64_t(y) << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= unsigned((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
inline float u2f(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
float h2f(unsigned short h);
struct Dim { int x = 0; };
inline Dim threadIdx, blockDim;
inline void syncthreads() {}
}  // namespace host_emu
#define __ldg host_emu::ldg
#define __dp4a host_emu::dp4a
#define __vsub4 host_emu::vsub4
#define __vadd4 host_emu::vadd4
#define __byte_perm host_emu::byte_perm
#define __uint_as_float host_emu::u2f
#define __ushort_as_half(x) (x)
#define __half2float(x) host_emu::h2f(x)
#define __shfl_xor_sync(m, v, o) (v)
#define __expf expf
#define threadIdx host_emu::threadIdx
#define blockDim host_emu::blockDim
#define __syncthreads host_emu::syncthreads

#include "cuda/quant_dequant.cuh"
#include "cuda/quant_dot.cuh"
#include "quant/half.h"
#include "quant/quant.h"
#include "quant/types.h"
#include "random_blocks.h"

float host_emu::h2f(unsigned short h) { return ms::f16_to_f32(h); }

namespace ms::cuda::dev {
namespace {

template <DType T>
std::vector<uint8_t> random_row(int64_t cols, std::mt19937& rng) {
  using D = Dequant<T>;
  const int64_t nb = cols / D::kBlock;
  std::vector<uint8_t> row(static_cast<size_t>(nb * D::kBytes + 64));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : row) b = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = row.data() + b * D::kBytes;
    if (T == DType::MXFP4) blk[0] = static_cast<uint8_t>(1 + byte(rng) % 140);  // includes subnormal scales
    else test::sane_block_scales(T, blk, rng);
  }
  return row;
}

// kExact: the element decoder must give the reference's float bit for bit;
// else (the sub-block decoders, which form s * q + m in their own order)
// within 1e-6 relative.
template <class Op, DType T, bool kExact = true>
void check_format(std::mt19937& rng) {
  for (int64_t cols : {256, 768, 2048}) {
    const auto row = random_row<T>(cols, rng);
    // element decoders == CPU reference
    std::vector<float> ref(cols);
    dequantize_row_ref(T, row.data(), ref.data(), cols);
    for (int64_t c = 0; c < cols; ++c) {
      if (kExact)
        ASSERT_EQ(dequant_elem<T>(row.data(), c), ref[c]) << type_name(T) << " element " << c;
      else
        ASSERT_NEAR(dequant_elem<T>(row.data(), c), ref[c], 1e-6f * std::fabs(ref[c]))
            << type_name(T) << " element " << c;
    }
    // item dots over int8 activations == the double dot of the reference values
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<int8_t> q(cols);
    std::vector<float2> ds(cols / 32);
    for (int64_t b = 0; b < cols / 32; ++b) {
      float x[32], amax = 0;
      for (float& v : x) { v = u(rng); amax = std::max(amax, std::fabs(v)); }
      const float d = amax / 127.f;
      int s = 0;
      for (int i = 0; i < 32; ++i) { q[b * 32 + i] = static_cast<int8_t>(std::nearbyint(x[i] / d)); s += q[b * 32 + i]; }
      ds[b] = make_float2(d, d * s);
    }
    Acts<2> a;
    for (int v = 0; v < 2; ++v) { a.q[v] = q.data(); a.ds[v] = ds.data(); a.f[v] = nullptr; }
    float acc[2] = {0.f, 0.f};
    for (int it = 0; it < cols / Op::kItem; ++it) Op::template dot<2>(row.data(), it, a, acc);
    double want = 0, mag = 0;
    for (int64_t c = 0; c < cols; ++c) {
      want += double(ref[c]) * ds[c / 32].x * q[c];
      mag += std::fabs(double(ref[c]) * ds[c / 32].x * q[c]);
    }
    EXPECT_NEAR(acc[0], want, 1e-5 * mag) << type_name(T) << " cols " << cols;
    EXPECT_EQ(acc[0], acc[1]);
  }
}

TEST(CudaHostEmulation, QuantizedItemDotsAndElementDecodersMatchReference) {
  std::mt19937 rng(3);
  check_format<OpQ4K, DType::Q4_K>(rng);
  check_format<OpQ5K, DType::Q5_K>(rng);
  check_format<OpQ6K, DType::Q6_K>(rng);
  check_format<OpQ8_0, DType::Q8_0>(rng);
  check_format<OpQ4_0, DType::Q4_0>(rng);
  check_format<OpMXFP4, DType::MXFP4>(rng);
}

// The sub-block decoders (quant_sub32*.cuh) through OpSub32 and Dequant<T>,
// with this file's copy of the IQ tables filled on the host.
TEST(CudaHostEmulation, SubBlockDecodersMatchReference) {
  std::memcpy(g_iq_tables.iq2xxs, kIQ2XXSGrid, sizeof g_iq_tables.iq2xxs);
  std::memcpy(g_iq_tables.iq2xs, kIQ2XSGrid, sizeof g_iq_tables.iq2xs);
  std::memcpy(g_iq_tables.iq2s, kIQ2SGrid, sizeof g_iq_tables.iq2s);
  std::memcpy(g_iq_tables.iq1s, kIQ1SGrid, sizeof g_iq_tables.iq1s);
  std::memcpy(g_iq_tables.iq3xxs, kIQ3XXSGrid, sizeof g_iq_tables.iq3xxs);
  std::memcpy(g_iq_tables.iq3s, kIQ3SGrid, sizeof g_iq_tables.iq3s);
  std::memcpy(g_iq_tables.iq4nl, kIQ4NLValues, sizeof g_iq_tables.iq4nl);
  std::memcpy(g_iq_tables.signs, kIQ2Signs, sizeof g_iq_tables.signs);
  std::mt19937 rng(5);
#define MS_CHECK_SUB32(T, D) check_format<OpSub32<D>, DType::T, false>(rng);
  MS_SUB32_TYPES(MS_CHECK_SUB32)
#undef MS_CHECK_SUB32
}

TEST(CudaHostEmulation, FloatDecodersMatchReference) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<uint16_t> h(64), b(64);
  for (int i = 0; i < 64; ++i) { h[i] = f32_to_f16(u(rng)); b[i] = f32_to_bf16(u(rng)); }
  const auto* hp = reinterpret_cast<const uint8_t*>(h.data());
  const auto* bp = reinterpret_cast<const uint8_t*>(b.data());
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(dequant_elem<DType::F16>(hp, i), f16_to_f32(h[i]));
    EXPECT_EQ(dequant_elem<DType::BF16>(bp, i), bf16_to_f32(b[i]));
  }
}

}  // namespace
}  // namespace ms::cuda::dev
