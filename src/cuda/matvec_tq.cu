// Matvec for the sub-block formats TQ1_0, TQ2_0 (the generic kernel of
// matvec_kernel.cuh with OpSub32 over their decoders).
#include "cuda/matvec_sub32_launch.cuh"

namespace ms::cuda::detail {

MS_MV_DEFINE(TQ1_0, DecTQ1_0)
MS_MV_DEFINE(TQ2_0, DecTQ2_0)

}  // namespace ms::cuda::detail
