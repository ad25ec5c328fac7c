// Matvec dispatch (format -> kernel instantiation) and Q8 activation quantization.
#include <string>

#include "cuda/device.h"
#include "cuda/matvec_kernel.cuh"
#include "cuda/pdl.cuh"
#include "cuda/warp_q8.cuh"
#include "util/error.h"

namespace ms::cuda {

namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t v) { return (v + kAlign - 1) & ~(kAlign - 1); }

// One warp per block of 32: amax -> d = amax/127, q = round(x/d).
__global__ void quantize_q8act_kernel(const float* __restrict__ x, int64_t n_blocks, int8_t* __restrict__ q,
                                      float2* __restrict__ ds) {
  dev::pdl_wait();  // x is the previous kernel's output
  dev::pdl_trigger();
  const int64_t blk = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (blk >= n_blocks) return;  // whole warps exit together
  const int lane = threadIdx.x % 32;
  dev::warp_q8(x[blk * 32 + lane], q + blk * 32 + lane, ds + blk, lane);
}

int item_elems(DType t) {
  switch (t) {
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return 64;
    case DType::Q8_0: case DType::Q4_0: case DType::MXFP4: return 32;
#define MS_SUB32_CASE(T, D) case DType::T:
    MS_SUB32_TYPES(MS_SUB32_CASE) return 32;  // one sub-block of 32 per item
#undef MS_SUB32_CASE
    default: return 1;
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// The decode fusion of matvec_kernel.cuh (null: a plain launch).
struct Fused {
  const float* combine_w = nullptr;  // kCombine: one token's slot weights
};

void run_matvec(const MatrixSet* ws, int parts, const MatvecInput& x, const MatvecGroups& g, float* y,
                int64_t y_stride, const float* residual, cudaStream_t stream, const Fused& fused = {}) {
  const MatrixSet& w = ws[0];
  if (!matvec_supported(w.type))
    throw Error(std::string("CUDA matvec: weight type ") + type_name(w.type) + " is not supported");
  if (w.rows <= 0 || w.cols <= 0) throw Error("CUDA matvec: empty matrix");
  if (g.max_groups <= 0 || g.max_groups > 65535 || g.per_group <= 0 || g.x_div <= 0)
    throw Error("CUDA matvec: bad group layout (max_groups " + std::to_string(g.max_groups) + ")");
  const int64_t rb = row_bytes(w.type, w.cols);  // throws for a partial block

  dev::MatvecParams p{};
  for (int z = 0; z < parts; ++z) {
    if (ws[z].type != w.type || ws[z].rows != w.rows || ws[z].cols != w.cols)
      throw Error("CUDA matvec_glu: gate and up differ in type or shape");
    if (ws[z].table == nullptr && ws[z].base == nullptr) throw Error("CUDA matvec: no weights given");
    dev::set_matrix(p, z, ws[z]);
  }
  p.rows = w.rows;
  p.row_bytes = rb;
  dev::set_groups(p, g);
  p.y = y;
  p.y_stride = y_stride > 0 ? y_stride : w.rows;
  p.residual = residual;
  p.combine_w = fused.combine_w;

  const int max_per_group = g.typical_per_group > 0 ? g.typical_per_group : g.per_group;
  if (matvec_takes_q8(w.type)) {
    if (x.q8.q == nullptr || x.q8.n != w.cols)
      throw Error("CUDA matvec: " + std::string(type_name(w.type)) + " weights need Q8 activations of " +
                  std::to_string(w.cols) + " elements");
    p.xq = x.q8.q;
    p.xds = reinterpret_cast<const float2*>(x.q8.ds);
    p.xq_n = x.q8.n;
    p.n_items = static_cast<int>(w.cols / item_elems(w.type));
    switch (w.type) {
      case DType::Q4_K: detail::matvec_launch_q4_k(p, g.max_groups, max_per_group, parts, stream); break;
      case DType::Q5_K: detail::matvec_launch_q5_k(p, g.max_groups, max_per_group, parts, stream); break;
      case DType::Q6_K: detail::matvec_launch_q6_k(p, g.max_groups, max_per_group, parts, stream); break;
      case DType::Q8_0: detail::matvec_launch_q8_0(p, g.max_groups, max_per_group, parts, stream); break;
      case DType::Q4_0: detail::matvec_launch_q4_0(p, g.max_groups, max_per_group, parts, stream); break;
      case DType::MXFP4: detail::matvec_launch_mxfp4(p, g.max_groups, max_per_group, parts, stream); break;
#define MS_SUB32_CASE(T, D) \
  case DType::T: detail::matvec_launch_##T(p, g.max_groups, max_per_group, parts, stream); break;
      MS_SUB32_TYPES(MS_SUB32_CASE)
#undef MS_SUB32_CASE
      default: throw Error(std::string("CUDA matvec: no kernel for ") + type_name(w.type));
    }
  } else {
    if (x.f32 == nullptr) throw Error("CUDA matvec: float weights need f32 activations");
    p.xf = x.f32;
    p.xf_stride = x.f32_stride > 0 ? x.f32_stride : w.cols;
    bool vec = w.cols % 8 == 0 && p.xf_stride % 4 == 0 && aligned16(x.f32);
    for (int z = 0; z < parts; ++z)
      vec = vec && aligned16(ws[z].base) && ws[z].stride % 16 == 0 && ws[z].offset % 16 == 0;
    p.n_items = static_cast<int>(vec ? w.cols / 8 : w.cols);
    const int kind = w.type == DType::F32 ? 0 : w.type == DType::F16 ? 1 : 2;
    detail::matvec_launch_float(kind, vec, p, g.max_groups, max_per_group, parts, stream);
  }
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t q8act_bytes(int64_t n, int64_t nvec) {
  return align_up(static_cast<size_t>(n * nvec)) + align_up(static_cast<size_t>(n / 32 * nvec) * 8);
}

Q8Act q8act_view(void* base, int64_t n, int64_t nvec) {
  Q8Act a;
  a.q = static_cast<int8_t*>(base);
  a.ds = reinterpret_cast<float*>(static_cast<char*>(base) + align_up(static_cast<size_t>(n * nvec)));
  a.n = n;
  return a;
}

void quantize_q8act(const float* x, int64_t n, int64_t nvec, Q8Act out, cudaStream_t stream) {
  if (n % 32 != 0) throw Error("quantize_q8act: n = " + std::to_string(n) + " is not a multiple of 32");
  if (out.n != n) throw Error("quantize_q8act: output is laid out for n = " + std::to_string(out.n));
  const int64_t n_blocks = n / 32 * nvec;
  if (n_blocks == 0) return;
  constexpr int kThreads = 256;
  const int64_t grid = (n_blocks + kThreads / 32 - 1) / (kThreads / 32);
  MS_CUDA_CHECK(launch_pdl(quantize_q8act_kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads), 0, stream, x,
                           n_blocks, out.q, reinterpret_cast<float2*>(out.ds)));
}

bool matvec_supported(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16:
    case DType::Q4_0: case DType::Q8_0: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
    case DType::MXFP4:
      return true;
#define MS_SUB32_CASE(T, D) case DType::T:
    MS_SUB32_TYPES(MS_SUB32_CASE)
#undef MS_SUB32_CASE
      return true;
    default:
      return false;
  }
}

bool matvec_takes_q8(DType t) {
  return t != DType::F32 && t != DType::F16 && t != DType::BF16;
}

void matvec(const MatrixSet& w, const MatvecInput& x, const MatvecGroups& groups, float* y, int64_t y_stride,
            const float* residual, cudaStream_t stream) {
  run_matvec(&w, 1, x, groups, y, y_stride, residual, stream);
}

void matvec_glu(const MatrixSet& gate, const MatrixSet& up, const MatvecInput& x, const MatvecGroups& groups,
                float* y, int64_t y_stride, cudaStream_t stream) {
  const MatrixSet ws[2] = {gate, up};
  run_matvec(ws, 2, x, groups, y, y_stride, nullptr, stream);
}

bool matvec_combine_supported(int k) { return k >= 1 && k <= dev::kCombineMaxSlots; }

void matvec_combine(const MatrixSet& w, const MatvecInput& x, int k, const int32_t* ids, int n_expert,
                    const float* weights, const float* residual, float* out, cudaStream_t stream) {
  if (!matvec_combine_supported(k))
    throw Error("CUDA matvec_combine: k = " + std::to_string(k) + " slots, at most " +
                std::to_string(dev::kCombineMaxSlots));
  if (weights == nullptr) throw Error("CUDA matvec_combine: no slot weights given");
  MatvecGroups g;
  g.max_groups = k;
  g.per_group = 1;
  g.n_expert = n_expert;
  g.expert = ids;
  Fused f;
  f.combine_w = weights;
  run_matvec(&w, 1, x, g, out, w.rows, residual, stream, f);
}

// Many vectors are spread over grid.y in groups of kLinearGroup (a prompt's
// gates, alpha and beta of a Gated DeltaNet layer, 32 rows: one group of 8192
// vectors left the whole prompt to 8 blocks). Every vector still goes through
// the same kernel (the several-vector one whenever n_vec >= 2), so the result
// does not depend on the split: the last group takes the remainder, keeping
// at least kLinearGroup + 1 vectors.
void linear(DType type, const void* w, int64_t rows, int64_t cols, const MatvecInput& x, int n_vec, float* y,
            const float* residual, cudaStream_t stream) {
  MatrixSet m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  m.base = w;
  constexpr int kLinearGroup = 8;
  constexpr int kMaxGroups = 65535;
  const int per_group = kLinearGroup * ((n_vec + kLinearGroup * kMaxGroups - 1) / (kLinearGroup * kMaxGroups));
  const int full_groups = n_vec / per_group - 1;  // the last, with the remainder, is launched on its own
  if (full_groups <= 0) {
    MatvecGroups g;
    g.max_groups = 1;
    g.per_group = n_vec;
    run_matvec(&m, 1, x, g, y, rows, residual, stream);
    return;
  }
  MatvecGroups g;
  g.max_groups = full_groups;
  g.per_group = per_group;
  run_matvec(&m, 1, x, g, y, rows, residual, stream);
  const int64_t first = static_cast<int64_t>(full_groups) * per_group;
  MatvecInput tail = x;
  if (tail.f32 != nullptr) tail.f32 += first * (x.f32_stride > 0 ? x.f32_stride : cols);
  if (tail.q8.q != nullptr) tail.q8 = q8act_rows(x.q8, first);
  MatvecGroups last;
  last.max_groups = 1;
  last.per_group = static_cast<int>(n_vec - first);
  run_matvec(&m, 1, tail, last, y + first * rows, rows, residual != nullptr ? residual + first * rows : nullptr,
             stream);
}

}  // namespace ms::cuda
