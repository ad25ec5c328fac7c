// A model opened for inference: the mapped GGUF, its bound weights and its
// tokenizer, plus where the built-in tiny model lives.
#pragma once
#include <memory>
#include <string>

#include "format/gguf.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace ms {

struct LoadedModel {
  std::unique_ptr<GgufFile> file;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;

  // Opens, validates and binds; throws ms::Error naming the file and what is wrong.
  // With to_ram, the weights are copied into anonymous memory backed by
  // transparent huge pages (where the kernel allows) instead of being read
  // through the file mapping's 4 KiB pages: fewer TLB misses when decode
  // streams gigabytes per token.
  static std::unique_ptr<LoadedModel> open(const std::string& path, bool to_ram = false);

  LoadedModel() = default;
  ~LoadedModel();
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;

 private:
  void* ram_ = nullptr;
  size_t ram_bytes_ = 0;
};

// The built-in default model (`moestream run` without -m): a tiny qwen3moe
// with random weights (`moestream gen --preset tiny --seed 1`). Looked for at
// $MOESTREAM_DEFAULT_MODEL, then tiny.gguf next to the executable; when absent
// it is generated there (or under $XDG_CACHE_HOME/moestream, ~/.cache/moestream,
// or /tmp when that is not writable) in well under a second. Returns the path.
std::string default_model_path(bool* generated = nullptr);

}  // namespace ms
