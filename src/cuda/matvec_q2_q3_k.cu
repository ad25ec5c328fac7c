// Matvec for the sub-block formats Q2_K, Q3_K (the generic kernel of
// matvec_kernel.cuh with OpSub32 over their decoders).
#include "cuda/matvec_kernel.cuh"

namespace ms::cuda::detail {

#define MS_MV_DEFINE(T, D)                                                                         \
  void matvec_launch_##T(const dev::MatvecParams& p, int max_groups, int max_per_group, int parts, \
                         cudaStream_t stream) {                                                    \
    dev::launch_matvec<dev::OpSub32<dev::D>>(p, max_groups, max_per_group, parts, stream);         \
  }
MS_MV_DEFINE(Q2_K, DecQ2K)
MS_MV_DEFINE(Q3_K, DecQ3K)
#undef MS_MV_DEFINE

}  // namespace ms::cuda::detail
