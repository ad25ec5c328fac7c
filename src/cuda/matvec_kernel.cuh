// The matvec kernel, generic over the weight format (Op, from quant_dot.cuh).
//
// Geometry: blocks of 128 threads; TPR lanes (16 or 32, an aligned part of a
// warp) share one row and stride over its items; a block covers 128/TPR rows.
// grid.x = row blocks, grid.y = groups (one expert matrix each). A group's
// output vectors are processed NV at a time, so each weight item is decoded
// once per NV vectors. PARTS = 2 reads two matrices (gate, up) for the same
// row and writes silu(gate) * up.
//
// One decode fusion reuses the same per-row work in a wider block (MODE
// kCombine): slice j of the block (k slices of 128 threads) is group j (one
// token's expert slot j, one vector each); the block then writes
// out[r] = sum_j w[j] * y_j[r] (+ residual[r]) in j order, as moe_combine
// does, so the k expert rows never go through memory: one launch fewer. (The
// same for SwiGLU + the Q8 of its output, 32 rows a block, was measured
// slower than the two launches: bench/results/cuda_bench.md, "Decode step".)
#pragma once
#include <string>

#include "cuda/device.h"
#include "cuda/expert_groups.cuh"
#include "cuda/matvec.h"
#include "cuda/pdl.cuh"
#include "cuda/quant_dot.cuh"
#include "cuda/quant_sub32_types.h"
#include "util/error.h"

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
  // kCombine: the k slot weights of the token
  const float* combine_w;
};

constexpr int kMatvecThreads = 128;
enum MatvecMode { kPlain = 0, kCombine = 1 };
// Most slots of a kCombine block (its k slices of kMatvecThreads fill at
// most 1024 threads).
constexpr int kCombineMaxSlots = 8;

// The parameters of one matrix (no gate|up pair) times f32 activations, as
// both matmul launchers (gemm.cu's dequantising one, gemm_float.cu) fill
// them, after the checks they share. `f32_need` ends the error for a
// missing x.f32.
inline MatvecParams one_matrix_f32_params(const MatrixSet& w, const MatvecInput& x, const MatvecGroups& g, float* y,
                                          int64_t y_stride, const float* residual, const char* f32_need) {
  if (w.rows <= 0 || w.cols <= 0) throw Error("CUDA matmul: empty matrix");
  if (x.f32 == nullptr) throw Error(std::string("CUDA matmul: ") + f32_need);
  if (w.table == nullptr && w.base == nullptr) throw Error("CUDA matmul: no weights given");
  if (g.max_groups <= 0 || g.max_groups > 65535 || g.per_group <= 0 || g.x_div <= 0)
    throw Error("CUDA matmul: bad group layout");
  MatvecParams p{};
  set_matrix(p, 0, w);
  p.rows = w.rows;
  p.row_bytes = row_bytes(w.type, w.cols);
  set_groups(p, g);
  p.xf = x.f32;
  p.xf_stride = x.f32_stride > 0 ? x.f32_stride : w.cols;
  p.y = y;
  p.y_stride = y_stride > 0 ? y_stride : w.rows;
  p.residual = residual;
  return p;
}

// RPL: rows per lane group. Each group of TPR lanes works on RPL rows at
// once, so a lane has RPL items of weights in flight instead of one, and with
// several vectors (NV > 1) each activation word it loads serves RPL rows.
// Lane group s of a block's kSlots takes rows r0 + s + j * kSlots, j < RPL.
template <class Op, int TPR, int NV, int PARTS, int MODE = kPlain, int RPL = 1>
__global__ void __launch_bounds__(MODE == kPlain ? kMatvecThreads : 1024, MODE == kPlain ? (NV == 1 ? 8 : 4) : 1)
    matvec_kernel(const MatvecParams p) {
  constexpr int kSlots = kMatvecThreads / TPR;  // lane groups of one slice
  constexpr int kRowsPerBlock = kSlots * RPL;   // rows of one slice
  static_assert(MODE == kPlain || (NV == 1 && PARTS == 1 && RPL == 1),
                "the combine takes one matrix, one vector a slot, one row a lane group");
  // A slice is kMatvecThreads threads doing the work of one plain block.
  const int slice = threadIdx.x / kMatvecThreads, tid = threadIdx.x % kMatvecThreads;
  const int slices = blockDim.x / kMatvecThreads;
  const int g = MODE == kCombine ? slice : blockIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  // Launched with programmatic dependent launch (pdl.cuh): a dense matrix's
  // rows of this block are no kernel's output, so they start their way into
  // L2 before the wait for the previous kernel (whose output x is).
  if (p.expert == nullptr && p.table[0] == nullptr) {
    const int64_t nr = min(static_cast<int64_t>(kRowsPerBlock), p.rows - r0);
#pragma unroll
    for (int z = 0; z < PARTS; ++z)
      dev::prefetch_l2(p.base[z] + r0 * p.row_bytes, nr * p.row_bytes, tid, kMatvecThreads);
  }
  dev::pdl_wait();
  dev::pdl_trigger();
  // (a kCombine block holds several groups: it is launched without a device
  // group count, since a slice that returned would leave the others waiting)
  if (MODE != kCombine && p.n_groups != nullptr && g >= __ldg(p.n_groups)) return;
  const int lane = tid % TPR;
  int64_t r[RPL];
  const uint8_t* wrow[RPL][PARTS];
  const int e = dev::group_expert(p, g);
#pragma unroll
  for (int j = 0; j < RPL; ++j) {
    r[j] = r0 + tid / TPR + j * kSlots;
    // Rows past the end still run (clamped) so every lane of a warp takes
    // part in the shuffles; they do not store.
    const int64_t rr = r[j] < p.rows ? r[j] : p.rows - 1;
#pragma unroll
    for (int z = 0; z < PARTS; ++z) wrow[j][z] = dev::expert_matrix(p, z, e) + rr * p.row_bytes;
  }

  const int2 vr = dev::group_vectors(p, g);
  const int begin = vr.x, end = vr.y;

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

    float acc[RPL][PARTS][NV];
#pragma unroll
    for (int j = 0; j < RPL; ++j)
#pragma unroll
      for (int z = 0; z < PARTS; ++z)
#pragma unroll
        for (int v = 0; v < NV; ++v) acc[j][z][v] = 0.f;

#pragma unroll (NV == 1 && RPL == 1 ? 2 : 1)
    for (int it = lane; it < p.n_items; it += TPR) {
#pragma unroll
      for (int j = 0; j < RPL; ++j)
#pragma unroll
        for (int z = 0; z < PARTS; ++z) Op::template dot<NV>(wrow[j][z], it, a, acc[j][z]);
    }

#pragma unroll
    for (int j = 0; j < RPL; ++j)
#pragma unroll
      for (int z = 0; z < PARTS; ++z)
#pragma unroll
        for (int v = 0; v < NV; ++v)
#pragma unroll
          for (int o = TPR / 2; o > 0; o >>= 1) acc[j][z][v] += __shfl_xor_sync(kFullMask, acc[j][z][v], o);

    if constexpr (MODE == kPlain) {
#pragma unroll
      for (int j = 0; j < RPL; ++j) {
        if (r[j] < p.rows) {
          // lane v stores vector v
#pragma unroll
          for (int v = 0; v < NV; ++v) {
            if (v == lane && v < nv) {
              float out = PARTS == 2 ? silu(acc[j][0][v]) * acc[j][PARTS - 1][v] : acc[j][0][v];
              const int64_t idx = static_cast<int64_t>(outv[v]) * p.y_stride + r[j];
              if (p.residual != nullptr) out += p.residual[idx];
              p.y[idx] = out;
            }
          }
        }
      }
    } else {
      __shared__ float slot_out[kCombineMaxSlots][kRowsPerBlock];
      if (lane == 0) slot_out[slice][tid / TPR] = acc[0][0][0];
      __syncthreads();
      // the same arithmetic as moe_combine_kernel (ops_elementwise.cu)
      if (threadIdx.x < kRowsPerBlock && r0 + threadIdx.x < p.rows) {
        float s = 0.f;
        for (int j = 0; j < slices; ++j) s += __ldg(p.combine_w + j) * slot_out[j][threadIdx.x];
        const int64_t idx = r0 + threadIdx.x;
        if (p.residual != nullptr) s += p.residual[idx];
        p.y[idx] = s;
      }
    }
  }
}

// Launch for one format; picks TPR from the items per row and NV from the
// vectors per group (kNvMulti at a time, default 8; 4 for gated pairs to bound
// registers).
// kRplOne / kRplGlu / kRplMulti: rows per lane group of the one-vector
// kernel (one matrix, gated pair) and of the several-vector one, per format:
// more rows put more weight bytes in flight where the format's registers
// allow it without spilling (bench/results/serve.md, "session 6").
template <class Op, int kRplOne = 1, int kRplGlu = 1, int kRplMulti = 1, int kNvMulti = 8>
void launch_matvec(const MatvecParams& p, int max_groups, int max_per_group, int parts, cudaStream_t stream) {
  const bool wide = p.n_items > 16;  // TPR 32 when a row has more than 16 items
  if (p.combine_w != nullptr) {  // kCombine: one token, max_groups slots of one vector each
    const int rpb = kMatvecThreads / (wide ? 32 : 16);
    const dim3 grid(static_cast<unsigned>((p.rows + rpb - 1) / rpb));
    const dim3 block(static_cast<unsigned>(kMatvecThreads * max_groups));
    if (wide) MS_CUDA_CHECK(launch_pdl(matvec_kernel<Op, 32, 1, 1, kCombine>, grid, block, 0, stream, p));
    else      MS_CUDA_CHECK(launch_pdl(matvec_kernel<Op, 16, 1, 1, kCombine>, grid, block, 0, stream, p));
    return;
  }
  const bool multi = max_per_group > 1;
  const int tpr = wide ? 32 : 16;
  const int rpl = multi ? kRplMulti : (parts == 2 ? kRplGlu : kRplOne);
  const int rpb = kMatvecThreads / tpr * rpl;
  const dim3 grid(static_cast<unsigned>((p.rows + rpb - 1) / rpb), static_cast<unsigned>(max_groups));
  const dim3 block(kMatvecThreads);
#define MS_MV_LAUNCH(TPR, NV, PARTS, RPL) \
  MS_CUDA_CHECK(launch_pdl(matvec_kernel<Op, TPR, NV, PARTS, kPlain, RPL>, grid, block, 0, stream, p))
  if (parts == 2) {
    if (wide) { if (multi) MS_MV_LAUNCH(32, 4, 2, kRplMulti); else MS_MV_LAUNCH(32, 1, 2, kRplGlu); }
    else      { if (multi) MS_MV_LAUNCH(16, 4, 2, kRplMulti); else MS_MV_LAUNCH(16, 1, 2, kRplGlu); }
  } else {
    if (wide) { if (multi) MS_MV_LAUNCH(32, kNvMulti, 1, kRplMulti); else MS_MV_LAUNCH(32, 1, 1, kRplOne); }
    else      { if (multi) MS_MV_LAUNCH(16, kNvMulti, 1, kRplMulti); else MS_MV_LAUNCH(16, 1, 1, kRplOne); }
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
// The sub-block formats (quant_sub32_types.h): matvec_launch_Q4_1, ...
#define MS_MV_DECLARE_SUB32(T, D) void matvec_launch_##T(const dev::MatvecParams&, int, int, int, cudaStream_t);
MS_SUB32_TYPES(MS_MV_DECLARE_SUB32)
#undef MS_MV_DECLARE_SUB32
// kind: 0 F32, 1 F16, 2 BF16; vec: 8-element items
void matvec_launch_float(int kind, bool vec, const dev::MatvecParams&, int, int, int, cudaStream_t);
}  // namespace ms::cuda::detail
