// Quantized matrix x vector products on the GPU (decode), for one dense matrix
// or for many expert matrices in one launch, reading weights in their file's
// quant format (no dequantised copies).
//
// Quantized weight types (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4, and through the
// sub-block decoders of quant_sub32*.cuh Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, TQ1_0,
// TQ2_0 and every IQ type) take activations quantized to int8 in blocks of 32
// (Q8Act, made by quantize_q8act or by rmsnorm's q8 output) and multiply with
// dp4a; float weight types (F32, F16, BF16) take f32 activations.
// matvec_takes_q8() says which.
//
// CUDA-only header. All pointers are device pointers unless said otherwise;
// every launcher is asynchronous on `stream`, does no host synchronisation and
// no allocation, so it can be captured in a CUDA graph.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace ms::cuda {

// ---------------------------------------------------------------- activations
// nvec vectors of n elements (n a multiple of 32), quantized per block of 32:
// q holds the int8 quants (vector v at q + v*n), ds a pair of floats per block
// {d, d * sum(q)} (vector v at ds + v*(n/32)*2), x ~= d * q.
struct Q8Act {
  int8_t* q = nullptr;
  float* ds = nullptr;
  int64_t n = 0;
};
// Device bytes for nvec vectors of n (q and ds, each 256-byte aligned).
size_t q8act_bytes(int64_t n, int64_t nvec);
// Lays a Q8Act out in `base` (q8act_bytes(n, nvec) bytes, 256-byte aligned).
Q8Act q8act_view(void* base, int64_t n, int64_t nvec);
// The view of vectors first.. of a (a Q8Act of several vectors).
inline Q8Act q8act_rows(Q8Act a, int64_t first) {
  a.q += first * a.n;
  a.ds += first * (a.n / 32) * 2;  // a (d, sum) pair per 32
  return a;
}
// x: nvec rows of n floats (row stride n).
void quantize_q8act(const float* x, int64_t n, int64_t nvec, Q8Act out, cudaStream_t stream);

// ---------------------------------------------------------------- weights
bool matvec_supported(DType t);
bool matvec_takes_q8(DType t);

// Where the weight matrix of an expert (or the one dense matrix) is. Rows of
// `cols` elements of `type`, row_bytes(type, cols) apart. Weights must be
// 16-byte aligned (arena allocations are).
struct MatrixSet {
  DType type = DType::F32;
  int64_t rows = 0, cols = 0;
  // Either a table of per-expert matrix pointers in device memory (expert
  // slots; `offset` bytes are added to each entry, to address one matrix of a
  // slot that holds several) ...
  const void* const* table = nullptr;
  int64_t offset = 0;
  // ... or a base pointer with experts stored back to back `stride` bytes
  // apart (stride 0: a single dense matrix).
  const void* base = nullptr;
  int64_t stride = 0;
};

// How output vectors map to matrices and inputs. The launch covers up to
// max_groups groups; group g multiplies matrix expert[g] (0 when expert is
// null) with the vectors of its list, and output vector p reads input vector
// p / x_div. Group g's output vectors are:
//   list[offsets[g] .. offsets[g+1])   when offsets is set (list null: identity)
//   g*per_group .. (g+1)*per_group-1    otherwise.
// n_groups (device, optional) lets a device-side producer say how many of the
// max_groups groups are real; the rest exit at once.
struct MatvecGroups {
  int max_groups = 1;
  int per_group = 1;
  // Vectors a group usually holds (0: per_group). 1 picks the one-vector
  // kernel, which walks a group's vectors one at a time: batches spread over
  // many experts (decode steps of several sequences) then do not pay the
  // multi-vector kernel's registers and its work for empty vector places.
  int typical_per_group = 0;
  int x_div = 1;
  int n_expert = 0;  // when > 0, expert ids are clamped into [0, n_expert)
  const int32_t* n_groups = nullptr;
  const int32_t* expert = nullptr;
  const int32_t* offsets = nullptr;
  const int32_t* list = nullptr;
};

// Whether `vectors` spread over `groups` experts are thin enough (at most 2
// an expert on average) for the one-vector kernel (typical_per_group = 1)
// rather than the several-vector kernel or a GEMM tile: the rule the
// all-resident and the tiered expert steps share.
constexpr int kOneVectorPerGroup = 2;
inline bool one_vector_groups(int64_t vectors, int64_t groups) { return vectors <= kOneVectorPerGroup * groups; }

struct MatvecInput {
  const float* f32 = nullptr;  // float weight types: vector v at f32 + v*f32_stride
  int64_t f32_stride = 0;      // 0 means cols
  Q8Act q8;                    // quantized weight types
};

// y[p*y_stride + r] = sum_c W_g[r][c] * x[p/x_div][c]  (+ residual[p*y_stride + r]
// when residual is set; it may alias y). y_stride 0 means rows.
void matvec(const MatrixSet& w, const MatvecInput& x, const MatvecGroups& groups, float* y,
            int64_t y_stride, const float* residual, cudaStream_t stream);

// Gated pair (SwiGLU): y = silu(W_gate x) * (W_up x), both matrices read in
// one pass. gate and up must have the same type and shape.
void matvec_glu(const MatrixSet& gate, const MatrixSet& up, const MatvecInput& x,
                const MatvecGroups& groups, float* y, int64_t y_stride, cudaStream_t stream);

// One token's k expert slots through one matrix each, weighted and summed in
// one launch: out[r] = sum_j weights[j] * (W_{ids[j]} x_j)[r] (+ residual[r]),
// j = 0..k-1 in order, x_j = vector j of x; ids clamped into [0, n_expert).
// Equal bit for bit to matvec over k groups then moe_combine (ops.h). k at
// most 8 (matvec_combine_supported); residual may alias out.
bool matvec_combine_supported(int k);
void matvec_combine(const MatrixSet& w, const MatvecInput& x, int k, const int32_t* ids, int n_expert,
                    const float* weights, const float* residual, float* out, cudaStream_t stream);

// Convenience: y[t] = W x[t] for n_vec vectors of one dense matrix
// (x.q8 / x.f32 with n_vec vectors).
void linear(DType type, const void* w, int64_t rows, int64_t cols, const MatvecInput& x, int n_vec,
            float* y, const float* residual, cudaStream_t stream);

}  // namespace ms::cuda
