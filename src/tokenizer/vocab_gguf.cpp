// The GGUF side of vocabularies: reading the tokenizer.* keys into a Vocab,
// writing them back, and building a Tokenizer straight from a file.
#include <cstdint>

#include "format/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace ms {

namespace {

const GgufValue* find_array(const GgufFile& f, const std::string& key, GgufType elem_kind) {
  const GgufValue* v = f.find(key);
  if (!v) return nullptr;
  if (v->type != GgufType::ARRAY)
    throw Error(f.path() + ": metadata key '" + key + "' should be an array but is " +
                gguf_type_name(v->type));
  bool ok = false;
  switch (elem_kind) {
    case GgufType::STRING: ok = v->elem_type == GgufType::STRING; break;
    case GgufType::FLOAT32:
      ok = v->elem_type == GgufType::FLOAT32 || v->elem_type == GgufType::FLOAT64;
      break;
    default:  // any integer type
      ok = v->elem_type != GgufType::STRING && v->elem_type != GgufType::ARRAY &&
           v->elem_type != GgufType::FLOAT32 && v->elem_type != GgufType::FLOAT64 &&
           v->elem_type != GgufType::BOOL;
      break;
  }
  if (!ok)
    throw Error(f.path() + ": metadata key '" + key + "' is an array of " +
                gguf_type_name(v->elem_type) + ", expected " + gguf_type_name(elem_kind));
  return v;
}

int32_t read_id(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) return -1;
  const int64_t id = v->as_int(key);
  // Some converters write -1 (as u32 0xFFFFFFFF) for "none".
  if (id == -1 || id == 0xFFFFFFFFll) return -1;
  if (id < 0 || id > INT32_MAX)
    throw Error(f.path() + ": metadata key '" + key + "' = " + std::to_string(id) +
                " is not a valid token id");
  return static_cast<int32_t>(id);
}

}  // namespace

Vocab load_vocab(const GgufFile& f) {
  Vocab v;
  const std::string where = f.path();
  const GgufValue* model = f.find("tokenizer.ggml.model");
  if (!model)
    throw Error(where + ": no tokenizer in this file (metadata key 'tokenizer.ggml.model' is "
                "missing); use a GGUF converted with its tokenizer");
  const std::string& model_name = model->as_string("tokenizer.ggml.model");
  if (model_name == "gpt2") {
    v.kind = VocabKind::BytePairGpt2;
  } else if (model_name == "llama") {
    v.kind = VocabKind::SentencePiece;
  } else {
    throw Error(where + ": tokenizer.ggml.model = '" + model_name +
                "' is not supported; supported: 'gpt2' (byte-level BPE), 'llama' (SentencePiece BPE)");
  }
  v.pre = f.get_string("tokenizer.ggml.pre", "");

  const GgufValue* toks = find_array(f, "tokenizer.ggml.tokens", GgufType::STRING);
  if (!toks) throw Error(where + ": metadata key 'tokenizer.ggml.tokens' is missing");
  v.tokens.reserve(toks->arr.size());
  for (const GgufValue& t : toks->arr) v.tokens.push_back(t.s);

  if (const GgufValue* tt = find_array(f, "tokenizer.ggml.token_type", GgufType::INT32)) {
    v.types.reserve(tt->arr.size());
    for (const GgufValue& t : tt->arr) {
      const int64_t x = t.as_int("tokenizer.ggml.token_type");
      if (x < 0 || x > 6)
        throw Error(where + ": tokenizer.ggml.token_type[" + std::to_string(v.types.size()) +
                    "] = " + std::to_string(x) + " is not a known token type (0..6)");
      v.types.push_back(static_cast<TokenType>(x));
    }
  } else {
    v.types.assign(v.tokens.size(), TokenType::Normal);
  }
  if (const GgufValue* sc = find_array(f, "tokenizer.ggml.scores", GgufType::FLOAT32)) {
    v.scores.reserve(sc->arr.size());
    for (const GgufValue& s : sc->arr) v.scores.push_back(static_cast<float>(s.f));
  }
  if (const GgufValue* mg = find_array(f, "tokenizer.ggml.merges", GgufType::STRING)) {
    v.merges.reserve(mg->arr.size());
    for (const GgufValue& m : mg->arr) v.merges.push_back(m.s);
  }
  v.bos_id = read_id(f, "tokenizer.ggml.bos_token_id");
  v.eos_id = read_id(f, "tokenizer.ggml.eos_token_id");
  v.eot_id = read_id(f, "tokenizer.ggml.eot_token_id");
  v.eom_id = read_id(f, "tokenizer.ggml.eom_token_id");
  v.unk_id = read_id(f, "tokenizer.ggml.unknown_token_id");
  v.pad_id = read_id(f, "tokenizer.ggml.padding_token_id");
  // SentencePiece models add BOS unless told otherwise; byte-level BPE does not.
  const bool spm = v.kind == VocabKind::SentencePiece;
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token", spm && v.bos_id >= 0);
  v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token", false);
  v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", spm);
  v.chat_template = f.get_string("tokenizer.chat_template", "");
  v.validate(where);
  return v;
}

void write_vocab_metadata(GgufWriter& w, const Vocab& v) {
  v.validate("write_vocab_metadata");
  w.set("tokenizer.ggml.model", GgufValue::of_string(v.model_name()));
  if (!v.pre.empty()) w.set("tokenizer.ggml.pre", GgufValue::of_string(v.pre));
  w.set("tokenizer.ggml.tokens", GgufValue::of_strings(v.tokens));
  std::vector<int32_t> types(v.types.size());
  for (size_t i = 0; i < types.size(); ++i) types[i] = static_cast<int32_t>(v.types[i]);
  w.set("tokenizer.ggml.token_type", GgufValue::of_i32s(types));
  if (!v.scores.empty()) w.set("tokenizer.ggml.scores", GgufValue::of_f32s(v.scores));
  if (!v.merges.empty()) w.set("tokenizer.ggml.merges", GgufValue::of_strings(v.merges));
  auto set_id = [&](const char* key, int32_t id) {
    if (id >= 0) w.set(key, GgufValue::of_u32(static_cast<uint32_t>(id)));
  };
  set_id("tokenizer.ggml.bos_token_id", v.bos_id);
  set_id("tokenizer.ggml.eos_token_id", v.eos_id);
  set_id("tokenizer.ggml.eot_token_id", v.eot_id);
  set_id("tokenizer.ggml.eom_token_id", v.eom_id);
  set_id("tokenizer.ggml.unknown_token_id", v.unk_id);
  set_id("tokenizer.ggml.padding_token_id", v.pad_id);
  w.set("tokenizer.ggml.add_bos_token", GgufValue::of_bool(v.add_bos));
  w.set("tokenizer.ggml.add_eos_token", GgufValue::of_bool(v.add_eos));
  if (v.kind == VocabKind::SentencePiece)
    w.set("tokenizer.ggml.add_space_prefix", GgufValue::of_bool(v.add_space_prefix));
  if (!v.chat_template.empty())
    w.set("tokenizer.chat_template", GgufValue::of_string(v.chat_template));
}

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  try {
    return Tokenizer(load_vocab(file));
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(file.path(), 0) == 0) throw;
    throw Error(file.path() + ": " + msg);
  }
}

}  // namespace ms
