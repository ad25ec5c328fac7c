// Helpers of the registry's CUDA files that came after ops_cuda.cpp
// (ops_cuda_fused.cpp, ops_cuda_moe.cpp): one stream, the device checks an
// implementation's `unavailable` uses, poisoned device outputs, and the
// scalar GPU-Q8 row dot the quantized references are built from.
// CUDA builds only (include inside #ifdef MOESTREAM_HAVE_CUDA).
#pragma once
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend_ops/inputs.h"
#include "backend_ops/registry.h"
#include "cuda/cuda_test_util.h"
#include "cuda/device.h"
#include "cuda/matvec.h"
#include "quant/gpu_q8.h"

namespace ms::backend_ops::gpu {

using cuda::DeviceBuffer;
using cuda::test::download;
using cuda::test::upload;

// One stream for every launch of these files, never destroyed (static
// destruction may run after the CUDA runtime has shut down).
inline cudaStream_t stream() {
  static cuda::Stream* s = new cuda::Stream();
  return s->get();
}

inline std::string no_device() {
  static const std::string why = [] {
    std::string w;
    return cuda::device_count(&w) == 0 ? "no CUDA device (" + w + ")" : std::string();
  }();
  return why;
}

// The int8 tensor-core paths (gemm.h) need sm_80+.
inline std::string no_int8_mma() {
  const std::string d = no_device();
  if (!d.empty()) return d;
  return cuda::device_info(0).cc_major >= 8 ? "" : "the int8 tensor-core path needs sm_80+";
}

inline DeviceBuffer poisoned_dev(size_t n_floats) { return cuda::test::poisoned(n_floats); }
inline std::vector<float> result(const DeviceBuffer& b, size_t n) { return download<float>(b.get(), n); }

inline Impl gpu_impl(std::string name, std::function<std::vector<float>(const Case&, const Problem&)> run,
                     double tol = -1, std::function<std::string()> unavailable = no_device) {
  Impl i;
  i.name = std::move(name);
  i.gpu = true;
  i.unavailable = std::move(unavailable);
  i.run = std::move(run);
  i.tol = tol;
  return i;
}

inline Case make_case(std::string label, std::map<std::string, int64_t> p, uint32_t seed) {
  Case c;
  c.label = std::move(label);
  c.p = std::move(p);
  c.seed = seed;
  return c;
}

inline cuda::MatrixSet dense_matrix(DType t, int64_t rows, int64_t cols, const void* base, int64_t stride = 0) {
  cuda::MatrixSet m;
  m.type = t;
  m.rows = rows;
  m.cols = cols;
  m.base = base;
  m.stride = stride;
  return m;
}

// x as the kernels see it for weight type t: quantized to the GPU's Q8 for
// the types that take Q8 (cuda::matvec_takes_q8), as is for float types.
struct RefActs {
  bool q8 = false;
  std::vector<uint8_t> a;  // the GPU Q8 row
  std::vector<float> x;    // float types: the f32 vector
};
inline RefActs ref_acts(DType t, const float* x, int64_t n) {
  RefActs r;
  r.q8 = cuda::matvec_takes_q8(t);
  if (r.q8) {
    r.a.resize(static_cast<size_t>(gpu_q8_row_bytes(n)));
    quantize_row_gpu_q8_ref(x, r.a.data(), n);
  } else {
    r.x.assign(x, x + n);
  }
  return r;
}

// One weight row (n elements of type t) times the activations: the value (the
// scalar reference: vec_dot_gpu_q8_ref, or a double sum over the dequantized
// float row) and sum |w_i a_i| (the float rounding's scale) in *abs.
inline double ref_dot(DType t, const uint8_t* row, int64_t n, const RefActs& a, double* abs) {
  const std::vector<float> w = dequant(t, row, n);
  double s = 0, m = 0;
  if (a.q8) {
    const GpuQ8RowConst q = gpu_q8_row(static_cast<const void*>(a.a.data()), n);
    for (int64_t i = 0; i < n; ++i) m += std::fabs(w[i] * q.q[i] * static_cast<double>(q.d[i / 32]));
    s = vec_dot_gpu_q8_ref(t, n, row, a.a.data());
  } else {
    for (int64_t i = 0; i < n; ++i) {
      s += static_cast<double>(w[i]) * a.x[i];
      m += std::fabs(static_cast<double>(w[i]) * a.x[i]);
    }
  }
  if (abs) *abs = m;
  return s;
}

// The activations' device form for weight type t: f32 (float types) or the
// device's Q8 (quantize_q8act, bit-identical to quantize_row_gpu_q8_ref).
struct DevActs {
  DeviceBuffer f32, q8buf;
  cuda::MatvecInput in;
};
inline void make_dev_acts(DType t, const std::vector<float>& x, int64_t n, int64_t nvec, DevActs& d) {
  d.f32 = upload(x);
  d.in.f32 = d.f32.as<float>();
  if (cuda::matvec_takes_q8(t)) {
    d.q8buf = DeviceBuffer(cuda::q8act_bytes(n, nvec));
    d.in.q8 = cuda::q8act_view(d.q8buf.get(), n, nvec);
    cuda::quantize_q8act(d.f32.as<float>(), n, nvec, d.in.q8, stream());
    d.in.f32 = nullptr;
  }
}

}  // namespace ms::backend_ops::gpu
