// Matvec for the sub-block formats Q4_1, Q5_0, Q5_1 (the generic kernel of
// matvec_kernel.cuh with OpSub32 over their decoders).
#include "cuda/matvec_sub32_launch.cuh"

namespace ms::cuda::detail {

MS_MV_DEFINE(Q4_1, DecQ4_1)
MS_MV_DEFINE(Q5_0, DecQ5_0)
MS_MV_DEFINE(Q5_1, DecQ5_1)

}  // namespace ms::cuda::detail
