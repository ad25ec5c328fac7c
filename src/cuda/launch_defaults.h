// Defaults of the kernels' launch choices, in a header without CUDA so that
// the CUDA backend's options (and the CLI's help, on any build) name the
// same constant the kernels' callers default to.
#pragma once

namespace ms::cuda {

// Batches of at least this many tokens take the int8 tensor-core matmul
// (dense projections, the output head, the routed experts); smaller ones the
// several-vector matvec, which reads the weights once per few tokens. The
// backend's Options::gemm_min_batch (`--gemm-min-batch`) overrides it.
inline constexpr int kGemmMinTokens = 16;

}  // namespace ms::cuda
