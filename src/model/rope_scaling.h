// RoPE scaling from a GGUF's rope.scaling.* keys, computed as llama.cpp
// computes it (llama-context.cpp's cparams, ggml's rope_yarn and
// ggml_rope_yarn_corr_dims), into the RopeScaling the CPU and CUDA RoPE
// ops take (model/rope_router.h).
//
//   rope.scaling.type                     none | linear | yarn (absent: none)
//   rope.scaling.factor                   context extension factor (freq_scale = 1/factor)
//   rope.scaling.original_context_length  YaRN: the pre-extension context (default context_length)
//   rope.scaling.attn_factor              multiplies cos/sin (every type; default 1)
//   rope.scaling.yarn_ext_factor          YaRN ramp weight (default 1)
//   rope.scaling.yarn_attn_factor         used only when the ramp is off (ext_factor 0)
//   rope.scaling.yarn_beta_fast / _slow   YaRN ramp ends in rotations (default 32 / 1)
//   rope.scaling.yarn_log_multiplier      YaRN's mscale_all_dim (default 0: none)
// Other types (longrope, ...) are refused by name.
#pragma once
#include <cstdint>
#include <string>

#include "model/rope_yarn.h"  // YarnParams, yarn_scaling, linear_scaling

namespace ms {

class GgufFile;

// Reads `<arch>.rope.scaling.*` (n_rot, theta_base and n_ctx_train as the
// model config has them). Throws ms::Error naming the key or the type.
RopeScaling read_rope_scaling(const GgufFile& f, const std::string& arch, int n_rot, double theta_base,
                              int64_t n_ctx_train);

// One line for -v output: "yarn x4 (ramp pairs 20..46, mscale 1.139)", "linear x2", "none".
std::string describe_rope_scaling(const RopeScaling& s);

}  // namespace ms
