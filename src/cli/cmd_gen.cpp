// `moestream gen`: writes a synthetic model with the real shapes and quant
// mix of a known MoE (random weights, working tokenizer), for tests and
// benchmarks. See src/engine/synthetic_model.h for how weights and skew are made.
#include <chrono>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cpu/thread_pool.h"
#include "engine/quant_presets.h"
#include "engine/synthetic_model.h"
#include "util/bytes.h"
#include "util/error.h"

namespace ms::cli {
namespace {

RegisterCommand reg("gen", [](CLI::App& app) {
  auto* sub = app.add_subcommand("gen", "Generate a synthetic model (random weights, real shapes) as GGUF");
  auto opt = std::make_shared<GenOptions>();
  auto out = std::make_shared<std::string>();
  auto threads = std::make_shared<int>(0);
  auto quiet = std::make_shared<bool>(false);
  sub->add_option("--arch", opt->arch, "qwen3moe | qwen35moe | mixtral | gpt-oss | qwen3 | qwen2 | llama (dense) | dflash (a DFlash drafter for the tiny targets)")
      ->capture_default_str();
  sub->add_option("--preset", opt->preset,
                  "tiny | qwen3-30b-a3b | qwen3.6-35b-a3b | mixtral-8x7b | gpt-oss-20b | gpt-oss-120b")
      ->capture_default_str();
  auto* quant = sub->add_option("--quant", opt->quant,
                                "llama-quantize preset, UD-style mix or single type: " + quant_scheme_names() +
                                    " (gpt-oss: default mxfp4_moe, as the published files)")
                    ->capture_default_str();
  sub->add_flag("--pure", opt->pure, "--quant names one type for every tensor (as llama-quantize --pure)");
  sub->add_option("--router-skew", opt->router_skew,
                  "Zipf exponent S of expert popularity (0: uniform routing)")->capture_default_str();
  sub->add_option("--router-locality", opt->router_locality,
                  "fraction of a token's experts the previous token chose too, as decoding measures it "
                  "(0: independent tokens; every MoE architecture; docs/traces.md)")
      ->capture_default_str();
  sub->add_option("--seed", opt->seed, "random seed (same seed, same file)")->capture_default_str();
  sub->add_option("--layout", opt->layout, "expert tensors: stacked | merged | per-expert")->capture_default_str();
  sub->add_option("--layers", opt->n_layer, "override the preset's layer count (0: keep)");
  sub->add_option("--ctx", opt->n_ctx, "override the preset's context length (0: keep)");
  sub->add_option("--experts", opt->n_expert, "override the preset's routed experts per layer (0: keep)");
  sub->add_option("--experts-used", opt->n_expert_used, "override the preset's experts per token (0: keep)");
  sub->add_option("-t,--threads", *threads, "threads for quantization (0: all cores)");
  sub->add_flag("-q,--quiet", *quiet, "no progress output");
  sub->add_option("-o,--output", *out, "output .gguf file")->required();
  return [=]() -> int {
    // Range checks (cli helper): a negative override used to be taken silently.
    if (opt->n_layer < 0 || opt->n_layer > 1024) throw Error("--layers must be in 0..1024 (0: the preset's)");
    if (opt->n_ctx < 0 || opt->n_ctx > (int64_t{1} << 24)) throw Error("--ctx must be in 0..16777216 (0: the preset's)");
    if (opt->n_expert < 0 || opt->n_expert_used < 0) throw Error("--experts and --experts-used must be >= 0 (0: the preset's)");
    if (*threads < 0 || *threads > 1024) throw Error("--threads must be in 0..1024 (0: all cores)");
    ThreadPool pool(*threads);
    GenOptions o = *opt;
    // gpt-oss ships MXFP4 experts with Q8_0 elsewhere: that is its default mix.
    if (quant->count() == 0 && (o.arch == "gpt-oss" || o.arch == "GPT-OSS")) o.quant = "mxfp4_moe";
    const auto t0 = std::chrono::steady_clock::now();
    double last = -1;
    if (!*quiet)
      o.progress = [&](uint64_t done, uint64_t total) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s - last < 0.5 && done != total) return;
        last = s;
        std::fprintf(stderr, "\rgen: %s / %s (%.0f%%), %.1f s   ", format_bytes(done).c_str(),
                     format_bytes(total).c_str(), 100.0 * static_cast<double>(done) / static_cast<double>(total), s);
      };
    GenResult r = generate_model(o, *out, pool);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!*quiet) std::fprintf(stderr, "\n");
    std::printf("wrote %s: %s (%s), %d layers, %llu tensors [%s], %s in %.1f s\n", out->c_str(), r.shape.name.c_str(),
                r.shape.gguf_arch.c_str(), r.shape.n_layer, static_cast<unsigned long long>(r.n_tensors), r.mix.c_str(),
                format_bytes(r.file_bytes).c_str(), s);
    return 0;
  };
});

}  // namespace
}  // namespace ms::cli
