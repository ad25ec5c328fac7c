#include "tokenizer/hf_import.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tokenizer/pretokenize.h"
#include "tokenizer/spm.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace ms {

namespace {

using json = nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the file");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
}

// Calls fn on `node` and, for "Sequence" nodes, on each of their children
// (the key of the children differs between normalizers, pre-tokenizers,
// decoders and post-processors).
template <typename Fn>
void for_each_component(const json& node, const Fn& fn) {
  if (!node.is_object()) return;
  fn(node);
  for (const char* key : {"normalizers", "pretokenizers", "pre_tokenizers", "decoders", "processors"}) {
    auto it = node.find(key);
    if (it != node.end() && it->is_array())
      for (const json& child : *it) for_each_component(child, fn);
  }
}

std::string type_of(const json& node) {
  auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A token given as "text" or {"content": "text", ...} in tokenizer_config.json.
std::string token_text(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return {};
}

std::string merge_text(const json& m, const std::string& where) {
  if (m.is_string()) return m.get<std::string>();
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return m[0].get<std::string>() + " " + m[1].get<std::string>();
  throw Error(where + ": model.merges holds an entry that is neither \"a b\" nor [\"a\", \"b\"]");
}

// The GGUF `tokenizer.ggml.pre` name for a byte-level Split regex.
std::string pre_name_for_regex(const std::string& regex, const std::string& where) {
  struct Known {
    const char* spec_name;
    const char* gguf_name;  // what llama.cpp's converter writes
  };
  for (const Known k : {Known{"gpt2", "gpt-2"}, Known{"llama3", "llama-bpe"}, Known{"qwen2", "qwen2"},
                        Known{"qwen35", "qwen35"}, Known{"gpt4o", "gpt-4o"}}) {
    if (regex == pre_tokenizer_spec(k.spec_name).published) return k.gguf_name;
  }
  throw Error(where + ": the pre-tokenizer regex is not one moestream knows (" + regex +
              "); supported pre-tokenizers: " + supported_pre_tokenizers());
}

// Byte-level BPE: the text normalisation moestream applies comes with the
// pre-tokenizer (NFC for qwen2, nothing for qwen35, GPT-2 and Llama 3), as the
// GGUF carries no normalizer. A tokenizer.json whose normalizer says
// otherwise would tokenize differently from Hugging Face's without a word:
// refuse it.
void check_byte_level_normalizer(const json& normalizer, const std::string& pre, const std::string& where) {
  bool nfc = false;
  for_each_component(normalizer, [&](const json& c) {
    const std::string t = type_of(c);
    if (t == "NFC") nfc = true;
    else if (t != "Sequence")
      throw Error(where + ": normalizer '" + t + "' is not supported for byte-level BPE (moestream applies NFC or "
                  "nothing, as the pre-tokenizer '" + pre + "' says)");
  });
  const bool spec_nfc = pre_tokenizer_spec(pre).nfc;
  if (nfc != spec_nfc)
    throw Error(where + ": the normalizer " + (nfc ? "applies NFC" : "does not apply NFC") + ", but pre-tokenizer '" +
                pre + "' " + (spec_nfc ? "does" : "does not") + "; the tokens would differ from Hugging Face's");
}

}  // namespace

Vocab vocab_from_hf_tokenizer_json(const std::string& path, const std::string& config_path_in) {
  const json j = read_json(path);
  std::string config_path = config_path_in;
  if (config_path.empty()) {
    const auto guess = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
    if (std::filesystem::exists(guess)) config_path = guess.string();
  }
  const json cfg = config_path.empty() ? json::object() : read_json(config_path);

  if (!j.contains("model") || !j["model"].is_object())
    throw Error(path + ": no \"model\" object; is this a tokenizer.json?");
  const json& model = j["model"];
  const std::string model_type = type_of(model);
  if (!model_type.empty() && model_type != "BPE")
    throw Error(path + ": model type '" + model_type + "' is not supported (only BPE: byte-level "
                "like GPT-2/Llama 3/Qwen, or SentencePiece-style like Llama 2/Mistral)");
  if (!model.contains("vocab") || !model["vocab"].is_object())
    throw Error(path + ": model.vocab is missing or not an object");

  // Which kind of BPE: byte fallback / ▁ spaces mean SentencePiece-style.
  bool byte_level = false, metaspace = false, prepend = false;
  std::string split_regex;
  const json null_json;
  auto section = [&](const char* key) -> const json& {
    auto it = j.find(key);
    return it == j.end() ? null_json : *it;
  };
  for (const char* key : {"normalizer", "pre_tokenizer", "decoder"}) {
    for_each_component(section(key), [&](const json& c) {
      const std::string t = type_of(c);
      if (t == "ByteLevel") byte_level = true;
      if (t == "Metaspace") {
        metaspace = true;
        const std::string scheme = c.value("prepend_scheme", std::string("always"));
        if (c.value("add_prefix_space", scheme != "never")) prepend = true;
      }
      if (t == "Prepend" && c.value("prepend", std::string()) == kSpmSpace) prepend = true;
      if (t == "Replace" && c.contains("content") && c["content"].is_string() &&
          c["content"].get<std::string>() == kSpmSpace)
        metaspace = true;
      if (t == "Split" && c.contains("pattern") && c["pattern"].contains("Regex") &&
          std::string_view(key) == "pre_tokenizer")
        split_regex = c["pattern"]["Regex"].get<std::string>();
    });
  }
  const bool byte_fallback = model.value("byte_fallback", false);

  Vocab v;
  if (byte_fallback || (metaspace && !byte_level)) {
    v.kind = VocabKind::SentencePiece;
    v.add_space_prefix = prepend;
  } else if (byte_level) {
    v.kind = VocabKind::BytePairGpt2;
    if (!split_regex.empty()) {
      v.pre = pre_name_for_regex(split_regex, path);
    } else {
      v.pre = "gpt-2";  // ByteLevel with its built-in (GPT-2) regex
    }
    check_byte_level_normalizer(section("normalizer"), v.pre, path);
    v.add_space_prefix = false;
  } else {
    throw Error(path + ": neither byte-level nor SentencePiece-style BPE; not supported");
  }

  // Tokens: the model's vocab plus the added tokens (which may lie beyond it).
  std::unordered_map<std::string, int32_t> ids;
  int64_t max_id = -1;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > INT32_MAX) throw Error(path + ": token '" + it.key() + "' has id " + std::to_string(id));
    ids.emplace(it.key(), static_cast<int32_t>(id));
    max_id = std::max(max_id, id);
  }
  const json& added = section("added_tokens");
  if (added.is_array())
    for (const json& a : added) max_id = std::max(max_id, a.value("id", int64_t{-1}));
  if (max_id < 0) throw Error(path + ": the vocabulary is empty");
  const size_t n = static_cast<size_t>(max_id) + 1;
  v.tokens.assign(n, std::string());
  v.types.assign(n, TokenType::Unused);
  for (const auto& [text, id] : ids) {
    v.tokens[static_cast<size_t>(id)] = text;
    TokenType t = TokenType::Normal;
    if (v.kind == VocabKind::SentencePiece && parse_byte_piece(text) >= 0) t = TokenType::Byte;
    v.types[static_cast<size_t>(id)] = t;
  }
  if (added.is_array()) {
    for (const json& a : added) {
      const int64_t id = a.value("id", int64_t{-1});
      if (id < 0 || !a.contains("content") || !a["content"].is_string())
        throw Error(path + ": an entry of added_tokens has no id or content");
      const std::string content = a["content"].get<std::string>();
      v.tokens[static_cast<size_t>(id)] = content;
      v.types[static_cast<size_t>(id)] = a.value("special", false) ? TokenType::Control : TokenType::UserDefined;
      ids[content] = static_cast<int32_t>(id);
    }
  }
  for (size_t i = 0; i < n; ++i)
    if (v.tokens[i].empty()) v.tokens[i] = "[PAD" + std::to_string(i) + "]";  // a hole in the ids

  auto id_of = [&](const std::string& text) -> int32_t {
    if (text.empty()) return -1;
    auto it = ids.find(text);
    return it == ids.end() ? -1 : it->second;
  };
  auto first_of = [&](std::initializer_list<const char*> texts) -> int32_t {
    for (const char* t : texts)
      if (int32_t id = id_of(t); id >= 0) return id;
    return -1;
  };

  // Merges (byte-level keeps them; SentencePiece turns their order into scores).
  std::vector<std::string> merges;
  if (model.contains("merges") && model["merges"].is_array()) {
    merges.reserve(model["merges"].size());
    for (const json& m : model["merges"]) merges.push_back(merge_text(m, path));
  }
  if (v.kind == VocabKind::BytePairGpt2) {
    v.merges = std::move(merges);
  } else {
    const float unreachable = -static_cast<float>(merges.size()) - 1.0f;
    v.scores.assign(n, 0.0f);
    std::vector<uint8_t> made(n, 0);
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const std::string& m = merges[rank];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) continue;
      const int32_t id = id_of(m.substr(0, sp) + m.substr(sp + 1));
      if (id < 0 || made[static_cast<size_t>(id)]) continue;
      made[static_cast<size_t>(id)] = 1;
      v.scores[static_cast<size_t>(id)] = -static_cast<float>(rank);
    }
    // Multi-character pieces no merge makes: last in line, after every merge.
    for (size_t i = 0; i < n; ++i) {
      const std::string& t = v.tokens[i];
      const bool multi_char = utf8::valid_char_length(t) < t.size();
      if (!made[i] && v.types[i] == TokenType::Normal && multi_char) v.scores[i] = unreachable;
    }
  }

  // Special tokens.
  const std::string unk_text = model.contains("unk_token") && model["unk_token"].is_string()
                                   ? model["unk_token"].get<std::string>()
                                   : token_text(cfg, "unk_token");
  v.unk_id = id_of(unk_text);
  if (v.unk_id >= 0) v.types[static_cast<size_t>(v.unk_id)] = TokenType::Unknown;
  v.bos_id = id_of(token_text(cfg, "bos_token"));
  v.eos_id = id_of(token_text(cfg, "eos_token"));
  v.pad_id = id_of(token_text(cfg, "pad_token"));
  if (v.bos_id < 0 && !cfg.contains("bos_token")) v.bos_id = first_of({"<s>", "<|begin_of_text|>"});
  if (v.eos_id < 0) v.eos_id = first_of({"</s>", "<|end_of_text|>", "<|endoftext|>"});
  v.eot_id = first_of({"<|eot_id|>", "<|im_end|>", "<|end|>"});
  v.eom_id = first_of({"<|eom_id|>"});

  // BOS/EOS addition: the post-processor's single-sequence template decides
  // where it exists (it is what the HF tokenizer runs), else the config.
  bool have_template = false;
  for_each_component(section("post_processor"), [&](const json& c) {
    if (type_of(c) != "TemplateProcessing" || !c.contains("single") || !c["single"].is_array()) return;
    have_template = true;
    const json& single = c["single"];
    auto special_id = [&](const json& item) -> int32_t {
      if (!item.contains("SpecialToken")) return -1;
      return id_of(item["SpecialToken"].value("id", std::string()));
    };
    if (!single.empty() && special_id(single.front()) >= 0) {
      v.add_bos = true;
      v.bos_id = special_id(single.front());
    }
    if (single.size() > 1 && special_id(single.back()) >= 0) {
      v.add_eos = true;
      v.eos_id = special_id(single.back());
    }
  });
  if (!have_template) {
    v.add_bos = cfg.value("add_bos_token", false) && v.bos_id >= 0;
    v.add_eos = cfg.value("add_eos_token", false) && v.eos_id >= 0;
  }

  if (cfg.contains("chat_template")) {
    const json& ct = cfg["chat_template"];
    if (ct.is_string()) {
      v.chat_template = ct.get<std::string>();
    } else if (ct.is_array()) {  // [{"name": "default", "template": "..."}, ...]
      for (const json& e : ct)
        if (e.value("name", std::string()) == "default" && e.contains("template"))
          v.chat_template = e["template"].get<std::string>();
    }
  }
  v.validate(path);
  return v;
}

}  // namespace ms
