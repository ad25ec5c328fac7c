// Matvec for the sub-block formats IQ4_NL, IQ4_XS (the generic kernel of
// matvec_kernel.cuh with OpSub32 over their decoders).
#include "cuda/matvec_sub32_launch.cuh"
#include "cuda/quant_sub32_iq.cuh"

namespace ms::cuda::detail {

MS_MV_DEFINE_IQ(IQ4_NL, DecIQ4_NL)
MS_MV_DEFINE_IQ(IQ4_XS, DecIQ4_XS)

}  // namespace ms::cuda::detail
