// A working byte-level BPE vocabulary for synthetic models (`moestream gen`):
// the 256 byte tokens, merges learned here from a fixed English text, filler
// tokens up to the requested size, and the ChatML control tokens with a ChatML
// chat template. Deterministic: the same n_vocab always gives the same vocab.
#pragma once
#include <cstdint>

#include "tokenizer/vocab.h"

namespace ms {

// n_vocab >= 260. Merges are learned until the text has no pair left that
// occurs twice (about a thousand) or the vocabulary is full; the remaining ids
// are normal tokens " w<N>" that decode to text but no merge produces (a real
// vocabulary's rare words play that part). The last three ids are
// <|endoftext|> (EOS), <|im_start|>, <|im_end|> (EOT).
Vocab make_synthetic_vocab(int32_t n_vocab);

// The text the merges are learned from (also a handy prompt for tests).
const char* synthetic_vocab_text();

}  // namespace ms
