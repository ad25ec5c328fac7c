// A GGUF vocabulary from a Hugging Face tokenizer.json (+ the
// tokenizer_config.json beside it, when there is one). Used by the converter
// and by the parity tests against the HF reference tokenizer.
//
// Supported: byte-level BPE whose Split regex is one of the known
// pre-tokenizers (gpt2, llama3, qwen2, qwen35, gpt4o), and SentencePiece-style BPE
// with byte fallback (Llama 2, Mistral). Anything else: ms::Error.
#pragma once
#include <string>

#include "tokenizer/vocab.h"

namespace ms {

// `config_path` may be empty: then "tokenizer_config.json" next to
// `tokenizer_json_path` is read if it exists.
//
// Mapping: added tokens with special=true are Control, others UserDefined;
// <0xXX> pieces are Byte; ids with no token (holes) become "[PAD<id>]" Unused.
// SentencePiece scores are derived from the merge ranks (a piece's score is
// minus the rank of the first merge that makes it), which reproduces the HF
// merge order exactly. BOS/EOS come from the config's bos_token/eos_token,
// add_bos/add_eos from the post-processor's template (else the config).
Vocab vocab_from_hf_tokenizer_json(const std::string& tokenizer_json_path,
                                   const std::string& config_path = "");

}  // namespace ms
