// trace stats' locality figures (repeat after the previous token, within the
// last 8, LRU at 40% of the experts, experts for 90% of the choices) on
// hand-made traces whose answers are worked out by hand below.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "experts/synthetic_trace.h"
#include "experts/trace.h"
#include "experts/trace_stats.h"
#include "util/error.h"

namespace ms {
namespace {

TraceHeader one_layer(uint32_t n_expert, uint32_t k) {
  TraceHeader h;
  h.model = "hand-made";
  h.arch = "qwen3moe";
  h.n_layer = 2;
  h.n_expert = n_expert;
  h.k = k;
  h.flags = 0;
  h.expert_bytes = {0, 1000};  // layer 0 dense, layer 1 MoE
  return h;
}

// Ten decode tokens at layer 1, 12 experts, k = 2.
//   pos: 0     1     2     3     4     5     6     7     8     9
//   ids: 0 1   0 2   3 4   3 4   5 6   7 8   9 5   1 2   0 9   8 11
// previous token: pos 1 repeats 0, pos 3 repeats 3 and 4: 3 of 18 choices.
// last 8 (pos 8 and 9 have 8 tokens before them): pos 8's 0 (pos 0, 1) and
//   9 (pos 6); pos 9's 8 (pos 5), not 11: 3 of 4.
// LRU of max(k, round(0.4 * 12)) = 5 slots: hits at pos 1 (0), 3 (3, 4),
//   6 (5), 8 (9): 5 of 20.
// counts 0:3, 1..5:2, 8:2, 9:2, 6:1, 7:1, 11:1 -> 9 experts reach 18 of 20.
Trace hand_made() {
  Trace t;
  t.header = one_layer(12, 2);
  const std::vector<std::vector<uint16_t>> ids = {{0, 1}, {0, 2}, {3, 4}, {3, 4}, {5, 6},
                                                  {7, 8}, {9, 5}, {1, 2}, {0, 9}, {8, 11}};
  for (uint32_t pos = 0; pos < ids.size(); ++pos) t.add(Phase::Decode, 1, 0, pos, pos, ids[pos]);
  return t;
}

TEST(TraceStats, LocalityFiguresOfAHandMadeTrace) {
  const TraceStats s = compute_trace_stats(hand_made());
  ASSERT_EQ(s.layers.size(), 1u);
  const LayerTraceStats& l = s.layers[0];
  EXPECT_DOUBLE_EQ(l.repeat_prob, 3.0 / 18);
  EXPECT_DOUBLE_EQ(l.repeat_within_8, 3.0 / 4);
  EXPECT_EQ(s.lru40_slots, 5u);
  EXPECT_DOUBLE_EQ(l.lru40_hit_rate, 5.0 / 20);
  EXPECT_EQ(l.experts_for_90, 9u);
  EXPECT_DOUBLE_EQ(l.experts_for_90_share, 9.0 / 12);
  // One MoE layer: the overall figures are its own.
  EXPECT_DOUBLE_EQ(s.overall.repeat_within_8, l.repeat_within_8);
  EXPECT_DOUBLE_EQ(s.overall.lru40_hit_rate, l.lru40_hit_rate);
  const nlohmann::json j = trace_stats_json(s);
  EXPECT_DOUBLE_EQ(j["overall"]["repeat_within_8"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["overall"]["lru40_hit_rate"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["overall"]["experts_for_90pct_share"].get<double>(), 0.75);
  EXPECT_EQ(j["lru40_slots"].get<uint32_t>(), 5u);
  const std::string text = trace_stats_text(s);
  EXPECT_NE(text.find("17% of a token's experts were chosen by the previous token, 75% within the last 8"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("an LRU cache of 5 experts per layer (40%) hits 25%; 90% of the choices go to 75%"),
            std::string::npos)
      << text;
}

TEST(TraceStats, PromptTokensAreHistoryNotCounted) {
  // The same trace with positions 0..7 as one prompt batch: they fill the
  // window and the cache, and only pos 8 and 9 are counted.
  Trace t;
  t.header = one_layer(12, 2);
  const Trace d = hand_made();
  for (const TraceRecord& r : d.records)
    t.add(r.pos < 8 ? Phase::Prompt : Phase::Decode, 1, 0, r.pos, r.pos < 8 ? 0 : r.pos - 7, d.ids_of(r));
  const TraceStats s = compute_trace_stats(t);
  const LayerTraceStats& l = s.layers[0];
  EXPECT_DOUBLE_EQ(l.repeat_prob, 0.0);        // pos 8 after pos 7, pos 9 after pos 8: no repeats
  EXPECT_DOUBLE_EQ(l.repeat_within_8, 3.0 / 4);
  EXPECT_DOUBLE_EQ(l.lru40_hit_rate, 1.0 / 4);  // pos 8's 9 only
}

TEST(TraceStats, ShortOrBrokenHistoriesAreNotCounted) {
  // A gap in positions restarts the 8-token history; a second sequence has its own.
  Trace t;
  t.header = one_layer(12, 2);
  const std::vector<uint16_t> a = {0, 1};
  for (uint32_t pos = 0; pos < 8; ++pos) t.add(Phase::Decode, 1, 0, pos, pos, a);
  t.add(Phase::Decode, 1, 0, 9, 8, a);  // pos 8 missing
  for (uint32_t pos = 0; pos < 5; ++pos) t.add(Phase::Decode, 1, 1, pos, 9 + pos, a);
  const TraceStats s = compute_trace_stats(t);
  EXPECT_LT(s.layers[0].repeat_within_8, 0.0);  // no token had 8 consecutive tokens before it
  EXPECT_EQ(trace_stats_json(s)["overall"]["repeat_within_8"], nullptr);
  EXPECT_DOUBLE_EQ(s.layers[0].repeat_prob, 1.0);
}

TEST(TraceStats, SyntheticLocalityIsWhatItSays) {
  // trace synth --locality P: each choice repeats one of the previous
  // token's with probability P, so P plus the chance of the rest.
  SyntheticTraceOptions o;
  o.n_layer = 4;
  o.n_expert = 64;
  o.k = 4;
  o.tokens = 1500;
  o.prompt_tokens = 0;
  o.skew = 0;
  o.locality = 0.45;
  const TraceStats s = compute_trace_stats(make_synthetic_trace(o));
  EXPECT_NEAR(s.overall.repeat_prob, 0.45 + 0.55 * 4.0 / 64, 0.03);
  EXPECT_GT(s.overall.repeat_within_8, s.overall.repeat_prob);
  o.locality = 0;
  const TraceStats u = compute_trace_stats(make_synthetic_trace(o));
  EXPECT_NEAR(u.overall.repeat_prob, 4.0 / 64, 0.02);
  // An LRU cache of 40% of uniformly chosen experts hits about 40%.
  EXPECT_NEAR(u.overall.lru40_hit_rate, 0.4, 0.04);
}

TEST(TraceStats, WindowLocalityModelRepeatsLikeRealRouters) {
  // gen --router-locality's model: P of a token's experts from the previous
  // token, and most of the rest from the few before it (published for
  // Qwen3-30B-A3B: 45% and 80% within 8; an LRU cache of 40% hits 90-95%).
  SyntheticTraceOptions o;
  o.n_layer = 8;
  o.n_expert = 128;
  o.k = 8;
  o.tokens = 1500;
  o.prompt_tokens = 256;
  o.skew = 0;
  o.locality = 0.45;
  o.locality_model = "window";
  const Trace a = make_synthetic_trace(o);
  EXPECT_EQ(a.ids, make_synthetic_trace(o).ids);  // deterministic
  const TraceStats s = compute_trace_stats(a);
  EXPECT_NEAR(s.overall.repeat_prob, 0.45, 0.04);
  EXPECT_GT(s.overall.repeat_within_8, 0.75);
  EXPECT_GT(s.overall.lru40_hit_rate, 0.85);
  // The repeat model at the same P: the previous token alike, the last 8 far less.
  o.locality_model = "repeat";
  const TraceStats r = compute_trace_stats(make_synthetic_trace(o));
  EXPECT_LT(r.overall.repeat_within_8, s.overall.repeat_within_8 - 0.1);
  o.locality_model = "markov";
  EXPECT_THROW(make_synthetic_trace(o), Error);
  o.locality_model = "window";
  o.locality = 0.99;  // beyond what the window reaches
  EXPECT_THROW(make_synthetic_trace(o), Error);
}

}  // namespace
}  // namespace ms
