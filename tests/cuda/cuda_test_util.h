// Shared helpers of the CUDA tests: skipping without a device, device buffers
// from host vectors, poisoned outputs, random weights of each format, and the
// CPU reference products.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/device.h"
#include "cuda/matvec.h"
#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "quant/types.h"
#include "random_blocks.h"
#include "util/error.h"

namespace ms::cuda::test {

// Skips the calling test (with the reason) where no CUDA device is usable.
#define MS_REQUIRE_GPU()                                                         \
  do {                                                                           \
    std::string ms_why_;                                                         \
    if (::ms::cuda::device_count(&ms_why_) == 0)                                 \
      GTEST_SKIP() << "no CUDA device, GPU test skipped (" << ms_why_ << ")";    \
  } while (0)

// cudaMemcpy from pageable memory and cudaMemset run on the legacy default
// stream and may return before the device has finished them; Stream is
// non-blocking, so a kernel launched on it right after would race with them
// (stale inputs, or poison landing after the kernel wrote its output). Every
// helper below that writes device memory therefore waits for the device.
inline void device_fill(void* p, int byte, size_t bytes) {
  MS_CUDA_CHECK(cudaMemset(p, byte, bytes));
  MS_CUDA_CHECK(cudaDeviceSynchronize());
}

template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T) + 16, "test buffer");
  if (!v.empty()) MS_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  MS_CUDA_CHECK(cudaDeviceSynchronize());
  return b;
}

template <class T>
std::vector<T> download(const void* p, size_t n) {
  MS_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> v(n);
  if (n) MS_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// Output buffer filled with NaN (all bits set), so an element the kernel does
// not write is caught.
inline DeviceBuffer poisoned(size_t n_floats) {
  DeviceBuffer b(n_floats * sizeof(float) + 16, "poisoned output");
  device_fill(b.get(), 0xff, n_floats * sizeof(float) + 16);
  return b;
}
inline void poison(void* p, size_t bytes) { device_fill(p, 0xff, bytes); }

// Elements of two f16 arrays (two kernels' KV caches) that differ by more than
// rel * (1 + |a|); equal bits (poison left in both) always match.
inline int count_f16_mismatches(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, float rel) {
  int off = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] == b[i]) continue;
    const float x = f16_to_f32(a[i]), y = f16_to_f32(b[i]);
    if (!(std::fabs(x - y) <= rel * (1 + std::fabs(x)))) ++off;
  }
  return off + static_cast<int>(a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// `rows` rows of `cols` elements of type t. Quantized formats: random bytes
// (every quant and scale bit pattern) with the float scales set to sane
// values (random_blocks.h); float formats: uniform(-1, 1).
inline std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int64_t rb = row_bytes(t, cols);
  std::vector<uint8_t> w(static_cast<size_t>(rb * rows));
  std::uniform_real_distribution<float> f(-1.f, 1.f);
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = f(rng);
      if (t == DType::F32) std::memcpy(&w[i * 4], &v, 4);
      if (t == DType::F16) put_f16(&w[i * 2], v);
      if (t == DType::BF16) { const uint16_t h = f32_to_bf16(v); std::memcpy(&w[i * 2], &h, 2); }
    }
    return w;
  }
  random_blocks(t, w.data(), rows * cols / type_info(t).block_size, rng);
  return w;
}

// Row r of w dequantised by the CPU reference.
inline std::vector<float> dequant_row(DType t, const std::vector<uint8_t>& w, int64_t r, int64_t cols) {
  std::vector<float> out(cols);
  const int64_t rb = row_bytes(t, cols);
  dequantize_row_ref(t, w.data() + r * rb, out.data(), cols);
  return out;
}

// Reference product of one row with x, and the error bound a kernel that
// quantizes x to int8 per block of 32 (d = amax/127) may show: the sum of
// |w_i| * d_i / 2, plus float rounding relative to sum |w_i x_i| (f32
// summation only, 2e-6, for float weights with f32 activations).
struct RefDot {
  double value = 0, bound = 0;
};
inline RefDot ref_dot(const std::vector<float>& wrow, const float* x, int64_t n, bool q8_activations) {
  RefDot r;
  double abs_sum = 0, quant_err = 0;
  for (int64_t b = 0; b < n; b += 32) {
    float amax = 0;
    for (int64_t i = b; i < std::min<int64_t>(b + 32, n); ++i) amax = std::max(amax, std::fabs(x[i]));
    const double half_step = q8_activations ? amax / 127.0 / 2.0 : 0.0;
    for (int64_t i = b; i < std::min<int64_t>(b + 32, n); ++i) {
      r.value += static_cast<double>(wrow[i]) * x[i];
      abs_sum += std::fabs(static_cast<double>(wrow[i]) * x[i]);
      quant_err += std::fabs(static_cast<double>(wrow[i])) * half_step;
    }
  }
  r.bound = quant_err * 1.001 + (q8_activations ? 3e-4 : 2e-6) * abs_sum + 1e-6;
  return r;
}

// Activations on the device in the form a weight type's kernel takes: f32,
// plus their Q8 blocks where the type's kernel reads those.
struct DevInput {
  DeviceBuffer f32, q8buf;
  MatvecInput in;
};
inline DevInput make_matvec_input(DType t, const std::vector<float>& x, int64_t cols, int64_t nvec, cudaStream_t s) {
  DevInput d;
  d.f32 = upload(x);
  d.in.f32 = d.f32.as<float>();
  if (matvec_takes_q8(t)) {
    d.q8buf = DeviceBuffer(q8act_bytes(cols, nvec));
    d.in.q8 = q8act_view(d.q8buf.get(), cols, nvec);
    quantize_q8act(d.f32.as<float>(), cols, nvec, d.in.q8, s);
  }
  return d;
}

}  // namespace ms::cuda::test
