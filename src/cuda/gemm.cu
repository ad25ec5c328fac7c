// Tensor-core matmul for prompt batches (see gemm.h).
//
// Block tile: 64 weight rows x 64 vectors, K step 32; 4 warps, each a 32x32
// sub-tile of 2x2 WMMA fragments. Per K step, the 128 threads dequantize the
// 64x32 weight tile (16 elements each, element decoders of quant_dequant.cuh)
// and convert the 64x32 activation tile to f16. A block loops over its
// group's vectors 64 at a time; results go through shared memory so edge
// tiles and scattered output vectors (expert lists) are stored with bounds
// checks and coalesced along rows.
#include <mma.h>

#include <string>

#include "cuda/device.h"
#include "cuda/expert_groups.cuh"
#include "cuda/gemm.h"
#include "cuda/gemm_float.cuh"
#include "cuda/gemm_q8.cuh"
#include "cuda/matvec_kernel.cuh"
#include "cuda/quant_dequant.cuh"
#include "util/error.h"

namespace ms::cuda {
namespace {

using namespace nvcuda;

constexpr int BM = 64, BN = 64, BK = 32, kThreads = 128;
constexpr int LDA = BK + 8, LDB = BK + 8, LDC = BM + 4;

struct GemmParams {
  dev::MatvecParams mv;  // addressing, groups, activations (xf), output
  int64_t cols;
};

template <DType T>
__global__ void __launch_bounds__(kThreads) gemm_kernel(const GemmParams gp) {
  const dev::MatvecParams& p = gp.mv;
  const int g = blockIdx.y;
  if (p.n_groups != nullptr && g >= __ldg(p.n_groups)) return;
  const int e = dev::group_expert(p, g);
  const uint8_t* mat = dev::expert_matrix(p, 0, e);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * BM;
  const int2 vr = dev::group_vectors(p, g);
  const int begin = vr.x, end = vr.y;

  __shared__ __align__(32) half As[BM * LDA];
  __shared__ __align__(32) half Bs[BN * LDB];
  __shared__ __align__(32) float Cs[BN * LDC];
  __shared__ int vec[BN];

  const int tid = threadIdx.x, warp = tid / 32;
  const int wm = warp % 2, wn = warp / 2;
  const int64_t cols = gp.cols;

  for (int c0 = begin; c0 < end; c0 += BN) {
    const int nv = min(BN, end - c0);
    if (tid < BN) vec[tid] = tid < nv ? (p.list != nullptr ? __ldg(p.list + c0 + tid) : c0 + tid) : -1;
    __syncthreads();

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);

    // this thread's share of the tiles: row / vector tid/2, 16 elements from (tid%2)*16
    const int lr = tid / 2, lk = (tid % 2) * 16;
    const int64_t wr = min(r0 + lr, p.rows - 1);  // clamp; rows past the end are not stored
    const uint8_t* wrow = mat + wr * p.row_bytes;
    const int myvec = vec[lr];
    const float* xrow = myvec >= 0 ? p.xf + static_cast<int64_t>(myvec / p.x_div) * p.xf_stride : nullptr;

    for (int64_t k0 = 0; k0 < cols; k0 += BK) {
#pragma unroll 4
      for (int i = 0; i < 16; ++i) {
        const int64_t c = k0 + lk + i;
        const float wv = c < cols ? dev::dequant_elem<T>(wrow, c) : 0.f;
        As[lr * LDA + lk + i] = __float2half_rn(wv);
        const float xv = (xrow != nullptr && c < cols) ? __ldg(xrow + c) : 0.f;
        Bs[lr * LDB + lk + i] = __float2half_rn(xv);
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a[2];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], As + (wm * 32 + i * 16) * LDA + kk, LDA);
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], Bs + (wn * 32 + j * 16) * LDB + kk, LDB);
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
      }
      __syncthreads();
    }

    // C[m][n] (m: weight row, n: vector) stored column-major: Cs[n * LDC + m]
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::store_matrix_sync(Cs + (wn * 32 + j * 16) * LDC + wm * 32 + i * 16, acc[i][j], LDC,
                                wmma::mem_col_major);
    __syncthreads();
    for (int idx = tid; idx < BM * nv; idx += kThreads) {
      const int n = idx / BM, m = idx % BM;
      const int64_t r = r0 + m;
      if (r < p.rows) {
        const int64_t o = static_cast<int64_t>(vec[n]) * p.y_stride + r;
        float v = Cs[n * LDC + m];
        if (p.residual != nullptr) v += p.residual[o];
        p.y[o] = v;
      }
    }
    __syncthreads();  // vec and Cs are rewritten by the next chunk
  }
}

}  // namespace

bool matmul_supported(DType t) { return matvec_supported(t); }
bool matmul_int8_supported(DType t) { return detail::gemm_q8_supported(t); }

namespace {
bool device_has_int8_mma() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
  return major >= 8;
}
}  // namespace

void matmul_stacked(const MatrixSet& w, const MatvecInput& x, int n, int segments, const int64_t* rows,
                    float* const* y, cudaStream_t stream) {
  if (segments < 1 || segments > 3 || n <= 0) throw Error("CUDA matmul_stacked: 1 to 3 segments, n > 0");
  if (w.base == nullptr || w.table != nullptr) throw Error("CUDA matmul_stacked: one dense matrix (base) needed");
  if (x.q8.q == nullptr || !detail::gemm_q8_supported(w.type) || !device_has_int8_mma()) {
    // No int8 path: one matmul per row block.
    MatvecGroups g;
    g.max_groups = 1;
    g.per_group = n;
    int64_t first = 0;
    for (int i = 0; i < segments; ++i) {
      MatrixSet part = w;
      part.rows = rows[i];
      part.base = static_cast<const uint8_t*>(w.base) + first * row_bytes(w.type, w.cols);
      matmul(part, x, g, y[i], rows[i], nullptr, stream);
      first += rows[i];
    }
    return;
  }
  detail::RowSegments seg;
  seg.n = segments;
  for (int i = 0; i < segments; ++i) {
    seg.rows[i] = rows[i];
    seg.y[i] = y[i];
  }
  MatvecGroups g;
  g.max_groups = 1;
  g.per_group = n;
  float* ys[1] = {y[0]};
  if (segments == 1) {
    detail::gemm_q8_launch(&w, 1, x.q8, g, ys, w.rows, nullptr, /*bn: chosen*/ 0, 0, stream);
    return;
  }
  detail::gemm_q8_launch(&w, 1, x.q8, g, ys, w.rows, nullptr, /*bn: chosen*/ 0, 0, stream, &seg);
}

void matmul(const MatrixSet& w, const MatvecInput& x, const MatvecGroups& g, float* y, int64_t y_stride,
            const float* residual, cudaStream_t stream) {
  if (!matmul_supported(w.type))
    throw Error(std::string("CUDA matmul: weight type ") + type_name(w.type) + " is not supported");
  if (detail::gemm_float_supported(w.type)) {
    detail::gemm_float_launch(w, x, g, y, y_stride, residual, stream);
    return;
  }
  static const bool int8_mma = device_has_int8_mma();
  if (x.q8.q != nullptr && int8_mma && detail::gemm_q8_supported(w.type)) {
    float* ys[1] = {y};
    const float* rs[1] = {residual};
    detail::gemm_q8_launch(&w, 1, x.q8, g, ys, y_stride, rs, /*bn: chosen*/ 0, g.max_groups > 1 ? 2 : 0, stream);
    return;
  }
  GemmParams gp{};
  gp.mv = dev::one_matrix_f32_params(w, x, g, y, y_stride, residual,
                                     "needs f32 activations (or x.q8 for an int8 weight type)");
  gp.cols = w.cols;
  const dim3 grid(static_cast<unsigned>((w.rows + BM - 1) / BM), static_cast<unsigned>(g.max_groups));
  switch (w.type) {
#define MS_GEMM(T) case DType::T: gemm_kernel<DType::T><<<grid, kThreads, 0, stream>>>(gp); break
    MS_GEMM(Q8_0); MS_GEMM(Q4_0);
    MS_GEMM(Q4_K); MS_GEMM(Q5_K); MS_GEMM(Q6_K); MS_GEMM(MXFP4);
#define MS_GEMM_SUB32(T, D) MS_GEMM(T);
    MS_SUB32_BASIC_TYPES(MS_GEMM_SUB32)
#undef MS_GEMM_SUB32
#define MS_GEMM_SUB32(T, D) \
  case DType::T:            \
    dev::iq_tables_ready(stream); \
    gemm_kernel<DType::T><<<grid, kThreads, 0, stream>>>(gp); \
    break;
    MS_SUB32_IQ_TYPES(MS_GEMM_SUB32)
#undef MS_GEMM_SUB32
#undef MS_GEMM
    default: throw Error(std::string("CUDA matmul: no dequantising kernel for ") + type_name(w.type));
  }
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
