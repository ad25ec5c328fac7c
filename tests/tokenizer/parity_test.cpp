// Parity with the Hugging Face tokenizers on real vocabularies (Qwen3,
// Llama 3, GPT-4o's o200k, and the SentencePiece vocabulary of the llama2
// package, which is Mistral's). The reference ids come from tools/tokenizer_fixtures (run
// scripts/fetch_tokenizer_fixtures.sh); without them the tests skip.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "tokenizer/chat_template.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ms {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path fixtures_dir() {
  if (const char* env = std::getenv("MOESTREAM_TOKENIZER_FIXTURES")) return env;
  return fs::path(MS_SOURCE_DIR) / "tools" / "tokenizer_fixtures" / "out";
}

struct Case {
  std::string text;
  std::vector<int32_t> ids, ids_special;
};

std::vector<Case> read_cases(const fs::path& file) {
  std::vector<Case> cases;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json j = json::parse(line);
    cases.push_back({j["text"].get<std::string>(), j["ids"].get<std::vector<int32_t>>(),
                     j["ids_special"].get<std::vector<int32_t>>()});
  }
  return cases;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// Loads NAME's fixture or skips the test with a message saying how to get it.
#define LOAD_FIXTURE_OR_SKIP(name, dir_var)                                                    \
  const fs::path dir_var = fixtures_dir() / (name);                                            \
  if (!fs::exists(dir_var / "cases.jsonl") || !fs::exists(dir_var / "tokenizer.json"))         \
    GTEST_SKIP() << "no tokenizer fixtures at " << dir_var                                     \
                 << ": run scripts/fetch_tokenizer_fixtures.sh (needs npm and the network), "  \
                    "or set MOESTREAM_TOKENIZER_FIXTURES";

void check_parity(const std::string& name, const char* expected_pre) {
  LOAD_FIXTURE_OR_SKIP(name, dir);
  const Tokenizer tok(vocab_from_hf_tokenizer_json((dir / "tokenizer.json").string()));
  EXPECT_STREQ(tok.pre_name(), expected_pre);
  const std::vector<Case> cases = read_cases(dir / "cases.jsonl");
  ASSERT_GT(cases.size(), 50u);
  int mismatches = 0;
  for (const Case& c : cases) {
    const auto ids = tok.encode(c.text, false, true);
    const auto ids_special = tok.encode(c.text, true, true);
    if (ids != c.ids || ids_special != c.ids_special) {
      if (++mismatches <= 10)
        ADD_FAILURE() << name << ": text " << json(c.text).dump() << "\n  want " << show(c.ids)
                      << "\n  got  " << show(ids) << "\n  want (special) " << show(c.ids_special)
                      << "\n  got  (special) " << show(ids_special);
    }
    // Decoding the raw encoding gives the text back (NFC'd where the tokenizer normalises).
    const std::string expect_text = tok.pre_name() == std::string("qwen2") ? utf8::nfc(c.text) : c.text;
    EXPECT_EQ(tok.decode(tok.encode(c.text, false, false)), expect_text) << name;
  }
  EXPECT_EQ(mismatches, 0) << name << ": " << mismatches << " of " << cases.size() << " lines differ";
  std::printf("[ parity ] %s: %zu lines, %d mismatches\n", name.c_str(), cases.size(), mismatches);

  // Arbitrary bytes (invalid UTF-8 included) survive encode -> decode where
  // the tokenizer does not normalise.
  if (tok.pre_name() != std::string("qwen2")) {
    std::mt19937 rng(11);
    for (int iter = 0; iter < 200; ++iter) {
      std::string bytes;
      const int len = static_cast<int>(rng() % 40);
      for (int k = 0; k < len; ++k) bytes.push_back(static_cast<char>(rng() % 256));
      ASSERT_EQ(tok.decode(tok.encode(bytes, true, false)), bytes) << name;
    }
  }

  // Speed: a ~100 KB prompt built from the corpus (reported, not asserted).
  std::string big;
  while (big.size() < 100 * 1024)
    for (const Case& c : cases) big += c.text + "\n";
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(big, false, true);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ parity ] %s: %zu bytes -> %zu tokens in %.1f ms\n", name.c_str(), big.size(), ids.size(), ms);
  EXPECT_EQ(tok.decode(ids, true).size() > 0, true);
}

TEST(TokenizerParity, Qwen3) { check_parity("qwen3", "qwen2"); }
TEST(TokenizerParity, Llama3) { check_parity("llama3", "llama3"); }
TEST(TokenizerParity, Llama2SentencePiece) { check_parity("llama2", "spm"); }
// gpt-4o's o200k vocabulary: the same text tokens (ids below 199998) and
// split as gpt-oss's o200k_harmony, which differs only in special tokens.
TEST(TokenizerParity, Gpt4o) { check_parity("gpt4o", "gpt4o"); }

TEST(TokenizerParity, ImportedSpecialTokens) {
  LOAD_FIXTURE_OR_SKIP("qwen3", dir);
  const Vocab q = vocab_from_hf_tokenizer_json((dir / "tokenizer.json").string());
  EXPECT_EQ(q.pre, "qwen2");
  EXPECT_EQ(q.tokens[static_cast<size_t>(q.eos_id)], "<|im_end|>");
  EXPECT_FALSE(q.add_bos);
  EXPECT_EQ(q.types[151644], TokenType::Control);      // <|im_start|>
  EXPECT_EQ(q.types[151667], TokenType::UserDefined);  // <think>
  const Tokenizer tq(q);
  EXPECT_TRUE(tq.is_eog(tq.find_token("<|im_end|>")));
  EXPECT_TRUE(tq.is_eog(tq.find_token("<|endoftext|>")));
  EXPECT_EQ(ChatTemplate::for_vocab(q).format(), ChatFormat::ChatML);

  const fs::path l2 = fixtures_dir() / "llama2" / "tokenizer.json";
  if (fs::exists(l2)) {
    const Vocab v = vocab_from_hf_tokenizer_json(l2.string());
    EXPECT_EQ(v.kind, VocabKind::SentencePiece);
    EXPECT_TRUE(v.add_bos);
    EXPECT_TRUE(v.add_space_prefix);
    EXPECT_EQ(v.bos_id, 1);
    EXPECT_EQ(v.eos_id, 2);
    EXPECT_EQ(v.unk_id, 0);
    EXPECT_EQ(v.types[3], TokenType::Byte);  // <0x00>
  }
}

TEST(TokenizerParity, Llama3ChatTemplateMatchesJinja) {
  LOAD_FIXTURE_OR_SKIP("llama3", dir);
  if (!fs::exists(dir / "chat.json")) GTEST_SKIP() << "no chat.json in " << dir;
  const Vocab v = vocab_from_hf_tokenizer_json((dir / "tokenizer.json").string());
  std::ifstream in(dir / "chat.json");
  const json j = json::parse(in);
  std::vector<ChatMessage> msgs;
  for (const json& m : j["messages"]) msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  std::string want = j["text"].get<std::string>();
  // The Jinja template writes BOS itself; ours leaves it to the tokenizer.
  const std::string bos = v.tokens[static_cast<size_t>(v.bos_id)];
  if (want.rfind(bos, 0) == 0) want.erase(0, bos.size());
  const ChatTemplate t = ChatTemplate::for_vocab(v);
  EXPECT_EQ(t.format(), ChatFormat::Llama3);
  EXPECT_EQ(t.apply(msgs, j["add_generation_prompt"].get<bool>()), want);
}

}  // namespace
}  // namespace ms
