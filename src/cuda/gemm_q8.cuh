// Internal launcher of the int8 tensor-core GEMM (gemm_q8.cu), shared by
// gemm.cu (matmul) and expert_ffn.cu (gate+up in one launch). See gemm.h for
// the public entry points and the design.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/matvec.h"

namespace ms::cuda::detail {

bool gemm_q8_supported(DType t);

// y_z[p*y_stride + r] = sum_c W_z,g[r][c] * x[p/x_div][c] (+ residual_z) for
// z < parts (1 or 2; both matrices the same type and shape, sharing the
// groups and the input). bn: vectors per block tile (32 or 64; 0 picks).
// zcap: at most this many blocks share one (row tile, group) pair, each
// looping over every zcap-th tile of bn vectors (0: as many as the group
// bound per_group needs).
// seg (optional, parts == 1): the rows in up to 3 segments, segment i's rows
// written to seg->y[i] with row stride seg->rows[i] (y and residual unused).
struct RowSegments {
  int n = 0;
  int64_t rows[3] = {0, 0, 0};
  float* y[3] = {nullptr, nullptr, nullptr};
};
// xr (optional): where each position's input vector is, instead of its
// output vector / x_div, so that a step over rows grouped by expert reads
// its tokens' rows in place and writes each product at its own index
// (groups.list), with no gather or scatter copies:
//   rows set: position i (offsets[g] + j) reads input vector rows[i];
//   by_position: position i reads input vector i.
struct XRows {
  const int32_t* rows = nullptr;
  bool by_position = false;
};
void gemm_q8_launch(const MatrixSet* w, int parts, const Q8Act& x, const MatvecGroups& g, float* const* y,
                    int64_t y_stride, const float* const* residual, int bn, int zcap, cudaStream_t stream,
                    const RowSegments* seg = nullptr, const XRows* xr = nullptr);

}  // namespace ms::cuda::detail
