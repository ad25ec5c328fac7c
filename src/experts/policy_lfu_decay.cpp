// lfu-decay and lfu (LfuDecayPolicy in policy_lfu_decay.h).
#include "experts/policy_lfu_decay.h"
#include "experts/policy_impl.h"

namespace ms {

std::unique_ptr<CachePolicy> make_lfu_decay(size_t capacity, const PolicyOptions& opts, double halflife_steps,
                                            double admit_margin) {
  return std::make_unique<LfuDecayPolicy>(capacity, opts.n_keys, halflife_steps, admit_margin);
}

}  // namespace ms
