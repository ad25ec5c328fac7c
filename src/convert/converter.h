// `moestream convert`: a Hugging Face checkpoint directory (config.json,
// model.safetensors or a sharded index, tokenizer.json, tokenizer_config.json)
// to one GGUF file that the llama.cpp ecosystem reads too.
//
// The conversion streams: tensors are read from the mmap'd shards a block of
// rows at a time, converted/quantized on the thread pool, and appended to the
// GGUF writer; memory stays near one block (a few tens of MiB), not the model.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "convert/hf_config.h"
#include "convert/quant_mix.h"
#include "convert/tensor_plan.h"
#include "tokenizer/vocab.h"

namespace ms {

class GgufWriter;

struct ConvertOptions {
  std::string input_dir;
  std::string output_path;
  ConvertType type = ConvertType::F16;
  std::string name;           // general.name; empty: from config.json or the directory
  int threads = 0;            // 0: all hardware threads
  bool allow_unused = false;  // checkpoint tensors nothing maps: warn instead of error
  bool with_vocab = true;     // false: write no tokenizer.* keys (weights-only file)
  bool progress = true;       // progress line on stderr
};

struct ConvertSummary {
  HfModelConfig config;
  std::string expert_layout;           // "per-expert", "fused", "mixed", "" (dense)
  size_t n_tensors = 0;
  uint64_t source_bytes = 0;
  uint64_t output_bytes = 0;           // tensor data written
  std::map<std::string, int> type_counts;  // GGUF type name -> tensors
  std::vector<std::string> notes;      // fallbacks, ignored/unused tensors
  double seconds = 0;
};

// Converts; `log` receives warnings and notes as they happen (default: none,
// they are in the summary). Throws ms::Error before writing anything for bad
// input; an unfinished output file is removed.
ConvertSummary convert_hf_to_gguf(const ConvertOptions& options,
                                  const std::function<void(const std::string&)>& log = {});

// The pieces, for tests and `convert --print-plan`.
// The tokenizer of DIR (tokenizer.json + tokenizer_config.json, with the chat
// template from tokenizer_config.json or chat_template.jinja), padded with
// "[PAD<id>]" unused tokens up to the model's vocab_size. Throws if the
// tokenizer has more tokens than the embedding has rows.
Vocab load_hf_vocab(const std::string& dir, int64_t n_vocab);
// Every general.* and {arch}.* key (not tokenizer.*).
void write_model_metadata(GgufWriter& writer, const HfModelConfig& config, ConvertType type, const std::string& name);
// One line per tensor: name, GGUF shape, type, source, note.
std::string describe_plan(const ConversionPlan& plan);

}  // namespace ms
