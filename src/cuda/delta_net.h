// Gated DeltaNet on the GPU (the linear-attention layers of qwen35moe): the
// causal conv with its rolling window, q/k preparation, the decay and write
// gates, the delta-rule recurrence and the gated RMSNorm. Semantics and state
// layout are those of src/cpu/delta_net.h (its *_ref functions are what
// tests/cuda/delta_net_test.cpp checks these against): value head j reads key
// head j % n_k_heads; the state is [n_v_heads][head_v][head_k] f32; the conv
// window [conv_kernel - 1][conv_dim] f32, oldest first.
//
// CUDA-only header. Pointers are device pointers; launchers are asynchronous
// on `stream`, allocate nothing and never synchronise (graph capturable).
//
// CudaBackend's layer recipe runs them (src/cuda/backend/qwen35_blocks.cpp).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cpu/delta_net.h"  // DeltaNetShape (plain C++)

namespace ms::cuda {

// out[t][c] = silu(sum_j w[c][j] * in[t - (taps-1) + j][c]) for n tokens, the
// inputs before token 0 from `window`, which then holds the last taps - 1
// inputs. x rows have stride ld_x; out is [n][channels]. taps in 2..16.
void conv1d_silu(const float* x, int64_t ld_x, int n, int64_t channels, const float* w, int taps, float* window,
                 float* out, cudaStream_t stream);

// In place on n rows [q | k | v] (stride ld): q and k l2-normalised per key
// head (x / sqrt(sum x^2 + eps)), q also scaled by 1/sqrt(head_k).
void delta_prepare_qk(float* qkv, int64_t ld, int n, const DeltaNetShape& s, float eps, cudaStream_t stream);

// g[t][h] = ssm_a[h] * softplus(alpha[t][h] + dt_bias[h]), beta[t][h] = sigmoid(b[t][h]).
void delta_gates(const float* alpha, const float* b, const float* ssm_a, const float* dt_bias, int n, int n_v,
                 float* g, float* beta, cudaStream_t stream);

// The recurrence over n tokens of one sequence (prepared qkv rows of stride
// ld; g, beta [n][n_v]); S updated; out [n][value_dim]. Every row of S
// evolves on its own (it reads only k, q and its own value channel), so a
// warp keeps one row in registers for all n tokens. head_k <= 256.
void delta_rule(const float* qkv, int64_t ld, const float* g, const float* beta, int n, const DeltaNetShape& s,
                float* S, float* out, cudaStream_t stream);

// The same recurrence in the chunked (WY) form of src/cpu/delta_net.h, for
// prompts: chunks of 64 tokens, each a few small matrix products on the
// tensor cores and a triangular solve, the state carried from chunk to
// chunk in shared memory (delta_net_chunked.cu). Same arguments, outputs and
// final state as delta_rule, up to float reassociation. kSplitTf32 (the
// default) splits every tensor-core operand into two tf32 parts and keeps
// f32 accuracy; kTf32 rounds the operands to tf32 (about 1e-3 relative).
// Heads of head_k up to 192 (delta_rule_chunked_supported says).
enum class DeltaPrecision { kSplitTf32, kTf32 };
bool delta_rule_chunked_supported(const DeltaNetShape& s);
void delta_rule_chunked(const float* qkv, int64_t ld, const float* g, const float* beta, int n,
                        const DeltaNetShape& s, float* S, float* out, cudaStream_t stream,
                        DeltaPrecision precision = DeltaPrecision::kSplitTf32);

// Prompt lengths from which the chunked form is used (shorter ones and
// decode run the token-by-token kernel): the length where the chunked
// kernel overtook the token-by-token one at Qwen3.6-35B-A3B's shape
// (bench/cuda/delta_net_bench.cu; figures in bench/results/long_context.md).
constexpr int kDeltaChunkedMinTokens = 64;
// What the layer calls: delta_rule below kDeltaChunkedMinTokens tokens (or
// for a head the chunked kernel does not take), delta_rule_chunked from there.
void delta_rule_prompt(const float* qkv, int64_t ld, const float* g, const float* beta, int n,
                       const DeltaNetShape& s, float* S, float* out, cudaStream_t stream);

// out[r] = rmsnorm(x[r]) * w * silu(z[r]) for `rows` rows of n (out may alias x).
void gated_rmsnorm(const float* x, const float* z, const float* w, float* out, int64_t rows, int n, float eps,
                   cudaStream_t stream);

}  // namespace ms::cuda
