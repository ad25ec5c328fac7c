// The quantized-format ops on the CPU: per weight type, the row dots with the
// CPU's activation formats (vec_dot_<T>: the AVX2 and AVX-512 kernels called
// directly, the dispatcher, the threaded matvec and small-batch matmul), the
// row dots with the GPU's Q8 activations (dot_q8_<T>, the rounding the CUDA
// kernels use), dequantization, and the activation quantizers.
// References: vec_dot_ref, vec_dot_gpu_q8_ref, dequantize_row_ref,
// quantize_row_ref, quantize_row_gpu_q8_ref (src/quant).
#include <cmath>
#include <string>

#include "backend_ops/inputs.h"
#include "backend_ops/quant_cases.h"
#include "backend_ops/registry.h"
#include "cpu/matvec.h"
#include "cpu/thread_pool.h"
#include "quant/gpu_q8.h"
#include "quant/gpu_q8_sub32.h"
#include "quant/simd_kernels.h"
#include "util/error.h"

namespace ms::backend_ops {
namespace {

ThreadPool& pool() {
  static ThreadPool p(3);  // 3 threads: row chunks split unevenly
  return p;
}

std::string no_kernel(bool cpu_has, const char* isa, bool kernel) {
  if (!cpu_has) return std::string("this CPU lacks ") + isa;
  return kernel ? "" : std::string("no ") + isa + " kernel for this type";
}

// ---------------------------------------------------------------- vec_dot_<T>
// Output [nvec][rows]: weight row r with activation vector v, both in the
// weight type's vec_dot_type.
Problem make_vec_dot(const Case& c) {
  const DType t = case_type(c);
  const int64_t n = c.at("n"), rows = c.at("rows"), nvec = c.at("nvec");
  const bool extreme = c.at("extreme") != 0;
  std::mt19937 rng(c.seed);
  Problem p;
  const int64_t stride = row_bytes(t, n) + (rows % 2 ? 0 : 64);
  p.b["w"] = weights(t, rows, n, stride, rng, extreme);
  const DType at = type_info(t).vec_dot_type;
  const int64_t ab = row_bytes(at, n);
  std::vector<float> xs;
  std::vector<uint8_t> acts(static_cast<size_t>(ab * nvec));
  for (int64_t v = 0; v < nvec; ++v) {
    const std::vector<float> x = activations(n, rng, extreme);
    xs.insert(xs.end(), x.begin(), x.end());
    quantize_row_ref(at, x.data(), acts.data() + v * ab, n);
  }
  p.f["x"] = xs;
  p.b["act"] = acts;
  for (int64_t v = 0; v < nvec; ++v) {
    const std::vector<float> a = dequant(at, acts.data() + v * ab, n);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* wr = p.b["w"].data() + r * stride;
      const std::vector<float> wf = dequant(t, wr, n);
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(wf[i]) * a[i]);
      p.ref.push_back(vec_dot_ref(t, n, wr, acts.data() + v * ab));
      p.scale.push_back(s + 1e-30);
    }
  }
  p.i["stride"] = {static_cast<int32_t>(stride)};
  add_residual_to_reference(c, p, rng);
  return p;
}

using RowsFn = std::function<void(int64_t n, const void* w, int64_t stride, int64_t rows, const void* a, float* out)>;

// Runs a row kernel once per activation vector.
std::vector<float> run_rows(const Case& c, const Problem& p, const RowsFn& fn, int64_t act_bytes) {
  const int64_t n = c.at("n"), rows = c.at("rows"), nvec = c.at("nvec");
  std::vector<float> out;
  for (int64_t v = 0; v < nvec; ++v) {
    std::vector<float> part = poisoned(static_cast<size_t>(rows + 1));
    part[rows] = 12345.f;  // a guard after the last row
    fn(n, p.b.at("w").data(), p.i.at("stride")[0], rows, p.b.at("act").data() + v * act_bytes, part.data());
    if (part[rows] != 12345.f) throw Error("row kernel wrote past its last row (" + c.label + ")");
    out.insert(out.end(), part.begin(), part.end() - 1);
  }
  return out;
}

void add_vec_dot(Registry& reg, DType t) {
  Op op;
  op.name = std::string("vec_dot_") + type_name(t);
  op.cases = dot_cases(t, /*gpu_q8=*/false);
  op.make = make_vec_dot;
  op.tol = 2e-5;
  const DType at = type_info(t).vec_dot_type;
  auto act_bytes = [at](const Case& c) { return row_bytes(at, c.at("n")); };
  op.impls.push_back({"avx2", false,
                      [t] { return no_kernel(simd::cpu_supports_avx2(), "AVX2",
                                             simd::cpu_supports_avx2() && simd::vec_dot_rows_kernel_avx2(t)); },
                      [=](const Case& c, const Problem& p) {
                        return run_rows(c, p, simd::vec_dot_rows_kernel_avx2(t), act_bytes(c));
                      }});
  op.impls.push_back({"avx512", false,
                      [t] { return no_kernel(simd::cpu_supports_avx512(), "AVX-512 VNNI",
                                             simd::cpu_supports_avx512() && simd::vec_dot_rows_kernel_avx512(t)); },
                      [=](const Case& c, const Problem& p) {
                        return run_rows(c, p, simd::vec_dot_rows_kernel_avx512(t), act_bytes(c));
                      }});
  op.impls.push_back({"dispatched", false, nullptr, [=](const Case& c, const Problem& p) {
                        return run_rows(
                            c, p,
                            [t](int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
                              vec_dot_rows(t, n, w, s, rows, a, out);
                            },
                            act_bytes(c));
                      }});
  // The threaded matvec (one vector at a time) and the small-batch matmul
  // quantize the float activations themselves (bit-identical quantizers).
  op.impls.push_back({"cpu_matvec", false, nullptr, [t](const Case& c, const Problem& p) {
                        const int64_t n = c.at("n"), rows = c.at("rows"), nvec = c.at("nvec");
                        const std::vector<uint8_t> w = dense_rows(c, p);
                        std::vector<float> out = poisoned(static_cast<size_t>(rows * nvec));
                        for (int64_t v = 0; v < nvec; ++v)
                          matvec(pool(), t, w.data(), rows, n, p.f.at("x").data() + v * n, out.data() + v * rows);
                        return out;
                      }});
  op.impls.push_back({"cpu_matmul", false, nullptr, [t](const Case& c, const Problem& p) {
                        const int64_t n = c.at("n"), rows = c.at("rows"), nvec = c.at("nvec");
                        const std::vector<uint8_t> w = dense_rows(c, p);
                        std::vector<float> out = poisoned(static_cast<size_t>(rows * nvec));
                        matmul(pool(), t, w.data(), rows, n, p.f.at("x").data(), nvec, out.data());
                        return out;
                      }});
  for (Impl& i : op.impls) {
    i.skip_case = skip_gpu_sized;
    i.run = [run = i.run](const Case& c, const Problem& p) {
      std::vector<float> out = run(c, p);
      add_residual(c, p, out);
      return out;
    };
  }
  reg.add(std::move(op));
}

// ---------------------------------------------------------------- dot_q8_<T>
// The GPU's activation rounding (quant/gpu_q8.h): x quantized per 32 with an
// f32 scale; output [nvec][rows].
Problem make_dot_q8(const Case& c) {
  const DType t = case_type(c);
  const int64_t n = c.at("n"), rows = c.at("rows"), nvec = c.at("nvec");
  const bool extreme = c.at("extreme") != 0;
  std::mt19937 rng(c.seed);
  Problem p;
  const int64_t stride = row_bytes(t, n) + (rows % 2 ? 0 : 64);
  p.b["w"] = weights(t, rows, n, stride, rng, extreme);
  const int64_t ab = gpu_q8_row_bytes(n);
  std::vector<float> xs;
  std::vector<uint8_t> acts(static_cast<size_t>(ab * nvec));
  for (int64_t v = 0; v < nvec; ++v) {
    const std::vector<float> x = activations(n, rng, extreme);
    xs.insert(xs.end(), x.begin(), x.end());
    quantize_row_gpu_q8_ref(x.data(), acts.data() + v * ab, n);
  }
  p.f["x"] = xs;
  p.b["act"] = acts;
  std::vector<std::vector<float>> wf;
  for (int64_t r = 0; r < rows; ++r) wf.push_back(dequant(t, p.b["w"].data() + r * stride, n));
  for (int64_t v = 0; v < nvec; ++v) {
    const GpuQ8RowConst a = gpu_q8_row(static_cast<const void*>(acts.data() + v * ab), n);
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(wf[r][i]) * a.q[i] * a.d[i / 32]);
      p.ref.push_back(vec_dot_gpu_q8_ref(t, n, p.b["w"].data() + r * stride, acts.data() + v * ab));
      p.scale.push_back(s + 1e-30);
    }
  }
  p.i["stride"] = {static_cast<int32_t>(stride)};
  add_residual_to_reference(c, p, rng);
  return p;
}

void add_dot_q8(Registry& reg, DType t) {
  Op op;
  op.name = std::string("dot_q8_") + type_name(t);
  op.cases = dot_cases(t, /*gpu_q8=*/true);
  op.make = make_dot_q8;
  op.tol = 2e-5;
  auto act_bytes = [](const Case& c) { return gpu_q8_row_bytes(c.at("n")); };
  op.impls.push_back({"avx2", false,
                      [t] { return no_kernel(simd::cpu_supports_avx2(), "AVX2",
                                             simd::cpu_supports_avx2() && simd::gpu_q8_rows_kernel_avx2(t)); },
                      [=](const Case& c, const Problem& p) {
                        return run_rows(c, p, simd::gpu_q8_rows_kernel_avx2(t), act_bytes(c));
                      }});
  op.impls.push_back({"avx512", false,
                      [t] {
                        return no_kernel(simd::cpu_supports_avx512(), "AVX-512 VNNI",
                                         simd::cpu_supports_avx512() && simd::gpu_q8_sub32_fast_kernel_avx512(t));
                      },
                      [=](const Case& c, const Problem& p) {
                        return run_rows(c, p, simd::gpu_q8_sub32_fast_kernel_avx512(t), act_bytes(c));
                      }});
  op.impls.push_back({"dispatched", false, nullptr, [=](const Case& c, const Problem& p) {
                        return run_rows(
                            c, p,
                            [t](int64_t n, const void* w, int64_t s, int64_t rows, const void* a, float* out) {
                              vec_dot_rows_gpu_q8(t, n, w, s, rows, a, out);
                            },
                            act_bytes(c));
                      }});
  for (Impl& i : op.impls) {
    i.skip_case = skip_gpu_sized;
    i.run = [run = i.run](const Case& c, const Problem& p) {
      std::vector<float> out = run(c, p);
      add_residual(c, p, out);
      return out;
    };
  }
  reg.add(std::move(op));
}

// ---------------------------------------------------------------- dequantize_<T>
Problem make_dequantize(const Case& c) {
  const DType t = case_type(c);
  const int64_t n = c.at("n"), rows = c.at("rows");
  std::mt19937 rng(c.seed);
  Problem p;
  p.b["w"] = weights(t, rows, n, row_bytes(t, n), rng, c.at("extreme") != 0);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> v = dequant(t, p.b["w"].data() + r * row_bytes(t, n), n);
    p.ref.insert(p.ref.end(), v.begin(), v.end());
  }
  return p;
}

void add_dequantize(Registry& reg, DType t) {
  Op op;
  op.name = std::string("dequantize_") + type_name(t);
  for (const Case& c : dot_cases(t, false))
    if (c.at("nvec") == 1 && !c.at("gpu_only")) op.cases.push_back(c);
  op.make = make_dequantize;
  op.tol = 1e-6;
  op.impls.push_back({"dispatched", false, nullptr, [t](const Case& c, const Problem& p) {
                        const int64_t n = c.at("n"), rows = c.at("rows");
                        std::vector<float> out = poisoned(static_cast<size_t>(n * rows));
                        for (int64_t r = 0; r < rows; ++r)
                          dequantize_row(t, p.b.at("w").data() + r * row_bytes(t, n), out.data() + r * n, n);
                        return out;
                      }});
  reg.add(std::move(op));
}

// ---------------------------------------------------------------- quantizers
// Output: the quantized bytes, one float each; bit-identity is the contract.
std::vector<float> bytes_as_floats(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

Problem make_quantize(const Case& c) {
  const DType at = static_cast<DType>(c.at("type"));
  const int64_t n = c.at("n");
  std::mt19937 rng(c.seed);
  Problem p;
  p.f["x"] = activations(n, rng, c.at("extreme") != 0);
  std::vector<uint8_t> q(static_cast<size_t>(at == DType::F32 ? 0 : row_bytes(at, n)));
  if (at == DType::F32) {  // the GPU Q8 layout (quantize_gpu_q8)
    q.resize(static_cast<size_t>(gpu_q8_row_bytes(n)));
    quantize_row_gpu_q8_ref(p.f["x"].data(), q.data(), n);
  } else {
    quantize_row_ref(at, p.f["x"].data(), q.data(), n);
  }
  p.ref.assign(q.begin(), q.end());
  return p;
}

std::vector<Case> quantize_cases(DType at) {
  std::vector<Case> v;
  const int64_t b = at == DType::Q8_K ? 256 : 32;
  uint32_t seed = 700 + static_cast<uint32_t>(at) * 16;
  for (int extreme : {0, 1})
    for (int64_t n : {b, 3 * b, 4096 + b}) {
      Case c;
      c.label = "n=" + std::to_string(n) + (extreme ? " extreme" : "");
      c.p = {{"type", static_cast<int64_t>(at)}, {"n", n}, {"extreme", extreme}};
      c.seed = seed++;
      v.push_back(c);
    }
  return v;
}

void add_quantize(Registry& reg, DType at) {
  Op op;
  op.name = std::string("quantize_") + type_name(at);
  op.cases = quantize_cases(at);
  op.make = make_quantize;
  op.tol = 0;
  auto run_with = [](std::function<void(const float*, void*, int64_t)> fn) {
    return [fn](const Case& c, const Problem& p) {
      std::vector<uint8_t> q(p.ref.size(), 0xA5);  // poison: any byte not written differs
      fn(p.f.at("x").data(), q.data(), c.at("n"));
      return bytes_as_floats(q);
    };
  };
  op.impls.push_back({"avx2", false,
                      [at] { return no_kernel(simd::cpu_supports_avx2(), "AVX2",
                                              simd::cpu_supports_avx2() && simd::quantize_act_kernel_avx2(at)); },
                      run_with([at](const float* x, void* q, int64_t n) { simd::quantize_act_kernel_avx2(at)(x, q, n); })});
  op.impls.push_back({"avx512", false,
                      [at] { return no_kernel(simd::cpu_supports_avx512(), "AVX-512",
                                              simd::cpu_supports_avx512() && simd::quantize_act_kernel_avx512(at)); },
                      run_with([at](const float* x, void* q, int64_t n) { simd::quantize_act_kernel_avx512(at)(x, q, n); })});
  op.impls.push_back({"dispatched", false, nullptr,
                      run_with([at](const float* x, void* q, int64_t n) { quantize_row_act(at, x, q, n); })});
  reg.add(std::move(op));
}

void add_quantize_gpu_q8(Registry& reg) {
  Op op;
  op.name = "quantize_gpu_q8";
  op.cases = quantize_cases(DType::Q8_0);
  for (Case& c : op.cases) c.p["type"] = static_cast<int64_t>(DType::F32);  // make_quantize: the GPU Q8 layout
  op.make = make_quantize;
  op.tol = 0;
  auto run_with = [](std::function<void(const float*, void*, int64_t)> fn) {
    return [fn](const Case& c, const Problem& p) {
      std::vector<uint8_t> q(p.ref.size(), 0xA5);
      fn(p.f.at("x").data(), q.data(), c.at("n"));
      return bytes_as_floats(q);
    };
  };
  op.impls.push_back({"avx2", false,
                      [] { return no_kernel(simd::cpu_supports_avx2(), "AVX2",
                                            simd::cpu_supports_avx2() && simd::gpu_q8_quantize_kernel_avx2()); },
                      run_with([](const float* x, void* q, int64_t n) { simd::gpu_q8_quantize_kernel_avx2()(x, q, n); })});
  op.impls.push_back({"dispatched", false, nullptr, run_with(quantize_row_gpu_q8)});
  reg.add(std::move(op));
}

}  // namespace

void register_quant_ops(Registry& reg) {
  for (DType t : dot_types()) add_vec_dot(reg, t);
  for (DType t : dot_types())
    if (gpu_q8_supported(t)) add_dot_q8(reg, t);
  for (DType t : dot_types()) add_dequantize(reg, t);
  for (DType at : {DType::Q8_0, DType::Q8_1, DType::Q8_K}) add_quantize(reg, at);
  add_quantize_gpu_q8(reg);
}

}  // namespace ms::backend_ops
