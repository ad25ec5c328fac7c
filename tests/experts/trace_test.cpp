#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "experts/access.h"
#include "experts/synthetic_trace.h"
#include "experts/trace.h"
#include "util/error.h"

namespace ms {
namespace {

TraceHeader small_header(uint32_t flags = kTraceHasGateWeights, uint32_t k_pred = 0) {
  TraceHeader h;
  h.model = "tiny";
  h.arch = "qwen3moe";
  h.quant = "q4_K";
  h.n_layer = 3;
  h.n_expert = 8;
  h.k = 2;
  h.k_pred = k_pred;
  h.flags = flags;
  h.expert_bytes = {0, 1000, 2000};  // layer 0 dense
  return h;
}

std::string temp_path(const char* name) { return std::string(::testing::TempDir()) + name; }

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Trace, WriterRoundTripsThroughReader) {
  const std::string path = temp_path("rt.trace");
  TraceHeader h = small_header(kTraceHasGateWeights | kTraceHasPredictions, 2);
  {
    TraceWriter w(path, h);
    w.begin_step();
    const uint32_t pos[2] = {0, 1}, seqs[2] = {0, 0};
    const uint16_t ids[4] = {1, 2, 3, 4}, pred[4] = {5, 6, 7, 0};
    const float wts[4] = {0.75f, 0.25f, 0.5f, 0.5f};
    w.record_batch(1, Phase::Prompt, pos, seqs, ids, wts, pred);
    w.record_batch(2, Phase::Prompt, pos, {}, ids, wts, pred);
    w.begin_step();
    const uint16_t d[2] = {7, 0};
    const float dw[2] = {0.6f, 0.4f};
    w.record_layer(2, 1, Phase::Decode, d, dw, d, 3);
    EXPECT_EQ(w.records_written(), 5u);
    w.close();
  }
  const Trace t = read_trace(path);
  EXPECT_EQ(t.header.model, "tiny");
  EXPECT_EQ(t.header.arch, "qwen3moe");
  EXPECT_EQ(t.header.quant, "q4_K");
  EXPECT_EQ(t.header.expert_bytes, (std::vector<uint64_t>{0, 1000, 2000}));
  ASSERT_EQ(t.records.size(), 5u);
  EXPECT_EQ(t.records[0].step, 0u);
  EXPECT_EQ(t.records[4].step, 1u);
  EXPECT_EQ(t.records[4].seq, 3u);
  EXPECT_EQ(t.records[4].pos, 2u);
  EXPECT_EQ(t.records[4].phase, Phase::Decode);
  EXPECT_EQ(t.records[3].layer, 2u);
  EXPECT_EQ(t.ids_of(t.records[1])[0], 3);
  EXPECT_EQ(t.weights_of(t.records[0])[0], 0.75f);  // exact in f16
  EXPECT_EQ(t.predictions_of(t.records[1])[1], 0);
  // Re-serialising gives the same bytes.
  write_trace(temp_path("rt2.trace"), t);
  EXPECT_EQ(file_bytes(path), file_bytes(temp_path("rt2.trace")));
  std::remove(path.c_str());
}

TEST(Trace, F32WeightsAreExact) {
  Trace t;
  t.header = small_header(kTraceHasGateWeights | kTraceGateWeightsF32);
  const uint16_t ids[2] = {0, 7};
  const float w[2] = {0.123456789f, 1e-8f};
  t.add(Phase::Decode, 2, 0, 0, 0, ids, w);
  write_trace(temp_path("f32.trace"), t);
  const Trace r = read_trace(temp_path("f32.trace"));
  EXPECT_EQ(r.weights_of(r.records[0])[0], w[0]);
  EXPECT_EQ(r.weights_of(r.records[0])[1], w[1]);
}

TEST(Trace, WriterRefusesBadRecords) {
  TraceWriter w(temp_path("bad.trace"), small_header());
  const float wts[2] = {0.5f, 0.5f};
  const uint16_t out_of_range[2] = {1, 8}, dup[2] = {3, 3}, ok[2] = {1, 2};
  EXPECT_THROW(w.record_layer(0, 1, Phase::Decode, out_of_range, wts), Error);
  EXPECT_THROW(w.record_layer(0, 1, Phase::Decode, dup, wts), Error);
  EXPECT_THROW(w.record_layer(0, 0, Phase::Decode, ok, wts), Error);   // dense layer
  EXPECT_THROW(w.record_layer(0, 5, Phase::Decode, ok, wts), Error);   // no such layer
  EXPECT_THROW(w.record_layer(0, 1, Phase::Decode, ok, {}), Error);    // weights missing
  EXPECT_THROW(w.record_layer(0, 1, Phase::Decode, ok, wts, ok), Error);  // no predictions in header
  EXPECT_NO_THROW(w.record_layer(0, 1, Phase::Decode, ok, wts));
  TraceHeader bad = small_header();
  bad.k = 9;
  EXPECT_THROW(TraceWriter(temp_path("bad2.trace"), bad), Error);
  bad = small_header();
  bad.expert_bytes = {0, 0, 0};
  EXPECT_THROW(TraceWriter(temp_path("bad3.trace"), bad), Error);
}

std::vector<uint8_t> valid_bytes() {
  SyntheticTraceOptions o;
  o.n_layer = 3;
  o.n_expert = 8;
  o.k = 2;
  o.tokens = 6;
  o.prompt_tokens = 2;
  o.prompt_batch = 2;
  o.predict_accuracy = 0.5;
  write_trace(temp_path("valid.trace"), make_synthetic_trace(o));
  return file_bytes(temp_path("valid.trace"));
}

TEST(Trace, EveryTruncationIsAClearError) {
  const std::vector<uint8_t> bytes = valid_bytes();
  const Trace full = parse_trace(bytes, "x");
  const size_t rb = full.header.record_bytes();
  const size_t header = bytes.size() - full.records.size() * rb;
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::span<const uint8_t> prefix(bytes.data(), n);
    if (n >= header && (n - header) % rb == 0) {
      EXPECT_EQ(parse_trace(prefix, "x").records.size(), (n - header) / rb);  // whole records: fine
    } else {
      EXPECT_THROW(parse_trace(prefix, "x"), Error) << n;
    }
  }
}

TEST(Trace, CorruptFieldsAreRejected) {
  const std::vector<uint8_t> good = valid_bytes();
  const Trace t = parse_trace(good, "x");
  const size_t header = good.size() - t.records.size() * t.header.record_bytes();
  auto with = [&](size_t at, uint8_t v) {
    std::vector<uint8_t> b = good;
    b[at] = v;
    return b;
  };
  EXPECT_THROW(parse_trace(with(0, 'X'), "x"), Error);          // magic
  EXPECT_THROW(parse_trace(with(8, 2), "x"), Error);            // version
  EXPECT_THROW(parse_trace(with(16, 0x80), "x"), Error);        // unknown flag
  EXPECT_THROW(parse_trace(with(28, 99), "x"), Error);          // k > n_expert
  EXPECT_THROW(parse_trace(with(header, 7), "x"), Error);       // phase
  EXPECT_THROW(parse_trace(with(header + 2, 9), "x"), Error);   // layer
  EXPECT_THROW(parse_trace(with(header + 16, 200), "x"), Error);  // expert id
  {
    std::vector<uint8_t> b = good;  // duplicate id in the first record
    b[header + 18] = b[header + 16];
    b[header + 19] = b[header + 17];
    EXPECT_THROW(parse_trace(b, "x"), Error);
  }
  try {
    parse_trace(with(header + 16, 200), "file.trace");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("file.trace"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("record 0"), std::string::npos);
  }
  EXPECT_THROW(read_trace(temp_path("does-not-exist.trace")), Error);
}

TEST(Trace, RandomCorruptionNeverCrashes) {
  const std::vector<uint8_t> good = valid_bytes();
  uint64_t s = 12345;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> b = good;
    const int flips = 1 + iter % 4;
    for (int f = 0; f < flips; ++f) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      b[(s >> 33) % b.size()] ^= uint8_t(1u << ((s >> 20) % 8));
    }
    try {
      const Trace t = parse_trace(b, "x");
      for (const auto& r : t.records) ASSERT_LT(r.layer, t.header.n_layer);
    } catch (const Error&) {
    }
  }
}

TEST(AccessSequence, GroupsBatchesAndCountsUses) {
  Trace t;
  t.header = small_header(kTraceHasGateWeights | kTraceHasPredictions, 2);
  const uint16_t a[2] = {1, 2}, b[2] = {2, 5}, p[2] = {4, 6};
  // step 0: a prompt batch of 2 tokens, layer-major; step 1: one decode token.
  t.add(Phase::Prompt, 1, 0, 0, 0, a, {}, p);
  t.add(Phase::Prompt, 1, 0, 1, 0, b, {}, p);
  t.add(Phase::Prompt, 2, 0, 0, 0, b, {}, p);
  t.add(Phase::Prompt, 2, 0, 1, 0, b, {}, p);
  t.add(Phase::Decode, 2, 0, 2, 7, a, {}, p);  // layer 1 missing: allowed
  const AccessSequence s = build_access_sequence(t);
  EXPECT_EQ(s.n_steps, 2u);
  ASSERT_EQ(s.steps.size(), 3u);
  EXPECT_EQ(s.steps[0].layer, 1u);
  EXPECT_EQ(s.steps[0].tokens, 2u);
  EXPECT_EQ(std::vector<ExpertKey>(s.keys_of(s.steps[0]).begin(), s.keys_of(s.steps[0]).end()),
            (std::vector<ExpertKey>{9, 10, 13}));
  EXPECT_EQ(s.uses_of(s.steps[0])[1], 2u);  // expert 2 chosen by both tokens
  EXPECT_EQ(s.steps[1].count, 2u);          // {2, 5}
  EXPECT_EQ(s.uses_of(s.steps[1])[0], 2u);
  EXPECT_EQ(s.steps[2].step, 1u);            // ordinal, not the recorded 7
  EXPECT_EQ(s.steps[2].phase, Phase::Decode);
  // Predictions at layer 1 name layer 2's experts, confidence = share of tokens.
  ASSERT_EQ(s.steps[0].pred_count, 2u);
  EXPECT_EQ(s.predictions_of(s.steps[0])[0], 2u * 8 + 4);
  EXPECT_FLOAT_EQ(s.confidences_of(s.steps[0])[0], 1.0f);
  EXPECT_EQ(s.steps[1].pred_count, 0u);  // last MoE layer: nothing after it
}

TEST(SyntheticTrace, IsDeterministicAndWellFormed) {
  SyntheticTraceOptions o;
  o.n_layer = 6;
  o.n_expert = 16;
  o.k = 4;
  o.tokens = 50;
  o.prompt_tokens = 20;
  o.prompt_batch = 8;
  o.sequences = 2;
  o.locality = 0.5;
  o.dense_first_layers = 1;
  o.predict_accuracy = 0.9;
  const Trace a = make_synthetic_trace(o), b = make_synthetic_trace(o);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.pred_ids, b.pred_ids);
  EXPECT_EQ(a.records.size(), size_t(2 * 50 * 5));
  o.seed = 2;
  EXPECT_NE(make_synthetic_trace(o).ids, a.ids);
  // Serialises and re-reads (the reader validates distinct ids, ranges, ...).
  write_trace(temp_path("syn.trace"), a);
  const Trace r = read_trace(temp_path("syn.trace"));
  EXPECT_EQ(r.ids, a.ids);
  const AccessSequence s = build_access_sequence(r);
  // Per sequence: 20 prompt tokens in batches of 8 (3 passes) + 30 decode.
  EXPECT_EQ(s.n_steps, 2u * (3 + 30));
  EXPECT_EQ(s.steps.front().tokens, 8u);
  EXPECT_EQ(s.steps.front().layer, 1u);
}

}  // namespace
}  // namespace ms
