// Matvec for the sub-block formats Q4_1, Q5_0, Q5_1 (the generic kernel of
// matvec_kernel.cuh with OpSub32 over their decoders).
#include "cuda/matvec_kernel.cuh"

namespace ms::cuda::detail {

#define MS_MV_DEFINE(T, D)                                                                         \
  void matvec_launch_##T(const dev::MatvecParams& p, int max_groups, int max_per_group, int parts, \
                         cudaStream_t stream) {                                                    \
    dev::launch_matvec<dev::OpSub32<dev::D>>(p, max_groups, max_per_group, parts, stream);         \
  }
MS_MV_DEFINE(Q4_1, DecQ4_1)
MS_MV_DEFINE(Q5_0, DecQ5_0)
MS_MV_DEFINE(Q5_1, DecQ5_1)
#undef MS_MV_DEFINE

}  // namespace ms::cuda::detail
