// Matvec for Q4_K weights (instantiates the generic kernel; see matvec_kernel.cuh
// and OpQ4K in quant_dot.cuh).
#include "cuda/matvec_kernel.cuh"

namespace ms::cuda::detail {

void matvec_launch_q4_k(const dev::MatvecParams& p, int max_groups, int max_per_group, int parts,
                      cudaStream_t stream) {
  // Rows per lane group 4 (one matrix), 2 (gate|up pair) and 2 (several
  // vectors, 4 at a time): the most that Q4_K's registers hold without
  // spilling at the kernel's occupancy, measured best (bench/results/serve.md,
  // "session 6"); 8 and 4 spilled and ran slower.
  dev::launch_matvec<dev::OpQ4K, 4, 2, 2, 4>(p, max_groups, max_per_group, parts, stream);
}

}  // namespace ms::cuda::detail
