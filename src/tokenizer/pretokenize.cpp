#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace ms {

namespace {

// The patterns are facts of the formats: each is the `Split` regex of the
// pre_tokenizer in the model family's HF tokenizer.json.
// Published patterns.
constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5/3.6: like qwen2, but combining marks (\p{M}) stay with the letters,
// and no NFC first: the Hugging Face tokenizer keeps "e" + U+0301 as two
// tokens where qwen2 composes "é" (llama.cpp's ggml-vocab-qwen35 test data,
// tests/tokenizer/llamacpp_vocab_test.cpp).
constexpr const char* kQwen35Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-4o / o200k (gpt-oss's o200k_harmony): words split at case
// changes ("camelCase" -> "camel", "Case"; an upper-case run keeps one
// following lower-case run), a contraction stays on its word, numbers go in
// groups of up to 3, and punctuation runs keep trailing newlines and '/'.
constexpr const char* kGpt4oRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Compiled patterns: the contractions group without (?i:).
#define MS_CONTRACTIONS R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))"
constexpr const char* kLlama3Compiled =
    MS_CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Compiled =
    MS_CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen35Compiled =
    MS_CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4oCompiled =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)" MS_CONTRACTIONS
    R"(?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)" MS_CONTRACTIONS
    R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
#undef MS_CONTRACTIONS

const PreTokenizerSpec kGpt2{"gpt2", kGpt2Regex, kGpt2Regex, false, false};
const PreTokenizerSpec kLlama3{"llama3", kLlama3Regex, kLlama3Compiled, false, true};
const PreTokenizerSpec kQwen2{"qwen2", kQwen2Regex, kQwen2Compiled, true, false};
const PreTokenizerSpec kQwen35{"qwen35", kQwen35Regex, kQwen35Compiled, false, false};
const PreTokenizerSpec kGpt4o{"gpt4o", kGpt4oRegex, kGpt4oCompiled, false, false};

struct Alias {
  const char* name;
  const PreTokenizerSpec* spec;
};
const Alias kAliases[] = {
    {"", &kGpt2},          {"default", &kGpt2},     {"gpt2", &kGpt2},     {"gpt-2", &kGpt2},
    {"llama3", &kLlama3},  {"llama-bpe", &kLlama3}, {"llama-v3", &kLlama3},
    {"qwen2", &kQwen2},    {"deepseek-r1-qwen", &kQwen2},
    {"qwen35", &kQwen35},
    {"gpt4o", &kGpt4o},    {"gpt-4o", &kGpt4o},
};

}  // namespace

std::string supported_pre_tokenizers() {
  return "gpt2 (also 'default', 'gpt-2'), llama3 (also 'llama-bpe', 'llama-v3'), "
         "qwen2 (also 'deepseek-r1-qwen'), qwen35, gpt4o (also 'gpt-4o')";
}

const PreTokenizerSpec& pre_tokenizer_spec(const std::string& pre) {
  for (const Alias& a : kAliases)
    if (pre == a.name) return *a.spec;
  throw Error("tokenizer.ggml.pre = '" + pre + "' is not a supported pre-tokenizer; supported: " +
              supported_pre_tokenizers());
}

struct PreTokenizer::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

PreTokenizer::PreTokenizer(const std::string& regex) : impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error("pre-tokenizer regex does not compile at offset " + std::to_string(err_offset) +
                ": " + reinterpret_cast<const char*>(msg));
  }
  // JIT makes splitting several times faster; the interpreter is the fallback
  // where the platform has no JIT.
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

PreTokenizer::~PreTokenizer() = default;

namespace {

struct MatchScratch {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ~MatchScratch() {
    if (md) pcre2_match_data_free(md);
    if (stack) pcre2_jit_stack_free(stack);
    if (mctx) pcre2_match_context_free(mctx);
  }
};

// Splits one run of valid UTF-8.
void split_valid(pcre2_code* code, bool jit, MatchScratch& s, std::string_view text,
                 std::vector<std::string_view>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc = jit ? pcre2_jit_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK,
                                         s.md, s.mctx)
                       : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, s.md,
                                     s.mctx);
    if (rc < 0) {
      // No further match (or a resource limit on a pathological input): the
      // rest is one word, so nothing of the text is lost.
      out.push_back(text.substr(pos));
      return;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
    size_t begin = ov[0], end = ov[1];
    if (begin > pos) out.push_back(text.substr(pos, begin - pos));  // unmatched gap
    if (end == begin) {  // an empty match cannot happen with these patterns; step one char
      size_t n = utf8::valid_char_length(text.substr(begin));
      end = begin + (n ? n : 1);
    }
    out.push_back(text.substr(begin, end - begin));
    pos = end;
  }
}

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  MatchScratch s;
  s.md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  s.mctx = pcre2_match_context_create(nullptr);
  if (!s.md || !s.mctx) throw Error("out of memory creating the pre-tokenizer match data");
  if (impl_->jit) {
    // Long runs of spaces backtrack through `\s+(?!\S)`: give the JIT room.
    s.stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    if (s.stack) pcre2_jit_stack_assign(s.mctx, nullptr, s.stack);
  }
  size_t i = 0;
  while (i < text.size()) {
    const size_t run = utf8::valid_prefix_length(text.substr(i));
    if (run > 0) {
      split_valid(impl_->code, impl_->jit, s, text.substr(i, run), out);
      i += run;
    }
    if (i < text.size()) {  // one invalid byte: a word by itself (byte-level BPE can encode it)
      out.push_back(text.substr(i, 1));
      ++i;
    }
  }
}

}  // namespace ms
