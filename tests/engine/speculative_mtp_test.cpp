// The MTP drafter (engine/speculative_mtp.h) on the tiny qwen35moe, which
// carries one MTP block: the CPU backend's hidden states and MTP forward
// against a float64 reference computed from the file's tensors (ref_model.h),
// greedy output with `--spec mtp` identical to plain decoding for K = 1..8,
// the block's cache after a run equal to one built fresh from the kept
// sequence (the chained draft entries rolled back), the block following the
// target back when it is truncated, and a model without an MTP block refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/generate.h"
#include "engine/loaded_model.h"
#include "engine/speculative.h"
#include "engine/speculative_mtp.h"
#include "forward_ref_util.h"
#include "ref_model.h"
#include "tiny_gguf.h"
#include "util/error.h"

namespace ms {
namespace {

using test::rel_rms;

struct Tiny {
  std::unique_ptr<LoadedModel> m;
  ThreadPool pool{2};
  std::unique_ptr<CpuBackend> be;
  Tiny(const std::string& arch, const std::string& quant) : m(LoadedModel::open(test::tiny_gguf(arch, quant, 41))) {
    be = std::make_unique<CpuBackend>(m->weights, pool);
  }
};

// The hidden rows a forward of `tokens` from position 0 hands the hook.
std::vector<float> hidden_of(Backend& be, KvCache& kv, const std::vector<int32_t>& tokens) {
  std::vector<float> rows, logits;
  be.set_hidden_hook([&](const HiddenEvent& e) {
    EXPECT_EQ(e.kv, &kv);
    EXPECT_EQ(e.pos0 * be.config().n_embd, static_cast<int64_t>(rows.size()));
    rows.insert(rows.end(), e.rows, e.rows + e.n * be.config().n_embd);
  });
  be.forward(kv, tokens, logits);
  be.set_hidden_hook(nullptr);
  return rows;
}

// The MTP block of the file in float64, pair by pair, with its own K/V.
struct RefMtp {
  testref::RefModel& r;
  testref::RefModel::Layer L;
  testref::Mat eh, enorm, hnorm, head_norm;
  std::vector<std::vector<double>> K, V;
  RefMtp(testref::RefModel& ref, const GgufFile& f) : r(ref), L(ref.load_layer(f, ref.n_layer)) {
    const std::string b = "blk." + std::to_string(ref.n_layer) + ".nextn.";
    eh = testref::load(f, b + "eh_proj.weight");
    enorm = testref::load(f, b + "enorm.weight");
    hnorm = testref::load(f, b + "hnorm.weight");
    head_norm = f.find_tensor(b + "shared_head_norm.weight") ? testref::load(f, b + "shared_head_norm.weight")
                                                             : ref.out_norm;
  }
  // (hidden of token p, token p + 1) at position p = the pairs so far;
  // returns the logits, `state` the block's output state.
  std::vector<double> step(const std::vector<double>& hidden, int32_t next, std::vector<double>& state) {
    const int64_t D = r.D;
    std::vector<double> e(r.embd.w.begin() + next * D, r.embd.w.begin() + (next + 1) * D);
    std::vector<double> in = testref::norm(e, enorm, r.eps);
    const std::vector<double> hn = testref::norm(hidden, hnorm, r.eps);
    in.insert(in.end(), hn.begin(), hn.end());
    std::vector<double> h = testref::mul(eh, in);
    const auto o = r.attend(L, K, V, testref::norm(h, L.attn_norm, r.eps), static_cast<int64_t>(K.size()));
    for (int64_t i = 0; i < D; ++i) h[i] += o[i];
    r.moe_ffn(L, h);
    state = testref::norm(h, head_norm, r.eps);
    return testref::mul(r.out, state);
  }
};

TEST(MtpForward, HiddenStatesAndBlockMatchTheReference) {
  Tiny t("qwen35moe", "f32");
  ASSERT_EQ(t.m->weights.mtp.size(), 1u);
  ASSERT_TRUE(t.be->supports_mtp());
  const int64_t D = t.m->weights.cfg.n_embd;
  testref::RefModel ref(*t.m->file);
  RefMtp mref(ref, *t.m->file);
  const std::vector<int32_t> prompt = test::random_tokens(13, 5);
  std::vector<std::vector<double>> ref_hidden;
  for (int32_t tok : prompt) {
    ref.step(tok);
    ref_hidden.push_back(ref.last_hidden);
  }
  KvCache kv = t.be->make_cache(64, KvType::F32);
  const std::vector<float> rows = hidden_of(*t.be, kv, prompt);
  ASSERT_EQ(rows.size(), prompt.size() * static_cast<size_t>(D));
  for (size_t p = 0; p < prompt.size(); ++p)
    EXPECT_LT(rel_rms(rows.data() + p * D, ref_hidden[p]), 1e-4) << "hidden state of position " << p;

  // Pairs 0..n-2 in one batch, and one by one in a second cache: each row's
  // logits and state against the reference's.
  const size_t n = prompt.size() - 1;
  std::vector<std::vector<double>> ref_logits, ref_state(n + 1);
  for (size_t p = 0; p < n; ++p) ref_logits.push_back(mref.step(ref_hidden[p], prompt[p + 1], ref_state[p]));
  KvCache batch = t.be->make_mtp_cache(64, KvType::F32), single = t.be->make_mtp_cache(64, KvType::F32);
  std::vector<float> logits, state;
  t.be->forward_mtp(batch, std::span<const float>(rows.data(), n * D),
                    std::span<const int32_t>(prompt.data() + 1, n), logits, state);
  EXPECT_EQ(batch.n_past(), static_cast<int64_t>(n));
  EXPECT_LT(rel_rms(logits.data(), ref_logits.back()), 1e-4);
  EXPECT_LT(rel_rms(state.data(), ref_state[n - 1]), 1e-4);
  for (size_t p = 0; p < n; ++p) {
    t.be->forward_mtp(single, std::span<const float>(rows.data() + p * D, D),
                      std::span<const int32_t>(prompt.data() + p + 1, 1), logits, state);
    EXPECT_LT(rel_rms(logits.data(), ref_logits[p]), 1e-4) << "pair " << p;
  }
  // A chained step: the block's own state and a drafted token.
  const int32_t drafted = 77;
  const std::vector<float> own = state;
  const auto ref_chain = mref.step(ref_state[n - 1], drafted, ref_state[n]);
  t.be->forward_mtp(single, own, std::span<const int32_t>(&drafted, 1), logits, state);
  EXPECT_LT(rel_rms(logits.data(), ref_chain), 1e-4);
  EXPECT_LT(rel_rms(state.data(), ref_state[n]), 1e-4);
}

TEST(MtpForward, BadInputsAreErrors) {
  Tiny t("qwen35moe", "q8_0");
  KvCache mkv = t.be->make_mtp_cache(4);
  const int64_t D = t.m->weights.cfg.n_embd;
  std::vector<float> h(static_cast<size_t>(D), 0.5f), logits, state;
  const int32_t ok[1] = {3}, bad[1] = {1 << 20};
  EXPECT_THROW(t.be->forward_mtp(mkv, h, bad, logits, state), Error);
  EXPECT_THROW(t.be->forward_mtp(mkv, std::span<const float>(h.data(), 3), ok, logits, state), Error);
  KvCache target = t.be->make_cache(4);
  EXPECT_THROW(t.be->forward_mtp(target, h, ok, logits, state), Error) << "a main-stack cache";
  for (int i = 0; i < 4; ++i) t.be->forward_mtp(mkv, h, ok, logits, state);
  EXPECT_THROW(t.be->forward_mtp(mkv, h, ok, logits, state), Error) << "full";
}

TEST(MtpDrafter, RefusedWithoutAnMtpBlock) {
  Tiny t("qwen3moe", "q8_0");
  EXPECT_FALSE(t.be->supports_mtp());
  KvCache kv = t.be->make_cache(32);
  try {
    MtpDrafter d(*t.be, kv);
    FAIL() << "accepted a model without an MTP block";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no MTP block"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_draft_choice("mtp").kind, DraftChoice::Kind::Mtp);
  EXPECT_EQ(parse_draft_choice("mtp").describe(), "mtp");
}

// The largest difference of two F32 caches' K and V over positions [0, n)
// (rows of head_dim per KV head and position: [n_kv][ctx][head_dim]).
double max_kv_diff(const ModelConfig& c, const KvCache& a, const KvCache& b, int64_t n) {
  double worst = 0;
  for (int l = 0; l < a.n_layer(); ++l)
    for (int h = 0; h < c.n_head_kv; ++h)
      for (int64_t p = 0; p < n; ++p)
        for (int i = 0; i < c.head_dim; ++i) {
          const int64_t at = (h * a.ctx() + p) * c.head_dim + i;
          worst = std::max(worst, static_cast<double>(std::fabs(a.k_f32(l)[at] - b.k_f32(l)[at])));
          worst = std::max(worst, static_cast<double>(std::fabs(a.v_f32(l)[at] - b.v_f32(l)[at])));
        }
  return worst;
}

struct SpecRun {
  std::vector<int32_t> tokens;
  GenerateStats st;
  std::vector<float> next_logits;
};

SpecRun generate_with(Backend& be, const std::vector<int32_t>& prompt, int k, int n_predict, bool mtp,
                  std::vector<int32_t>* kept = nullptr, KvCache* mtp_cache_out = nullptr) {
  KvCache kv = be.make_cache(128, KvType::F32);
  std::unique_ptr<MtpDrafter> d;
  if (mtp) d = std::make_unique<MtpDrafter>(be, kv, KvType::F32);
  SamplerParams sp;
  sp.temperature = 0;
  Sampler sampler(sp);
  GenerateParams gp;
  gp.n_predict = n_predict;
  gp.stop_at_eog = false;
  gp.spec.drafter = d.get();
  gp.spec.control.draft_max = k;
  gp.spec.control.adaptive = false;
  SpecRun r;
  r.st = generate(be, kv, sampler, nullptr, prompt, gp, [&](int32_t id) {
    r.tokens.push_back(id);
    return true;
  });
  if (kept) {  // the sequence the cache holds
    *kept = prompt;
    kept->insert(kept->end(), r.tokens.begin(), r.tokens.end() - 1);
    EXPECT_EQ(kv.n_past(), static_cast<int64_t>(kept->size()));
  }
  if (mtp_cache_out) mtp_cache_out->copy_from(d->cache());
  const int32_t next[1] = {r.tokens.back()};
  be.forward(kv, next, r.next_logits);
  return r;
}

TEST(MtpSpec, GreedyOutputIsPlainDecodingsForEveryK) {
  Tiny t("qwen35moe", "q8_0");
  const std::vector<int32_t> prompt = test::random_tokens(12, 9);
  const SpecRun plain = generate_with(*t.be, prompt, 1, 40, false);
  for (int k = 1; k <= 8; ++k) {
    const SpecRun spec = generate_with(*t.be, prompt, k, 40, true);
    EXPECT_EQ(spec.tokens, plain.tokens) << "K = " << k;
    EXPECT_EQ(spec.next_logits, plain.next_logits) << "K = " << k << ": the cache goes on as plain decoding's";
    EXPECT_GT(spec.st.spec.verifies, 0) << "K = " << k;
    EXPECT_GT(spec.st.spec.drafted, 0) << "K = " << k;
  }
}

// After a run with chained drafts and rejections, the block's cache holds
// exactly what one catch-up pass over the kept sequence writes: entries made
// from drafted states were rolled back and rewritten from the target's.
TEST(MtpSpec, BlockCacheAfterARunIsAFreshOnesOfTheKeptSequence) {
  Tiny t("qwen35moe", "q8_0");
  const std::vector<int32_t> prompt = test::random_tokens(10, 4);
  std::vector<int32_t> kept;
  KvCache after = t.be->make_mtp_cache(128, KvType::F32);
  const SpecRun r = generate_with(*t.be, prompt, 5, 30, true, &kept, &after);
  ASSERT_GT(r.st.spec.verifies, 1);
  const int64_t m = after.n_past();
  ASSERT_GT(m, static_cast<int64_t>(prompt.size()));
  ASSERT_LE(m, static_cast<int64_t>(kept.size()));

  KvCache target = t.be->make_cache(128, KvType::F32);
  const std::vector<float> rows = hidden_of(*t.be, target, kept);
  const int64_t D = t.m->weights.cfg.n_embd;
  KvCache fresh = t.be->make_mtp_cache(128, KvType::F32);
  std::vector<float> logits, state;
  t.be->forward_mtp(fresh, std::span<const float>(rows.data(), static_cast<size_t>(m * D)),
                    std::span<const int32_t>(kept.data() + 1, static_cast<size_t>(m)), logits, state);
  EXPECT_LT(max_kv_diff(t.m->weights.cfg, after, fresh, m), 1e-4);
}

// The target truncated below what the block has read: the block goes back
// with it, and drafts as a drafter that only ever saw the new sequence.
TEST(MtpSpec, BlockFollowsTheTargetBack) {
  Tiny t("qwen35moe", "q8_0");
  std::vector<int32_t> seq = test::random_tokens(14, 8);
  KvCache kv = t.be->make_cache(64);
  MtpDrafter d(*t.be, kv);
  std::vector<float> logits;
  kv.set_checkpoints({16, kv.checkpoints().options().spacing});
  kv.keep_token_states();  // the DeltaNet state at every position, so the target can go back to 6
  t.be->forward(kv, std::span<const int32_t>(seq.data(), 10), logits);
  std::vector<int32_t> out;
  d.propose(std::span<const int32_t>(seq.data(), 11), 4, out);
  EXPECT_EQ(out.size(), 4u);
  EXPECT_EQ(d.cache().n_past(), 10) << "the chained entries are rolled back";
  kv.truncate(6);
  t.be->forward(kv, std::span<const int32_t>(seq.data() + 6, 2), logits);  // positions 6, 7 again
  EXPECT_EQ(d.cache().n_past(), 6);
  seq[8] = 123;  // a different continuation
  d.propose(std::span<const int32_t>(seq.data(), 9), 4, out);

  KvCache kv2 = t.be->make_cache(64);
  MtpDrafter d2(*t.be, kv2);  // replaces d's hook: d must not be used after this
  t.be->forward(kv2, std::span<const int32_t>(seq.data(), 8), logits);
  std::vector<int32_t> out2;
  d2.propose(std::span<const int32_t>(seq.data(), 9), 4, out2);
  EXPECT_EQ(out, out2);
  EXPECT_EQ(d2.passes(), 4) << "one catch-up pass, three chained";
}

// The sequence went on from position 10 with another token than the one the
// block read there: the entry that read it is recomputed (the drafts are a
// fresh drafter's), from the one hidden row kept behind the sequence's end.
TEST(MtpSpec, AnEntryWhoseTokenChangedIsRecomputed) {
  Tiny t("qwen35moe", "q8_0");
  std::vector<int32_t> seq = test::random_tokens(12, 13);
  KvCache kv = t.be->make_cache(64);
  KvCache after = t.be->make_mtp_cache(64, KvType::F32);
  std::vector<float> logits;
  std::vector<int32_t> out, out2;
  {
    MtpDrafter d(*t.be, kv, KvType::F32);
    t.be->forward(kv, std::span<const int32_t>(seq.data(), 10), logits);
    d.propose(std::span<const int32_t>(seq.data(), 11), 3, out);  // read x_10 = seq[10]
    seq[10] = (seq[10] + 1) % 500;
    t.be->forward(kv, std::span<const int32_t>(seq.data() + 10, 1), logits);  // another token at 10
    d.propose(std::span<const int32_t>(seq.data(), 12), 3, out);
    after.copy_from(d.cache());
  }
  KvCache kv2 = t.be->make_cache(64);
  MtpDrafter d2(*t.be, kv2, KvType::F32);
  t.be->forward(kv2, std::span<const int32_t>(seq.data(), 11), logits);
  d2.propose(std::span<const int32_t>(seq.data(), 12), 3, out2);
  EXPECT_EQ(out, out2);
  ASSERT_EQ(after.n_past(), d2.cache().n_past());
  EXPECT_LT(max_kv_diff(t.m->weights.cfg, after, d2.cache(), after.n_past()), 1e-4);
}

}  // namespace
}  // namespace ms
