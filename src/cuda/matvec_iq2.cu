// Matvec for the sub-block formats IQ2_XXS, IQ2_XS, IQ2_S (the generic kernel of
// matvec_kernel.cuh with OpSub32 over their decoders).
#include "cuda/matvec_sub32_launch.cuh"
#include "cuda/quant_sub32_iq.cuh"

namespace ms::cuda::detail {

MS_MV_DEFINE_IQ(IQ2_XXS, DecIQ2_XXS)
MS_MV_DEFINE_IQ(IQ2_XS, DecIQ2_XS)
MS_MV_DEFINE_IQ(IQ2_S, DecIQ2_S)

}  // namespace ms::cuda::detail
