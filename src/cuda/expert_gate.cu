// Device-side residency check, the gate a miss waits at, and the combine
// that takes the host's rows (see expert_gate.h).
#include <atomic>

#include "cuda/device.h"
#include "cuda/expert_gate.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kCheckThreads = 256;

__device__ __forceinline__ uint32_t load_volatile(const uint32_t* p) { return *const_cast<const volatile uint32_t*>(p); }

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void __launch_bounds__(kCheckThreads) gate_check_kernel(GateCheck c) {
  __shared__ int all_resident, any_staged;
  const int tid = threadIdx.x;
  if (tid == 0) all_resident = 1, any_staged = 0;
  __syncthreads();
  GateMailbox* box = c.box;
  if (tid < c.k) {
    const int e = c.ids[tid];
    const bool in_range = e >= 0 && e < c.n_expert;
    bool ok = in_range && ((c.resident[e / 32] >> (e % 32)) & 1u) != 0;
    // A staging slot holds it this step: its stamp, written by the copy
    // stream after the staged copy and the slot table, is this step's.
    if (!ok && in_range && c.staged != nullptr && load_volatile(c.staged + e) == load_volatile(c.seq))
      ok = true, any_staged = 1;  // benign races: every writer writes the same value
    if (!ok) all_resident = 0;
    box->ids[tid] = e;
  }
  if (tid < c.n_pred) box->pred[tid] = c.pred[tid];
  __syncthreads();
  const bool hit = all_resident != 0;
  if (!hit) {  // the CPU may compute some expert: it needs the input
    float* x = reinterpret_cast<float*>(reinterpret_cast<char*>(box) + GateMailbox::kHeaderBytes);
    for (int64_t i = tid; i < c.d; i += kCheckThreads) x[i] = c.x[i];
  }
  __threadfence_system();
  __syncthreads();
  if (tid != 0) return;
  *c.host_mask = 0;
  const uint32_t s = load_volatile(c.seq);
  *const_cast<volatile uint32_t*>(&box->hit) = hit ? (any_staged ? 2u : 1u) : 0u;
  __threadfence_system();
  *const_cast<volatile uint32_t*>(&box->seq) = s;
  if (hit) {
    __threadfence();  // host_mask = 0 before the gate opens
    *const_cast<volatile uint32_t*>(c.gate) = s;
    *const_cast<volatile uint32_t*>(c.gate + 1) = s;
  }
}

__global__ void gate_wait_kernel(const uint32_t* seq, const uint32_t* gate, uint32_t* timed_out, uint64_t timeout_ns) {
  const uint32_t want = load_volatile(seq);
  const uint64_t t0 = global_ns();
  while (load_volatile(gate) != want) {
    __nanosleep(256);
    if (global_ns() - t0 > timeout_ns) {
      *const_cast<volatile uint32_t*>(timed_out) = 1;
      break;
    }
  }
  __threadfence();
}

constexpr int kRowsThreads = 512;
constexpr int kRowsUnroll = 4;

__global__ void __launch_bounds__(kRowsThreads) gate_wait_rows_kernel(GateRows g, const float* src, uint64_t timeout_ns) {
  __shared__ int s_rows[GateMailbox::kMaxK];
  __shared__ int s_n_rows;
  if (threadIdx.x == 0) {
    const uint32_t want = load_volatile(g.seq);
    const uint64_t t0 = global_ns();
    uint32_t mask = 0;
    for (;;) {
      if (load_volatile(g.gate) == want) break;
      if (load_acquire_sys(&g.box->open) == want) {
        mask = load_volatile(&g.box->mask);
        *g.mask = mask;
        break;
      }
      __nanosleep(128);
      if (global_ns() - t0 > timeout_ns) {
        *const_cast<volatile uint32_t*>(g.timed_out) = 1;
        break;
      }
    }
    int n = 0;
    for (int j = 0; j < g.k; ++j)
      if ((mask >> j) & 1u) s_rows[n++] = j;
    s_n_rows = n;
  }
  __syncthreads();
  // The rows sit in host memory, where every read crosses PCIe (~1-2 us):
  // each thread issues several loads before it stores any, so the block has
  // thousands in flight instead of a round trip per element. __ldcv: never
  // from a cache (this memory changed under the GPU since the last step).
  const int n_rows = s_n_rows;
  const bool vec = g.d % 4 == 0;
  const int64_t per_row = vec ? g.d / 4 : g.d;
  const int64_t total = n_rows * per_row;
  for (int64_t base = threadIdx.x; base < total; base += int64_t{kRowsUnroll} * kRowsThreads) {
    if (vec) {
      float4 v[kRowsUnroll];
#pragma unroll
      for (int u = 0; u < kRowsUnroll; ++u) {
        const int64_t i = base + int64_t{u} * kRowsThreads;
        if (i < total) v[u] = __ldcv(reinterpret_cast<const float4*>(src + s_rows[i / per_row] * g.d) + i % per_row);
      }
#pragma unroll
      for (int u = 0; u < kRowsUnroll; ++u) {
        const int64_t i = base + int64_t{u} * kRowsThreads;
        if (i < total) reinterpret_cast<float4*>(g.y + s_rows[i / per_row] * g.d)[i % per_row] = v[u];
      }
    } else {
      float v[kRowsUnroll];
#pragma unroll
      for (int u = 0; u < kRowsUnroll; ++u) {
        const int64_t i = base + int64_t{u} * kRowsThreads;
        if (i < total) v[u] = __ldcv(src + s_rows[i / per_row] * g.d + i % per_row);
      }
#pragma unroll
      for (int u = 0; u < kRowsUnroll; ++u) {
        const int64_t i = base + int64_t{u} * kRowsThreads;
        if (i < total) g.y[s_rows[i / per_row] * g.d + i % per_row] = v[u];
      }
    }
  }
  __threadfence();
}

constexpr int kCombineThreads = 256;

__global__ void combine_host_rows_kernel(const float* __restrict__ y, const float* __restrict__ host_y,
                                         const uint32_t* __restrict__ host_mask, const float* __restrict__ wts, int k,
                                         int64_t n, const float* residual, float* out) {
  const uint32_t mask = *host_mask;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(kCombineThreads) + threadIdx.x; c < n;
       c += static_cast<int64_t>(gridDim.x) * kCombineThreads) {
    float s = 0.f;
    for (int j = 0; j < k; ++j) s += wts[j] * ((mask >> j) & 1u ? host_y : y)[static_cast<int64_t>(j) * n + c];
    if (residual) s += residual[c];
    out[c] = s;
  }
}

}  // namespace

size_t GateMailbox::bytes(int64_t d, int k) {
  return kHeaderBytes + x_bytes(d) + x_bytes(d * static_cast<int64_t>(k));
}

void gate_check(const GateCheck& c, cudaStream_t stream) {
  if (c.k <= 0 || c.k > GateMailbox::kMaxK || c.n_pred < 0 || c.n_pred > GateMailbox::kMaxK)
    throw Error("gate_check: k and the prediction must be at most 32 experts");
  if (!c.resident || !c.ids || !c.seq || !c.gate || !c.host_mask || !c.box || (c.n_pred > 0 && !c.pred) || !c.x)
    throw Error("gate_check: missing buffer");
  gate_check_kernel<<<1, kCheckThreads, 0, stream>>>(c);
  MS_CUDA_CHECK_LAUNCH();
}

void gate_wait(const uint32_t* seq, const uint32_t* gate, uint32_t* timed_out, uint32_t timeout_ms,
               cudaStream_t stream) {
  gate_wait_kernel<<<1, 1, 0, stream>>>(seq, gate, timed_out, static_cast<uint64_t>(timeout_ms) * 1000000ull);
  MS_CUDA_CHECK_LAUNCH();
}

void gate_wait_rows(const GateRows& g, cudaStream_t stream) {
  if (g.k <= 0 || g.k > GateMailbox::kMaxK || g.d <= 0) throw Error("gate_wait_rows: k must be in 1..32");
  if (!g.seq || !g.gate || !g.box || !g.y || !g.mask || !g.timed_out) throw Error("gate_wait_rows: missing buffer");
  const float* rows = reinterpret_cast<const float*>(reinterpret_cast<const char*>(g.box) + GateMailbox::kHeaderBytes +
                                                     GateMailbox::x_bytes(g.d));
  gate_wait_rows_kernel<<<1, kRowsThreads, 0, stream>>>(g, rows, static_cast<uint64_t>(g.timeout_ms) * 1000000ull);
  MS_CUDA_CHECK_LAUNCH();
}

void open_host_rows(GateMailbox* box, uint32_t mask, uint32_t seq) {
  *reinterpret_cast<volatile uint32_t*>(&box->mask) = mask;
  // The rows and the mask before the gate (the device reads them after it
  // sees `open`, with acquire semantics).
  std::atomic_thread_fence(std::memory_order_release);
  *reinterpret_cast<volatile uint32_t*>(&box->open) = seq;
}

void moe_combine_host_rows(const float* y, const float* host_y, const uint32_t* host_mask, const float* weights,
                           int k, int64_t n, const float* residual, float* out, cudaStream_t stream) {
  if (k <= 0 || k > 32 || n <= 0) throw Error("moe_combine_host_rows: k must be in 1..32");
  const int64_t bx = (n + kCombineThreads - 1) / kCombineThreads;
  combine_host_rows_kernel<<<static_cast<unsigned>(bx < 1024 ? bx : 1024), kCombineThreads, 0, stream>>>(
      y, host_y, host_mask, weights, k, n, residual, out);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
