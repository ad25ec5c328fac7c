// Internal: the vector kernels of delta_net.cpp's recurrence, one ISA level
// per file (delta_net_avx2.cpp is built with AVX2/FMA flags; delta_net.cpp
// calls it only when cpu_features().avx2 says the CPU has them).
#pragma once

namespace ms::delta_kernels {

// sum_i a[i] * b[i]
float dot_avx2(const float* a, const float* b, int n);
// row[i] = row[i] * decay + d * k[i], then returns sum_i row[i] * q[i]
float update_avx2(float* row, const float* k, const float* q, float decay, float d, int n);

}  // namespace ms::delta_kernels
