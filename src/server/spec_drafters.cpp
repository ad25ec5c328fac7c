#include "server/spec_drafters.h"

#include <utility>
#include <vector>

#include "engine/generate.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"

namespace ms::server {

DrafterFactory ngram_drafters() {
  return [](const Job&) -> std::unique_ptr<Drafter> { return std::make_unique<NgramDrafter>(); };
}

DrafterFactory oracle_drafters(Backend& be, const Tokenizer& tok, int64_t ctx, KvType kv_type, double alpha) {
  auto scratch = std::make_shared<std::unique_ptr<KvCache>>();
  return [&be, &tok, ctx, kv_type, alpha, scratch](const Job& job) -> std::unique_ptr<Drafter> {
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
