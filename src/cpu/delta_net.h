// The ops of a Gated DeltaNet layer (the linear attention of Qwen3.5/3.6-MoE,
// GGUF `qwen35moe`), on the CPU. The layer, per token t:
//
//   [q | k | v] = silu(causal_conv1d(Wqkv x))      depthwise, conv_kernel taps
//   q, k       = l2norm per key head; q *= 1/sqrt(head_k)
//   g          = ssm_a * softplus(alpha + ssm_dt)  per value head (ssm_a < 0: decay)
//   beta       = sigmoid(b)                        per value head (write strength)
//   for each value head h (reading key head h % n_k_heads):
//     S     = exp(g) * S                           S: head_v x head_k
//     delta = beta * (v - S k)
//     S     = S + delta k^T                        (the delta rule)
//     o     = S q
//   y = Wout (rmsnorm(o, ssm_norm) * silu(z))       per value head, z = Wz x
//
// Value heads are in llama.cpp's GGUF order ("tiled"): value head j uses key
// head j % n_k_heads. Hugging Face stores them grouped (value head j uses key
// head j / (n_v / n_k)); `moestream convert` reorders them.
//
// State layout (per sequence and layer, f32): the conv window, the last
// conv_kernel - 1 inputs as [conv_kernel - 1][conv_dim] (oldest first), and S
// as [n_v_heads][head_v][head_k]: row v of head h is the key-space vector
// that value channel v reads, so every per-token pass over S is contiguous.
//
// Every op has a scalar reference (*_ref, plain loops, sums in double) that
// the engine's versions (here and src/cuda) are tested against. Prompts use
// the chunked form (delta_rule_chunked): tokens in chunks of kDeltaChunk, a
// few small matrix products per chunk instead of one state pass per token,
// the state carried between chunks; it equals the recurrence up to float
// reassociation (tests/cpu/delta_net_test.cpp).
#pragma once
#include <cstdint>

namespace ms {

class ThreadPool;

struct DeltaNetShape {
  int n_k_heads = 0, n_v_heads = 0;
  int head_k = 0, head_v = 0;
  int64_t key_dim() const { return static_cast<int64_t>(n_k_heads) * head_k; }
  int64_t value_dim() const { return static_cast<int64_t>(n_v_heads) * head_v; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  int64_t state_elems() const { return static_cast<int64_t>(n_v_heads) * head_v * head_k; }
};

// Tokens per chunk of the chunked prompt form.
constexpr int kDeltaChunk = 64;

// ---------------------------------------------------------------- conv
// out[t][c] = silu(sum_j w[c][j] * in[t - (taps - 1) + j][c]) over n tokens of
// `channels`, where inputs before token 0 come from `window` ([taps - 1][channels],
// oldest first). window is then advanced to the last taps - 1 inputs.
// x: [n][channels] (row stride ld_x), out: [n][channels] (may not alias x).
void conv1d_silu_ref(const float* x, int64_t ld_x, int n, int64_t channels, const float* w, int taps,
                     float* window, float* out);
void conv1d_silu(const float* x, int64_t ld_x, int n, int64_t channels, const float* w, int taps, float* window,
                 float* out);

// ---------------------------------------------------------------- small per-head ops
// x *= scale / sqrt(sum x^2 + eps), in place (eps inside the root, as the
// reference's l2norm).
void l2norm_scale_ref(float* x, int64_t n, float eps, float scale);
void l2norm_scale(float* x, int64_t n, float eps, float scale);

// g[h] = ssm_a[h] * softplus(alpha[h] + dt_bias[h]), beta[h] = sigmoid(b[h]).
void delta_gates_ref(const float* alpha, const float* b, const float* ssm_a, const float* dt_bias, int n_v,
                     float* g, float* beta);
void delta_gates(const float* alpha, const float* b, const float* ssm_a, const float* dt_bias, int n_v, float* g,
                 float* beta);

// out = rmsnorm(x) * w * silu(z) over one head of n values (out may alias x).
void gated_rmsnorm_ref(const float* x, const float* z, const float* w, float* out, int64_t n, float eps);
void gated_rmsnorm(const float* x, const float* z, const float* w, float* out, int64_t n, float eps);

// Prepares a conv output row [q | k | v] in place: q and k l2-normalised per
// key head, q also scaled by 1/sqrt(head_k).
void delta_prepare_qk(const DeltaNetShape& s, float* qkv_row, float eps);

// ---------------------------------------------------------------- the delta rule
// n tokens of one sequence. qkv: [n] rows of [q | k | v] (row stride ld,
// prepared by delta_prepare_qk); g, beta: [n][n_v_heads]; S: the state
// (updated); out: [n][value_dim].
//
// Reference: the recurrence, token by token, in double.
void delta_rule_ref(const DeltaNetShape& s, const float* qkv, int64_t ld, const float* g, const float* beta, int n,
                    float* S, float* out);
// The recurrence in float, heads over the pool (decode).
void delta_rule_recurrent(ThreadPool* pool, const DeltaNetShape& s, const float* qkv, int64_t ld, const float* g,
                          const float* beta, int n, float* S, float* out);
// The chunked form (chunk tokens at a time), heads over the pool (prompts).
void delta_rule_chunked(ThreadPool* pool, const DeltaNetShape& s, const float* qkv, int64_t ld, const float* g,
                        const float* beta, int n, float* S, float* out, int chunk = kDeltaChunk);
// What the engine calls: the recurrence for one token, chunks for more.
void delta_rule(ThreadPool* pool, const DeltaNetShape& s, const float* qkv, int64_t ld, const float* g,
                const float* beta, int n, float* S, float* out);

}  // namespace ms
