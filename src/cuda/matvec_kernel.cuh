// The matvec kernel, generic over the weight format (Op, from quant_dot.cuh).
//
// Geometry: blocks of 128 threads; TPR lanes (16 or 32, an aligned part of a
// warp) share one row and stride over its items; a block covers 128/TPR rows.
// grid.x = row blocks, grid.y = groups (one expert matrix each). A group's
// output vectors are processed NV at a time, so each weight item is decoded
// once per NV vectors. PARTS = 2 reads two matrices (gate, up) for the same
// row and writes silu(gate) * up.
#pragma once
#include "cuda/device.h"
#include "cuda/matvec.h"
#include "cuda/pdl.cuh"
#include "cuda/quant_dot.cuh"

namespace ms::cuda::dev {

struct MatvecParams {
  // weights (PARTS of them; same shape and type)
  const void* const* table[2];
  int64_t offset[2];
  const uint8_t* base[2];
  int64_t stride[2];
  int64_t rows, row_bytes;
  int n_items;  // items per row
  // groups
  int per_group, x_div, n_expert;
  const int32_t* n_groups;
  const int32_t* expert;
  const int32_t* offsets;
  const int32_t* list;
  // activations
  const int8_t* xq;
  const float2* xds;
  int64_t xq_n;  // elements per q8 vector
  const float* xf;
  int64_t xf_stride;
  // output
  float* y;
  int64_t y_stride;
  const float* residual;
};

constexpr int kMatvecThreads = 128;

template <class Op, int TPR, int NV, int PARTS>
__global__ void __launch_bounds__(kMatvecThreads, NV == 1 ? 8 : 2) matvec_kernel(const MatvecParams p) {
  constexpr int kRowsPerBlock = kMatvecThreads / TPR;
  const int g = blockIdx.y;
  // Launched with programmatic dependent launch (pdl.cuh): a dense matrix's
  // rows of this block are no kernel's output, so they start their way into
  // L2 before the wait for the previous kernel (whose output x is).
  if (p.expert == nullptr && p.table[0] == nullptr) {
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
    const int64_t nr = min(static_cast<int64_t>(kRowsPerBlock), p.rows - r0);
#pragma unroll
    for (int z = 0; z < PARTS; ++z)
      dev::prefetch_l2(p.base[z] + r0 * p.row_bytes, nr * p.row_bytes, threadIdx.x, kMatvecThreads);
  }
  dev::pdl_wait();
  dev::pdl_trigger();
  if (p.n_groups != nullptr && g >= __ldg(p.n_groups)) return;
  const int lane = threadIdx.x % TPR;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / TPR;
  // Rows past the end still run (clamped) so every lane of a warp takes part
  // in the shuffles; they do not store.
  const int64_t rr = r < p.rows ? r : p.rows - 1;
  int e = p.expert != nullptr ? __ldg(p.expert + g) : 0;
  if (p.n_expert > 0) e = min(max(e, 0), p.n_expert - 1);

  const uint8_t* wrow[PARTS];
#pragma unroll
  for (int z = 0; z < PARTS; ++z) {
    const uint8_t* m = p.table[z] != nullptr
                           ? static_cast<const uint8_t*>(p.table[z][e]) + p.offset[z]
                           : p.base[z] + static_cast<int64_t>(e) * p.stride[z];
    wrow[z] = m + rr * p.row_bytes;
  }

  int begin, end;
  if (p.offsets != nullptr) {
    begin = __ldg(p.offsets + g);
    end = __ldg(p.offsets + g + 1);
  } else {
    begin = g * p.per_group;
    end = begin + p.per_group;
  }

  for (int c0 = begin; c0 < end; c0 += NV) {
    const int nv = min(NV, end - c0);
    int outv[NV];
    Acts<NV> a;
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const int c = c0 + (v < nv ? v : 0);  // surplus slots repeat vector 0; not stored
      outv[v] = p.list != nullptr ? __ldg(p.list + c) : c;
      const int64_t xi = outv[v] / p.x_div;
      if constexpr (Op::kQ8) {
        a.q[v] = p.xq + xi * p.xq_n;
        a.ds[v] = p.xds + xi * (p.xq_n / 32);
        a.f[v] = nullptr;
      } else {
        a.q[v] = nullptr;
        a.ds[v] = nullptr;
        a.f[v] = p.xf + xi * p.xf_stride;
      }
    }

    float acc[PARTS][NV];
#pragma unroll
    for (int z = 0; z < PARTS; ++z)
#pragma unroll
      for (int v = 0; v < NV; ++v) acc[z][v] = 0.f;

#pragma unroll 2
    for (int it = lane; it < p.n_items; it += TPR) {
#pragma unroll
      for (int z = 0; z < PARTS; ++z) Op::template dot<NV>(wrow[z], it, a, acc[z]);
    }

#pragma unroll
    for (int z = 0; z < PARTS; ++z)
#pragma unroll
      for (int v = 0; v < NV; ++v)
#pragma unroll
        for (int o = TPR / 2; o > 0; o >>= 1) acc[z][v] += __shfl_xor_sync(kFullMask, acc[z][v], o);

    if (r < p.rows) {
      // lane v stores vector v
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        if (v == lane && v < nv) {
          float out = PARTS == 2 ? silu(acc[0][v]) * acc[PARTS - 1][v] : acc[0][v];
          const int64_t idx = static_cast<int64_t>(outv[v]) * p.y_stride + r;
          if (p.residual != nullptr) out += p.residual[idx];
          p.y[idx] = out;
        }
      }
    }
  }
}

// Launch for one format; picks TPR from the items per row and NV from the
// vectors per group (8 at a time, 4 for gated pairs to bound registers).
template <class Op>
void launch_matvec(const MatvecParams& p, int max_groups, int max_per_group, int parts, cudaStream_t stream) {
  const bool wide = p.n_items > 16;  // TPR 32 when a row has more than 16 items
  const bool multi = max_per_group > 1;
  const int rpb = kMatvecThreads / (wide ? 32 : 16);
  const dim3 grid(static_cast<unsigned>((p.rows + rpb - 1) / rpb), static_cast<unsigned>(max_groups));
  const dim3 block(kMatvecThreads);
#define MS_MV_LAUNCH(TPR, NV, PARTS) MS_CUDA_CHECK(launch_pdl(matvec_kernel<Op, TPR, NV, PARTS>, grid, block, 0, stream, p))
  if (parts == 2) {
    if (wide) { if (multi) MS_MV_LAUNCH(32, 4, 2); else MS_MV_LAUNCH(32, 1, 2); }
    else      { if (multi) MS_MV_LAUNCH(16, 4, 2); else MS_MV_LAUNCH(16, 1, 2); }
  } else {
    if (wide) { if (multi) MS_MV_LAUNCH(32, 8, 1); else MS_MV_LAUNCH(32, 1, 1); }
    else      { if (multi) MS_MV_LAUNCH(16, 8, 1); else MS_MV_LAUNCH(16, 1, 1); }
  }
#undef MS_MV_LAUNCH
}

}  // namespace ms::cuda::dev

// Each matvec_<format>.cu defines its launcher.
namespace ms::cuda::detail {
void matvec_launch_q4_k(const dev::MatvecParams&, int, int, int, cudaStream_t);
void matvec_launch_q5_k(const dev::MatvecParams&, int, int, int, cudaStream_t);
void matvec_launch_q6_k(const dev::MatvecParams&, int, int, int, cudaStream_t);
void matvec_launch_q8_0(const dev::MatvecParams&, int, int, int, cudaStream_t);
void matvec_launch_q4_0(const dev::MatvecParams&, int, int, int, cudaStream_t);
void matvec_launch_mxfp4(const dev::MatvecParams&, int, int, int, cudaStream_t);
// kind: 0 F32, 1 F16, 2 BF16; vec: 8-element items
void matvec_launch_float(int kind, bool vec, const dev::MatvecParams&, int, int, int, cudaStream_t);
}  // namespace ms::cuda::detail
