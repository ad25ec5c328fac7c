#include "cli/llama_flags.h"

#include <set>

namespace ms::cli {

namespace {

const char* kVramInstead =
    "moestream places weights by a VRAM budget instead of by layers or tensors: --vram 8G keeps the dense weights, "
    "the KV cache and as many experts as fit on the GPU (the rest are streamed to it or run on the CPU), --vram full "
    "keeps everything there, and the default is the GPU's free memory less 512 MiB";

bool is_value_of_fa(const std::string& s) {
  static const std::set<std::string> v = {"on", "off", "auto", "0", "1", "true", "false"};
  return v.count(s) > 0;
}

}  // namespace

LlamaFlags translate_llama_flags(const std::vector<std::string>& argv,
                                 const std::function<bool(const std::string&, const std::string&)>& has_option) {
  LlamaFlags out;
  if (argv.empty()) return out;
  out.args.push_back(argv[0]);
  // The subcommand: the first argument that is not an option.
  std::string command;
  for (size_t i = 1; i < argv.size() && command.empty(); ++i)
    if (!argv[i].empty() && argv[i][0] != '-') command = argv[i];
  auto takes = [&](const std::string& name) { return !command.empty() && has_option(command, name); };
  // Straight renames: llama.cpp's spelling -> ours (where the command has it).
  const std::vector<std::pair<std::string, std::string>> renames = {
      {"--ctx-size", "--ctx"},     {"-np", "--parallel"},     {"--n-parallel", "--parallel"},
      {"--alias", "--model-name"}, {"--batch-size", "--batch"}, {"-s", "--seed"},
      {"-to", "--read-timeout"},   {"--timeout", "--read-timeout"},
      {"-md", "--model-draft"},    {"-devd", "--device-draft"}};
  // What is always so here: accepted, with a line saying so.
  const std::vector<std::pair<std::string, std::string>> always = {
      {"--jinja", "the model's Jinja chat template is always used (--chat-template NAME picks a built-in format)"},
      {"-cb", "batching is always continuous"},
      {"--cont-batching", "batching is always continuous"},
      {"--metrics", "/metrics is always served"}};
  const std::set<std::string> vram_only = {"-ngl",  "--n-gpu-layers", "--gpu-layers", "-ot",     "--override-tensor",
                                           "--n-cpu-moe", "-ncmoe", "--cpu-moe",    "-cmoe"};
  std::string k_type, v_type;
  bool passed_dashdash = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    std::string a = argv[i];
    if (passed_dashdash || a == "--") {
      passed_dashdash = true;
      out.args.push_back(a);
      continue;
    }
    // --name=value forms split, so both spellings are handled alike.
    std::string inline_value;
    bool has_inline = false;
    if (a.rfind("--", 0) == 0) {
      const size_t eq = a.find('=');
      if (eq != std::string::npos) {
        inline_value = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_inline = true;
      }
    }
    auto value = [&](std::string* v) {
      if (has_inline) {
        *v = inline_value;
        return true;
      }
      if (i + 1 < argv.size()) {
        *v = argv[++i];
        return true;
      }
      return false;
    };
    if (vram_only.count(a) && !command.empty() && takes("--vram")) {
      out.error = a + " is llama.cpp's; " + kVramInstead;
      return out;
    }
    if ((a == "-fa" || a == "--flash-attn") && !command.empty() && takes("--vram")) {
      if (has_inline || (i + 1 < argv.size() && is_value_of_fa(argv[i + 1]))) {
        if (!has_inline) ++i;
      }
      out.notices.push_back(a + " ignored: attention runs fused wherever that is faster (tiled flash attention on the "
                                "GPU's tensor cores), there is nothing to switch");
      continue;
    }
    if ((a == "-ctk" || a == "--cache-type-k" || a == "-ctv" || a == "--cache-type-v") && takes("--kv-type")) {
      std::string t;
      if (!value(&t)) {
        out.error = a + " needs a type (f16, q8_0 or f32)";
        return out;
      }
      (a == "-ctk" || a == "--cache-type-k" ? k_type : v_type) = t;
      continue;
    }
    if (a == "-o" && command == "bench" && i + 1 < argv.size()) {
      const std::string& f = argv[i + 1];
      if (f == "json" || f == "md") {
        ++i;
        if (f == "json") out.args.push_back("--json");
        continue;
      }
      if (f == "csv" || f == "jsonl" || f == "sql") {
        out.error = "-o " + f + ": moestream bench prints markdown (the default) or JSON (-o json, --json); "
                    "-o FILE also writes the output to FILE";
        return out;
      }
    }
    bool known = false;
    for (const auto& [flag, why] : always)
      if (a == flag && !has_inline && (takes("--vram") || takes("--parallel"))) {
        out.notices.push_back(a + " ignored: " + why);
        known = true;
      }
    if (known) continue;
    bool renamed = false;
    for (const auto& [from, to] : renames) {
      if (a == from && takes(to)) {
        out.args.push_back(to);
        if (has_inline) out.args.push_back(inline_value);
        renamed = true;
        break;
      }
    }
    if (renamed) continue;
    out.args.push_back(argv[i]);
  }
  if (!k_type.empty() || !v_type.empty()) {
    // llama.cpp's default for the one not given is f16.
    const std::string k = k_type.empty() ? "f16" : k_type, v = v_type.empty() ? "f16" : v_type;
    if (k != v) {
      out.error = "-ctk " + k + " -ctv " + v + ": moestream keeps K and V in one type; give both the same type "
                  "(or --kv-type f16|q8_0|f32)";
      return out;
    }
    out.args.push_back("--kv-type");
    out.args.push_back(k);
  }
  return out;
}

}  // namespace ms::cli
