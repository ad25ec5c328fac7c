// `moestream sim --spec` (engine/sim_spec.h): a trace's decode replayed as
// speculative verifies, with the drafts' routes counted or left out.
#include "engine/sim_spec.h"

#include <gtest/gtest.h>

#include "experts/synthetic_trace.h"
#include "util/error.h"

namespace ms {
namespace {

Trace small_trace() {
  SyntheticTraceOptions o;
  o.n_layer = 6;
  o.n_expert = 32;
  o.k = 4;
  o.tokens = 300;
  o.prompt_tokens = 4;  // a short prompt: decode still meets experts the first time
  o.prompt_batch = 4;
  o.skew = 1.0;
  o.locality = 0.3;
  return make_synthetic_trace(o);
}

SimOptions sim(const std::string& policy, double fraction) {
  SimOptions o;
  o.policy = policy;
  o.capacity.kind = CapacitySpec::Kind::Fraction;
  o.capacity.value = fraction;
  o.belady = false;
  return o;
}

constexpr uint64_t kDecodeTokens = 300 - 4;

TEST(SimSpec, EveryDecodeTokenIsEmittedOnce) {
  const Trace t = small_trace();
  for (double alpha : {0.0, 0.6, 1.0}) {
    const SpecSimResult r = simulate_speculative(t, sim("lru", 0.3), {.alpha = alpha, .draft_max = 4, .seed = 3});
    EXPECT_EQ(r.emitted, kDecodeTokens) << alpha;
    EXPECT_EQ(r.emitted, r.decode_passes + r.accepted) << alpha;
    if (alpha == 0.0) EXPECT_EQ(r.accepted, 0u);
    if (alpha == 1.0) EXPECT_EQ(r.accepted, r.drafted);
    if (alpha == 0.6) {
      EXPECT_GT(r.accepted, 0u);
      EXPECT_LT(r.accepted, r.drafted);
    }
  }
}

// With room for every expert (no evictions) and every draft rejected, the
// fed tokens see the cache plain decoding sees: the drafts admitted nothing.
// Counting every route instead admits the drafts' experts early.
TEST(SimSpec, RejectedDraftsAdmitNothing) {
  const Trace t = small_trace();
  for (const std::string policy : {"lru", "adaptive"}) {
    SCOPED_TRACE(policy);
    const SimOptions o = sim(policy, 1.0);
    const SpecSimResult plain = simulate_speculative(t, o, {.alpha = 0.0, .draft_max = 0});
    const SpecSimResult out = simulate_speculative(t, o, {.alpha = 0.0, .draft_max = 4, .exclude_rejected = true});
    const SpecSimResult all = simulate_speculative(t, o, {.alpha = 0.0, .draft_max = 4, .exclude_rejected = false});
    EXPECT_EQ(plain.evicted, 0u);
    EXPECT_EQ(out.kept_accesses, plain.accesses);
    EXPECT_EQ(out.kept_hits, plain.hits);
    EXPECT_EQ(out.admitted, plain.admitted);
    EXPECT_GT(out.accesses, plain.accesses);  // the drafts' experts were served too
    EXPECT_GT(all.kept_hits, plain.hits);
    EXPECT_GT(all.admitted, 0u);
  }
}

TEST(SimSpec, DeterministicForASeed) {
  const Trace t = small_trace();
  const SpecSimOptions s{.alpha = 0.7, .draft_max = 3, .seed = 9};
  const SpecSimResult a = simulate_speculative(t, sim("lfu-decay", 0.25), s);
  const SpecSimResult b = simulate_speculative(t, sim("lfu-decay", 0.25), s);
  EXPECT_EQ(a.hits, b.hits);
  EXPECT_EQ(a.admitted, b.admitted);
  EXPECT_EQ(a.pcie_bytes, b.pcie_bytes);
  EXPECT_EQ(a.accepted, b.accepted);
  EXPECT_FALSE(spec_table_row("x", a).empty());
}

TEST(SimSpec, BadInputIsAnError) {
  const Trace t = small_trace();
  EXPECT_THROW(simulate_speculative(t, sim("lru", 0.3), {.alpha = 1.5}), Error);
  EXPECT_THROW(simulate_speculative(t, sim("lru", 0.3), {.draft_max = 65}), Error);
  SimOptions o = sim("lru", 0.3);
  o.prefetch = PrefetchMode::Oracle;
  EXPECT_THROW(simulate_speculative(t, o, {}), Error);
}

}  // namespace
}  // namespace ms
