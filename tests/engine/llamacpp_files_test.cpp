// GGUFs made by llama.cpp's own converter (tests/fixtures/llamacpp, made by
// tools/llamacpp_files.sh from tiny random Hugging Face checkpoints) load and
// run on the CPU, and their logits agree with Hugging Face's forward of the
// same checkpoint (every position of a fixed 16-token prompt). The
// checkpoints' weights are f16 values, so an f16 file holds exactly the
// reference's weights: what is left is arithmetic (f32 here, f32 there).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cpu_backend.h"
#include "engine/generate.h"
#include "engine/loaded_model.h"
#include "engine/sampler.h"
#include "util/error.h"

namespace ms {
namespace {

const std::string kDir = std::string(MS_SOURCE_DIR) + "/tests/fixtures/llamacpp/";

// The prompt of every fixture (hf_logits.json's "tokens").
const std::vector<int32_t> kTokens = {298, 221, 81, 85, 73, 67, 75, 221, 66, 281, 87, 78, 258, 79, 88, 221};
constexpr int64_t kVocab = 384;

std::vector<float> hf_logits(const std::string& model) {
  std::ifstream in(kDir + model + "-hf_logits.f32", std::ios::binary);
  std::vector<float> v(kTokens.size() * kVocab);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  EXPECT_TRUE(in.good()) << model << "-hf_logits.f32 is missing or short";
  return v;
}

// Every position's logits on the CPU backend, f32 KV cache.
std::vector<float> cpu_logits(const LoadedModel& m) {
  ThreadPool pool(2);
  CpuBackend be(m.weights, pool);
  KvCache kv = be.make_cache(64, KvType::F32);
  std::vector<float> out;
  be.forward(kv, kTokens, out, /*all_logits=*/true);
  return out;
}

// max over positions of max_i |a_i - b_i| / max_i |b_i|.
double worst_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t p = 0; p < kTokens.size(); ++p) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < kVocab; ++i) {
      const size_t k = p * kVocab + static_cast<size_t>(i);
      num = std::max(num, std::fabs(static_cast<double>(a[k]) - b[k]));
      den = std::max(den, std::fabs(static_cast<double>(b[k])));
    }
    worst = std::max(worst, num / den);
  }
  return worst;
}

int argmax_at(const std::vector<float>& v, size_t pos) {
  const float* r = v.data() + pos * kVocab;
  return static_cast<int>(std::max_element(r, r + kVocab) - r);
}

struct Case {
  const char* file;
  const char* model;   // whose Hugging Face logits
  const char* arch;
  int n_layer, n_mtp;
  double bound;        // on worst_rel_err
};

// f16: the reference's own weights, f32 arithmetic on both sides (1e-5 seen;
// the f32 files give the same). q8_0: the weights' and the activations'
// rounding against an unrounded reference (the format's effect: 0.03-0.42
// seen per position, the Gated DeltaNet model the most sensitive), so only
// a loose bound and the top token at all but two positions.
const Case kCases[] = {
    {"qwen35moe-f16.gguf", "qwen35moe", "qwen35moe", 3, 1, 1e-4},
    {"qwen35moe-nomtp-q8_0.gguf", "qwen35moe", "qwen35moe", 3, 0, 0.6},
    {"qwen3moe-f16.gguf", "qwen3moe", "qwen3moe", 2, 0, 1e-4},
    {"mixtral-f16.gguf", "mixtral", "llama", 2, 0, 1e-4},
};

class LlamacppFiles : public ::testing::TestWithParam<Case> {};

TEST_P(LlamacppFiles, LoadsAndMatchesHuggingFace) {
  const Case& c = GetParam();
  auto m = LoadedModel::open(kDir + c.file);
  const ModelConfig& cfg = m->weights.cfg;
  EXPECT_EQ(cfg.arch_name, c.arch);
  EXPECT_EQ(cfg.n_layer, c.n_layer);
  EXPECT_EQ(cfg.n_layer_mtp, c.n_mtp);
  EXPECT_EQ(static_cast<int>(m->weights.mtp.size()), c.n_mtp);
  EXPECT_EQ(cfg.n_vocab, kVocab);
  const std::vector<float> got = cpu_logits(*m);
  ASSERT_EQ(got.size(), kTokens.size() * kVocab);
  for (float x : got) ASSERT_TRUE(std::isfinite(x));
  const std::vector<float> ref = hf_logits(c.model);
  const double err = worst_rel_err(got, ref);
  EXPECT_LE(err, c.bound) << c.file << " against Hugging Face";
  int agree = 0;
  for (size_t p = 0; p < kTokens.size(); ++p) agree += argmax_at(got, p) == argmax_at(ref, p);
  EXPECT_GE(agree, static_cast<int>(kTokens.size()) - (c.bound <= 1e-3 ? 0 : 2)) << "top tokens agreeing";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamacppFiles, ::testing::ValuesIn(kCases),
                         [](const auto& info) {
                           std::string n = info.param.file;
                           n = n.substr(0, n.find(".gguf"));
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// The Qwen3.5 fixture's layer kinds come from its recurrent_layers array
// ([linear, full, linear] + the MTP block), not from the every-4th default
// its full_attention_interval key still states.
TEST(LlamacppFilesQwen35, LayerKindsFromRecurrentLayers) {
  auto m = LoadedModel::open(kDir + "qwen35moe-f16.gguf");
  const ModelConfig& cfg = m->weights.cfg;
  ASSERT_EQ(cfg.linear_layer.size(), 3u);
  EXPECT_TRUE(cfg.is_linear(0));
  EXPECT_FALSE(cfg.is_linear(1));
  EXPECT_TRUE(cfg.is_linear(2));
  // The MTP block is bound (for drafting) with its nextn tensors.
  ASSERT_EQ(m->weights.mtp.size(), 1u);
  const MtpWeights& mtp = m->weights.mtp[0];
  EXPECT_TRUE(mtp.eh_proj);
  EXPECT_TRUE(mtp.enorm);
  EXPECT_TRUE(mtp.hnorm);
  EXPECT_TRUE(mtp.shared_head_norm);
  EXPECT_TRUE(mtp.layer.wq);
  EXPECT_EQ(mtp.layer.experts.n_expert, 4);
  // The shared-expert gate is stored as llama.cpp keeps it, {n_embd, 1}: one row.
  EXPECT_EQ(m->weights.layers[0].shexp_router.rows, 1);
  EXPECT_EQ(m->weights.layers[0].shexp_router.cols, 64);
}

// With and without the MTP block, the trunk computes the same logits.
TEST(LlamacppFilesQwen35, MtpBlockDoesNotChangeTheTrunk) {
  auto with = LoadedModel::open(kDir + "qwen35moe-f16.gguf");
  const std::vector<float> a = cpu_logits(*with);
  const std::vector<float> ref = hf_logits("qwen35moe");
  // The q8_0 file without MTP agrees on the top token where the reference is decisive.
  auto without = LoadedModel::open(kDir + "qwen35moe-nomtp-q8_0.gguf");
  const std::vector<float> b = cpu_logits(*without);
  int agree = 0;
  for (size_t p = 0; p < kTokens.size(); ++p) agree += argmax_at(a, p) == argmax_at(b, p);
  EXPECT_GE(agree, static_cast<int>(kTokens.size()) - 2);
  EXPECT_LE(worst_rel_err(a, ref), 1e-4);
}

// A copy of a fixture with one tensor's bytes overwritten by `fill` (a
// corrupt download); removed with the test.
class CorruptCopy {
 public:
  CorruptCopy(const std::string& fixture, const std::string& tensor, uint8_t fill) {
    path_ = (std::filesystem::temp_directory_path() /
             ("ms_corrupt_" + std::to_string(::getpid()) + "_" + tensor + ".gguf"))
                .string();
    std::filesystem::copy_file(kDir + fixture, path_, std::filesystem::copy_options::overwrite_existing);
    uint64_t at = 0, n = 0;
    {
      auto f = GgufFile::open(path_);
      const GgufTensorInfo& t = f->tensor(tensor);
      at = f->data_offset() + t.offset;
      n = t.nbytes;
    }
    std::fstream io(path_, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(at));
    const std::vector<char> bytes(n, static_cast<char>(fill));
    io.write(bytes.data(), static_cast<std::streamsize>(n));
  }
  ~CorruptCopy() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Weights full of NaN give non-finite logits: generation stops with an error
// saying so, instead of sampling garbage and exiting cleanly.
TEST(NonFiniteLogits, GenerateStopsWithAClearError) {
  CorruptCopy bad("qwen3moe-f16.gguf", "output_norm.weight", 0xFF);  // f32 0xFFFFFFFF: NaN
  auto m = LoadedModel::open(bad.path());
  ThreadPool pool(2);
  CpuBackend be(m->weights, pool);
  KvCache kv = be.make_cache(64);
  SamplerParams sp;
  sp.temperature = 0;
  Sampler sampler(sp);
  int emitted = 0;
  try {
    generate(be, kv, sampler, nullptr, kTokens, GenerateParams{}, [&](int32_t) { return ++emitted, true; });
    ADD_FAILURE() << "generation with NaN weights succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("prompt: the forward pass produced non-finite logits (NaN"), std::string::npos) << msg;
    EXPECT_NE(msg.find("inspect --check"), std::string::npos) << msg;
  }
  EXPECT_EQ(emitted, 0);
}

TEST(NonFiniteLogits, CheckNamesTheFirstBadId) {
  std::vector<float> v(10, 1.0f);
  EXPECT_NO_THROW(check_finite_logits(v, "prompt"));
  v[7] = std::numeric_limits<float>::infinity();
  v[9] = std::numeric_limits<float>::quiet_NaN();
  try {
    check_finite_logits(v, "decode step", 3);
    ADD_FAILURE() << "accepted an infinite logit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decode step 3: the forward pass produced non-finite logits (Inf for token id 7)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ms
