// `moestream trace ...`: routing traces — statistics, synthetic traces, profiles.
//   trace stats FILE [--json]
//   trace synth --layers 48 --experts 128 --k 8 --tokens 2000 --skew 1.0 -o FILE
//   trace profile TRACE -o PROFILE.json
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "experts/profile.h"
#include "experts/synthetic_trace.h"
#include "experts/trace.h"
#include "experts/trace_stats.h"
#include "util/bytes.h"
#include "util/error.h"

namespace ms::cli {
namespace {

constexpr double kMaxTraceChoices = double(1ull << 30);

struct TraceArgs {
  std::string file, out, expert_bytes;
  bool json = false;
  SyntheticTraceOptions synth;
};

RegisterCommand reg("trace", [](CLI::App& app) {
  auto args = std::make_shared<TraceArgs>();
  auto* trace = app.add_subcommand("trace", "Routing traces: statistics, synthetic traces, access profiles");
  trace->require_subcommand(1);

  auto* stats = trace->add_subcommand("stats", "Per-layer expert popularity, skew, reuse distance, repeat and prediction rates");
  stats->add_option("file", args->file, "Trace file (from --record-routes or `trace synth`)")->required();
  stats->add_flag("--json", args->json, "Print JSON instead of a table");

  auto* synth = trace->add_subcommand("synth", "Write a synthetic trace (Zipf-skewed routers) for tests and policy design");
  SyntheticTraceOptions& o = args->synth;
  synth->add_option("--layers", o.n_layer, "Layers")->capture_default_str();
  synth->add_option("--experts", o.n_expert, "Routed experts per layer")->capture_default_str();
  synth->add_option("--k", o.k, "Experts per token")->capture_default_str();
  synth->add_option("--tokens", o.tokens, "Tokens per sequence, prompt included")->capture_default_str();
  synth->add_option("--prompt", o.prompt_tokens, "Prompt tokens per sequence")->capture_default_str();
  synth->add_option("--prompt-batch", o.prompt_batch, "Prompt tokens per forward pass")->capture_default_str();
  synth->add_option("--sequences", o.sequences, "Sequences, one after the other")->capture_default_str();
  synth->add_option("--skew", o.skew, "Zipf exponent of expert popularity (0 = uniform router)")->capture_default_str();
  synth->add_option("--locality", o.locality,
                    "repeat model: chance each choice repeats one of the previous token's experts; window model: the "
                    "fraction of a token's experts the previous token chose (0..1)")
      ->capture_default_str();
  synth->add_option("--locality-model", o.locality_model,
                    "repeat (each choice on its own) | window (gen --router-locality's model: the last 8 tokens hold "
                    "most of a token's experts, as in real routers)")
      ->capture_default_str();
  synth->add_option("--drift", o.drift, "Chance per token and layer that two popularity ranks swap (0..1)")->capture_default_str();
  synth->add_option("--predict-accuracy", o.predict_accuracy,
                    "Store next-layer predictions right with this probability (default: none)");
  synth->add_option("--expert-bytes", args->expert_bytes, "Bytes of one expert (default 1.7M, a q4_K 2048x768 expert)");
  synth->add_option("--dense-layers", o.dense_first_layers, "Leading layers without routed experts")->capture_default_str();
  synth->add_option("--model", o.model, "Model name in the header")->capture_default_str();
  synth->add_option("--seed", o.seed, "Random seed")->capture_default_str();
  synth->add_option("-o,--output", args->out, "Output trace file")->required();

  auto* profile = trace->add_subcommand("profile", "Write a per-(layer, expert) access profile (JSON) for --profile pinning");
  profile->add_option("file", args->file, "Trace file")->required();
  profile->add_option("-o,--output", args->out, "Output profile (JSON)")->required();

  return [args, stats, synth, profile]() -> int {
    if (stats->parsed()) {
      const Trace t = read_trace(args->file);
      const TraceStats s = compute_trace_stats(t);
      if (args->json) std::printf("%s\n", trace_stats_json(s).dump(2).c_str());
      else std::fputs(trace_stats_text(s).c_str(), stdout);
      return 0;
    }
    if (synth->parsed()) {
      if (!args->expert_bytes.empty()) args->synth.expert_bytes = parse_bytes(args->expert_bytes);
      // Every routed choice is held in memory before the file is written: a
      // typo like --tokens 4000000000 must not allocate until the OOM killer.
      const SyntheticTraceOptions& o = args->synth;
      const double choices = double(o.n_layer) * o.tokens * o.sequences * o.k;
      if (choices > kMaxTraceChoices)
        throw Error("trace synth: --layers x --tokens x --sequences x --k = " + std::to_string(uint64_t(choices)) +
                    " expert choices; at most " + std::to_string(uint64_t(kMaxTraceChoices)));
      const Trace t = make_synthetic_trace(args->synth);
      write_trace(args->out, t);
      std::printf("wrote %s: %zu records, %u layers x %u experts, k=%u\n", args->out.c_str(), t.records.size(),
                  t.header.n_layer, t.header.n_expert, t.header.k);
      return 0;
    }
    if (profile->parsed()) {
      const ExpertProfile p = ExpertProfile::from_trace(read_trace(args->file));
      p.save(args->out);
      std::printf("wrote %s: access counts of %u layers x %u experts\n", args->out.c_str(), p.n_layer, p.n_expert);
      return 0;
    }
    return 1;
  };
});

}  // namespace
}  // namespace ms::cli
