// Embedding rows (dequantised from the table's own format) and KV cache appends
// (f16, f32, q8_0).
#include <string>

#include "cuda/device.h"
#include "cuda/kv_elem.cuh"
#include "cuda/ops.h"
#include "cuda/quant_dequant.cuh"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kThreads = 256;

template <DType T>
__global__ void embed_kernel(const uint8_t* __restrict__ table, int64_t n_vocab, int64_t n, int64_t row_bytes,
                             const int32_t* __restrict__ ids, float* __restrict__ out) {
  const int t = blockIdx.y;
  const int32_t id = ids[t];
  float* o = out + static_cast<int64_t>(t) * n;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; c < n;
       c += static_cast<int64_t>(gridDim.x) * kThreads) {
    o[c] = (id >= 0 && id < n_vocab) ? dev::dequant_elem<T>(table + id * row_bytes, c) : 0.f;
  }
}

// One thread per element; f32 -> T (f16: round-to-nearest-even; f32: as is).
template <class T>
__global__ void kv_append_kernel(const float* __restrict__ k, const float* __restrict__ v, int n_kv, int head_dim,
                                 const int32_t* __restrict__ positions, T* k_cache, T* v_cache, int64_t ctx) {
  const int t = blockIdx.y;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n_kv * head_dim) return;
  const int32_t pos = positions[t];
  if (pos < 0 || pos >= ctx) return;
  const int h = idx / head_dim, d = idx % head_dim;
  const int64_t src = static_cast<int64_t>(t) * n_kv * head_dim + idx;
  const int64_t dst = (static_cast<int64_t>(h) * ctx + pos) * head_dim + d;
  k_cache[dst] = dev::KvElem<T>::from_float(k[src]);
  v_cache[dst] = dev::KvElem<T>::from_float(v[src]);
}

// q8_0: a warp per block of 32 elements (lane = element); blocks of a token
// [n_kv][head_dim/32] in order, 8 warps per thread block. Bit for bit the
// CPU's quantize_row_act(Q8_0) (src/quant, the CPU cache's kv_store): d =
// amax/127 (f32, stored as f16), q = round-half-even(x * (1/d)) clamped to
// +-127 (ggml's reference rounds ties away from zero: rare ties differ by 1).
__global__ void kv_append_q8_0_kernel(const float* __restrict__ k, const float* __restrict__ v, int n_kv,
                                      int head_dim, const int32_t* __restrict__ positions, BlockQ8_0* k_cache,
                                      BlockQ8_0* v_cache, int64_t ctx) {
  const int t = blockIdx.y;
  const int per_head = head_dim / QK;
  const int blk = blockIdx.x * (kThreads / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (blk >= n_kv * per_head) return;
  const int32_t pos = positions[t];
  if (pos < 0 || pos >= ctx) return;
  const int h = blk / per_head, b = blk % per_head;
  const int64_t src = static_cast<int64_t>(t) * n_kv * head_dim + static_cast<int64_t>(blk) * QK + lane;
  const int64_t dst = (static_cast<int64_t>(h) * ctx + pos) * per_head + b;
  for (int which = 0; which < 2; ++which) {
    const float x = (which == 0 ? k : v)[src];
    BlockQ8_0& out = (which == 0 ? k_cache : v_cache)[dst];
    const float d = dev::warp_max(fabsf(x)) / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    const float r = x * id;
    out.qs[lane] = static_cast<int8_t>(max(-127, min(127, static_cast<int>(rintf(isfinite(r) ? r : 0.f)))));
    if (lane == 0) out.d = __half_as_ushort(__float2half_rn(d));
  }
}

template <class T>
void kv_append_impl(const float* k, const float* v, int n_tokens, int n_kv, int head_dim, const int32_t* positions,
                    T* k_cache, T* v_cache, int64_t ctx, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  if (n_tokens > 65535) throw Error("kv_append: at most 65535 tokens per call");
  const int per_token = n_kv * head_dim;
  const dim3 grid(static_cast<unsigned>((per_token + kThreads - 1) / kThreads), static_cast<unsigned>(n_tokens));
  kv_append_kernel<T><<<grid, kThreads, 0, stream>>>(k, v, n_kv, head_dim, positions, k_cache, v_cache, ctx);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool embed_supported(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0:
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: case DType::MXFP4:
      return true;
#define MS_SUB32_CASE(T, D) case DType::T:
    MS_SUB32_TYPES(MS_SUB32_CASE)
#undef MS_SUB32_CASE
      return true;
    default:
      return false;
  }
}

void embed_rows(DType t, const void* table, int64_t n_vocab, int64_t n, const int32_t* ids, int n_tokens, float* out,
                cudaStream_t stream) {
  if (n_tokens <= 0) return;
  if (!embed_supported(t))
    throw Error(std::string("embed_rows: token embedding type ") + type_name(t) + " is not supported on CUDA");
  if (n_tokens > 65535) throw Error("embed_rows: at most 65535 tokens per call");
  const int64_t rb = row_bytes(t, n);
  const int64_t bx = (n + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(bx < 1024 ? bx : 1024), static_cast<unsigned>(n_tokens));
  const auto* tb = static_cast<const uint8_t*>(table);
  switch (t) {
#define MS_EMBED(T) case DType::T: embed_kernel<DType::T><<<grid, kThreads, 0, stream>>>(tb, n_vocab, n, rb, ids, out); break
    MS_EMBED(F32); MS_EMBED(F16); MS_EMBED(BF16); MS_EMBED(Q8_0); MS_EMBED(Q4_0);
    MS_EMBED(Q4_K); MS_EMBED(Q5_K); MS_EMBED(Q6_K); MS_EMBED(MXFP4);
#define MS_EMBED_SUB32(T, D) MS_EMBED(T);
    MS_SUB32_BASIC_TYPES(MS_EMBED_SUB32)
#undef MS_EMBED_SUB32
#define MS_EMBED_SUB32(T, D)  \
  case DType::T:              \
    dev::iq_tables_ready(stream); \
    embed_kernel<DType::T><<<grid, kThreads, 0, stream>>>(tb, n_vocab, n, rb, ids, out); \
    break;
    MS_SUB32_IQ_TYPES(MS_EMBED_SUB32)
#undef MS_EMBED_SUB32
#undef MS_EMBED
    default: break;
  }
  MS_CUDA_CHECK_LAUNCH();
}

void kv_append(const float* k, const float* v, int n_tokens, int n_kv, int head_dim, const int32_t* positions,
               uint16_t* k_cache, uint16_t* v_cache, int64_t ctx, cudaStream_t stream) {
  kv_append_impl(k, v, n_tokens, n_kv, head_dim, positions, reinterpret_cast<__half*>(k_cache),
                 reinterpret_cast<__half*>(v_cache), ctx, stream);
}

void kv_append(const float* k, const float* v, int n_tokens, int n_kv, int head_dim, const int32_t* positions,
               float* k_cache, float* v_cache, int64_t ctx, cudaStream_t stream) {
  kv_append_impl(k, v, n_tokens, n_kv, head_dim, positions, k_cache, v_cache, ctx, stream);
}

void kv_append(const float* k, const float* v, int n_tokens, int n_kv, int head_dim, const int32_t* positions,
               BlockQ8_0* k_cache, BlockQ8_0* v_cache, int64_t ctx, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  if (head_dim <= 0 || head_dim % QK != 0)
    throw Error("kv_append: a q8_0 KV cache needs head_dim a multiple of 32, not " + std::to_string(head_dim));
  if (n_tokens > 65535) throw Error("kv_append: at most 65535 tokens per call");
  const int blocks = n_kv * (head_dim / QK), per_tb = kThreads / 32;
  const dim3 grid(static_cast<unsigned>((blocks + per_tb - 1) / per_tb), static_cast<unsigned>(n_tokens));
  kv_append_q8_0_kernel<<<grid, kThreads, 0, stream>>>(k, v, n_kv, head_dim, positions, k_cache, v_cache, ctx);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
