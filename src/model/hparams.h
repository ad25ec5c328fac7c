// A model's hyper-parameters as the GGUF metadata states them (`<arch>.*`
// keys), read leniently enough that `inspect` can describe any architecture,
// with the keys a runnable model must have made explicit (require_complete).
//
// Extending: a new key is a field here and one line in read_hparams(); a new
// architecture's quirks (defaults, which layers have attention) go in the
// per-architecture table at the top of hparams.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ms {

class GgufFile;

struct ModelHParams {
  std::string arch;           // general.architecture ("" if absent)
  std::string name;           // general.name
  bool known_arch = false;    // arch is in hparams.cpp's table (its required keys are known)
  bool moe_arch = false;      // the table says the architecture has routed experts

  int64_t n_layer = 0;        // {arch}.block_count
  int64_t n_embd = 0;         // {arch}.embedding_length
  int64_t n_ff = 0;           // {arch}.feed_forward_length (dense FFN width; 0 if absent)
  int64_t n_ff_exp = 0;       // {arch}.expert_feed_forward_length, else from the expert tensors
  int64_t n_head = 0;         // {arch}.attention.head_count
  int64_t n_head_kv = 0;      // {arch}.attention.head_count_kv, default n_head
  int64_t head_dim = 0;       // {arch}.attention.key_length, default n_embd / n_head
  int64_t head_dim_v = 0;     // {arch}.attention.value_length, default head_dim
  int64_t n_ctx_train = 0;    // {arch}.context_length
  int64_t n_expert = 0;       // {arch}.expert_count (0: dense)
  int64_t n_expert_used = 0;  // {arch}.expert_used_count
  int64_t n_expert_shared = 0;  // {arch}.expert_shared_count
  double rope_freq_base = 0;  // {arch}.rope.freq_base (0 if absent)
  double rms_eps = 0;         // {arch}.attention.layer_norm_rms_epsilon (0 if absent)
  int64_t n_vocab = 0;        // tokenizer.ggml.tokens length, else token_embd rows
  std::optional<bool> expert_weights_norm;  // {arch}.expert_weights_norm
  int64_t full_attention_interval = 0;      // {arch}.full_attention_interval (linear-attention hybrids)
  // Sliding-window attention (gpt-oss): {arch}.attention.sliding_window, 0
  // when absent; which layers use it: {arch}.attention.sliding_window_pattern
  // (one bool per layer, or n: layers il % n < n - 1), else the
  // architecture's pattern (hparams.cpp's table; gpt-oss 2: the even layers).
  int64_t sliding_window = 0;
  std::vector<bool> layer_is_swa;  // [n_layer]; all false without a window
  // {arch}.nextn_predict_layers: MTP (next-token prediction) blocks stored
  // after the main stack; block_count counts them, the normal forward pass
  // skips them (they draft tokens for speculative decoding).
  int64_t n_layer_nextn = 0;
  // Gated DeltaNet (linear attention) layers: {arch}.ssm.* keys, 0 when absent.
  int64_t ssm_conv_kernel = 0;  // ssm.conv_kernel: taps of the causal conv1d
  int64_t ssm_state_size = 0;   // ssm.state_size: key head size (= value head size in llama.cpp's layout)
  int64_t ssm_group_count = 0;  // ssm.group_count: key heads
  int64_t ssm_dt_rank = 0;      // ssm.time_step_rank: value heads
  int64_t ssm_inner_size = 0;   // ssm.inner_size: value heads * value head size

  // Per layer (size n_layer): KV heads (0 for a layer without attention, e.g.
  // the linear-attention layers of qwen3next / qwen35moe), and whether the
  // layer has softmax attention and so a KV cache.
  std::vector<int64_t> n_head_kv_layer;
  std::vector<bool> layer_has_attention;
  std::vector<bool> layer_is_recurrent;  // linear-attention layers (a recurrent state instead of a KV cache)

  // Required keys that were absent or invalid, in the order checked, with the
  // reason ("missing" / "must be > 0"). Empty for a complete set.
  std::vector<std::string> problems;

  bool is_moe() const { return n_expert > 0; }
  int n_attention_layers() const;
  // Bytes of a K and V cache for n_ctx tokens:
  //   n_ctx * sum over attention layers of n_head_kv(layer) * (head_dim + head_dim_v) * b / 32
  // (MTP layers excluded: the normal forward pass does not run them), b the
  // cache type's bytes per 32 elements of a row: 64 F16 (the default), 128
  // F32, 34 Q8_0 (engine/kv_cache.h: kv_bytes_per_32; Q8_0 needs head sizes
  // that are multiples of 32, which the KV cache checks).
  uint64_t kv_cache_bytes(int64_t n_ctx, int kv_bytes_per_32 = 64) const;
  // Bytes of one sequence's recurrent state, whatever its length: per
  // linear-attention layer an f32 conv window ((conv_kernel - 1) * conv_dim)
  // and an f32 delta-rule state (value heads * key head size * value head size).
  uint64_t recurrent_state_bytes() const;
  // Throws ms::Error naming the first missing or invalid required key (and
  // the file) if `problems` is not empty.
  void require_complete(const std::string& path) const;
};

// Reads what the metadata states, fills defaults and inferred values, and
// records missing required keys in `problems` instead of throwing (so inspect
// can show what there is). Throws only for values of the wrong type.
ModelHParams inspect_hparams(const GgufFile& file);

// inspect_hparams + require_complete: for loading a model to run. Throws
// ms::Error naming the missing key.
ModelHParams read_hparams(const GgufFile& file);

}  // namespace ms
