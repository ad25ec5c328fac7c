// How the float ops' cases (ops_cpu.cpp) turn into the arguments of the ops,
// for the CUDA implementations that read the same cases (ops_cuda.cpp).
#pragma once
#include <vector>

#include "backend_ops/registry.h"
#include "cpu/attention.h"
#include "cpu/delta_net.h"
#include "cpu/expert_ffn.h"
#include "model/rope_router.h"

namespace ms::backend_ops {

// rope: "scaling" 0 none, 1 linear 1/4, 2 YaRN factor 4 over a 4096 context.
RopeScaling rope_case_scaling(const Case& c);
// attention_*: the shape (scale 1/sqrt(head_dim)); "cache" 0 f16, 1 f32, 2 q8_0.
AttentionShape attention_case_shape(const Case& c);
// delta_*: the DeltaNet shape.
DeltaNetShape delta_case_shape(const Case& c);

}  // namespace ms::backend_ops
