// Vocabularies through GGUF: write_vocab_metadata -> a vocab-only file ->
// load_vocab / Tokenizer::from_gguf, and the errors for bad metadata.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "tiny_vocabs.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("ms_tokenizer_" + std::to_string(::getpid()) + "_" + name + ".gguf");
}

// Writes a vocab-only GGUF (metadata, no tensors), plus `extra` keys.
fs::path write_vocab_gguf(const Vocab& v, const std::string& name,
                          const std::vector<std::pair<std::string, GgufValue>>& extra = {}) {
  const fs::path p = temp_path(name);
  GgufWriter w(p.string());
  w.set("general.architecture", GgufValue::of_string("llama"));
  write_vocab_metadata(w, v);
  for (const auto& [k, val] : extra) w.set(k, val);
  w.finish();
  return p;
}

struct Cleanup {
  fs::path p;
  ~Cleanup() { std::error_code ec; fs::remove(p, ec); }
};

TEST(GgufVocab, BytePairRoundTrip) {
  Vocab v = test::tiny_bpe({{"h", "e"}, {"l", "l"}}, {"<|im_start|>", "<|im_end|>"}, "qwen2");
  v.eos_id = test::id_of(v, "<|im_end|>");
  v.eot_id = v.eos_id;
  v.pad_id = 0;
  v.chat_template = "{{ '<|im_start|>' }}";
  Cleanup c{write_vocab_gguf(v, "bpe")};
  const auto f = GgufFile::open(c.p.string());
  EXPECT_TRUE(f->tensors().empty());
  const Vocab r = load_vocab(*f);
  EXPECT_EQ(r.kind, VocabKind::BytePairGpt2);
  EXPECT_EQ(r.pre, "qwen2");
  EXPECT_EQ(r.tokens, v.tokens);
  EXPECT_EQ(r.types, v.types);
  EXPECT_EQ(r.merges, v.merges);
  EXPECT_EQ(r.eos_id, v.eos_id);
  EXPECT_EQ(r.eot_id, v.eot_id);
  EXPECT_EQ(r.pad_id, 0);
  EXPECT_EQ(r.bos_id, -1);
  EXPECT_FALSE(r.add_bos);
  EXPECT_EQ(r.chat_template, v.chat_template);
  const Tokenizer a(v);
  const Tokenizer b = Tokenizer::from_gguf(*f);
  const std::string text = "<|im_start|>hello\n<|im_end|>";
  EXPECT_EQ(a.encode(text), b.encode(text));
}

TEST(GgufVocab, SentencePieceRoundTrip) {
  Vocab v = test::tiny_spm({{"\xE2\x96\x81", -1}, {"a", -2}, {"\xE2\x96\x81" "a", -3}});
  v.add_space_prefix = false;
  Cleanup c{write_vocab_gguf(v, "spm")};
  const auto f = GgufFile::open(c.p.string());
  const Vocab r = load_vocab(*f);
  EXPECT_EQ(r.kind, VocabKind::SentencePiece);
  EXPECT_EQ(r.scores, v.scores);
  EXPECT_TRUE(r.add_bos);
  EXPECT_FALSE(r.add_space_prefix);
  EXPECT_EQ(r.unk_id, 0);
  EXPECT_EQ(Tokenizer(r).encode(" a a"), Tokenizer(v).encode(" a a"));
}

void expect_load_error(const std::vector<std::pair<std::string, GgufValue>>& kv, const std::string& what,
                       const std::string& name) {
  const fs::path p = temp_path(name);
  Cleanup c{p};
  {
    GgufWriter w(p.string());
    for (const auto& [k, val] : kv) w.set(k, val);
    w.finish();
  }
  const auto f = GgufFile::open(p.string());
  try {
    Tokenizer::from_gguf(*f);
    FAIL() << "expected an error mentioning " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(GgufVocab, ClearErrorsForBadMetadata) {
  const auto toks = GgufValue::of_strings({"a", "b"});
  expect_load_error({{"general.architecture", GgufValue::of_string("llama")}}, "tokenizer.ggml.model", "none");
  expect_load_error({{"tokenizer.ggml.model", GgufValue::of_string("bert")}, {"tokenizer.ggml.tokens", toks}},
                    "not supported", "bert");
  expect_load_error({{"tokenizer.ggml.model", GgufValue::of_string("gpt2")}, {"tokenizer.ggml.tokens", toks},
                     {"tokenizer.ggml.token_type", GgufValue::of_i32s({1})}},
                    "token_type", "types");
  expect_load_error({{"tokenizer.ggml.model", GgufValue::of_string("gpt2")}, {"tokenizer.ggml.tokens", toks},
                     {"tokenizer.ggml.eos_token_id", GgufValue::of_u32(7)}},
                    "eos_token_id", "eos");
  expect_load_error({{"tokenizer.ggml.model", GgufValue::of_string("gpt2")}, {"tokenizer.ggml.tokens", toks},
                     {"tokenizer.ggml.pre", GgufValue::of_string("falcon")}},
                    "supported", "pre");
  expect_load_error({{"tokenizer.ggml.model", GgufValue::of_string("gpt2")},
                     {"tokenizer.ggml.tokens", GgufValue::of_i32s({1, 2})}},
                    "tokenizer.ggml.tokens", "tokens_type");
  expect_load_error({{"tokenizer.ggml.model", GgufValue::of_string("llama")}, {"tokenizer.ggml.tokens", toks}},
                    "scores", "spm_scores");
}

// A byte-level tokenizer.json whose normalizer disagrees with what its
// pre-tokenizer implies (NFC for qwen2, nothing for qwen35/gpt2/llama3) is
// refused by name: the import would otherwise tokenize differently from
// Hugging Face without a word.
TEST(HfImport, TheNormalizerMustMatchThePreTokenizer) {
  auto write = [](const nlohmann::json& normalizer, const std::string& regex) {
    nlohmann::json j;
    j["model"] = {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}};
    j["normalizer"] = normalizer;
    nlohmann::json pre = nlohmann::json::array();
    if (!regex.empty())
      pre.push_back({{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}});
    pre.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}});
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", pre}};
    const fs::path path = fs::temp_directory_path() / ("ms_hf_norm_" + std::to_string(::getpid()) + ".json");
    std::ofstream(path) << j.dump();
    return Cleanup{path};
  };
  const std::string qwen2 = pre_tokenizer_spec("qwen2").published, qwen35 = pre_tokenizer_spec("qwen35").published;
  const nlohmann::json nfc = {{"type", "NFC"}};
  const nlohmann::json seq_nfc = {{"type", "Sequence"}, {"normalizers", nlohmann::json::array({nfc})}};
  {
    Cleanup c = write(nullptr, qwen35);
    EXPECT_EQ(vocab_from_hf_tokenizer_json(c.p.string()).pre, "qwen35");
  }
  {
    Cleanup c = write(seq_nfc, qwen2);
    EXPECT_EQ(vocab_from_hf_tokenizer_json(c.p.string()).pre, "qwen2");
  }
  {
    Cleanup c = write(nullptr, "");  // GPT-2: no normalizer
    EXPECT_EQ(vocab_from_hf_tokenizer_json(c.p.string()).pre, "gpt-2");
  }
  auto refused = [&](const nlohmann::json& normalizer, const std::string& regex, const std::string& what) {
    Cleanup c = write(normalizer, regex);
    try {
      vocab_from_hf_tokenizer_json(c.p.string());
      ADD_FAILURE() << "accepted " << normalizer.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused(nfc, qwen35, "applies NFC");                        // qwen35 does not normalise
  refused(nullptr, qwen2, "does not apply NFC");              // qwen2 expects NFC
  refused(nfc, "", "applies NFC");                            // gpt2 does not
  refused({{"type", "NFKC"}}, qwen2, "normalizer 'NFKC'");     // a normalisation moestream does not do
  refused({{"type", "Sequence"}, {"normalizers", {nfc, {{"type", "Lowercase"}}}}}, qwen2, "normalizer 'Lowercase'");
}

// The real vocabularies survive GGUF unchanged (tokens, merges, scores, ids).
TEST(GgufVocab, RealVocabulariesRoundTrip) {
  const char* env = std::getenv("MOESTREAM_TOKENIZER_FIXTURES");
  const fs::path dir = env ? fs::path(env) : fs::path(MS_SOURCE_DIR) / "tools" / "tokenizer_fixtures" / "out";
  int n = 0;
  for (const char* name : {"qwen3", "llama3", "llama2"}) {
    const fs::path json = dir / name / "tokenizer.json";
    if (!fs::exists(json)) continue;
    const Vocab v = vocab_from_hf_tokenizer_json(json.string());
    Cleanup c{write_vocab_gguf(v, name)};
    const auto f = GgufFile::open(c.p.string());
    const Vocab r = load_vocab(*f);
    EXPECT_EQ(r.tokens, v.tokens) << name;
    EXPECT_EQ(r.types, v.types) << name;
    EXPECT_EQ(r.merges, v.merges) << name;
    EXPECT_EQ(r.scores, v.scores) << name;
    EXPECT_EQ(r.pre, v.pre) << name;
    EXPECT_EQ(r.add_bos, v.add_bos) << name;
    const std::string text = "<|im_start|>Hello, 世界! 12345  \n\tdone</s>";
    EXPECT_EQ(Tokenizer(r).encode(text), Tokenizer(v).encode(text)) << name;
    ++n;
  }
  if (n == 0) GTEST_SKIP() << "no tokenizer fixtures: run scripts/fetch_tokenizer_fixtures.sh";
}

}  // namespace
}  // namespace ms
