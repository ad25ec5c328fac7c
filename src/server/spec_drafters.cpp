#include "server/spec_drafters.h"

#include <utility>
#include <vector>

#include "engine/generate.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"
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
