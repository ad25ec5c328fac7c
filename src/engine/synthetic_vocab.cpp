#include "engine/synthetic_vocab.h"

#include <cctype>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/bpe.h"
#include "util/error.h"

namespace ms {

const char* synthetic_vocab_text() {
  return "The river runs past the old mill and the mill wheel turns slowly in the morning light. "
         "Once upon a time there was a small town by the sea, and the people of the town were fishers "
         "and weavers and bakers. Every morning the bakers made bread, and the smell of the bread went "
         "through the streets and into the houses. The children ran to the harbour to watch the boats "
         "come in with their catch, and the old men sat on the wall and told stories about the storms "
         "they had seen when they were young.\n"
         "A mixture of experts is a model in which each layer holds many small networks, the experts, "
         "and a router that chooses a few of them for every token. Only the chosen experts are computed, "
         "so the model can be large while each token costs little. The experts that are chosen often are "
         "called hot, and the ones that are chosen rarely are called cold. Keeping the hot experts in fast "
         "memory and streaming the cold ones is the whole idea of this engine.\n"
         "She opened the window and looked at the garden. The roses were in bloom, the grass was wet with "
         "rain, and a bird was singing in the tree by the gate. It was going to be a good day, she thought, "
         "and she went down to the kitchen to make tea. Her brother was already there, reading the paper "
         "and eating an apple. He said that the weather would turn in the afternoon and that they should "
         "walk to the hill before the rain came back.\n"
         "Question: what is the capital of France? Answer: the capital of France is Paris. Question: how "
         "many days are there in a week? Answer: there are seven days in a week. Question: what colour is "
         "the sky on a clear day? Answer: the sky is blue on a clear day.\n"
         "def add(a, b):\n    return a + b\n\nfor item in items:\n    print(item)\n";
}

namespace {

// Words as the qwen2/gpt2 pre-tokenizers cut English text: an optional
// leading space glued to a run of letters, a run of other non-space bytes,
// or a run of spaces/newlines.
std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  size_t i = 0;
  auto alpha = [](unsigned char c) { return std::isalpha(c) != 0 || c >= 0x80; };
  while (i < text.size()) {
    size_t j = i;
    if (text[j] == ' ' && j + 1 < text.size() && alpha(text[j + 1])) ++j;
    if (alpha(text[j])) {
      while (j < text.size() && alpha(text[j])) ++j;
    } else if (std::isspace(static_cast<unsigned char>(text[j]))) {
      while (j < text.size() && std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    } else {
      while (j < text.size() && !alpha(text[j]) && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    }
    words.push_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

}  // namespace

Vocab make_synthetic_vocab(int32_t n_vocab) {
  if (n_vocab < 260) throw Error("synthetic vocabulary: needs at least 260 tokens, asked for " + std::to_string(n_vocab));
  const int32_t n_special = 3;
  const int32_t n_normal = n_vocab - n_special;

  Vocab v;
  v.kind = VocabKind::BytePairGpt2;
  v.pre = "qwen2";
  std::vector<std::string> raw;  // raw bytes of each normal token
  for (int b = 0; b < 256; ++b) raw.emplace_back(1, static_cast<char>(b));

  // BPE training: words with their counts, each as a list of token ids.
  std::map<std::string, int> word_count;
  for (const std::string& w : split_words(synthetic_vocab_text())) ++word_count[w];
  std::vector<std::pair<std::vector<int32_t>, int>> words;
  for (const auto& [w, c] : word_count) {
    std::vector<int32_t> ids;
    for (unsigned char ch : w) ids.push_back(ch);
    words.emplace_back(std::move(ids), c);
  }
  std::set<std::string> known(raw.begin(), raw.end());
  while (static_cast<int32_t>(raw.size()) < n_normal) {
    std::map<std::pair<int32_t, int32_t>, int> pairs;  // ordered: ties go to the smallest pair
    for (const auto& [ids, c] : words)
      for (size_t i = 0; i + 1 < ids.size(); ++i) pairs[{ids[i], ids[i + 1]}] += c;
    std::pair<int32_t, int32_t> best{-1, -1};
    int best_count = 1;
    for (const auto& [p, c] : pairs)
      if (c > best_count) best = p, best_count = c;
    if (best.first < 0) break;
    const std::string merged = raw[best.first] + raw[best.second];
    const int32_t id = static_cast<int32_t>(raw.size());
    raw.push_back(merged);
    known.insert(merged);
    v.merges.push_back(byte_level_encode(raw[best.first]) + " " + byte_level_encode(raw[best.second]));
    for (auto& [ids, c] : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == best.first && ids[i + 1] == best.second) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(ids[i]);
        }
      }
      ids = std::move(out);
    }
  }
  for (int64_t n = 0; static_cast<int32_t>(raw.size()) < n_normal; ++n) {
    std::string filler = " w" + std::to_string(n);
    if (known.insert(filler).second) raw.push_back(filler);
  }

  for (const std::string& r : raw) {
    v.tokens.push_back(byte_level_encode(r));
    v.types.push_back(TokenType::Normal);
  }
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    v.tokens.emplace_back(s);
    v.types.push_back(TokenType::Control);
  }
  v.eos_id = n_normal;
  v.eot_id = n_normal + 2;
  v.pad_id = n_normal;
  v.add_bos = false;
  v.add_eos = false;
  v.chat_template =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  v.validate("synthetic vocabulary");
  return v;
}

}  // namespace ms
