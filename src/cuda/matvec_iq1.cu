// Matvec for the sub-block formats IQ1_S, IQ1_M (the generic kernel of
// matvec_kernel.cuh with OpSub32 over their decoders).
#include "cuda/matvec_sub32_launch.cuh"
#include "cuda/quant_sub32_iq.cuh"

namespace ms::cuda::detail {

MS_MV_DEFINE_IQ(IQ1_S, DecIQ1_S)
MS_MV_DEFINE_IQ(IQ1_M, DecIQ1_M)

}  // namespace ms::cuda::detail
