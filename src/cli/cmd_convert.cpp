// `moestream convert HF_DIR -o OUT.gguf [--type T]`: a Hugging Face checkpoint
// to GGUF (see src/convert/converter.h and docs/convert.md).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "convert/converter.h"
#include "format/safetensors.h"
#include "util/bytes.h"

namespace ms::cli {
namespace {

struct ConvertArgs {
  std::string input_dir, output, type = "f16", name;
  int threads = 0;
  bool allow_unused = false, no_vocab = false, quiet = false, print_plan = false;
};

RegisterCommand reg("convert", [](CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  auto* sub = app.add_subcommand("convert", "Convert a Hugging Face checkpoint (safetensors) to GGUF");
  sub->add_option("HF_DIR", a->input_dir, "Directory with config.json, *.safetensors and tokenizer.json")
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("-o,--output", a->output, "Output GGUF file");
  sub->add_option("--type", a->type,
                  std::string("Tensor type or mix: ") + convert_type_names() + " (default f16)");
  sub->add_option("--name", a->name, "general.name (default: from config.json or the directory)");
  sub->add_option("-t,--threads", a->threads, "Threads for quantization (default: all)");
  sub->add_flag("--allow-unused", a->allow_unused,
                "Convert even if the checkpoint holds tensors the GGUF layout has no place for (they are dropped)");
  sub->add_flag("--no-vocab", a->no_vocab, "Write no tokenizer (weights-only file)");
  sub->add_flag("-q,--quiet", a->quiet, "No progress line");
  sub->add_flag("--print-plan", a->print_plan, "Print every tensor's name, shape, type and source; write nothing");
  return [a]() -> int {
    ConvertOptions o;
    o.input_dir = a->input_dir;
    o.output_path = a->output;
    o.type = parse_convert_type(a->type);
    o.name = a->name;
    o.threads = a->threads;
    o.allow_unused = a->allow_unused;
    o.with_vocab = !a->no_vocab;
    o.progress = !a->quiet;
    if (a->print_plan) {
      const HfModelConfig c = read_hf_config(o.input_dir);
      const SafetensorsModel m(o.input_dir);
      const ConversionPlan plan = plan_conversion(c, m, o.type);
      std::fputs(describe_plan(plan).c_str(), stdout);
      std::printf("%zu tensors, %s -> %s; unused: %zu\n", plan.tensors.size(),
                  format_bytes(plan.source_bytes).c_str(), format_bytes(plan.output_bytes).c_str(),
                  plan.unused.size());
      for (const std::string& u : plan.unused) std::printf("  unused: %s\n", u.c_str());
      return 0;
    }
    if (o.output_path.empty()) {
      std::fprintf(stderr, "moestream convert: -o OUT.gguf is required\n");
      return 1;
    }
    const ConvertSummary s = convert_hf_to_gguf(o, [](const std::string& msg) {
      std::fprintf(stderr, "convert: %s\n", msg.c_str());
    });
    std::string types;
    for (const auto& [t, n] : s.type_counts) types += (types.empty() ? "" : ", ") + t + " x" + std::to_string(n);
    std::printf("wrote %s: arch %s (%s), %lld layers%s, %zu tensors (%s), %s of tensor data from %s in %.1f s\n",
                o.output_path.c_str(), s.config.gguf_arch.c_str(), s.config.model_type.c_str(),
                static_cast<long long>(s.config.n_layer),
                s.config.is_moe() ? (", " + std::to_string(s.config.n_expert) + " experts (" + s.expert_layout +
                                     " in the checkpoint)")
                                        .c_str()
                                  : "",
                s.n_tensors, types.c_str(), format_bytes(s.output_bytes).c_str(),
                format_bytes(s.source_bytes).c_str(), s.seconds);
    return 0;
  };
});

}  // namespace
}  // namespace ms::cli
