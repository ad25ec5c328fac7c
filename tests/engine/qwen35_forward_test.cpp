// The qwen35moe (Qwen3.5/3.6-MoE) forward pass on the CPU: against the plain
// reference of ref_model.h (Gated DeltaNet as the Hugging Face recurrence
// writes it, gated attention, partial RoPE, shared expert), prompts of every
// length around the chunk edge (1, 63, 64, 65) against token by token, state
// carried across batches and into decode, several sequences in one decode
// step, and the rules of a recurrent state (no rewinding, clear resets).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/loaded_model.h"
#include "engine/synthetic_model.h"
#include "format/gguf.h"
#include "model/hparams.h"
#include "model/tensor_roles.h"
#include "forward_ref_util.h"
#include "ref_model.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;
using test::rel_rms;

// Tiny qwen35moe models, generated once per run.
const std::string& model_path(const std::string& quant, const std::string& layout = "stacked") {
  static std::map<std::string, std::string> paths;
  static const fs::path dir = fs::temp_directory_path() / ("moestream_q35_test_" + std::to_string(::getpid()));
  static struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup;
  const std::string key = quant + "-" + layout;
  if (auto it = paths.find(key); it != paths.end()) return it->second;
  fs::create_directories(dir);
  ThreadPool pool(2);
  GenOptions o;
  o.arch = "qwen35moe";
  o.preset = "tiny";
  o.quant = quant;
  o.layout = layout;
  o.seed = 11;
  const std::string p = (dir / (key + ".gguf")).string();
  generate_model(o, p, pool);
  return paths[key] = p;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

std::vector<int32_t> random_prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>(rng() % 509));
  return p;
}

TEST(Qwen35Forward, ConfigAndWeights) {
  auto m = LoadedModel::open(model_path("f32"));
  const ModelConfig& c = m->weights.cfg;
  EXPECT_EQ(c.n_layer, 4) << "block_count 5 less the MTP block";
  EXPECT_EQ(c.n_layer_mtp, 1);
  EXPECT_EQ(c.linear_layer, (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(c.n_rot, 16) << "partial RoPE: a quarter of the head";
  EXPECT_EQ(c.lin.conv_dim(), 2 * 2 * 32 + 4 * 32);
  EXPECT_EQ(c.n_ff_shexp, 256);
  ASSERT_EQ(m->weights.mtp.size(), 1u);
  EXPECT_TRUE(m->weights.mtp[0].eh_proj);
  EXPECT_EQ(m->weights.mtp[0].layer.experts.n_expert, 16);
  EXPECT_TRUE(m->weights.layers[0].ssm_qkv);
  EXPECT_FALSE(m->weights.layers[0].wq);
  EXPECT_EQ(m->weights.layers[3].wq.rows, 2 * 4 * 64) << "q and its output gate";
  EXPECT_TRUE(m->weights.layers[3].shexp_router);
}

TEST(Qwen35Forward, F32MatchesReference) {
  auto m = LoadedModel::open(model_path("f32"));
  ThreadPool pool(2);
  CpuBackend be(m->weights, pool);
  KvCache kv = be.make_cache(64, KvType::F32);
  testref::RefModel ref(*m->file);
  std::vector<float> logits;
  double worst = 0;
  for (int32_t t : random_prompt(20, 3)) {
    be.forward(kv, std::span<const int32_t>(&t, 1), logits);
    worst = std::max(worst, rel_rms(logits.data(), ref.step(t)));
  }
  EXPECT_LT(worst, 1e-4);
}

TEST(Qwen35Forward, QuantizedPrefillMatchesReference) {
  // A whole prompt at once (the chunked delta rule) against the reference
  // run token by token; quantized activations: the median is the check.
  auto m = LoadedModel::open(model_path("q4_k_m"));
  ThreadPool pool(2);
  CpuBackend be(m->weights, pool);
  KvCache kv = be.make_cache(128);
  testref::RefModel ref(*m->file);
  const auto prompt = random_prompt(70, 4);
  std::vector<float> all;
  be.forward(kv, prompt, all, /*all_logits=*/true);
  std::vector<double> err;
  const int64_t V = m->weights.cfg.n_vocab;
  for (size_t i = 0; i < prompt.size(); ++i) err.push_back(rel_rms(all.data() + i * V, ref.step(prompt[i])));
  std::sort(err.begin(), err.end());
  EXPECT_LT(err[err.size() / 2], 3e-2);
}

// Prompts of 1, 63, 64, 65 tokens (the chunk edges of kDeltaChunk = 64) and
// 130, as one batch and as batches of 16 (the state carried between them),
// give the logits of the same tokens fed one by one; then three decode steps
// continue both the same way. F32 weights: with quantized activations a
// router near-tie can flip an expert between the batched and the one-token
// kernels, and the recurrent state carries that difference on (a property of
// quantization, checked by QuantizedPrefillMatchesReference's median).
TEST(Qwen35Forward, ChunkEdgesAndDecodeEqualTokenByToken) {
  auto m = LoadedModel::open(model_path("f32"));
  ThreadPool pool(2);
  const int64_t V = m->weights.cfg.n_vocab;
  CpuBackend one(m->weights, pool);
  CpuBackend::Options small;
  small.max_batch = 16;
  CpuBackend split(m->weights, pool, small);
  for (int n : {1, 63, 64, 65, 130}) {
    const auto prompt = random_prompt(n, 100 + n);
    KvCache kv1 = one.make_cache(160), kv2 = one.make_cache(160), kv3 = split.make_cache(160);
    std::vector<float> step, by_token, whole, pieces;
    for (int32_t t : prompt) {
      one.forward(kv1, std::span<const int32_t>(&t, 1), step);
      by_token.insert(by_token.end(), step.begin(), step.end());
    }
    one.forward(kv2, prompt, whole, true);
    split.forward(kv3, prompt, pieces, true);
    ASSERT_EQ(whole.size(), by_token.size());
    EXPECT_LT(max_abs_diff(whole, by_token), 2e-4) << n;
    EXPECT_LT(max_abs_diff(pieces, by_token), 2e-4) << n;
    for (int32_t next : {7, 300, 42}) {
      std::vector<float> a, b, c;
      one.forward(kv1, std::span<const int32_t>(&next, 1), a);
      one.forward(kv2, std::span<const int32_t>(&next, 1), b);
      split.forward(kv3, std::span<const int32_t>(&next, 1), c);
      EXPECT_LT(max_abs_diff(b, a), 2e-4) << n << " decode";
      EXPECT_LT(max_abs_diff(c, a), 2e-4) << n << " decode";
    }
    ASSERT_EQ(static_cast<int64_t>(by_token.size()), n * V);
  }
}

TEST(Qwen35Forward, PromptThenPromptContinuesTheState) {
  // A second prompt chunk (a chat turn) after a first one equals one prompt.
  auto m = LoadedModel::open(model_path("f32"));
  ThreadPool pool(2);
  CpuBackend be(m->weights, pool);
  const auto p = random_prompt(90, 9);
  KvCache a = be.make_cache(128), b = be.make_cache(128);
  std::vector<float> la, lb;
  be.forward(a, p, la);
  be.forward(b, std::span<const int32_t>(p.data(), 40), lb);
  be.forward(b, std::span<const int32_t>(p.data() + 40, 50), lb);
  EXPECT_LT(max_abs_diff(la, lb), 1e-4);
}

TEST(Qwen35Forward, MultiSequenceDecodeEqualsEachAlone) {
  auto m = LoadedModel::open(model_path("q4_k_m"));
  ThreadPool pool(2);
  CpuBackend be(m->weights, pool);
  std::vector<KvCache> alone, together;
  std::vector<float> logits;
  for (int i = 0; i < 3; ++i) {
    const auto prompt = random_prompt(5 + 7 * i, 20 + i);
    alone.push_back(be.make_cache(64));
    together.push_back(be.make_cache(64));
    be.forward(alone.back(), prompt, logits);
    be.forward(together.back(), prompt, logits);
  }
  const std::vector<int32_t> next = {11, 222, 333};
  std::vector<KvCache*> ptrs = {&together[0], &together[1], &together[2]};
  std::vector<float> multi;
  be.forward_multi(ptrs, next, multi);
  const int64_t V = m->weights.cfg.n_vocab;
  for (int i = 0; i < 3; ++i) {
    be.forward(alone[static_cast<size_t>(i)], std::span<const int32_t>(&next[static_cast<size_t>(i)], 1), logits);
    std::vector<float> mine(multi.begin() + i * V, multi.begin() + (i + 1) * V);
    EXPECT_LT(max_abs_diff(mine, logits), 1e-4) << i;
  }
}

TEST(Qwen35Forward, RecurrentCacheCannotRewindButClearResets) {
  auto m = LoadedModel::open(model_path("f32"));
  ThreadPool pool(2);
  CpuBackend be(m->weights, pool);
  KvCache kv = be.make_cache(64);
  EXPECT_TRUE(kv.has_recurrent());
  EXPECT_TRUE(kv.is_recurrent(0));
  EXPECT_FALSE(kv.is_recurrent(3));
  EXPECT_THROW(kv.k_f16(0), Error) << "a linear layer has no keys";
  const auto p = random_prompt(10, 5);
  std::vector<float> first, again;
  be.forward(kv, p, first);
  EXPECT_FALSE(kv.can_truncate_to(4));
  EXPECT_TRUE(kv.can_truncate_to(10));
  EXPECT_TRUE(kv.can_truncate_to(0));
  EXPECT_THROW(kv.truncate(4), Error);
  kv.truncate(10);
  EXPECT_EQ(kv.n_past(), 10);
  kv.clear();
  be.forward(kv, p, again);
  EXPECT_EQ(first, again) << "a cleared state starts from zero";
}

// The VRAM plan (what --vram and the CUDA backend's tiers go by): the shared
// expert and the Gated DeltaNet tensors are dense bytes (always resident),
// only ffn_*_exps are routed-expert bytes, 16 experts a layer (no expert
// count assumed), and the sequence state counts the recurrent layers' state
// beside the one attention layer's K/V.
TEST(Qwen35Forward, VramPlanCountsTheSharedExpertAsDense) {
  auto m = LoadedModel::open(model_path("q4_k_m"));
  const WeightSplit split = split_weights(*m->file);
  uint64_t shared = 0, routed = 0, all = 0;
  for (const GgufTensorInfo& t : m->file->tensors()) {
    all += t.nbytes;
    if (t.name.find("_shexp") != std::string::npos) shared += t.nbytes;
    if (t.name.find("_exps.") != std::string::npos) routed += t.nbytes;
  }
  EXPECT_GT(shared, 0u);
  EXPECT_EQ(split.expert_bytes, routed) << "only routed experts are tiered";
  EXPECT_EQ(split.dense_bytes, all - routed) << "the shared expert, DeltaNet and MTP tensors are dense";
  ASSERT_GE(split.layers.size(), 4u);
  for (int il = 0; il < 4; ++il) {
    EXPECT_EQ(split.layers[static_cast<size_t>(il)].n_expert, 16) << "layer " << il;
    EXPECT_GT(split.layers[static_cast<size_t>(il)].dense_bytes, 0u) << "layer " << il;
  }
  const ModelHParams hp = inspect_hparams(*m->file);
  const VramPlan v = vram_needs(split, hp, 128);
  EXPECT_EQ(v.dense_bytes, split.dense_bytes);
  // One attention layer of 2 KV heads of 64 (K and V, f16) + 3 recurrent layers' f32 state.
  const uint64_t kv = 128ull * 2 * (64 + 64) * 2;
  const uint64_t rec = 3ull * 4 * ((4 - 1) * (2 * 2 * 32 + 4 * 32) + 4 * 32 * 32);
  EXPECT_EQ(v.kv_bytes, kv + rec);
  EXPECT_EQ(v.everything_bytes - v.minimum_bytes, split.expert_bytes);
}

TEST(Qwen35Forward, MissingDeltaNetTensorIsNamed) {
  // Drop one Gated DeltaNet tensor from a copy of the tiny model.
  const std::string src = model_path("f32");
  auto f = GgufFile::open(src);
  const std::string path = (fs::temp_directory_path() / ("q35_missing_" + std::to_string(::getpid()) + ".gguf")).string();
  {
    GgufWriter w(path);
    for (const auto& [k, v] : f->metadata()) w.set(k, v);
    for (const GgufTensorInfo& t : f->tensors())
      if (t.name != "blk.1.ssm_a") w.add_tensor(t.name, t.type, t.shape);
    w.write_header();
    for (const GgufTensorInfo& t : f->tensors())
      if (t.name != "blk.1.ssm_a") w.write_tensor_data(t.data, t.nbytes);
    w.finish();
  }
  try {
    LoadedModel::open(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.1.ssm_a"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

}  // namespace
}  // namespace ms
