#include "server/spec_drafters.h"

#include <map>
#include <utility>
#include <vector>

#include "engine/generate.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "engine/speculative_dflash.h"
#include "engine/speculative_mtp.h"
#include "util/error.h"

namespace ms::server {

DrafterFactory ngram_drafters() {
  return [](const Job&, const KvCache&) -> std::unique_ptr<Drafter> { return std::make_unique<NgramDrafter>(); };
}

namespace {

// The MTP drafters alive now (the scheduler's worker thread makes, feeds and
// ends them all).
struct MtpHub {
  std::vector<MtpDrafter*> live;
};

class SlotMtpDrafter final : public MtpDrafter {
 public:
  SlotMtpDrafter(Backend& be, const KvCache& target, KvType type, std::shared_ptr<MtpHub> hub)
      : MtpDrafter(be, target, type, /*own_hook=*/false), hub_(std::move(hub)) {
    hub_->live.push_back(this);
  }
  ~SlotMtpDrafter() override { std::erase(hub_->live, static_cast<MtpDrafter*>(this)); }

 private:
  std::shared_ptr<MtpHub> hub_;
};

}  // namespace

DrafterFactory mtp_drafters(Backend& be, KvType kv_type) {
  if (!be.supports_mtp()) throw Error(kNoMtpBlock);
  auto hub = std::make_shared<MtpHub>();
  be.set_hidden_hook([hub](const HiddenEvent& e) {
    for (MtpDrafter* d : hub->live) d->observe(e);
  });
  return [&be, kv_type, hub](const Job&, const KvCache& kv) -> std::unique_ptr<Drafter> {
    return std::make_unique<SlotMtpDrafter>(be, kv, kv_type, hub);
  };
}

namespace {

// The draft caches of the slots (keyed by the slot's target cache, which
// lives as long as the scheduler), on the draft model's backend.
struct DraftHub {
  Backend& be;
  std::shared_ptr<KvPages> pages;  // paged KV: the pool the caches share
  std::map<const KvCache*, std::shared_ptr<DraftCache>> slots;
};

// A job's drafter over its slot's draft cache; a paged cache gives its pages
// back when the job ends (other slots' drafts need them more than this slot's
// next prompt does).
class SlotModelDrafter final : public ModelDrafter {
 public:
  SlotModelDrafter(Backend& be, Options o, std::shared_ptr<DraftCache> cache)
      : ModelDrafter(be, o, cache), cache_(std::move(cache)) {}
  ~SlotModelDrafter() override {
    if (cache_->kv && cache_->kv->paged()) cache_->clear();
  }

 private:
  std::shared_ptr<DraftCache> cache_;
};

}  // namespace

DrafterFactory model_drafters(Backend& draft, double p_min, int64_t pool_tokens,
                              std::shared_ptr<const KvPages>* pages) {
  auto hub = std::make_shared<DraftHub>(DraftHub{draft, nullptr, {}});
  // Pages as the target's (Scheduler::Options::kv_page_tokens' default).
  if (draft.paged_kv() && pool_tokens > 0) hub->pages = draft.make_kv_pages(pool_tokens, KvType::F16, 64);
  if (pages) *pages = hub->pages;
  return [hub, p_min](const Job& job, const KvCache& target) -> std::unique_ptr<Drafter> {
    std::shared_ptr<DraftCache>& c = hub->slots[&target];
    if (!c) {  // (a cache that cannot be made leaves the slot without one: the job decodes plainly)
      auto kv = std::make_unique<KvCache>(hub->pages ? hub->be.make_paged_cache(hub->pages, target.ctx(), KvType::F16)
                                                     : hub->be.make_cache(target.ctx()));
      // Recurrent draft models go back through checkpoints (one per verify depth).
      if (kv->has_recurrent()) kv->set_checkpoints({66, kv->checkpoints().options().spacing});
      c = std::make_shared<DraftCache>();
      c->kv = std::move(kv);
    }
    ModelDrafter::Options o;
    o.sampling = job.sampling;
    o.p_min = p_min;
    o.ctx = target.ctx();
    return std::make_unique<SlotModelDrafter>(hub->be, o, c);
  };
}

namespace {

// The slots' DFlash drafters, each watching its slot's forwards.
struct DFlashHub {
  std::map<const KvCache*, std::unique_ptr<DFlashDrafter>> slots;
};

// What a job holds: its slot's drafter, which outlives it.
class SlotDFlashDrafter final : public Drafter {
 public:
  explicit SlotDFlashDrafter(DFlashDrafter& d) : d_(d) {}
  void propose(std::span<const int32_t> history, int max_tokens, std::vector<int32_t>& out) override {
    d_.propose(history, max_tokens, out);
  }
  std::string name() const override { return d_.name(); }

 private:
  DFlashDrafter& d_;
};

}  // namespace

DrafterFactory dflash_drafters(Backend& be, const DFlashWeights& w, const ModelWeights& target_w, ThreadPool& pool,
                               KvType kv_type) {
  be.set_hidden_layers(w.cfg.target_layers);  // throws where the backend cannot hand them out
  auto hub = std::make_shared<DFlashHub>();
  be.set_hidden_hook([hub](const HiddenEvent& e) {
    for (auto& [kv, d] : hub->slots) d->observe(e);
  });
  return [&be, &w, &target_w, &pool, kv_type, hub](const Job& job, const KvCache& target) -> std::unique_ptr<Drafter> {
    std::unique_ptr<DFlashDrafter>& d = hub->slots[&target];
    // A later choice's state is a fork (no forward to read): the slot's old
    // context would be another text's.
    if (!d || job.choice > 0) {
      d.reset();
      d = std::make_unique<DFlashDrafter>(be, target, w, target_w, pool, kv_type, /*own_hook=*/false);
    }
    return std::make_unique<SlotDFlashDrafter>(*d);
  };
}

DrafterFactory oracle_drafters(Backend& be, const Tokenizer& tok, int64_t ctx, KvType kv_type, double alpha) {
  auto scratch = std::make_shared<std::unique_ptr<KvCache>>();
  return [&be, &tok, ctx, kv_type, alpha, scratch](const Job& job, const KvCache&) -> std::unique_ptr<Drafter> {
    if (!*scratch) *scratch = std::make_unique<KvCache>(be.make_cache(ctx, kv_type));
    KvCache& kv = **scratch;
    kv.clear();
    Sampler sampler(job.sampling);
    GenerateParams gp;
    gp.n_predict = job.gen.n_predict;
    gp.stop_at_eog = job.gen.stop_at_eog;
    std::vector<int32_t> reference;
    generate(be, kv, sampler, &tok, job.prompt, gp, [&](int32_t id) {
      reference.push_back(id);
      return true;
    });
    return std::make_unique<OracleDrafter>(std::move(reference), job.prompt.size(), alpha, be.config().n_vocab,
                                           job.sampling.seed);
  };
}

}  // namespace ms::server
