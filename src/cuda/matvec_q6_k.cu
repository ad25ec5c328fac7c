// Matvec for Q6_K weights (instantiates the generic kernel; see matvec_kernel.cuh
// and OpQ6K in quant_dot.cuh).
#include "cuda/matvec_kernel.cuh"

namespace ms::cuda::detail {

void matvec_launch_q6_k(const dev::MatvecParams& p, int max_groups, int max_per_group, int parts,
                      cudaStream_t stream) {
  // One row per lane group for one vector (Q6_K's unpacking spills at more),
  // 2 rows for several vectors: each activation word then serves two rows
  // (the output head over a multi-sequence step; bench/results/serve.md,
  // "session 6").
  dev::launch_matvec<dev::OpQ6K, 1, 1, 2, 8>(p, max_groups, max_per_group, parts, stream);
}

}  // namespace ms::cuda::detail
