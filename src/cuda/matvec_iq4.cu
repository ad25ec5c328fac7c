// Matvec for the sub-block formats IQ4_NL, IQ4_XS (the generic kernel of
// matvec_kernel.cuh with OpSub32 over their decoders).
#include "cuda/matvec_kernel.cuh"
#include "cuda/quant_sub32_iq.cuh"

namespace ms::cuda::detail {

#define MS_MV_DEFINE(T, D)                                                                         \
  void matvec_launch_##T(const dev::MatvecParams& p, int max_groups, int max_per_group, int parts, \
                         cudaStream_t stream) {                                                    \
    dev::iq_tables_ready(stream);                                                                  \
    dev::launch_matvec<dev::OpSub32<dev::D>>(p, max_groups, max_per_group, parts, stream);         \
  }
MS_MV_DEFINE(IQ4_NL, DecIQ4_NL)
MS_MV_DEFINE(IQ4_XS, DecIQ4_XS)
#undef MS_MV_DEFINE

}  // namespace ms::cuda::detail
