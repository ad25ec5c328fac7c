// The weight types and shapes of the per-type ops (vec_dot_<T>, dot_q8_<T>,
// dequantize_<T>), shared by the CPU and CUDA registrations.
#pragma once
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend_ops/registry.h"
#include "quant/types.h"

namespace ms::backend_ops {

inline DType case_type(const Case& c) { return static_cast<DType>(c.at("type")); }

// The CPU implementations' skip_case: the GPU-sized cases are left to the GPU.
inline std::string skip_gpu_sized(const Case& c) { return c.at("gpu_only") ? "a GPU-sized case" : ""; }

// Every weight type the engine computes with (the ones with a CPU row-dot
// path; Q8_0/Q8_1/Q8_K activation formats are covered by quantize_*).
inline const std::vector<DType>& dot_types() {
  static const std::vector<DType> k = {
      DType::F32,   DType::F16,     DType::BF16,   DType::Q4_0,    DType::Q4_1,   DType::Q5_0,   DType::Q5_1,
      DType::Q8_0,  DType::Q2_K,    DType::Q3_K,   DType::Q4_K,    DType::Q5_K,   DType::Q6_K,   DType::MXFP4,
      DType::TQ1_0, DType::TQ2_0,   DType::IQ1_S,  DType::IQ1_M,   DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S,
      DType::IQ3_XXS, DType::IQ3_S, DType::IQ4_NL, DType::IQ4_XS};
  return k;
}

// Output [nvec][rows] = the row dots, plus f["res"] (same shape) where the
// case has "res" (the kernels' residual input; CPU implementations add it
// after their dots).
// Shapes (n = row length, rows, nvec = activation vectors) from one block to
// a few thousand elements, row and vector counts that are not multiples of
// any tile (7, 33, 67; 3, 20), an "extreme" case (every quant and scale at
// its maximum in some blocks, activations at +-127 after rounding). Float
// types add row lengths that are no multiple of 8 or 32 (not for the GPU Q8
// dots, which need n a multiple of 32).
inline std::vector<Case> dot_cases(DType t, bool gpu_q8) {
  const int64_t bs = type_info(t).block_size;
  const int64_t b = bs == 1 ? 32 : bs;  // float types: lengths in 32s, plus the odd ones below
  struct S {
    int64_t n, rows, nvec;
    int extreme;  // 1: extreme values; 2: a GPU-sized case (CPU implementations skip it)
  };
  std::vector<S> shapes = {{b, 1, 1, 0}, {3 * b, 7, 3, 0}, {b * (2048 / b) + b, 33, 1, 0},
                           {b * (2048 / b) + b, 67, 20, 0}, {3 * b, 5, 2, 1}};
  if (bs == 1 && !gpu_q8) {
    shapes.push_back({7, 3, 1, 0});
    shapes.push_back({2051, 9, 2, 0});
  }
  // Past one tile of the int8 tensor-core GEMM in rows and vectors (its
  // tiles are 64/128 rows by 32/64 vectors): run by the GPU only.
  shapes.push_back({b * (512 / b) + (b == 32 ? b : 0), 130, 65, 2});
  std::vector<Case> v;
  uint32_t seed = 1000 + static_cast<uint32_t>(t) * 64 + (gpu_q8 ? 32 : 0);
  for (const S& s : shapes) {
    Case c;
    c.label = "n=" + std::to_string(s.n) + " rows=" + std::to_string(s.rows) + " nvec=" + std::to_string(s.nvec) +
              (s.extreme == 1 ? " extreme" : "");
    c.p = {{"type", static_cast<int64_t>(t)}, {"n", s.n},       {"rows", s.rows},
           {"nvec", s.nvec},                 {"extreme", s.extreme == 1}, {"gpu_only", s.extreme == 2},
           {"res", s.nvec == 3}};
    c.seed = seed++;
    v.push_back(c);
  }
  return v;
}

// The weight rows of a dot problem (b["w"], rows i["stride"][0] bytes apart)
// packed back to back, as a dense matrix.
inline std::vector<uint8_t> dense_rows(const Case& c, const Problem& p) {
  const DType t = case_type(c);
  const int64_t n = c.at("n"), rows = c.at("rows"), stride = p.i.at("stride")[0], rb = row_bytes(t, n);
  std::vector<uint8_t> w(static_cast<size_t>(rb * rows));
  for (int64_t r = 0; r < rows; ++r) std::memcpy(w.data() + r * rb, p.b.at("w").data() + r * stride, rb);
  return w;
}

// Adds the residual of a case with one (see dot_cases) to the dots of an
// implementation that has no residual input.
inline void add_residual(const Case& c, const Problem& p, std::vector<float>& out) {
  if (!c.at("res")) return;
  const std::vector<float>& r = p.f.at("res");
  for (size_t k = 0; k < out.size() && k < r.size(); ++k) out[k] += r[k];
}

// The residual's part in a dot problem: added to the reference, and its size
// to the error scale (the float addition rounds relative to it).
inline void add_residual_to_reference(const Case& c, Problem& p, std::mt19937& rng) {
  if (!c.at("res")) return;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float>& r = p.f["res"];
  r.resize(p.ref.size());
  for (size_t k = 0; k < r.size(); ++k) {
    r[k] = u(rng);
    p.ref[k] += r[k];
    p.scale[k] += std::fabs(r[k]);
  }
}

}  // namespace ms::backend_ops
