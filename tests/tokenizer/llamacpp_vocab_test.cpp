// Parity with the Hugging Face tokenizers through llama.cpp's tokenizer test
// data: for each model family a vocabulary-only GGUF (as llama.cpp's
// converter writes it from the real tokenizer.json) with test texts (.inp)
// and the ids the HF tokenizer gives for them (.out, made by llama.cpp's
// convert_hf_to_gguf_update.py with `transformers`). This is the only real
// Qwen3.5/3.6 (`qwen35`) tokenizer data reachable from here; it covers
// combining marks, CJK, emoji, digit runs and whitespace runs.
//
// scripts/fetch_tokenizer_fixtures.sh copies the files out of the llama.cpp
// source that the `node-llama-cpp` npm package bundles; without them the
// test skips.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

fs::path vocab_dir() {
  if (const char* env = std::getenv("MOESTREAM_TOKENIZER_FIXTURES")) return fs::path(env) / "llamacpp";
  return fs::path(MS_SOURCE_DIR) / "tools" / "tokenizer_fixtures" / "out" / "llamacpp";
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// .inp: the texts, each followed by "\n__ggml_vocab_test__\n".
std::vector<std::string> read_texts(const fs::path& p) {
  const std::string all = slurp(p), sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t at = 0;
  for (size_t end; (end = all.find(sep, at)) != std::string::npos; at = end + sep.size())
    texts.push_back(all.substr(at, end - at));
  EXPECT_EQ(at, all.size()) << p << ": text after the last separator";
  return texts;
}

// .out: one line of space-separated ids per text.
std::vector<std::vector<int32_t>> read_ids(const fs::path& p) {
  std::ifstream f(p);
  std::vector<std::vector<int32_t>> out;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::vector<int32_t> ids;
    for (int32_t id; in >> id;) ids.push_back(id);
    out.push_back(std::move(ids));
  }
  return out;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

struct Family {
  const char* file;  // ggml-vocab-FILE.gguf
  const char* pre;   // the pre-tokenizer moestream must pick
};

TEST(TokenizerParity, LlamaCppVocabulariesMatchHuggingFace) {
  const Family families[] = {{"qwen35", "qwen35"}, {"qwen2", "qwen2"}, {"llama-bpe", "llama3"},
                             {"gpt-2", "gpt2"},     {"llama-spm", "spm"}, {"phi-3", "spm"}};
  int checked = 0;
  for (const Family& fam : families) {
    const fs::path gguf = vocab_dir() / (std::string("ggml-vocab-") + fam.file + ".gguf");
    const fs::path inp = gguf.string() + ".inp", out = gguf.string() + ".out";
    if (!fs::exists(gguf) || !fs::exists(inp) || !fs::exists(out)) continue;
    SCOPED_TRACE(fam.file);
    const auto file = GgufFile::open(gguf.string());
    const Tokenizer tok = Tokenizer::from_gguf(*file);
    EXPECT_STREQ(tok.pre_name(), fam.pre);
    const std::vector<std::string> texts = read_texts(inp);
    const std::vector<std::vector<int32_t>> want = read_ids(out);
    ASSERT_EQ(texts.size(), want.size());
    ASSERT_GE(texts.size(), 30u);
    int mismatches = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      // As the reference was made: no BOS/EOS, special-token text not parsed.
      const std::vector<int32_t> got = tok.encode(texts[i], false, false);
      if (got != want[i] && ++mismatches <= 5)
        ADD_FAILURE() << "text " << i << " \"" << texts[i] << "\"\n  want " << show(want[i]) << "\n  got  "
                      << show(got);
    }
    EXPECT_EQ(mismatches, 0) << mismatches << " of " << texts.size() << " texts differ";
    std::printf("[ parity ] llama.cpp vocab %s: %zu texts, %d mismatches\n", fam.file, texts.size(), mismatches);
    ++checked;
  }
  if (checked == 0)
    GTEST_SKIP() << "no llama.cpp vocabulary fixtures at " << vocab_dir()
                 << ": run scripts/fetch_tokenizer_fixtures.sh (needs npm, git and the network)";
  EXPECT_EQ(checked, 6) << "some vocabularies are missing from " << vocab_dir();
}

}  // namespace
}  // namespace ms
