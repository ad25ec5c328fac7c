// AVX2/FMA row kernels of the delta-rule recurrence (see delta_net_kernels.h).
// A state row is head_k floats (128 in Qwen3.5/3.6): two accumulators hide
// the FMA latency; the tail is scalar.
#include <immintrin.h>

#include "cpu/delta_net_kernels.h"
#include "quant/simd_hsum.h"

namespace ms::delta_kernels {
namespace {

using simd::hsum;

}  // namespace

float dot_avx2(const float* a, const float* b, int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

float update_avx2(float* row, const float* k, const float* q, float decay, float d, int n) {
  const __m256 vdec = _mm256_set1_ps(decay), vd = _mm256_set1_ps(d);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 r0 = _mm256_fmadd_ps(vd, _mm256_loadu_ps(k + i), _mm256_mul_ps(_mm256_loadu_ps(row + i), vdec));
    const __m256 r1 =
        _mm256_fmadd_ps(vd, _mm256_loadu_ps(k + i + 8), _mm256_mul_ps(_mm256_loadu_ps(row + i + 8), vdec));
    _mm256_storeu_ps(row + i, r0);
    _mm256_storeu_ps(row + i + 8, r1);
    acc0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q + i), acc0);
    acc1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(q + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 r0 = _mm256_fmadd_ps(vd, _mm256_loadu_ps(k + i), _mm256_mul_ps(_mm256_loadu_ps(row + i), vdec));
    _mm256_storeu_ps(row + i, r0);
    acc0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q + i), acc0);
  }
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) {
    row[i] = row[i] * decay + d * k[i];
    s += row[i] * q[i];
  }
  return s;
}

}  // namespace ms::delta_kernels
