// CudaBackend with several sequence states (Options::n_seq, serve's
// --parallel): forward_seqs runs many sequences' tokens in one pass and every
// sequence gets what it gets alone.
//
// The reference is each sequence run alone (its prompt in one forward, then
// greedy decode steps) on a backend of one state. The multi-sequence run goes
// in lockstep: each sequence is fed the reference's tokens (prompts joining
// mid-run beside other sequences' decode steps, sequences leaving and their
// states reused), and after every step its logits must be those of the
// reference within a tolerance and pick the same token, unless the
// reference's two candidates are a near-tie. Tolerances: f32 weights and an
// f32 cache differ only by float reassociation (the batch path's tensor-core
// projections against the decode path's matvecs: backend_qwen35_test.cpp's
// PrefillMatchesTokenByToken bound); f16 and quantized weights and the f16
// cache round the activations differently on the two paths
// (backend_forward_test.cpp's bound).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "cuda_test_util.h"
#include "format/gguf.h"
#include "model/hparams.h"
#include "model/tensor_roles.h"
#include "tiny_models.h"
#include "util/error.h"

namespace ms::cuda::test {
namespace {

constexpr int kCtx = 96;

struct Tol {
  double rel;  // max |got - ref| / rms(ref)
  double tie;  // a different pick is allowed only within this margin x rms(ref)
};
constexpr Tol kExact{1e-3, 2e-3};  // f32 weights, f32 cache
constexpr Tol kRounded{0.05, 0.02};

double rms(const float* v, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(v[i]) * v[i];
  return n > 0 ? std::sqrt(s / double(n)) : 0;
}

// One sequence of a scenario: its prompt, how many decode steps it makes,
// and the step at which it joins (its prompt runs then, beside the others).
struct Seq {
  std::vector<int32_t> prompt;
  int steps = 0;
  int join = 0;
};

// The reference: logits after the prompt and after each of `steps` greedy
// decode steps ([steps + 1][V]), alone in a fresh cache.
std::vector<std::vector<float>> alone(CudaBackend& be, const Seq& s, KvType kt) {
  KvCache kv = be.make_cache(kCtx, kt);
  std::vector<std::vector<float>> out(1);
  be.forward(kv, s.prompt, out[0]);
  const auto V = static_cast<int32_t>(be.config().n_vocab);
  for (int i = 0; i < s.steps; ++i) {
    const int32_t next = argmax(out.back().data(), V);
    out.emplace_back();
    be.forward(kv, std::span<const int32_t>(&next, 1), out.back());
  }
  return out;
}

// Runs the scenario through forward_seqs on `be` (lockstep with `ref`, see
// the header comment); returns how many picks matched exactly.
int run_together(CudaBackend& be, const std::vector<Seq>& seqs, const std::vector<std::vector<std::vector<float>>>& ref,
                 KvType kt, Tol tol, const std::string& what) {
  const int64_t V = be.config().n_vocab;
  const size_t n = seqs.size();
  std::vector<std::optional<KvCache>> kv(n);
  std::vector<int> done(n, -1);  // decode steps made (-1: not joined)
  std::vector<int32_t> fed(n);
  int same = 0;
  for (int step = 0;; ++step) {
    std::vector<SeqTokens> entries;
    std::vector<size_t> who;
    bool any_left = false;
    for (size_t i = 0; i < n; ++i) {
      if (done[i] >= seqs[i].steps) continue;
      any_left = true;
      if (done[i] < 0 && step != seqs[i].join) continue;
      if (done[i] < 0) {
        kv[i].emplace(be.make_cache(kCtx, kt));  // joins: a free state (one that left is reused)
        entries.push_back({&*kv[i], seqs[i].prompt, true});
      } else {
        fed[i] = argmax(ref[i][static_cast<size_t>(done[i])].data(), static_cast<int32_t>(V));
        entries.push_back({&*kv[i], std::span<const int32_t>(&fed[i], 1), true});
      }
      who.push_back(i);
    }
    if (!any_left) break;
    if (entries.empty()) continue;
    std::vector<float> logits;
    be.forward_seqs(entries, logits);
    EXPECT_EQ(logits.size(), entries.size() * static_cast<size_t>(V)) << what;
    if (logits.size() != entries.size() * static_cast<size_t>(V)) return same;
    for (size_t e = 0; e < who.size(); ++e) {
      const size_t i = who[e];
      ++done[i];
      const std::vector<float>& r = ref[i][static_cast<size_t>(done[i])];
      const float* g = logits.data() + e * static_cast<size_t>(V);
      const double scale = rms(r.data(), V);
      double worst = 0;
      for (int64_t t = 0; t < V; ++t) worst = std::max(worst, std::fabs(double(g[t]) - r[static_cast<size_t>(t)]));
      EXPECT_LE(worst / scale, tol.rel) << what << ": sequence " << i << " step " << done[i] << " (pass step " << step
                                        << ", " << entries.size() << " entries)";
      const int32_t a = argmax(r.data(), static_cast<int32_t>(V)), b = argmax(g, static_cast<int32_t>(V));
      if (a == b) {
        ++same;
      } else {
        const double margin = (r[static_cast<size_t>(a)] - r[static_cast<size_t>(b)]) / scale;
        std::printf("[ %s ] sequence %zu step %d: picks %d not %d, reference margin %.5f x rms\n", what.c_str(), i,
                    done[i], b, a, margin);
        EXPECT_LE(margin, tol.tie) << what << ": sequence " << i << " step " << done[i] << " with a clear margin";
      }
      if (done[i] >= seqs[i].steps) kv[i].reset();  // leaves: its state goes back
    }
  }
  return same;
}

// A scenario over `n` sequences of different prompt lengths (1 to 40
// tokens: single-token prompts, chunks below and above the tensor-core
// threshold), all joining at step 0, then a second wave joining while the
// first decodes (prompt chunks beside decode steps), reusing the states of
// those that left.
std::vector<Seq> scenario(int n, int64_t V, uint32_t seed) {
  static const int kLens[] = {7, 1, 23, 3, 40, 12, 2, 17, 5, 31, 9, 1, 19, 4, 26, 11};
  std::vector<Seq> s;
  for (int i = 0; i < n; ++i) {
    Seq q;
    q.prompt = some_tokens(kLens[i % 16], V, seed + static_cast<uint32_t>(i));
    q.steps = 4 + (i * 3) % 7;
    q.join = 0;
    s.push_back(q);
  }
  // Second wave: as many as half the states, joining when the first of the
  // first wave have left (4 steps in) and at a later step.
  for (int i = 0; i < std::max(1, n / 2); ++i) {
    Seq q;
    q.prompt = some_tokens(kLens[(i * 5 + 3) % 16], V, seed + 100 + static_cast<uint32_t>(i));
    q.steps = 3 + i % 4;
    q.join = 5 + 2 * (i % 2);
    s.push_back(q);
  }
  return s;
}

// States the scenario needs at once: sequences live at each step.
int peak_live(const std::vector<Seq>& s) {
  int peak = 0;
  for (int step = 0; step < 64; ++step) {
    int live = 0;
    for (const Seq& q : s)
      if (step >= q.join && step <= q.join + q.steps) ++live;
    peak = std::max(peak, live);
  }
  return peak;
}

CudaBackend::Options options(KvType kt, int n_seq, uint64_t budget = 0, int max_batch = 0) {
  CudaBackend::Options o;
  o.ctx = kCtx;
  o.n_seq = n_seq;
  o.kv_f32 = kt == KvType::F32;
  o.kv_type = kt;
  o.max_batch = max_batch;
  if (budget > 0) {
    o.vram_budget = budget;
    o.tiered.pool = &pool();
  } else {
    o.vram_full = true;
  }
  return o;
}

struct Case {
  const char* arch;
  const char* quant;
  bool kv_f32;
};

class MultiSeq : public ::testing::TestWithParam<Case> {};

// All-resident: 2, 5 and 16 sequences together, and passes of 16 tokens
// (max_batch: entries split across passes) against each sequence alone.
TEST_P(MultiSeq, EachSequenceGetsWhatItGetsAlone) {
  MS_REQUIRE_GPU();
  const Case& c = GetParam();
  const LoadedModel& m = tiny_model(c.arch, c.quant);
  const KvType kt = c.kv_f32 ? KvType::F32 : KvType::F16;
  const Tol tol = c.kv_f32 && std::string(c.quant) == "f32" ? kExact : kRounded;
  CudaBackend one(m.weights, options(kt, 1));
  for (int n : {2, 5, 16}) {
    const std::vector<Seq> seqs = scenario(n, m.weights.cfg.n_vocab, 11 * static_cast<uint32_t>(n));
    std::vector<std::vector<std::vector<float>>> ref;
    int steps = 0;
    for (const Seq& s : seqs) {
      ref.push_back(alone(one, s, kt));
      steps += s.steps + 1;
    }
    for (int max_batch : {0, 16}) {
      const std::string what = std::string(c.arch) + " " + c.quant + (c.kv_f32 ? " kv f32" : " kv f16") + ", " +
                               std::to_string(n) + " sequences, max_batch " + std::to_string(max_batch);
      CudaBackend be(m.weights, options(kt, peak_live(seqs), 0, max_batch));
      EXPECT_EQ(be.max_sequences(), peak_live(seqs));
      const int same = run_together(be, seqs, ref, kt, tol, what);
      std::printf("[ %s ] %d of %d picks identical\n", what.c_str(), same, steps);
      EXPECT_GE(same, steps - steps / 10) << what;
    }
  }
}

// Tiered experts (--vram below the model): the multi-sequence passes stream
// and compute the experts for all their tokens at once; each sequence still
// gets what it gets alone at the same budget.
TEST_P(MultiSeq, TieredBudgetsGiveEachSequenceWhatItGetsAlone) {
  MS_REQUIRE_GPU();
  const Case& c = GetParam();
  const LoadedModel& m = tiny_model(c.arch, c.quant);
  const KvType kt = c.kv_f32 ? KvType::F32 : KvType::F16;
  const Tol tol = c.kv_f32 && std::string(c.quant) == "f32" ? kExact : kRounded;
  const int n = 6;
  const std::vector<Seq> seqs = scenario(n, m.weights.cfg.n_vocab, 5);
  const int ns = peak_live(seqs);
  const ModelHParams hp = inspect_hparams(*m.file);
  const VramPlan p = vram_needs(split_weights(*m.file), hp, static_cast<int64_t>(kCtx) * ns, kv_bytes_per_32(kt));
  const uint64_t rec = hp.recurrent_state_bytes() * static_cast<uint64_t>(ns);
  const uint64_t experts = p.everything_bytes - p.minimum_bytes;
  for (uint64_t budget : {p.minimum_bytes + rec, p.minimum_bytes + rec + experts / 2}) {
    const std::string what = std::string(c.arch) + " " + c.quant + " budget " + std::to_string(budget >> 10) + " KiB";
    CudaBackend one(m.weights, options(kt, 1, budget));
    CudaBackend be(m.weights, options(kt, ns, budget));
    ASSERT_TRUE(be.expert_telemetry().hybrid) << what;
    std::vector<std::vector<std::vector<float>>> ref;
    int steps = 0;
    for (const Seq& s : seqs) {
      ref.push_back(alone(one, s, kt));
      steps += s.steps + 1;
    }
    const int same = run_together(be, seqs, ref, kt, tol, what);
    std::printf("[ %s ] %d of %d picks identical\n", what.c_str(), same, steps);
    EXPECT_GE(same, steps - steps / 10) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, MultiSeq,
                         ::testing::Values(Case{"qwen3moe", "f32", true}, Case{"qwen3moe", "f16", false},
                                           Case{"qwen35moe", "f32", true}, Case{"qwen35moe", "f16", false},
                                           Case{"gpt-oss", "f32", true}, Case{"gpt-oss", "f16", false}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string a = i.param.arch;
                           for (char& ch : a)
                             if (ch == '-') ch = '_';
                           return a + "_" + i.param.quant + (i.param.kv_f32 ? "_kvf32" : "_kvf16");
                         });

// Steps of one token per sequence (all experts resident) replay a graph
// captured for their shape: the same bits as direct launches, one capture
// while the shape holds, another when a sequence leaves.
TEST(MultiSeqGraph, DecodeStepsReplayWithTheDirectLaunchesBits) {
  MS_REQUIRE_GPU();
  for (const char* arch : {"qwen3moe", "qwen35moe", "gpt-oss"}) {
    const LoadedModel& m = tiny_model(arch, "f16");
    const auto V = static_cast<int32_t>(m.weights.cfg.n_vocab);
    CudaBackend::Options with = options(KvType::F16, 4), without = with;
    without.use_graph = false;
    CudaBackend g(m.weights, with), d(m.weights, without);
    std::vector<KvCache> kg, kd;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 4; ++i) {
      prompts.push_back(some_tokens(3 + 5 * i, V, 70 + static_cast<uint32_t>(i)));
      kg.push_back(g.make_cache(kCtx));
      kd.push_back(d.make_cache(kCtx));
    }
    auto step = [&](int live, const std::vector<std::vector<int32_t>>& toks, std::vector<float>& lg,
                    std::vector<float>& ld) {
      std::vector<SeqTokens> eg, ed;
      for (int i = 0; i < live; ++i) {
        eg.push_back({&kg[static_cast<size_t>(i)], toks[static_cast<size_t>(i)], true});
        ed.push_back({&kd[static_cast<size_t>(i)], toks[static_cast<size_t>(i)], true});
      }
      g.forward_seqs(eg, lg);
      d.forward_seqs(ed, ld);
    };
    std::vector<float> lg, ld;
    step(4, prompts, lg, ld);
    ASSERT_EQ(lg, ld) << arch << ": the prompts";
    const int before = g.graph_captures();
    for (int s = 0; s < 12; ++s) {
      const int live = s < 6 ? 4 : 3;  // the last sequence leaves after 6 steps
      std::vector<std::vector<int32_t>> next;
      for (int i = 0; i < live; ++i) next.push_back({argmax(ld.data() + static_cast<size_t>(i) * V, V)});
      step(live, next, lg, ld);
      ASSERT_EQ(lg, ld) << arch << ": decode step " << s;
    }
    EXPECT_EQ(g.graph_captures() - before, 2) << arch << ": one capture per shape (4 sequences, then 3)";
    EXPECT_EQ(d.graph_captures(), 0) << arch;
  }
}

// Every state taken: make_cache says so; one going back frees it for the
// next; a copied cache holds no state and is refused.
TEST(MultiSeqSlots, ExhaustionCopiesAndReuse) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model("qwen3moe", "f16");
  CudaBackend be(m.weights, options(KvType::F16, 2));
  EXPECT_EQ(be.max_sequences(), 2);
  std::optional<KvCache> a(be.make_cache(kCtx));
  KvCache b = be.make_cache(kCtx);
  EXPECT_NE(a->device_slot(), b.device_slot());
  try {
    (void)be.make_cache(kCtx);
    ADD_FAILURE() << "a third cache of two states";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds 2 sequences (--parallel 2); all are in use"), std::string::npos)
        << e.what();
  }
  const KvCache copy = b;
  EXPECT_EQ(copy.device_slot(), -1);
  KvCache copied = copy;
  std::vector<float> logits;
  const std::vector<int32_t> prompt = some_tokens(5, m.weights.cfg.n_vocab, 3);
  EXPECT_THROW(be.forward(copied, prompt, logits), Error);
  // Two entries on one cache, and more entries than states: refused before anything runs.
  const SeqTokens twice[] = {{&b, prompt, true}, {&b, prompt, true}};
  EXPECT_THROW(be.forward_seqs(twice, logits), Error);
  EXPECT_EQ(b.n_past(), 0);
  a.reset();
  KvCache c = be.make_cache(kCtx);  // the state `a` gave back
  EXPECT_GE(c.device_slot(), 0);
  const SeqTokens both[] = {{&b, prompt, true}, {&c, prompt, false}};
  be.forward_seqs(both, logits);
  EXPECT_EQ(logits.size(), static_cast<size_t>(m.weights.cfg.n_vocab));
  EXPECT_EQ(b.n_past(), 5);
  EXPECT_EQ(c.n_past(), 5);
}

// One state (the default): every cache maps to it, as before; forward_seqs
// of one entry is forward(), of two it is an error naming --parallel.
TEST(MultiSeqSlots, OneStateKeepsTheSingleSequenceBehaviour) {
  MS_REQUIRE_GPU();
  const LoadedModel& m = tiny_model("qwen3moe", "f16");
  CudaBackend be(m.weights, options(KvType::F16, 1));
  EXPECT_EQ(be.max_sequences(), 1);
  const std::vector<int32_t> prompt = some_tokens(9, m.weights.cfg.n_vocab, 8);
  std::vector<float> direct, seqs;
  KvCache a = be.make_cache(kCtx), b = be.make_cache(kCtx);  // both map to the one state
  be.forward(a, prompt, direct);
  const SeqTokens one[] = {{&b, prompt, true}};
  be.forward_seqs(one, seqs);
  EXPECT_EQ(seqs, direct);
  const SeqTokens two[] = {{&a, prompt, true}, {&b, prompt, true}};
  try {
    be.forward_seqs(two, seqs);
    ADD_FAILURE() << "two sequences on one state";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--parallel 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ms::cuda::test
