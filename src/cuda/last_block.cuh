// A grid-wide "who finishes last" for kernels whose final step (a merge, a
// top-k, a normalisation) needs every block's output, without a second launch.
#pragma once
#include <cuda_runtime.h>

namespace ms::cuda::dev {

// Called by every thread of each of n_blocks blocks after they wrote their
// results: true in the block that arrives last (all threads), which then sees
// every block's writes; that block also resets *counter to 0 for the next
// launch (so a captured graph can replay the kernel).
__device__ __forceinline__ bool last_block_to_arrive(unsigned int* counter, unsigned int n_blocks) {
  __shared__ bool last;
  __threadfence();  // this block's writes visible device-wide before it counts itself done
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == n_blocks - 1;
  __syncthreads();
  if (!last) return false;
  __threadfence();
  if (threadIdx.x == 0) *counter = 0u;  // every block has counted
  return true;
}

}  // namespace ms::cuda::dev
