// Matvec for Q5_K weights (instantiates the generic kernel; see matvec_kernel.cuh
// and OpQ5K in quant_dot.cuh).
#include "cuda/matvec_kernel.cuh"

namespace ms::cuda::detail {

void matvec_launch_q5_k(const dev::MatvecParams& p, int max_groups, int max_per_group, int parts,
                      cudaStream_t stream) {
  dev::launch_matvec<dev::OpQ5K>(p, max_groups, max_per_group, parts, stream);
}

}  // namespace ms::cuda::detail
