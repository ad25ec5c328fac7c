// Multi-sequence Gated DeltaNet decode steps (see delta_net_multi.h): the
// one-token case of delta_net.cu's conv1d_silu_kernel and delta_rule_kernel,
// with the state of each row found through its slot. The arithmetic is theirs
// in the same order (tests/cuda/delta_net_multi_test.cpp checks the bits).
#include <string>
#include <utility>

#include "cuda/common.cuh"
#include "cuda/delta_net_multi.h"
#include "cuda/device.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kMaxTaps = 16;
constexpr int kMaxHeadK = 256;
constexpr int kRowsPerBlock = 4;  // warps per block in the recurrence
constexpr int kConvThreads = 128;

__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }

// Thread per (channel, row): the newest tap first, then the window oldest
// first (the reference's order), then the window shifts by one.
template <int kTaps>
__global__ void __launch_bounds__(kConvThreads)
    conv1d_silu_multi_kernel(const float* __restrict__ x, int64_t ld_x, int64_t channels, const float* __restrict__ w,
                             float* window_base, int64_t window_stride, int n_slots, const int32_t* __restrict__ slots,
                             float* __restrict__ out) {
  constexpr int kHist = kTaps - 1;
  const int64_t c = blockIdx.x * static_cast<int64_t>(kConvThreads) + threadIdx.x;
  const int t = blockIdx.y;
  if (c >= channels) return;
  const int slot = __ldg(slots + t);
  if (slot < 0 || slot >= n_slots) return;
  float* window = window_base + static_cast<int64_t>(slot) * window_stride;
  const float in = x[static_cast<int64_t>(t) * ld_x + c];
  float win[kHist];
#pragma unroll
  for (int j = 0; j < kHist; ++j) win[j] = window[j * channels + c];
  float acc = w[c * kTaps + kHist] * in;
#pragma unroll
  for (int j = 0; j < kHist; ++j) acc += w[c * kTaps + j] * win[j];
  out[static_cast<int64_t>(t) * channels + c] = silu(acc);
#pragma unroll
  for (int j = 0; j + 1 < kHist; ++j) window[j * channels + c] = win[j + 1];
  window[(kHist - 1) * channels + c] = in;
}

template <int kTaps>
void launch_conv(const float* x, int64_t ld_x, int n, int64_t channels, const float* w, float* window_base,
                 int64_t window_stride, int n_slots, const int32_t* slots, float* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((channels + kConvThreads - 1) / kConvThreads), static_cast<unsigned>(n));
  conv1d_silu_multi_kernel<kTaps><<<grid, kConvThreads, 0, stream>>>(x, ld_x, channels, w, window_base, window_stride,
                                                                     n_slots, slots, out);
}

template <int... kTaps>
void launch_conv_taps(std::integer_sequence<int, kTaps...>, int taps, const float* x, int64_t ld_x, int n,
                      int64_t channels, const float* w, float* window_base, int64_t window_stride, int n_slots,
                      const int32_t* slots, float* out, cudaStream_t stream) {
  ((taps == kTaps + 2
        ? launch_conv<kTaps + 2>(x, ld_x, n, channels, w, window_base, window_stride, n_slots, slots, out, stream)
        : void()),
   ...);
}

// Warp per (state row of value head h, channel c) of row t's slot: one token
// of delta_rule_kernel.
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    delta_rule_multi_kernel(const float* __restrict__ qkv, int64_t ld, const float* __restrict__ g,
                            const float* __restrict__ beta, int n_k, int n_v, int head_k, int head_v, float* S_base,
                            int64_t state_stride, int n_slots, const int32_t* __restrict__ slots, float* out) {
  const int lane = threadIdx.x % 32;
  const int t = blockIdx.y;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= static_cast<int64_t>(n_v) * head_v) return;
  const int slot = __ldg(slots + t);
  if (slot < 0 || slot >= n_slots) return;
  const int h = static_cast<int>(row / head_v), c = static_cast<int>(row % head_v), kh = h % n_k;
  const int64_t key_dim = static_cast<int64_t>(n_k) * head_k, value_dim = static_cast<int64_t>(n_v) * head_v;
  float* Sr = S_base + static_cast<int64_t>(slot) * state_stride + row * head_k;
  float s[kMaxHeadK / 32];
#pragma unroll
  for (int j = 0; j < kMaxHeadK / 32; ++j) {
    const int i = lane + 32 * j;
    s[j] = i < head_k ? Sr[i] : 0.f;
  }
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
#pragma unroll
  for (int j = 0; j < kMaxHeadK / 32; ++j) {
    const int i = lane + 32 * j;
    if (i < head_k) Sr[i] = s[j];
  }
}

void check_slots(const char* who, int n, int n_slots, int64_t stride) {
  if (n > 65535) throw Error(std::string(who) + ": at most 65535 rows per call, not " + std::to_string(n));
  if (n_slots <= 0 || stride < 0)
    throw Error(std::string(who) + ": " + std::to_string(n_slots) + " slots of stride " + std::to_string(stride));
}

}  // namespace

void conv1d_silu_multi(const float* x, int64_t ld_x, int n, int64_t channels, const float* w, int taps,
                       float* window_base, int64_t window_stride, int n_slots, const int32_t* slots, float* out,
                       cudaStream_t stream) {
  if (taps < 2 || taps > kMaxTaps) throw Error("conv1d_silu_multi: " + std::to_string(taps) + " taps (2..16 supported)");
  if (n <= 0 || channels <= 0) return;
  check_slots("conv1d_silu_multi", n, n_slots, window_stride);
  launch_conv_taps(std::make_integer_sequence<int, kMaxTaps - 1>{}, taps, x, ld_x, n, channels, w, window_base,
                   window_stride, n_slots, slots, out, stream);
  MS_CUDA_CHECK_LAUNCH();
}

void delta_rule_multi(const float* qkv, int64_t ld, const float* g, const float* beta, int n, const DeltaNetShape& s,
                      float* S_base, int64_t state_stride, int n_slots, const int32_t* slots, float* out,
                      cudaStream_t stream) {
  if (s.head_k > kMaxHeadK || s.head_k <= 0 || s.n_k_heads <= 0 || s.n_v_heads % s.n_k_heads != 0)
    throw Error("delta_rule_multi: unsupported shape (head_k " + std::to_string(s.head_k) +
                " must be 1..256, value heads a multiple of key heads)");
  if (n <= 0) return;
  check_slots("delta_rule_multi", n, n_slots, state_stride);
  const int64_t rows = static_cast<int64_t>(s.n_v_heads) * s.head_v;
  const dim3 grid(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(n));
  delta_rule_multi_kernel<<<grid, 32 * kRowsPerBlock, 0, stream>>>(qkv, ld, g, beta, s.n_k_heads, s.n_v_heads,
                                                                   s.head_k, s.head_v, S_base, state_stride, n_slots,
                                                                   slots, out);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
