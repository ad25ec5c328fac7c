// Matvec for Q4_0 weights (instantiates the generic kernel; see matvec_kernel.cuh
// and OpQ4_0 in quant_dot.cuh).
#include "cuda/matvec_kernel.cuh"

namespace ms::cuda::detail {

void matvec_launch_q4_0(const dev::MatvecParams& p, int max_groups, int max_per_group, int parts,
                      cudaStream_t stream) {
  dev::launch_matvec<dev::OpQ4_0>(p, max_groups, max_per_group, parts, stream);
}

}  // namespace ms::cuda::detail
