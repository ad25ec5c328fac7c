// The backend-ops registry (as llama.cpp's test-backend-ops): every op the
// engine runs on a fast path -- SIMD on the CPU, CUDA on the GPU -- listed
// once, with the shapes to try, how to make random inputs for one shape, its
// scalar reference (src/cpu *_ref, src/quant *_ref) and each implementation.
// backend_ops_test.cpp runs every (op, implementation) pair over every shape:
// outputs start poisoned (NaN), and the result must be finite and within the
// op's tolerance of the reference.
//
// Error measure: the largest |got - ref| over the output, divided by the
// output's error scale: per element where the op says (dot products: the sum
// of |w_i * a_i| of that row, the size of the float rounding), else the
// largest |ref| of the whole output (llama.cpp's NMSE is the squared cousin).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ms::backend_ops {

// One shape (and parameter set) of an op: named integer parameters (sizes,
// modes, types as their enum values), a seed for its random inputs, and a
// label for the report.
struct Case {
  std::string label;
  std::map<std::string, int64_t> p;
  uint32_t seed = 1;
  int64_t at(const std::string& k) const;
};

// The random inputs of one case and the reference output computed from them.
struct Problem {
  std::map<std::string, std::vector<float>> f;    // float inputs
  std::map<std::string, std::vector<uint8_t>> b;  // raw bytes: quantized weights, caches
  std::map<std::string, std::vector<int32_t>> i;  // integer inputs: positions, ids
  std::vector<double> ref;                        // what the scalar reference computed
  std::vector<double> scale;                      // per-element error scale (empty: max |ref|)
};

struct Impl {
  std::string name;  // "avx2", "avx512", "dispatched", "cpu", "cuda_...": [A-Za-z0-9_]
  bool gpu = false;  // runs on a CUDA device (labelled gpu, skipped without one)
  // Why this implementation cannot run here ("" when it can): a CPU without
  // the ISA, a type without a kernel, no CUDA device.
  std::function<std::string()> unavailable;
  // Output of the implementation on the problem's inputs, of ref's size. The
  // output buffer must start NaN-filled (poison), so unwritten elements fail.
  std::function<std::vector<float>(const Case&, const Problem&)> run;
  double tol = -1;  // < 0: the op's tolerance
  // Cases this implementation does not take (a kernel's limits), "" to run it.
  std::function<std::string(const Case&)> skip_case;
};

struct Op {
  std::string name;  // [A-Za-z0-9_]
  std::vector<Case> cases;
  std::function<Problem(const Case&)> make;  // inputs + reference
  double tol = 1e-5;
  std::vector<Impl> impls;
};

class Registry {
 public:
  Op& add(Op op);
  // The op called name (ms::Error when there is none).
  Op& op(const std::string& name);
  bool has(const std::string& name) const;
  // Adds an implementation to an op registered before.
  void add_impl(const std::string& op_name, Impl impl);
  const std::vector<Op>& ops() const { return ops_; }

 private:
  std::vector<Op> ops_;
};

// Every op, built once: the quant ops, the CPU ops, then the CUDA
// implementations where the build has CUDA.
const Registry& registry();

// The files that fill it (each registers its ops or implementations).
void register_quant_ops(Registry& r);
void register_cpu_ops(Registry& r);
void register_cuda_impls(Registry& r);  // no-op in a build without CUDA
void register_cuda_fused_impls(Registry& r);  // ops_cuda_fused.cpp (no-op without CUDA)
void register_cuda_moe_impls(Registry& r);    // ops_cuda_moe.cpp (no-op without CUDA)

// ---------------------------------------------------------------- comparison
struct Verdict {
  bool ok = false;
  double err = 0;      // max |got - ref| / scale
  int64_t worst = -1;  // element of the largest error
  int64_t not_finite = 0;
  std::string detail;  // one line for the report
};
Verdict compare(const Problem& p, const std::vector<float>& got, double tol);

}  // namespace ms::backend_ops
