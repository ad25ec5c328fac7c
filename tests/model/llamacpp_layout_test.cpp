// The layout of GGUFs made by llama.cpp's converter, and what the binder says
// when such a file disagrees with itself. Each case rewrites the committed
// Qwen3.5 fixture (tests/fixtures/llamacpp/qwen35moe-f16.gguf: 3 layers
// [linear, full, linear] + 1 MTP block) with one thing changed, and expects
// either a clean bind or an ms::Error naming the key or tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>

#include "format/gguf.h"
#include "model/hparams.h"
#include "model/weights.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;
const std::string kFixture = std::string(MS_SOURCE_DIR) + "/tests/fixtures/llamacpp/qwen35moe-f16.gguf";

struct Edit {
  std::map<std::string, GgufValue> kv;  // replaced or added keys
  std::map<std::string, std::pair<DType, std::vector<int64_t>>> tensors;  // new type and shape (data zeroed)
};

class Qwen35Layout : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("ms_l35_" + std::to_string(::getpid()) + "_" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf"))
                .string();
  }
  void TearDown() override { fs::remove(path_); }

  // The fixture rewritten with `e` applied; opened.
  std::unique_ptr<GgufFile> rewrite(const Edit& e) {
    auto src = GgufFile::open(kFixture);
    {
      GgufWriter w(path_);
      for (const auto& [k, v] : src->metadata()) {
        if (k == "general.alignment") continue;
        auto it = e.kv.find(k);
        w.set(k, it == e.kv.end() ? v : it->second);
      }
      for (const auto& [k, v] : e.kv)
        if (!src->find(k)) w.set(k, v);
      for (const GgufTensorInfo& t : src->tensors()) {
        auto it = e.tensors.find(t.name);
        if (it == e.tensors.end()) w.add_tensor(t.name, t.type, t.shape);
        else w.add_tensor(t.name, it->second.first, it->second.second);
      }
      for (const GgufTensorInfo& t : src->tensors()) {
        auto it = e.tensors.find(t.name);
        if (it == e.tensors.end()) {
          w.write_tensor_data(t.data, t.nbytes);
          continue;
        }
        int64_t n = 1;
        for (int64_t d : it->second.second) n *= d;
        const std::vector<uint8_t> zeros(static_cast<size_t>(row_bytes(it->second.first, it->second.second[0]) *
                                                             (n / it->second.second[0])));
        w.write_tensor_data(zeros.data(), zeros.size());
      }
      w.finish();
    }
    return GgufFile::open(path_);
  }
  // The bind error's message, or "" when it binds.
  std::string bind_error(const Edit& e) {
    auto f = rewrite(e);
    try {
      (void)bind_weights(*f);
      return "";
    } catch (const Error& err) {
      return err.what();
    }
  }
  static GgufValue bools(std::vector<bool> v) {
    std::vector<GgufValue> e;
    for (bool b : v) e.push_back(GgufValue::of_bool(b));
    return GgufValue::of_array(GgufType::BOOL, std::move(e));
  }
  std::string path_;
};

TEST_F(Qwen35Layout, TheFixtureBindsAsWritten) {
  auto f = rewrite({});
  const ModelWeights w = bind_weights(*f);
  EXPECT_EQ(w.cfg.n_layer, 3);
  EXPECT_EQ(w.cfg.n_layer_mtp, 1);
  EXPECT_EQ(w.cfg.linear_layer, (std::vector<bool>{true, false, true}));
  const ModelHParams h = read_hparams(*f);
  EXPECT_EQ(h.full_attention_interval, 4);  // what the converter writes, whatever the pattern
  EXPECT_EQ(h.layer_is_recurrent, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(h.kv_cache_bytes(10), 10u * 2 * (32 + 32) * 2);  // layer 1 only (not the MTP block)
}

// Without the recurrent_layers array the every-4th rule would make layer 1
// linear too, and the binder names the tensor that is then missing.
TEST_F(Qwen35Layout, LayerKindsComeFromRecurrentLayers) {
  EXPECT_NE(bind_error({.kv = {{"qwen35moe.attention.recurrent_layers", bools({true, true, true, false})}}})
                .find("missing tensor 'blk.1.attn_qkv.weight'"),
            std::string::npos);
  EXPECT_NE(bind_error({.kv = {{"qwen35moe.attention.recurrent_layers", bools({false, false, true, false})}}})
                .find("missing tensor 'blk.0.attn_q.weight'"),
            std::string::npos);
}

TEST_F(Qwen35Layout, RecurrentLayersMustMatchBlockCount) {
  const std::string e = bind_error({.kv = {{"qwen35moe.attention.recurrent_layers", bools({true, false, true})}}});
  EXPECT_NE(e.find("'qwen35moe.attention.recurrent_layers' has 3 values for block_count 4"), std::string::npos) << e;
  const std::string m = bind_error({.kv = {{"qwen35moe.attention.recurrent_layers", bools({true, false, true, true})}}});
  EXPECT_NE(m.find("marks MTP block 3 as recurrent"), std::string::npos) << m;
}

// The shared-expert gate: {n_embd} (moestream's converter) or {n_embd, 1}
// (llama.cpp's) bind; anything else is named.
TEST_F(Qwen35Layout, SharedExpertGateShapes) {
  const std::string t = "blk.0.ffn_gate_inp_shexp.weight";
  EXPECT_EQ(bind_error({.tensors = {{t, {DType::F32, {64}}}}}), "");
  const std::string e = bind_error({.tensors = {{t, {DType::F32, {64, 2}}}}});
  EXPECT_NE(e.find("tensor '" + t + "' has shape {64, 2}, expected {64}"), std::string::npos) << e;
  const std::string r = bind_error({.tensors = {{t, {DType::F32, {1, 64}}}}});
  EXPECT_NE(r.find("tensor '" + t + "' has shape {1, 64}"), std::string::npos) << r;
}

// A type the file may legally hold but moestream cannot compute with: the
// binder names the tensor and the type.
TEST_F(Qwen35Layout, UncomputableTypeIsNamed) {
  const std::string e = bind_error({.tensors = {{"blk.1.attn_q.weight", {DType::I32, {64, 256}}}}});
  EXPECT_NE(e.find("tensor 'blk.1.attn_q.weight' has type i32, which moestream cannot compute with"), std::string::npos)
      << e;
  const std::string n = bind_error({.tensors = {{"blk.0.ssm_norm.weight", {DType::F16, {16}}}}});
  EXPECT_NE(n.find("tensor 'blk.0.ssm_norm.weight' is f16; norms and biases must be f32"), std::string::npos) << n;
}

// A shape that disagrees with the metadata (the experts' width here) is named
// with both shapes.
TEST_F(Qwen35Layout, ShapeDisagreeingWithMetadataIsNamed) {
  const std::string e = bind_error({.kv = {{"qwen35moe.expert_feed_forward_length", GgufValue::of_u32(64)}}});
  EXPECT_NE(e.find("tensor 'blk.0.ffn_gate_exps.weight' has shape {64, 32, 4}, expected {64, 64, 4}"), std::string::npos)
      << e;
}

}  // namespace
}  // namespace ms
