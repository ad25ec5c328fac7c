// Synthetic models (`moestream gen`): GGUF files with the real shapes and
// quant mixes (llama-quantize's presets, engine/quant_presets.h) of
// Qwen3-30B-A3B, Qwen3.6-35B-A3B, Mixtral 8x7B or gpt-oss-20b/120b (or a tiny model for tests
// and the embedded default), random weights, and a working tokenizer.
//
// Weights are random but scaled so activations stay finite through every
// layer: matrices ~ U(-a, a) with standard deviation 1/sqrt(fan_in); the
// output projections that write into the residual stream (attn_output, FFN
// down) are further scaled by 1/sqrt(2 * n_layer), so the residual stream
// keeps the size of the embeddings however deep the model is. Norm weights
// are 1.
//
// Router skew (Zipf exponent S): real MoE routing is skewed, uniform routing
// is the worst case for caching, and benchmarks need both. The architectures
// have no router bias, so one is built in: hidden dimension 0 is a constant
// channel. Every token embedding has value C there, and nothing writes to it
// (row 0 of attn_output and of every expert's down projection is zero), so
// after each RMSNorm x[0] ~ C for every token. Column 0 of the router then
// acts as a bias: expert e gets -S * ln(rank_e + 1) / C, with ranks a random
// permutation per layer, so the softmax prefers experts as (rank + 1)^-S times
// the token-dependent part. S = 0 leaves column 0 zero (uniform routing).
// `moestream run --routing-stats` measures the popularity that results.
//
// Router locality P (qwen3moe): layer 0 gets a context head whose output, a
// moving average of recent tokens, occupies residual channels of its own, and
// the routers read it beside the token, so a decode token repeats P of the
// previous token's experts (engine/router_locality.h).
//
// Large models (over 256M weights): quantizing every random row with the
// reference quantizer would take an hour for Qwen3-30B-A3B, so the quantized
// tensors of 256 rows or more (experts, attention, embeddings, the output
// head; not routers or norms) take each row from a pool of 4096
// pre-quantized random rows per (role, type, width, scale), chosen by a hash
// of (layer, expert, row). Every expert is still a different matrix; bytes,
// shapes and types are the real ones.
//
// Generation streams tensor by tensor to disk (a chunk of rows at a time, rows
// generated and quantized in parallel from a counter-based random stream, so
// the file is the same for a seed whatever the thread count): memory stays at
// a few chunks, not the file's size.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "cpu/thread_pool.h"
#include "model/weights.h"
#include "quant/types.h"

namespace ms {

struct GenShape {
  std::string gguf_arch;  // "qwen3moe", "llama", "qwen3", "qwen2"
  std::string name;       // preset name for general.name
  int n_layer = 0;
  int64_t n_embd = 0;
  int n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t n_ff = 0;       // dense FFN width (dense models; also written for MoE as metadata)
  int n_expert = 0, n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_vocab = 0;
  int64_t n_ctx = 0;
  float rope_base = 10000.0f;
  float rms_eps = 1e-6f;
  bool tied_output = false;
  int n_rot = 0;          // rope.dimension_count (0: head_dim)
  // qwen35moe (Qwen3.5/3.6-MoE): Gated DeltaNet layers, a shared expert, MTP blocks.
  int full_attn_interval = 0;  // every Nth layer has softmax attention; the others Gated DeltaNet
  int ssm_conv_kernel = 0, ssm_k_heads = 0, ssm_v_heads = 0, ssm_head_k = 0, ssm_head_v = 0;
  int64_t n_ff_shexp = 0;
  int n_mtp = 0;          // MTP blocks after the main stack (nextn_predict_layers)
  // gpt-oss: sliding window on the even layers (attention.sliding_window),
  // YaRN RoPE (rope.scaling.*: factor, original context; 0: none), biases on
  // attention, router and experts, attention sinks. Experts stacked only.
  int64_t sliding_window = 0;
  float yarn_factor = 0.0f;
  int64_t yarn_orig_ctx = 0;
};

// arch: qwen3moe | qwen35moe | mixtral | gpt-oss | qwen3 | qwen2 | llama (the
// last three dense); preset: tiny | qwen3-30b-a3b | qwen3.6-35b-a3b |
// mixtral-8x7b | gpt-oss-20b | gpt-oss-120b.
// Throws ms::Error for an unknown name or a combination that does not exist
// (e.g. mixtral + qwen3-30b-a3b).
GenShape gen_preset(const std::string& arch, const std::string& preset);

// The hyper-parameters a file of shape s reads back as (what the recipe and
// the tensor table need: widths, heads, experts, linear and window layers), so
// gen lists each layer's dense tensors from the tensor table.
ModelConfig gen_model_config(const GenShape& s);

struct GenOptions {
  std::string arch = "qwen3moe";
  std::string preset = "tiny";
  // A quantization scheme (engine/quant_presets.h): a llama-quantize preset
  // (q4_k_m, q2_k, iq4_xs, ...), a UD-style mix, or a single type (q4_k, q5_k).
  std::string quant = "q4_k_m";
  bool pure = false;               // `quant` is a type name, for every tensor (llama-quantize --pure)
  std::string layout = "stacked";  // experts: stacked (3-D) | merged (gate_up) | per-expert (2-D)
  double router_skew = 0.0;
  // Temporal locality (engine/router_locality.h): the fraction of a decode
  // token's experts the previous token chose too, in [0, 1] (0: independent
  // tokens). qwen3moe only.
  double router_locality = 0.0;
  uint64_t seed = 1;
  // Overrides of the preset (0: keep), for medium-sized test models.
  int n_layer = 0;
  int64_t n_ctx = 0;
  int n_expert = 0, n_expert_used = 0;  // routed experts and experts per token (MoE presets)
  // Rows per pre-quantized row pool for big tensors (-1: auto, 4096 for
  // models over 256M weights, none below; 0: off). See synthetic_model.cpp.
  int64_t pool_rows = -1;
  // Called after each chunk with bytes written so far and the total.
  std::function<void(uint64_t, uint64_t)> progress;
};

struct GenResult {
  GenShape shape;
  uint64_t file_bytes = 0;
  uint64_t n_tensors = 0;
  std::string mix;  // e.g. "q4_K 312 tensors, q6_K 40, f32 193"
};

// Writes the model to `path`. Throws ms::Error for bad options or I/O errors
// (a partial file is removed).
GenResult generate_model(const GenOptions& opt, const std::string& path, ThreadPool& pool);

}  // namespace ms
