#include "cli/draft_setup.h"

#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/backend_choice.h"
#include "util/error.h"

namespace ms::cli {

// llama.cpp's -md and -devd reach these as --model-draft and --device-draft
// (cli/llama_flags.cpp: CLI11 names of one dash are one letter).
void add_draft_options(CLI::App& sub, DraftSetup* d) {
  auto mark = [d](const std::string&) { d->given = true; };
  sub.add_option("--model-draft,--spec-draft-model", d->model,
                 "with --spec draft: the draft model (a smaller GGUF with the same vocabulary); with --spec dflash: "
                 "the DFlash drafter (GGUF architecture dflash)")
      ->each(mark);
  sub.add_option("--device-draft,--draft-device", d->device,
                 "with --spec draft: where the draft model runs, cpu or gpu (default: where the model runs)")
      ->check(CLI::IsMember({"cpu", "gpu", "cuda"}))
      ->each(mark);
  sub.add_option("--draft-p-min", d->p_min,
                 "with --spec draft: stop drafting at a token the draft model gives less than this probability "
                 "(0: never)")
      ->capture_default_str()
      ->each(mark);
}

void add_spec_options(CLI::App& sub, SpecFlags* f, const std::string& spec_help) {
  sub.add_option("--spec", f->spec, spec_help)->option_text("ngram|mtp|draft|dflash|oracle:ALPHA");
  add_draft_options(sub, &f->draft);
  auto mark = [f](const std::string&) { f->control_given = true; };
  sub.add_option("--draft-max", f->control.draft_max, "with --spec: drafts per verify at most")
      ->capture_default_str()
      ->each(mark);
  sub.add_option("--draft-min", f->control.draft_min, "with --spec: fewer drafts than this: a plain step")
      ->capture_default_str()
      ->each(mark);
  sub.add_flag("--spec-fixed", f->fixed,
               "with --spec: always verify --draft-max drafts (no controller turning K down or off)")
      ->each(mark);
}

std::optional<DraftChoice> check_spec_flags(const SpecFlags& f, const std::string& control_flags) {
  if (f.spec.empty()) {
    check_draft_flags(f.draft, nullptr);
    if (f.control_given) throw Error(control_flags + " apply with --spec ngram|mtp|draft|dflash|oracle:ALPHA");
    return std::nullopt;
  }
  const DraftChoice choice = parse_draft_choice(f.spec);
  check_draft_flags(f.draft, &choice);
  f.control.validate();
  return choice;
}

void check_spec_tree_flag(int nodes) {
  if (nodes < 0 || nodes > kMaxSpecTree)
    throw Error("--spec-tree " + std::to_string(nodes) + ": the drafts of a tree must be 0 (chains) .. " +
                std::to_string(kMaxSpecTree));
}

void check_draft_flags(const DraftSetup& d, const DraftChoice* spec) {
  if (!spec || !spec->needs_file()) {
    if (d.given) throw Error("-md, --device-draft and --draft-p-min apply with --spec draft or --spec dflash");
    return;
  }
  const std::string what = spec->describe();
  if (d.model.empty()) throw Error("--spec " + what + " needs the drafter: -md FILE (--model-draft)");
  if (!(d.p_min >= 0.0 && d.p_min <= 1.0)) throw Error("--draft-p-min: must be in [0, 1]");
  if (spec->kind == DraftChoice::Kind::DFlash) {
    if (d.p_min != 0) throw Error("--draft-p-min applies with --spec draft (the DFlash drafter drafts greedily)");
    if (!d.device.empty() && d.device != "cpu")
      throw Error("--device-draft " + d.device + ": the DFlash drafter runs on the CPU (with the CPU backend)");
  }
}

OpenDFlash open_dflash(const DraftSetup& d, const LoadedModel& target, bool quiet) {
  OpenDFlash o;
  o.file = GgufFile::open(d.model);
  o.weights = std::make_unique<DFlashWeights>(bind_dflash(*o.file));
  try {
    check_dflash_fits(o.weights->cfg, target.weights.cfg);
  } catch (const Error& e) {
    throw Error(d.model + ": " + e.what());
  }
  if (!quiet) std::fprintf(stderr, "moestream: DFlash drafter %s | %s\n", d.model.c_str(), o.weights->cfg.describe().c_str());
  return o;
}

OpenDraft open_draft_model(const DraftSetup& d, const LoadedModel& target, const std::string& target_backend,
                           ThreadPool& pool, int64_t ctx, int n_seq, bool quiet) {
  OpenDraft o;
  o.model = LoadedModel::open(d.model);
  check_draft_vocab(*target.tokenizer, *o.model->tokenizer, target.weights.cfg.n_vocab,
                    o.model->weights.cfg.n_vocab);
  BackendSetup bs;
  const std::string dev = d.device.empty() ? target_backend : d.device;
  bs.requested = dev == "cpu" ? "cpu" : "cuda";
  bs.quiet = quiet;
  bs.ctx = ctx;
  bs.n_seq = n_seq;
  // The draft is small: every weight resident beside the model's (the
  // default budget would be read from what the model left free).
  bs.vram.budget = "full";
  o.backend = make_backend(bs, o.model->weights, pool);
  if (!quiet)
    std::fprintf(stderr, "moestream: draft model %s | %s | %s\n", d.model.c_str(),
                 o.model->weights.cfg.describe().c_str(), o.backend->name().c_str());
  return o;
}

OpenDraft open_draft(const DraftSetup& d, const LoadedModel& target, const std::string& target_backend,
                     ThreadPool& pool, int64_t ctx, const SamplerParams& sampling, bool quiet) {
  OpenDraft o = open_draft_model(d, target, target_backend, pool, ctx, 1, quiet);
  ModelDrafter::Options mo;
  mo.sampling = sampling;
  mo.p_min = d.p_min;
  mo.ctx = ctx;
  o.drafter = std::make_unique<ModelDrafter>(*o.backend, mo);
  return o;
}

}  // namespace ms::cli
