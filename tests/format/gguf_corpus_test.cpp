// The fuzzer's seed corpus (fuzz/corpus/*.gguf): small valid files covering
// every metadata type, nested arrays, several quant types, alignments and a v2
// file. This test checks the committed seeds still parse and match what this
// generator writes; run with MS_WRITE_FUZZ_CORPUS=1 to (re)write them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "format/gguf.h"
#include "format/gguf_bytes.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Deterministic filler bytes for tensor data.
std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = static_cast<uint8_t>(seed + k * 37);
  return v;
}

void write_tensors(GgufWriter& w, const std::vector<std::tuple<std::string, DType, std::vector<int64_t>>>& ts) {
  std::vector<uint64_t> sizes;
  for (const auto& [name, type, shape] : ts) {
    w.add_tensor(name, type, shape);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    sizes.push_back(static_cast<uint64_t>(n / type_info(type).block_size * type_info(type).type_size));
  }
  uint8_t seed = 1;
  for (uint64_t s : sizes) {
    const auto d = pattern(s, seed++);
    w.write_tensor_data(d.data(), d.size());
  }
}

void all_types(const std::string& p) {
  GgufWriter w(p);
  w.set("general.architecture", GgufValue::of_string("qwen3moe"));
  w.set("general.name", GgufValue::of_string("seed — ünïcödé"));
  GgufValue v;
  for (GgufType t : {GgufType::UINT8, GgufType::INT8, GgufType::UINT16, GgufType::INT16, GgufType::UINT64}) {
    v.type = t;
    v.u = 7;
    v.i = -7;
    w.set(std::string("t.") + gguf_type_name(t), v);
  }
  w.set("t.u32", GgufValue::of_u32(4000000000u));
  w.set("t.i32", GgufValue::of_i32(-5));
  w.set("t.i64", GgufValue::of_i64(-1));
  w.set("t.f32", GgufValue::of_f32(1e-6f));
  w.set("t.f64", GgufValue::of_f64(-2.5));
  w.set("t.bool", GgufValue::of_bool(true));
  w.set("t.empty", GgufValue::of_string(""));
  w.set("t.strings", GgufValue::of_strings({"a", "", "<|endoftext|>"}));
  w.set("t.empty_array", GgufValue::of_array(GgufType::INT32, {}));
  // Inner arrays each carry their own element type, so they may differ.
  w.set("t.nested", GgufValue::of_array(GgufType::ARRAY, {GgufValue::of_i32s({1, 2}), GgufValue::of_i32s({}),
                                                          GgufValue::of_strings({"x"})}));
  w.set("t.nested_strings", GgufValue::of_array(GgufType::ARRAY, {GgufValue::of_strings({"p", "q"})}));
  GgufValue deep = GgufValue::of_f32s({0.5f});
  for (int d = 1; d < kGgufMaxArrayDepth; ++d) deep = GgufValue::of_array(GgufType::ARRAY, {deep});
  w.set("t.deep", deep);
  write_tensors(w, {{"token_embd.weight", DType::F32, {4, 3}}});
  w.finish();
}

void quant_tensors(const std::string& p) {
  GgufWriter w(p);
  w.set("general.architecture", GgufValue::of_string("qwen3moe"));
  w.set("qwen3moe.block_count", GgufValue::of_u32(1));
  w.set("qwen3moe.expert_count", GgufValue::of_u32(2));
  write_tensors(w, {{"token_embd.weight", DType::F16, {8, 4}},
                    {"blk.0.attn_norm.weight", DType::F32, {8}},
                    {"blk.0.ffn_gate_inp.weight", DType::BF16, {8, 2}},
                    {"blk.0.ffn_gate_exps.weight", DType::Q8_0, {32, 2, 2}},
                    {"blk.0.ffn_up_exps.weight", DType::Q4_0, {32, 2, 2}},
                    {"blk.0.ffn_down_exps.weight", DType::Q4_K, {256, 1, 2}},
                    {"blk.0.attn_q.weight", DType::Q6_K, {256, 1}},
                    {"blk.0.attn_k.weight", DType::MXFP4, {32, 2}},
                    {"output.weight", DType::Q5_K, {256, 1}}});
  w.finish();
}

void aligned_8(const std::string& p) {
  GgufWriter w(p);
  w.set("general.alignment", GgufValue::of_u32(8));
  w.set("tokenizer.ggml.model", GgufValue::of_string("gpt2"));
  w.set("tokenizer.ggml.tokens", GgufValue::of_strings({"a", "b", "ab"}));
  w.set("tokenizer.ggml.merges", GgufValue::of_strings({"a b"}));
  w.set("tokenizer.ggml.token_type", GgufValue::of_i32s({1, 1, 1}));
  write_tensors(w, {{"a", DType::F32, {3}}, {"b", DType::I8, {5}}, {"c", DType::F64, {1}}});
  w.finish();
}

void version_2(const std::string& p) {
  test::GgufBytes b;
  b.header(2, 2, 2).kv_str("general.architecture", "llama").kv_u32("llama.block_count", 1);
  b.tensor_info("blk.0.ffn_gate.0.weight", {32, 1}, 8, 0).tensor_info("output_norm.weight", {2}, 0, 64).pad(32);
  const auto d = pattern(34, 9);
  b.b.insert(b.b.end(), d.begin(), d.end());
  b.pad(32).fill(8, 0x3f);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.b.data()),
                                           static_cast<std::streamsize>(b.size()));
}

const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> kSeeds = {
    {"all_types.gguf", all_types},
    {"quant_tensors.gguf", quant_tensors},
    {"aligned_8.gguf", aligned_8},
    {"version_2.gguf", version_2},
};

TEST(GgufCorpus, SeedFilesAreValidSmallAndUpToDate) {
  const fs::path dir = fs::path(MS_SOURCE_DIR) / "fuzz" / "corpus";
  const char* write = std::getenv("MS_WRITE_FUZZ_CORPUS");
  if (write && *write == '1') {
    fs::create_directories(dir);
    for (const auto& [name, gen] : kSeeds) gen((dir / name).string());
  }
  const fs::path tmp = fs::temp_directory_path() / ("ms_corpus_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::create_directories(tmp);
  for (const auto& [name, gen] : kSeeds) {
    const fs::path seed = dir / name;
    if (!fs::exists(seed)) {
      ADD_FAILURE() << seed << " is missing; run MS_WRITE_FUZZ_CORPUS=1 test_format";
      continue;
    }
    EXPECT_LT(fs::file_size(seed), 4096u) << name;
    EXPECT_NO_THROW(GgufFile::open(seed.string())) << name;
    gen((tmp / name).string());
    EXPECT_EQ(read_all(seed), read_all(tmp / name)) << name << " differs from the generator's output; rewrite with "
                                                       "MS_WRITE_FUZZ_CORPUS=1";
  }
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace ms
