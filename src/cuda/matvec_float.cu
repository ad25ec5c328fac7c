// Matvec for F32, F16 and BF16 weights with f32 activations.
#include "cuda/matvec_kernel.cuh"

namespace ms::cuda::detail {

void matvec_launch_float(int kind, bool vec, const dev::MatvecParams& p, int max_groups, int max_per_group,
                         int parts, cudaStream_t stream) {
  using namespace dev;
  switch (kind * 2 + (vec ? 1 : 0)) {
    case 0: launch_matvec<OpFloat<0, false>>(p, max_groups, max_per_group, parts, stream); break;
    case 1: launch_matvec<OpFloat<0, true>>(p, max_groups, max_per_group, parts, stream); break;
    case 2: launch_matvec<OpFloat<1, false>>(p, max_groups, max_per_group, parts, stream); break;
    case 3: launch_matvec<OpFloat<1, true>>(p, max_groups, max_per_group, parts, stream); break;
    case 4: launch_matvec<OpFloat<2, false>>(p, max_groups, max_per_group, parts, stream); break;
    default: launch_matvec<OpFloat<2, true>>(p, max_groups, max_per_group, parts, stream); break;
  }
}

}  // namespace ms::cuda::detail
