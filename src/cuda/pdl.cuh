// Programmatic dependent launch (Hopper, sm_90+): a kernel launched with
// launch_pdl() may start while the kernel before it on the stream is still
// running; it must call pdl_wait() before it reads anything an earlier kernel
// wrote (weights and other data no kernel writes may be read before). Each
// such kernel calls pdl_trigger() right after its wait, so the kernel after
// it can launch early too, and may itself read, before its own wait, what
// the kernel two back wrote.
//
// Decode is a chain of ~10 small kernels per layer; overlapping each one's
// launch and its first weight loads with the tail of the previous one is
// what this buys. On older GPUs (or with MOESTREAM_CUDA_PDL=0) launch_pdl is
// a plain launch and the device functions do nothing.
#pragma once
#include <cuda_runtime.h>

#include <utility>

namespace ms::cuda {

namespace dev {
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Starts pulling [p, p + bytes) into L2 (128-byte lines, `stride` threads
// cooperating from index `first`).
__device__ __forceinline__ void prefetch_l2(const void* p, long long bytes, int first, int stride) {
  const char* c = static_cast<const char*>(p);
  for (long long o = static_cast<long long>(first) * 128; o < bytes; o += static_cast<long long>(stride) * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(c + o));
}
}  // namespace dev

// Whether launch_pdl asks for programmatic serialization: the device is
// sm_90+ (a fact of the hardware, not a setting: PDL measured faster on
// every run, bench/results/cuda_bench.md, so there is no switch to turn it
// off). Defined in device.cpp.
bool pdl_enabled();

// Returns the launch's error (check it with MS_CUDA_CHECK).
template <class... KArgs, class... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace ms::cuda
