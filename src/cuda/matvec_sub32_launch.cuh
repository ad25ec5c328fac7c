// The launcher of one sub-block format (quant_sub32_types.h) for the
// matvec_<formats>.cu files: the generic kernel of matvec_kernel.cuh with
// OpSub32 over the format's decoder D, defining detail::matvec_launch_T.
// Use inside namespace ms::cuda::detail. The IQ formats' decoders read the
// device grid tables of quant_sub32_iq.cuh (include it): MS_MV_DEFINE_IQ makes
// sure they are uploaded first.
#pragma once
#include "cuda/matvec_kernel.cuh"

#define MS_MV_DEFINE_WITH(T, D, PROLOGUE)                                                          \
  void matvec_launch_##T(const dev::MatvecParams& p, int max_groups, int max_per_group, int parts, \
                         cudaStream_t stream) {                                                    \
    PROLOGUE;                                                                                      \
    dev::launch_matvec<dev::OpSub32<dev::D>>(p, max_groups, max_per_group, parts, stream);         \
  }
#define MS_MV_DEFINE(T, D) MS_MV_DEFINE_WITH(T, D, (void)0)
#define MS_MV_DEFINE_IQ(T, D) MS_MV_DEFINE_WITH(T, D, dev::iq_tables_ready(stream))
