#include "model/dflash_weights.h"

#include <set>
#include <string>

#include "format/gguf.h"
#include "util/error.h"

namespace ms {
namespace {

constexpr const char* A = "dflash";

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "{";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "}";
}

// Tensors of one file: each bound one is recorded, so that whatever is left
// over (a variant's extra heads) can be refused by name.
class DFlashBinder {
 public:
  explicit DFlashBinder(const GgufFile& f) : f_(f) {}

  TensorView get(const std::string& name, std::vector<int64_t> shape, bool required = true, bool f32 = false) {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (!required) return {};
      throw Error(f_.path() + ": missing tensor '" + name + "' (needed by a DFlash drafter)");
    }
    bound_.insert(name);
    if (shape.size() == 1 && t->shape.size() == 2 && t->shape[1] == 1 && t->shape[0] == shape[0]) shape = t->shape;
    if (t->shape != shape)
      throw Error(f_.path() + ": tensor '" + name + "' has shape " + shape_str(t->shape) + ", expected " +
                  shape_str(shape) + " from the drafter's hyper-parameters");
    const TypeInfo& info = type_info(t->type);
    if (!info.computable || shape[0] % info.block_size != 0)
      throw Error(f_.path() + ": tensor '" + name + "' has type " + info.name + ", which moestream cannot compute with here");
    if (f32 && t->type != DType::F32)
      throw Error(f_.path() + ": tensor '" + name + "' is " + type_name(t->type) + "; norms must be f32");
    TensorView v;
    v.name = name;
    v.type = t->type;
    v.data = t->data;
    v.cols = shape[0];
    v.rows = shape.size() > 1 ? shape[1] : 1;
    v.file_offset = f_.data_offset() + t->offset;
    v.nbytes = t->nbytes;
    return v;
  }
  TensorView norm(const std::string& name, int64_t n, bool required = true) { return get(name, {n}, required, true); }
  // Rows of a 2-D tensor of `cols` columns, or 0 when absent.
  int64_t rows_of(const std::string& name, int64_t cols) const {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (!t) return 0;
    if (t->shape.size() != 2 || t->shape[0] != cols)
      throw Error(f_.path() + ": tensor '" + name + "' has shape " + shape_str(t->shape) + ", expected {" +
                  std::to_string(cols) + ", n_vocab}");
    return t->shape[1];
  }
  void refuse_unbound() const {
    for (const GgufTensorInfo& t : f_.tensors())
      if (!bound_.count(t.name))
        throw Error(f_.path() + ": tensor '" + t.name +
                    "' belongs to a DFlash variant moestream does not run (DFlash2 selectors, DSpark heads, "
                    "d2t vocabularies, attention sinks, DSV4 stages); only the plain DFlash drafter is supported");
  }

 private:
  const GgufFile& f_;
  std::set<std::string> bound_;
};

int64_t int_in(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi, const int64_t* def = nullptr) {
  if (!f.has(key)) {
    if (def) return *def;
    throw Error(f.path() + ": missing metadata key '" + key + "' (needed by a DFlash drafter)");
  }
  const int64_t v = f.get_int(key);
  if (v < lo || v > hi)
    throw Error(f.path() + ": " + key + " = " + std::to_string(v) + " is outside " + std::to_string(lo) + ".." +
                std::to_string(hi));
  return v;
}

bool flag(const GgufFile& f, const std::string& key, bool def) {
  const GgufValue* v = f.find(key);
  if (!v) return def;
  if (v->type == GgufType::STRING) return v->s == "true";  // some converters write strings
  return v->as_bool(key);
}

}  // namespace

std::string DFlashConfig::describe() const {
  std::string layers;
  for (int l : target_layers) layers += (layers.empty() ? "" : ",") + std::to_string(l);
  return "dflash, " + std::to_string(n_layer) + " layers, n_embd " + std::to_string(n_embd) + ", block " +
         std::to_string(block_size) + (causal ? " (causal)" : "") + ", target layers [" + layers + "]";
}

DFlashWeights bind_dflash(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture", "");
  if (arch != A)
    throw Error(f.path() + ": general.architecture is '" + arch + "', not 'dflash' (a DFlash drafter file)");
  for (const char* key : {".hyper_connection.count", ".attention.sliding_window", ".selector_rank"})
    if (f.has(A + std::string(key)) && f.get_int(A + std::string(key)) != 0)
      throw Error(f.path() + ": " + A + key + " marks a DFlash variant moestream does not run");
  if (f.has(std::string(A) + ".hidden_act") && f.get_string(std::string(A) + ".hidden_act") != "silu")
    throw Error(f.path() + ": " + A + ".hidden_act '" + f.get_string(std::string(A) + ".hidden_act") +
                "' is not supported (silu only)");
  DFlashWeights w;
  DFlashConfig& c = w.cfg;
  const std::string P = std::string(A) + ".";
  c.n_layer = static_cast<int>(int_in(f, P + "block_count", 1, kDFlashMaxLayers));
  c.n_embd = int_in(f, P + "embedding_length", 1, 1 << 16);
  c.n_head = static_cast<int>(int_in(f, P + "attention.head_count", 1, 1024));
  c.n_head_kv = static_cast<int>(int_in(f, P + "attention.head_count_kv", 1, c.n_head));
  if (c.n_head % c.n_head_kv != 0)
    throw Error(f.path() + ": attention.head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
                std::to_string(c.n_head_kv));
  const int64_t def_hd = c.n_embd / c.n_head;
  c.head_dim = static_cast<int>(int_in(f, P + "attention.key_length", 2, 1024, &def_hd));
  if (int_in(f, P + "attention.value_length", 1, 1024, &def_hd) != c.head_dim)
    throw Error(f.path() + ": attention.value_length differs from key_length (not supported)");
  if (c.head_dim % 2 != 0) throw Error(f.path() + ": attention.key_length must be even (RoPE pairs)");
  const int64_t def_rot = c.head_dim;
  c.n_rot = static_cast<int>(int_in(f, P + "rope.dimension_count", 2, c.head_dim, &def_rot));
  if (c.n_rot % 2 != 0) throw Error(f.path() + ": rope.dimension_count must be even");
  // The cache is sized from these times the context: bounded by the hidden
  // size (published drafters: q n_embd wide, k/v a quarter of it).
  if (int64_t{c.n_head} * c.head_dim > 4 * c.n_embd)
    throw Error(f.path() + ": attention heads " + std::to_string(c.n_head) + " x " + std::to_string(c.head_dim) +
                " are over 4 times the hidden size " + std::to_string(c.n_embd));
  c.n_ff = int_in(f, P + "feed_forward_length", 1, 1 << 20);
  const int64_t def_ctx = 0;
  c.n_ctx_train = int_in(f, P + "context_length", 0, int64_t{1} << 32, &def_ctx);
  c.rms_eps = static_cast<float>(f.get_float(P + "attention.layer_norm_rms_epsilon", 1e-6));
  c.rope_base = static_cast<float>(f.get_float(P + "rope.freq_base", 10000.0));
  c.attn_scale = static_cast<float>(f.get_float(P + "attention.scale", 0.0));
  c.embedding_scale = static_cast<float>(f.get_float(P + "embedding_scale", 0.0));
  if (!(c.rms_eps > 0 && c.rms_eps < 1) || !(c.rope_base > 0) || !(c.attn_scale >= 0) || !(c.embedding_scale >= 0))
    throw Error(f.path() + ": rms epsilon, rope.freq_base, attention.scale or embedding_scale is out of range");
  const int64_t def_block = 16;
  c.block_size = static_cast<int>(int_in(f, P + "block_size", 2, kDFlashMaxBlock, &def_block));
  c.causal = flag(f, P + "attention.causal", false);
  c.mask_token = static_cast<int32_t>(int_in(f, "tokenizer.ggml.mask_token_id", 0, (int64_t{1} << 31) - 1));

  const GgufValue* tl = f.find(P + "target_layers");
  if (!tl) throw Error(f.path() + ": missing metadata key '" + P + "target_layers' (the target layers a DFlash drafter reads)");
  if (tl->type != GgufType::ARRAY || tl->arr.empty() || tl->arr.size() > kDFlashMaxTargetLayers)
    throw Error(f.path() + ": " + P + "target_layers must be an array of 1.." + std::to_string(kDFlashMaxTargetLayers) +
                " layer ids");
  for (const GgufValue& v : tl->arr) {
    const int64_t id = v.as_int(P + "target_layers");
    if (id < 0 || id > 4096) throw Error(f.path() + ": " + P + "target_layers holds " + std::to_string(id));
    c.target_layers.push_back(static_cast<int>(id));
  }

  DFlashBinder b(f);
  const int64_t D = c.n_embd, hd = c.head_dim;
  const int64_t q_dim = int64_t{c.n_head} * hd, kv_dim = int64_t{c.n_head_kv} * hd;
  c.n_vocab = b.rows_of("token_embd.weight", D);
  if (c.n_vocab == 0) c.n_vocab = b.rows_of("output.weight", D);
  if (c.n_vocab > 0) {
    w.token_embd = b.get("token_embd.weight", {D, c.n_vocab}, false);
    w.output = b.get("output.weight", {D, c.n_vocab}, false);
    if (!w.output) w.output = w.token_embd;  // tied, as llama.cpp falls back
  }
  w.fc = b.get("fc.weight", {static_cast<int64_t>(c.target_layers.size()) * D, D});
  w.enc_norm = b.norm("enc.output_norm.weight", D);
  w.output_norm = b.norm("output_norm.weight", D);
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    DFlashLayer L;
    L.attn_norm = b.norm(p + "attn_norm.weight", D);
    L.wq = b.get(p + "attn_q.weight", {D, q_dim});
    L.wk = b.get(p + "attn_k.weight", {D, kv_dim});
    L.wv = b.get(p + "attn_v.weight", {D, kv_dim}, false);
    L.wo = b.get(p + "attn_output.weight", {q_dim, D});
    L.q_norm = b.norm(p + "attn_q_norm.weight", hd);
    L.k_norm = b.norm(p + "attn_k_norm.weight", hd);
    L.attn_post_norm = b.norm(p + "attn_post_norm.weight", D, false);
    L.ffn_norm = b.norm(p + "ffn_norm.weight", D);
    L.ffn_gate = b.get(p + "ffn_gate.weight", {D, c.n_ff});
    L.ffn_up = b.get(p + "ffn_up.weight", {D, c.n_ff});
    L.ffn_down = b.get(p + "ffn_down.weight", {c.n_ff, D});
    L.ffn_post_norm = b.norm(p + "ffn_post_norm.weight", D, false);
    w.layers.push_back(L);
  }
  b.refuse_unbound();
  return w;
}

void check_dflash_fits(const DFlashConfig& d, const ModelConfig& t) {
  if (d.n_embd != t.n_embd)
    throw Error("the DFlash drafter's hidden size " + std::to_string(d.n_embd) + " is not the model's (" +
                std::to_string(t.n_embd) + ")");
  for (int l : d.target_layers)
    if (l >= t.n_layer)
      throw Error("the DFlash drafter reads target layer " + std::to_string(l) + ", but the model has " +
                  std::to_string(t.n_layer) + " layers");
  if (d.n_vocab != 0 && d.n_vocab != t.n_vocab)
    throw Error("the DFlash drafter's vocabulary has " + std::to_string(d.n_vocab) + " tokens, the model's " +
                std::to_string(t.n_vocab));
  if (d.mask_token >= t.n_vocab)
    throw Error("the DFlash drafter's mask token " + std::to_string(d.mask_token) + " is outside the model's vocabulary (" +
                std::to_string(t.n_vocab) + " tokens)");
}

}  // namespace ms
