// llama.cpp's flag spellings (llama-server, llama-cli, llama-bench) that mean
// the same here, rewritten to moestream's before parsing, so a command line
// carried over works; and the ones that do not apply, answered with one
// line each. CLI11 reads "-ngl" as "-n gl", hence a rewrite of argv rather
// than aliases.
//
//   --ctx-size N            -> --ctx N           (-c is the same already)
//   -np N, --n-parallel N   -> --parallel N      (serve)
//   --alias NAME            -> --model-name NAME (serve)
//   --batch-size N          -> --batch N
//   -s N                    -> --seed N          (run)
//   -to S, --timeout S      -> --read-timeout S  (serve)
//   --jinja, -cb, --cont-batching, --metrics: what is always so here; a notice
//   -ctk T -ctv T, --cache-type-k/v T -> --kv-type T (K and V share one type
//                              here: different types are an error)
//   -o json | -o md         -> --json | (nothing) (bench: llama-bench's output formats)
//   -fa [on|off|auto|0|1], --flash-attn [...]: dropped, with a notice
//     (attention is fused wherever it helps; nothing to switch)
//   -ngl, --n-gpu-layers, --gpu-layers, -ot, --override-tensor, --n-cpu-moe,
//   -ncmoe, --cpu-moe, -cmoe: an error saying what --vram does instead.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace ms::cli {

struct LlamaFlags {
  std::vector<std::string> args;     // argv rewritten (argv[0] included)
  std::vector<std::string> notices;  // one line each, for stderr
  std::string error;                 // non-empty: print it and exit 1
};

// `has_option(command, name)`: whether subcommand `command` takes option
// `name` (a rewrite happens only where its target exists; anything else is
// left for the parser to refuse).
LlamaFlags translate_llama_flags(const std::vector<std::string>& argv,
                                 const std::function<bool(const std::string&, const std::string&)>& has_option);

}  // namespace ms::cli
