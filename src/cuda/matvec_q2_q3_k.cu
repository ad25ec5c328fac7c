// Matvec for the sub-block formats Q2_K, Q3_K (the generic kernel of
// matvec_kernel.cuh with OpSub32 over their decoders).
#include "cuda/matvec_sub32_launch.cuh"

namespace ms::cuda::detail {

MS_MV_DEFINE(Q2_K, DecQ2K)
MS_MV_DEFINE(Q3_K, DecQ3K)

}  // namespace ms::cuda::detail
