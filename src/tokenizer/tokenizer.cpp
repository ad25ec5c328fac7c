#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/special.h"
#include "tokenizer/spm.h"
#include "tokenizer/text_map.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace ms {

namespace {

// Control tokens that end a turn in the chat formats we know; generation
// stops on them even when the GGUF names only one EOS.
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>",
    "</s>",       "<|end|>",       "<end_of_turn>", "<|return|>", "<|call|>",
};

}  // namespace

struct Tokenizer::Impl {
  Vocab vocab;
  const PreTokenizerSpec* spec = nullptr;  // BPE only
  std::unique_ptr<PreTokenizer> pre;
  std::unique_ptr<BpeModel> bpe;
  std::unique_ptr<SpmModel> spm;
  std::unique_ptr<SpecialSplitter> special;
  TextToId by_text;
  std::vector<uint8_t> eog;

  explicit Impl(Vocab v) : vocab(std::move(v)) {
    vocab.validate();
    if (vocab.kind == VocabKind::BytePairGpt2) {
      spec = &pre_tokenizer_spec(vocab.pre);
      pre = std::make_unique<PreTokenizer>(spec->regex);
      bpe = std::make_unique<BpeModel>(vocab, spec->ignore_merges);
    } else {
      spm = std::make_unique<SpmModel>(vocab);
    }
    special = std::make_unique<SpecialSplitter>(vocab);
    by_text.reserve(vocab.tokens.size());
    for (size_t id = 0; id < vocab.tokens.size(); ++id)
      by_text.emplace(vocab.tokens[id], static_cast<int32_t>(id));
    eog.assign(vocab.tokens.size(), 0);
    for (int32_t id : {vocab.eos_id, vocab.eot_id, vocab.eom_id})
      if (id >= 0) eog[static_cast<size_t>(id)] = 1;
    for (std::string_view t : kEndOfTurnTexts)
      if (const int32_t id = control_id(t); id >= 0) eog[static_cast<size_t>(id)] = 1;
    // The harmony format (gpt-oss's o200k_harmony) ends a turn with <|return|>
    // or a tool call with <|call|>; its <|end|> only closes one message (the
    // analysis) and the answer follows, so it must not stop generation. (As
    // llama.cpp: a vocabulary with both markers drops <|end|>, even when the
    // file names it as EOS or EOT.)
    const int32_t ret = control_id("<|return|>"), call = control_id("<|call|>"), end = control_id("<|end|>");
    if (ret >= 0 && call >= 0 && end >= 0) eog[static_cast<size_t>(end)] = 0;
  }

  // The id of a control token with this text, or -1.
  int32_t control_id(std::string_view text) const {
    const int32_t id = find_id(by_text, text);
    return id >= 0 && vocab.types[static_cast<size_t>(id)] == TokenType::Control ? id : -1;
  }

  void encode_text(std::string_view text, std::vector<int32_t>& out) const {
    if (spm) {
      // Every text fragment starts a "sentence" (it follows the start or a
      // special token), so it gets the space prefix, as SentencePiece does.
      spm->encode(spm_escape_spaces(text, vocab.add_space_prefix), out);
      return;
    }
    std::string normalized;
    if (spec->nfc) {
      normalized = utf8::nfc(text);
      text = normalized;
    }
    std::vector<std::string_view> words;
    pre->split(text, words);
    for (std::string_view w : words) bpe->encode_word(w, out);
  }
};

Tokenizer::Tokenizer(Vocab vocab) : impl_(std::make_unique<Impl>(std::move(vocab))) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && m.vocab.add_bos) out.push_back(m.vocab.bos_id);
  std::vector<Fragment> frags;
  m.special->split(text, parse_special, frags);
  for (const Fragment& f : frags) {
    if (f.token >= 0) out.push_back(f.token);
    else m.encode_text(f.text, out);
  }
  if (add_special && m.vocab.add_eos) out.push_back(m.vocab.eos_id);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  const Impl& m = *impl_;
  if (id < 0 || id >= m.vocab.n_tokens())
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" +
                std::to_string(m.vocab.n_tokens()) + " tokens)");
  const size_t i = static_cast<size_t>(id);
  const std::string& text = m.vocab.tokens[i];
  switch (m.vocab.types[i]) {
    case TokenType::Control:
    case TokenType::Unknown:
    case TokenType::Unused:
      return render_special ? text : std::string();
    case TokenType::UserDefined:
      return text;
    case TokenType::Byte:
      if (m.spm) {
        const int b = parse_byte_piece(text);
        return b >= 0 ? std::string(1, static_cast<char>(b)) : text;
      }
      return m.bpe->token_bytes(id);
    case TokenType::Normal:
    case TokenType::Undefined:
      break;
  }
  if (m.bpe) return m.bpe->token_bytes(id);
  std::string out;
  out.reserve(text.size());
  for (size_t k = 0; k < text.size();) {  // ▁ -> ' '
    if (text.compare(k, kSpmSpace.size(), kSpmSpace) == 0) {
      out.push_back(' ');
      k += kSpmSpace.size();
    } else {
      out.push_back(text[k++]);
    }
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  const Impl& m = *impl_;
  std::string out;
  bool strip_space = m.spm != nullptr && m.vocab.add_space_prefix;
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, render_special);
    if (piece.empty()) continue;
    if (strip_space) {
      strip_space = false;
      const TokenType t = m.vocab.types[static_cast<size_t>(id)];
      if (piece[0] == ' ' && (t == TokenType::Normal || t == TokenType::Undefined)) piece.erase(0, 1);
    }
    out += piece;
  }
  return out;
}

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && id < impl_->vocab.n_tokens() && impl_->eog[static_cast<size_t>(id)] != 0;
}

bool Tokenizer::is_control(int32_t id) const {
  if (id < 0 || id >= impl_->vocab.n_tokens()) return false;
  const TokenType t = impl_->vocab.types[static_cast<size_t>(id)];
  return t == TokenType::Control || t == TokenType::Unknown;
}

int32_t Tokenizer::find_token(std::string_view text) const {
  const int32_t id = find_id(impl_->by_text, text);
  if (id >= 0) return id;
  return impl_->bpe ? impl_->bpe->find(text) : -1;
}

const Vocab& Tokenizer::vocab() const { return impl_->vocab; }
int32_t Tokenizer::n_tokens() const { return impl_->vocab.n_tokens(); }
int32_t Tokenizer::bos_id() const { return impl_->vocab.bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->vocab.eos_id; }
int32_t Tokenizer::eot_id() const {
  return impl_->vocab.eot_id >= 0 ? impl_->vocab.eot_id : impl_->vocab.eos_id;
}
const char* Tokenizer::pre_name() const { return impl_->spec ? impl_->spec->name : "spm"; }

}  // namespace ms
