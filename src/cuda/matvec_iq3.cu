// Matvec for the sub-block formats IQ3_XXS, IQ3_S (the generic kernel of
// matvec_kernel.cuh with OpSub32 over their decoders).
#include "cuda/matvec_sub32_launch.cuh"
#include "cuda/quant_sub32_iq.cuh"

namespace ms::cuda::detail {

MS_MV_DEFINE_IQ(IQ3_XXS, DecIQ3_XXS)
MS_MV_DEFINE_IQ(IQ3_S, DecIQ3_S)

}  // namespace ms::cuda::detail
