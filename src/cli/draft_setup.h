// Speculative decoding's flags, one parser for `run` and `serve`: --spec,
// --draft-max, --draft-min, --spec-fixed, and the draft model's flags
// (llama.cpp's spellings: -md / --model-draft / --spec-draft-model, -devd /
// --device-draft, --draft-p-min); and building the draft model: the file
// opened, its vocabulary checked against the model's, a backend of its own
// (the CPU's, or the same GPU), and the ModelDrafter over it. `--spec dflash`
// reads its drafter from -md too (open_dflash).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "cpu/thread_pool.h"
#include "engine/backend.h"
#include "engine/loaded_model.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "format/gguf.h"
#include "model/dflash_weights.h"

namespace CLI {
class App;
}

namespace ms::cli {

struct DraftSetup {
  std::string model;   // -md FILE
  std::string device;  // cpu | gpu ("": the model's own backend)
  double p_min = 0;    // --draft-p-min
  bool given = false;  // any of the flags appeared
};

// Adds -md/--model-draft, -devd/--device-draft and --draft-p-min.
void add_draft_options(CLI::App& sub, DraftSetup* d);

// Throws ms::Error for a draft flag without `--spec draft` or `dflash`, either
// without -md, a p-min outside [0, 1], or (dflash) a p-min or a device other
// than the CPU. `spec` is the --spec choice, if any.
void check_draft_flags(const DraftSetup& d, const DraftChoice* spec);

struct SpecFlags {
  std::string spec;                // --spec ("": off)
  SpecControllerOptions control;   // --draft-max, --draft-min
  bool fixed = false;              // --spec-fixed: control.adaptive off
  bool control_given = false;      // --draft-max, --draft-min or --spec-fixed appeared (or a command's own)
  DraftSetup draft;                // --spec draft's model
  // The controller options the flags give (adaptive unless --spec-fixed).
  SpecControllerOptions controller() const {
    SpecControllerOptions o = control;
    o.adaptive = !fixed;
    return o;
  }
};

// Adds --spec (with `spec_help`), --draft-max, --draft-min, --spec-fixed and
// the draft model's flags (add_draft_options).
void add_spec_options(CLI::App& sub, SpecFlags* f, const std::string& spec_help);

// The drafter --spec names (none without --spec). Throws ms::Error for a
// --spec that parse_draft_choice refuses, controller values out of range,
// draft flags that do not fit (check_draft_flags), or controller flags
// without --spec (the message lists `control_flags`, the command's).
std::optional<DraftChoice> check_spec_flags(const SpecFlags& f, const std::string& control_flags);

// --spec-tree N (run, bench): throws ms::Error unless 0 <= N <= kMaxSpecTree.
constexpr int kMaxSpecTree = 255;
void check_spec_tree_flag(int nodes);

struct OpenDraft {
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ModelDrafter> drafter;
};

// Opens -md FILE for a model whose backend is `target_backend` ("cpu",
// "cuda"): throws ms::Error when the file is not a model, its vocabulary is
// not the model's (check_draft_vocab), or the device is not usable.
OpenDraft open_draft(const DraftSetup& d, const LoadedModel& target, const std::string& target_backend,
                     ThreadPool& pool, int64_t ctx, const SamplerParams& sampling, bool quiet);
// The same without the drafter (`serve` makes one per request): the model
// and its backend, for caches of up to ctx tokens, n_seq of them live at
// once on a device (CUDA: each holds a sequence state of its own).
OpenDraft open_draft_model(const DraftSetup& d, const LoadedModel& target, const std::string& target_backend,
                           ThreadPool& pool, int64_t ctx, int n_seq, bool quiet);

// `--spec dflash`: the drafter file, bound and checked against the model
// (check_dflash_fits). The DFlashDrafter itself is made with the sequence's
// cache, whose forwards it watches.
struct OpenDFlash {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<DFlashWeights> weights;
};
OpenDFlash open_dflash(const DraftSetup& d, const LoadedModel& target, bool quiet);

}  // namespace ms::cli
