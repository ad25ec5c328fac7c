// Device-side residency check, the gate a miss waits at, and the combine
// that takes the host's rows (see expert_gate.h).
#include "cuda/device.h"
#include "cuda/expert_gate.h"
#include "util/error.h"

namespace ms::cuda {
namespace {

constexpr int kCheckThreads = 256;

__device__ __forceinline__ uint32_t load_volatile(const uint32_t* p) { return *const_cast<const volatile uint32_t*>(p); }

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void __launch_bounds__(kCheckThreads) gate_check_kernel(GateCheck c) {
  __shared__ int all_resident;
  const int tid = threadIdx.x;
  if (tid == 0) all_resident = 1;
  __syncthreads();
  GateMailbox* box = c.box;
  if (tid < c.k) {
    const int e = c.ids[tid];
    const bool ok = e >= 0 && e < c.n_expert && ((c.resident[e / 32] >> (e % 32)) & 1u) != 0;
    if (!ok) all_resident = 0;  // a benign race: every writer writes 0
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
  *const_cast<volatile uint32_t*>(&box->hit) = hit ? 1u : 0u;
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

size_t GateMailbox::bytes(int64_t d) { return (kHeaderBytes + sizeof(float) * static_cast<size_t>(d) + 255) & ~size_t{255}; }

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

void moe_combine_host_rows(const float* y, const float* host_y, const uint32_t* host_mask, const float* weights,
                           int k, int64_t n, const float* residual, float* out, cudaStream_t stream) {
  if (k <= 0 || k > 32 || n <= 0) throw Error("moe_combine_host_rows: k must be in 1..32");
  const int64_t bx = (n + kCombineThreads - 1) / kCombineThreads;
  combine_host_rows_kernel<<<static_cast<unsigned>(bx < 1024 ? bx : 1024), kCombineThreads, 0, stream>>>(
      y, host_y, host_mask, weights, k, n, residual, out);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
