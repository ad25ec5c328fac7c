// Matmul for float weights (F32, F16, BF16) with f32 activations and f32
// accumulation, on the CUDA cores (see gemm.h for why not tensor cores).
//
// Block tile: 64 weight rows x 64 vectors, K step 16, 256 threads, each
// computing a 4x4 sub-tile (rows 4*tx.., vectors 4*ty..) with float4 reads of
// the k-major shared tiles. A block loops over its group's vectors 64 at a
// time (same addressing as matvec: MatvecParams, expert groups and lists).
#include <string>

#include "cuda/device.h"
#include "cuda/expert_groups.cuh"
#include "cuda/gemm_float.cuh"
#include "cuda/matvec_kernel.cuh"
#include "cuda/quant_dequant.cuh"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int BM = 64, BN = 64, BK = 16, kThreads = 256;
constexpr int LD = BM + 4;  // padded k-major rows, 16-byte aligned
static_assert(BM == BN, "one tile loader serves both operands");

template <DType T>
__global__ void __launch_bounds__(kThreads) gemm_float_kernel(const dev::MatvecParams p, int64_t cols) {
  const int g = blockIdx.y;
  if (p.n_groups != nullptr && g >= __ldg(p.n_groups)) return;
  const int e = dev::group_expert(p, g);
  const uint8_t* mat = dev::expert_matrix(p, 0, e);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * BM;
  const int2 vr = dev::group_vectors(p, g);
  const int begin = vr.x, end = vr.y;

  __shared__ __align__(16) float Ws[BK][LD];  // Ws[k][m]
  __shared__ __align__(16) float Xs[BK][LD];  // Xs[k][n]
  __shared__ int vec[BN];

  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;       // compute: rows 4tx.., vectors 4ty..
  const int lr = tid / 4, lk = (tid % 4) * 4;   // load: row / vector lr, k lk..lk+3
  const int64_t wr = min(r0 + lr, p.rows - 1);  // clamp; rows past the end are not stored
  const uint8_t* wrow = mat + wr * p.row_bytes;

  for (int c0 = begin; c0 < end; c0 += BN) {
    const int nv = min(BN, end - c0);
    if (tid < BN) vec[tid] = tid < nv ? (p.list != nullptr ? __ldg(p.list + c0 + tid) : c0 + tid) : -1;
    __syncthreads();
    const int myvec = vec[lr];
    const float* xrow = myvec >= 0 ? p.xf + static_cast<int64_t>(myvec / p.x_div) * p.xf_stride : nullptr;

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;

    for (int64_t k0 = 0; k0 < cols; k0 += BK) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t c = k0 + lk + i;
        Ws[lk + i][lr] = c < cols ? dev::dequant_elem<T>(wrow, c) : 0.f;
        Xs[lk + i][lr] = (xrow != nullptr && c < cols) ? __ldg(xrow + c) : 0.f;
      }
      __syncthreads();
#pragma unroll
      for (int k = 0; k < BK; ++k) {
        const float4 a = *reinterpret_cast<const float4*>(&Ws[k][4 * tx]);
        const float4 b = *reinterpret_cast<const float4*>(&Xs[k][4 * ty]);
        const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
      __syncthreads();
    }

#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int v = vec[4 * ty + j];
      if (v < 0) continue;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t r = r0 + 4 * tx + i;
        if (r < p.rows) {
          const int64_t o = static_cast<int64_t>(v) * p.y_stride + r;
          float out = acc[i][j];
          if (p.residual != nullptr) out += p.residual[o];
          p.y[o] = out;
        }
      }
    }
    __syncthreads();  // vec is rewritten by the next chunk
  }
}

}  // namespace

namespace detail {

bool gemm_float_supported(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

void gemm_float_launch(const MatrixSet& w, const MatvecInput& x, const MatvecGroups& g, float* y, int64_t y_stride,
                       const float* residual, cudaStream_t stream) {
  if (!gemm_float_supported(w.type))
    throw Error(std::string("CUDA float matmul: weight type ") + type_name(w.type) + " is not F32, F16 or BF16");
  const dev::MatvecParams p =
      dev::one_matrix_f32_params(w, x, g, y, y_stride, residual, "float weights need f32 activations");
  const dim3 grid(static_cast<unsigned>((w.rows + BM - 1) / BM), static_cast<unsigned>(g.max_groups));
  switch (w.type) {
    case DType::F32: gemm_float_kernel<DType::F32><<<grid, kThreads, 0, stream>>>(p, w.cols); break;
    case DType::F16: gemm_float_kernel<DType::F16><<<grid, kThreads, 0, stream>>>(p, w.cols); break;
    default: gemm_float_kernel<DType::BF16><<<grid, kThreads, 0, stream>>>(p, w.cols); break;
  }
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace ms::cuda
