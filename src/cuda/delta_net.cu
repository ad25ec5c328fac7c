// Gated DeltaNet kernels (see delta_net.h). Small, plain kernels: the layer's
// big products (its projections) go through the matvec/GEMM of src/cuda.
#include <string>
#include <utility>

#include "cuda/common.cuh"
#include "cuda/delta_net.h"
#include "cuda/device.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kMaxTaps = 16;
constexpr int kMaxHeadK = 256;  // a state row of head_k floats: 8 per lane
constexpr int kRowsPerBlock = 4;  // warps per block in the recurrence

__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }

// Thread per (channel, run of kConvTokens tokens): a prompt's tokens are
// independent given the inputs before them, so the threads of one channel
// each rebuild their window from x (the first run from `window`) and the grid
// covers channels x tokens. (One thread per channel walking all n tokens left
// a 35B layer's 8192 channels at 64 blocks, two warps per SM, each waiting on
// one load per token.) The sum runs in the order of the reference (the newest
// tap first, then the window oldest first), so the results do not depend on
// the split. The first run of a channel is the only reader of `window`, and
// it writes the new window after its reads (kConvTokens >= taps - 1).
constexpr int kConvTokens = 16;
constexpr int kConvThreads = 128;
static_assert(kConvTokens >= kMaxTaps - 1, "only a channel's first run may read the old window");

template <int kTaps>
__global__ void __launch_bounds__(kConvThreads)
    conv1d_silu_kernel(const float* __restrict__ x, int64_t ld_x, int n, int64_t channels,
                       const float* __restrict__ w, float* window, float* __restrict__ out) {
  constexpr int kHist = kTaps - 1;
  const int64_t c = blockIdx.y * static_cast<int64_t>(kConvThreads) + threadIdx.x;
  if (c >= channels) return;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kConvTokens;
  // Input tau of this channel: x from token 0, the carried window before it.
  auto input = [&](int64_t tau) { return tau >= 0 ? x[tau * ld_x + c] : window[(tau + kHist) * channels + c]; };
  float wc[kTaps], win[kHist];
#pragma unroll
  for (int j = 0; j < kTaps; ++j) wc[j] = w[c * kTaps + j];
#pragma unroll
  for (int j = 0; j < kHist; ++j) win[j] = input(t0 - kHist + j);
  const int64_t left = n - t0;
  const int count = left < kConvTokens ? static_cast<int>(left) : kConvTokens;
  float in[kConvTokens];
#pragma unroll
  for (int i = 0; i < kConvTokens; ++i) in[i] = i < count ? x[(t0 + i) * ld_x + c] : 0.f;  // loads up front
#pragma unroll
  for (int i = 0; i < kConvTokens; ++i) {
    if (i < count) {
      float acc = wc[kHist] * in[i];
#pragma unroll
      for (int j = 0; j < kHist; ++j) acc += wc[j] * win[j];
      out[(t0 + i) * channels + c] = silu(acc);
    }
#pragma unroll
    for (int j = 0; j + 1 < kHist; ++j) win[j] = win[j + 1];
    win[kHist - 1] = in[i];
  }
  if (blockIdx.x == 0) {  // the new window: the last kHist inputs (old window entries too when n < kHist)
    float next[kHist];
#pragma unroll
    for (int j = 0; j < kHist; ++j) next[j] = input(static_cast<int64_t>(n) - kHist + j);
#pragma unroll
    for (int j = 0; j < kHist; ++j) window[j * channels + c] = next[j];
  }
}

template <int kTaps>
void launch_conv(const float* x, int64_t ld_x, int n, int64_t channels, const float* w, float* window, float* out,
                 cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((n + kConvTokens - 1) / kConvTokens),
                  static_cast<unsigned>((channels + kConvThreads - 1) / kConvThreads));
  conv1d_silu_kernel<kTaps><<<grid, kConvThreads, 0, stream>>>(x, ld_x, n, channels, w, window, out);
}

template <int... kTaps>
void launch_conv_taps(std::integer_sequence<int, kTaps...>, int taps, const float* x, int64_t ld_x, int n,
                      int64_t channels, const float* w, float* window, float* out, cudaStream_t stream) {
  ((taps == kTaps + 2 ? launch_conv<kTaps + 2>(x, ld_x, n, channels, w, window, out, stream) : void()), ...);
}

// Block per (token, q-or-k head): l2 norm of head_k values.
__global__ void prepare_qk_kernel(float* qkv, int64_t ld, int n_k, int head_k, float eps, float qscale) {
  __shared__ float scratch[32];
  const int t = blockIdx.x, which = blockIdx.y;  // which < n_k: q heads, then k heads
  float* v = qkv + t * ld + static_cast<int64_t>(which) * head_k;
  float ss = 0.f;
  for (int i = threadIdx.x; i < head_k; i += blockDim.x) ss += v[i] * v[i];
  ss = dev::block_sum(ss, scratch);
  const float f = (which < n_k ? qscale : 1.f) * rsqrtf(ss + eps);
  for (int i = threadIdx.x; i < head_k; i += blockDim.x) v[i] *= f;
}

__global__ void gates_kernel(const float* alpha, const float* b, const float* ssm_a, const float* dt_bias, int n,
                             int n_v, float* g, float* beta) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * n_v) return;
  const int h = i % n_v;
  const float x = alpha[i] + dt_bias[h];
  const float sp = x > 20.f ? x : log1pf(__expf(x));
  g[i] = ssm_a[h] * sp;
  beta[i] = 1.f / (1.f + __expf(-b[i]));
}

// Warp per state row (value head h, value channel c): the row stays in
// registers (lane l holds elements l, l + 32, ...) across the n tokens.
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    delta_rule_kernel(const float* __restrict__ qkv, int64_t ld, const float* __restrict__ g,
                      const float* __restrict__ beta, int n, int n_k, int n_v, int head_k, int head_v, float* S,
                      float* out) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= static_cast<int64_t>(n_v) * head_v) return;
  const int h = static_cast<int>(row / head_v), c = static_cast<int>(row % head_v), kh = h % n_k;
  const int64_t key_dim = static_cast<int64_t>(n_k) * head_k, value_dim = static_cast<int64_t>(n_v) * head_v;
  float* Sr = S + row * head_k;
  float s[kMaxHeadK / 32];
#pragma unroll
  for (int j = 0; j < kMaxHeadK / 32; ++j) {
    const int i = lane + 32 * j;
    s[j] = i < head_k ? Sr[i] : 0.f;
  }
  for (int t = 0; t < n; ++t) {
    const float* q = qkv + t * ld + static_cast<int64_t>(kh) * head_k;
    const float* k = q + key_dim;
    const float v = qkv[t * ld + 2 * key_dim + static_cast<int64_t>(h) * head_v + c];
    const float decay = __expf(g[static_cast<int64_t>(t) * n_v + h]);
    const float b = beta[static_cast<int64_t>(t) * n_v + h];
    float kr[kMaxHeadK / 32], sk = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxHeadK / 32; ++j) {
      const int i = lane + 32 * j;
      kr[j] = i < head_k ? k[i] : 0.f;
      sk += s[j] * kr[j];
    }
    const float d = b * (v - decay * dev::warp_sum(sk));
    float o = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxHeadK / 32; ++j) {
      const int i = lane + 32 * j;
      s[j] = s[j] * decay + d * kr[j];
      o += i < head_k ? s[j] * q[i] : 0.f;
    }
    o = dev::warp_sum(o);
    if (lane == 0) out[t * value_dim + static_cast<int64_t>(h) * head_v + c] = o;
  }
#pragma unroll
  for (int j = 0; j < kMaxHeadK / 32; ++j) {
    const int i = lane + 32 * j;
    if (i < head_k) Sr[i] = s[j];
  }
}

// Warp per row of n values.
__global__ void gated_rmsnorm_kernel(const float* x, const float* __restrict__ z, const float* __restrict__ w,
                                     float* out, int64_t rows, int n, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  const float* xr = x + r * n;
  float ss = 0.f;
  for (int i = lane; i < n; i += 32) ss += xr[i] * xr[i];
  const float inv = rsqrtf(dev::warp_sum(ss) / static_cast<float>(n) + eps);
  for (int i = lane; i < n; i += 32) out[r * n + i] = xr[i] * inv * w[i] * silu(z[r * n + i]);
}

unsigned blocks(int64_t items, int per_block) { return static_cast<unsigned>((items + per_block - 1) / per_block); }

}  // namespace

void conv1d_silu(const float* x, int64_t ld_x, int n, int64_t channels, const float* w, int taps, float* window,
                 float* out, cudaStream_t stream) {
  if (taps < 2 || taps > kMaxTaps) throw Error("conv1d_silu: " + std::to_string(taps) + " taps (2..16 supported)");
  if (n <= 0 || channels <= 0) return;
  if ((channels + kConvThreads - 1) / kConvThreads > 65535)
    throw Error("conv1d_silu: " + std::to_string(channels) + " channels (at most " +
                std::to_string(65535 * kConvThreads) + ")");
  launch_conv_taps(std::make_integer_sequence<int, kMaxTaps - 1>{}, taps, x, ld_x, n, channels, w, window, out,
                   stream);
  MS_CUDA_CHECK_LAUNCH();
}

void delta_prepare_qk(float* qkv, int64_t ld, int n, const DeltaNetShape& s, float eps, cudaStream_t stream) {
  if (n <= 0) return;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(2 * s.n_k_heads));
  prepare_qk_kernel<<<grid, 128, 0, stream>>>(qkv, ld, s.n_k_heads, s.head_k, eps,
                                              1.f / sqrtf(static_cast<float>(s.head_k)));
  MS_CUDA_CHECK_LAUNCH();
}

void delta_gates(const float* alpha, const float* b, const float* ssm_a, const float* dt_bias, int n, int n_v,
                 float* g, float* beta, cudaStream_t stream) {
  if (n <= 0 || n_v <= 0) return;
  gates_kernel<<<blocks(static_cast<int64_t>(n) * n_v, 256), 256, 0, stream>>>(alpha, b, ssm_a, dt_bias, n, n_v, g,
                                                                               beta);
  MS_CUDA_CHECK_LAUNCH();
}

void delta_rule(const float* qkv, int64_t ld, const float* g, const float* beta, int n, const DeltaNetShape& s,
                float* S, float* out, cudaStream_t stream) {
  if (s.head_k > kMaxHeadK || s.head_k <= 0 || s.n_k_heads <= 0 || s.n_v_heads % s.n_k_heads != 0)
    throw Error("delta_rule (CUDA): unsupported shape (head_k " + std::to_string(s.head_k) + " must be 1..256, value "
                "heads a multiple of key heads)");
  if (n <= 0) return;
  const int64_t rows = static_cast<int64_t>(s.n_v_heads) * s.head_v;
  delta_rule_kernel<<<blocks(rows, kRowsPerBlock), 32 * kRowsPerBlock, 0, stream>>>(
      qkv, ld, g, beta, n, s.n_k_heads, s.n_v_heads, s.head_k, s.head_v, S, out);
  MS_CUDA_CHECK_LAUNCH();
}

void gated_rmsnorm(const float* x, const float* z, const float* w, float* out, int64_t rows, int n, float eps,
                   cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  gated_rmsnorm_kernel<<<blocks(rows, 4), 128, 0, stream>>>(x, z, w, out, rows, n, eps);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
