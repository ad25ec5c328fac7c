// The conversion plan: every GGUF tensor to write, where its rows come from in
// the safetensors checkpoint, its GGUF shape and type. Building the plan checks
// the whole checkpoint against config.json before a byte is written: every
// expected tensor present with the shape the config implies and a float dtype,
// and every checkpoint tensor used (or reported as unused).
//
// Names (HF -> GGUF), shared by the supported architectures:
//   model.embed_tokens.weight                    token_embd.weight
//   model.norm.weight                            output_norm.weight
//   lm_head.weight                               output.weight (absent when tied)
//   model.layers.N.input_layernorm.weight        blk.N.attn_norm.weight
//   model.layers.N.self_attn.{q,k,v,o}_proj.*    blk.N.attn_{q,k,v,output}.*
//   model.layers.N.self_attn.{q,k}_norm.weight   blk.N.attn_{q,k}_norm.weight
//   model.layers.N.post_attention_layernorm.*    blk.N.ffn_norm.weight
//   dense:   mlp.{gate,up,down}_proj.weight      blk.N.ffn_{gate,up,down}.weight
//   experts: {mlp|block_sparse_moe}.gate.weight  blk.N.ffn_gate_inp.weight
//            experts.E.{gate,up,down}_proj / experts.E.{w1,w3,w2}  (per expert, 4.x)
//            experts.gate_up_proj [E, 2*ff, n_embd] (gate rows first) and
//            experts.down_proj [E, n_embd, ff]                    (fused, 5.x)
//              -> blk.N.ffn_{gate,up,down}_exps.weight, 3-D: GGUF shape
//                 {n_embd, ff, E} for gate/up and {ff, n_embd, E} for down.
// gpt-oss (GptOssForCausalLM) differs: post_attention_layernorm ->
//   blk.N.post_attention_norm; self_attn.sinks -> blk.N.attn_sinks.weight;
//   mlp.router.{weight,bias} -> ffn_gate_inp.{weight,bias}; experts stored
//   [E, in, out] (transposed) with gate and up interleaved in gate_up_proj
//   [E, n_embd, 2*ff] (gate = even columns, up = odd), gate_up_proj_bias
//   [E, 2*ff] alike, down_proj [E, ff, n_embd], down_proj_bias [E, n_embd]
//   -> ffn_{gate,up,down}_exps.{weight,bias} through strided gathers; the
//   published MXFP4 form (*_blocks [E, out, in/32, 16], *_scales [E, out,
//   in/32], gate/up rows interleaved) is repacked to MXFP4 bit for bit.
//
// The one transformation: for GGUF arch "llama" (Mixtral, Llama, Mistral) the
// rows of attn_q and attn_k are permuted so that GGUF's adjacent-pair RoPE
// computes what HF's rotate-half RoPE computes: within each head of size d,
// output row 2i+j takes source row j*d/2 + i (i < d/2, j in {0,1}).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "convert/hf_config.h"
#include "convert/quant_mix.h"
#include "format/safetensors.h"
#include "quant/types.h"

namespace ms {

// What a slab does to each value it reads (qwen35moe's conventions):
//   AddOne: w + 1 (Qwen3.5's RMSNorms scale by 1 + w; GGUF stores 1 + w)
//   NegExp: -exp(w) (A_log -> ssm_a, the decay rate the engine multiplies by)
enum class ValueOp { None, AddOne, NegExp };

// A run of rows of one source tensor, viewed as a matrix [rows, row_len]
// (row_len = the source's last dimension), in the order GGUF stores them.
struct Slab {
  const StTensor* src = nullptr;
  int64_t first_row = 0;
  int64_t n_rows = 0;
  int64_t row_len = 0;
  // > 0: the llama q/k permutation over heads of n_rows / permute_heads rows.
  int64_t permute_heads = 0;
  // Non-empty: slab row r reads source row first_row + row_map[r] (and
  // permute_heads is 0); element i of a row is source element col_map[i].
  std::vector<int64_t> row_map, col_map;
  ValueOp op = ValueOp::None;
  // gather_elem > 0: a strided gather instead (gpt-oss's experts, stored
  // [in, out] with gate and up interleaved): element i of slab row r is the
  // source's flat element gather_base + r * gather_row + i * gather_elem
  // (first_row, the maps and permute_heads unused).
  int64_t gather_base = 0, gather_row = 0, gather_elem = 0;
  bool is_gather() const { return gather_elem > 0; }
  // mxfp4_scales set: an MXFP4 repack (gpt-oss's published checkpoints). src
  // is the *_blocks tensor viewed as rows of row_len / 32 blocks of 16 bytes
  // (two 4-bit codes a byte, element 2j low), mxfp4_scales the *_scales one
  // (one E8M0 byte a block); slab row r is source row gather_base + r *
  // gather_row. Written as GGUF MXFP4 blocks (the scale byte, then element i
  // low and i + 16 high in byte i), bit for bit: no float round trip.
  const StTensor* mxfp4_scales = nullptr;
  bool is_mxfp4_repack() const { return mxfp4_scales != nullptr; }
  // Flat source elements a gather spans (from gather_base; not for a repack).
  int64_t gather_span() const { return (n_rows - 1) * gather_row + (row_len - 1) * gather_elem + 1; }
};

// Slab row r (0 <= r < n_rows) reads source row first_row + source_row_in_slab(r).
int64_t source_row_in_slab(const Slab& s, int64_t r);

// Qwen3.5's value heads, Hugging Face order (grouped: value head j reads key
// head j / (n_v / n_k)) to the GGUF's (tiled: value head j reads key head
// j % n_k): GGUF value head j is HF value head tiled_source_head(j).
inline int64_t tiled_source_head(int64_t j, int64_t n_k, int64_t n_v) { return (j % n_k) * (n_v / n_k) + j / n_k; }
// The index map over n_v heads of head_dim consecutive entries.
std::vector<int64_t> tiled_head_map(int64_t n_k, int64_t n_v, int64_t head_dim);

// The llama RoPE permutation within one head of `head_dim` rows: GGUF row
// `r` takes source row permuted_head_row(r, head_dim).
inline int64_t permuted_head_row(int64_t r, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  return (r % 2) * half + r / 2;
}

struct PlannedTensor {
  std::string name;  // GGUF name
  ConvertRole role = ConvertRole::Norm;
  int layer = -1;
  std::vector<int64_t> shape;  // GGUF order: ne[0] (innermost) first
  DType type = DType::F32;
  std::string type_note;  // why a fallback type was used, if one was
  std::vector<Slab> slabs;  // concatenated in order, they are the tensor's rows

  int64_t row_len() const { return shape.empty() ? 1 : shape[0]; }
  int64_t n_rows() const;
  uint64_t source_bytes() const;  // bytes read from the checkpoint
  uint64_t output_bytes() const;  // bytes written to the GGUF
};

struct ConversionPlan {
  std::vector<PlannedTensor> tensors;
  std::vector<std::string> unused;   // checkpoint tensors nothing maps (sorted)
  std::vector<std::string> ignored;  // known-redundant tensors skipped on purpose
  std::string expert_layout;         // "per-expert", "fused", "mixed" or "" (dense)
  int64_t n_mtp = 0;                 // qwen35moe: MTP blocks planned (after the main stack)
  uint64_t source_bytes = 0;
  uint64_t output_bytes = 0;
};

// Builds and validates the plan. Throws ms::Error naming the tensor for a
// missing tensor, a shape that disagrees with the config, or a dtype that is
// not F32/F16/BF16/F64. Unused tensors are listed, not an error here.
ConversionPlan plan_conversion(const HfModelConfig& config, const SafetensorsModel& model, ConvertType target);

}  // namespace ms
