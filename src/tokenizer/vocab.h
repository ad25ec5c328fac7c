// A tokenizer vocabulary as GGUF stores it (the `tokenizer.*` metadata keys),
// loaded, validated and written back.
//
// Two kinds are supported:
//   - `gpt2`:  byte-level BPE. Tokens are stored in the GPT-2 byte-to-unicode
//              form ("Ġhello" for " hello"), merges as "left right" strings,
//              ranked by position. `pre` names the pre-tokenizer regex.
//   - `llama`: SentencePiece BPE. Tokens use U+2581 (▁) for spaces, pieces are
//              merged by score, and characters missing from the vocabulary fall
//              back to byte tokens "<0xXX>".
// Control and user-defined tokens are stored as plain text in both kinds.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ms {

class GgufFile;
class GgufWriter;

// Values of `tokenizer.ggml.token_type`.
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

enum class VocabKind { BytePairGpt2, SentencePiece };

struct Vocab {
  VocabKind kind = VocabKind::BytePairGpt2;
  std::string pre;  // tokenizer.ggml.pre; empty means the GPT-2 default

  std::vector<std::string> tokens;  // id -> text as stored (see above)
  std::vector<TokenType> types;     // same length as tokens
  std::vector<float> scores;        // SentencePiece: same length; BPE: empty or same length
  std::vector<std::string> merges;  // BPE: "left right", best (rank 0) first

  // Special token ids; -1 where the model has none.
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;
  int32_t eom_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;

  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;  // SentencePiece only: prepend ▁ to the text

  std::string chat_template;  // tokenizer.chat_template (a Jinja string), may be empty

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  // The GGUF spelling of `kind`: "gpt2" or "llama".
  const char* model_name() const;

  // Checks lengths, ids and required fields; throws ms::Error naming the
  // field and what to do. `where` prefixes messages (e.g. the file name).
  void validate(const std::string& where = "vocabulary") const;
};

// Reads the `tokenizer.*` keys of a GGUF file (a full model or a vocab-only
// file) and validates them. Throws ms::Error for a missing or unsupported
// tokenizer, mismatched array lengths, or out-of-range ids.
Vocab load_vocab(const GgufFile& file);

// Sets every `tokenizer.*` key for `vocab` on a writer (used by the synthetic
// model writer, the converter and the tests' vocab-only files).
void write_vocab_metadata(GgufWriter& writer, const Vocab& vocab);

}  // namespace ms
