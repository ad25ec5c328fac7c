#include "convert/converter.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "convert/progress.h"
#include "cpu/thread_pool.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "tokenizer/hf_import.h"
#include "util/error.h"

namespace ms {
namespace {

namespace fs = std::filesystem;

// Staging per block of rows: the f32 copy is at most this big.
constexpr int64_t kBlockFloats = 8 << 20;  // 32 MiB of f32

// Elements [first, first + row_len) of a tensor, as f32.
void read_span_f32(const StTensor& t, int64_t first, int64_t row_len, float* dst) {
  const int64_t size = st_dtype_size(t.dtype);
  const uint64_t begin = static_cast<uint64_t>(first * size);
  const uint64_t len = static_cast<uint64_t>(row_len * size);
  if (first < 0 || begin + len > t.nbytes)
    throw Error("internal: elements from " + std::to_string(first) + " outside tensor '" + t.name + "'");
  const uint8_t* p = t.data + begin;
  switch (t.dtype) {
    case StDType::F32: std::memcpy(dst, p, len); return;
    case StDType::F16:
    case StDType::BF16:
      for (int64_t i = 0; i < row_len; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = t.dtype == StDType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    case StDType::F64:
      for (int64_t i = 0; i < row_len; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        dst[i] = static_cast<float>(d);
      }
      return;
    default:
      throw Error(t.file + ": tensor '" + t.name + "' has dtype " + st_dtype_name(t.dtype) + ", which cannot be converted");
  }
}

// One source row (row_len elements starting at element row*row_len) as f32.
void read_row_f32(const StTensor& t, int64_t row, int64_t row_len, float* dst) {
  read_span_f32(t, row * row_len, row_len, dst);
}

void encode_row(DType type, const float* src, void* dst, int64_t n) {
  switch (type) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    default: quantize_row_ref(type, src, dst, n); return;
  }
}

// Drops a source range's pages from this process's mapping once converted:
// they stay in the page cache, but do not pile up in the RSS of a conversion
// that reads the whole checkpoint. (Read-only file mapping: a later read just
// faults the pages back in.)
void release_pages(const uint8_t* p, uint64_t n) {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const uint64_t end = (reinterpret_cast<uintptr_t>(p) + n + page - 1) / page * page;
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advisory: errors are harmless
}

bool in_order(const Slab& s) { return s.permute_heads == 0 && s.row_map.empty() && !s.is_gather(); }

void apply_value_op(ValueOp op, float* row, int64_t n) {
  switch (op) {
    case ValueOp::None: return;
    case ValueOp::AddOne:
      for (int64_t i = 0; i < n; ++i) row[i] += 1.0f;
      return;
    case ValueOp::NegExp:
      for (int64_t i = 0; i < n; ++i) row[i] = -std::exp(row[i]);
      return;
  }
}

// One GGUF MXFP4 row from a checkpoint's MXFP4 row (tensor_plan.h: Slab):
// the scale byte as it is; HF packs elements 2j (low) and 2j+1 (high) in byte
// j of a block, GGUF element i (low) and i + 16 (high) in byte i.
void repack_mxfp4_row(const uint8_t* codes, const uint8_t* scales, int64_t n_blocks, uint8_t* dst) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* c = codes + b * 16;
    auto code = [&](int n) { return n % 2 == 0 ? c[n / 2] & 0x0F : c[n / 2] >> 4; };
    uint8_t* o = dst + b * 17;
    o[0] = scales[b];
    for (int i = 0; i < 16; ++i) o[1 + i] = static_cast<uint8_t>(code(i) | (code(i + 16) << 4));
  }
}

void write_mxfp4_slab(GgufWriter& w, const Slab& s, ProgressMeter& progress) {
  const int64_t nb = s.row_len / 32;
  std::vector<uint8_t> out(static_cast<size_t>(s.n_rows * nb * 17));
  for (int64_t r = 0; r < s.n_rows; ++r) {
    const int64_t src_row = s.gather_base + r * s.gather_row;
    if ((src_row + 1) * nb * 16 > static_cast<int64_t>(s.src->nbytes) ||
        (src_row + 1) * nb > static_cast<int64_t>(s.mxfp4_scales->nbytes))
      throw Error("internal: MXFP4 row " + std::to_string(src_row) + " outside '" + s.src->name + "'");
    repack_mxfp4_row(s.src->data + src_row * nb * 16, s.mxfp4_scales->data + src_row * nb, nb,
                     out.data() + r * nb * 17);
  }
  w.write_tensor_data(out.data(), out.size());
  progress.add(static_cast<uint64_t>(s.n_rows * nb * 17));
}

// Streams one planned tensor into the writer, block of rows by block.
void write_tensor(GgufWriter& w, const PlannedTensor& t, ThreadPool& pool, ProgressMeter& progress) {
  std::vector<float> f32;
  std::vector<uint8_t> out;
  for (const Slab& s : t.slabs) {
    if (s.is_mxfp4_repack()) {
      if (t.type != DType::MXFP4) throw Error("internal: '" + t.name + "' repacks MXFP4 but is typed otherwise");
      write_mxfp4_slab(w, s, progress);
      continue;
    }
    const int64_t n = s.row_len;
    const int64_t rb = row_bytes(t.type, n);
    const int64_t block_rows = std::max<int64_t>(1, std::min<int64_t>(s.n_rows, kBlockFloats / n));
    f32.resize(static_cast<size_t>(block_rows * n));
    out.resize(static_cast<size_t>(block_rows * rb));
    const int64_t elem = st_dtype_size(s.src->dtype);
    const int64_t grain = std::max<int64_t>(1, 16384 / n);  // ~64 KiB of f32 per task
    // A gather reads its whole span once (one expert of gpt-oss: n_embd x
    // 2 ff values), then picks strided elements from it.
    std::vector<float> span;
    if (s.is_gather()) {
      span.resize(static_cast<size_t>(s.gather_span()));
      read_span_f32(*s.src, s.gather_base, s.gather_span(), span.data());
    }
    for (int64_t r0 = 0; r0 < s.n_rows; r0 += block_rows) {
      const int64_t rows = std::min(block_rows, s.n_rows - r0);
      pool.parallel_for(rows, grain, [&](int64_t b, int64_t e) {
        std::vector<float> src;
        for (int64_t r = b; r < e; ++r) {
          float* row = f32.data() + r * n;
          if (s.is_gather()) {
            const float* base = span.data() + (r0 + r) * s.gather_row;
            for (int64_t i = 0; i < n; ++i) row[i] = base[i * s.gather_elem];
          } else if (s.col_map.empty()) {
            read_row_f32(*s.src, s.first_row + source_row_in_slab(s, r0 + r), n, row);
          } else {  // elements out of order within the row
            src.resize(static_cast<size_t>(n));
            read_row_f32(*s.src, s.first_row + source_row_in_slab(s, r0 + r), n, src.data());
            for (int64_t i = 0; i < n; ++i) row[i] = src[static_cast<size_t>(s.col_map[static_cast<size_t>(i)])];
          }
          apply_value_op(s.op, row, n);
          encode_row(t.type, row, out.data() + r * rb, n);
        }
      });
      w.write_tensor_data(out.data(), static_cast<size_t>(rows * rb));
      progress.add(static_cast<uint64_t>(rows * n * elem));
      if (in_order(s))
        release_pages(s.src->data + (s.first_row + r0) * n * elem, static_cast<uint64_t>(rows * n * elem));
    }
    // Permuted slabs read rows out of order: release at the end.
    if (s.is_gather())
      release_pages(s.src->data + s.gather_base * elem, static_cast<uint64_t>(s.gather_span() * elem));
    else if (!in_order(s))
      release_pages(s.src->data + s.first_row * n * elem, static_cast<uint64_t>(s.n_rows * n * elem));
  }
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p.string() + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string default_name(const ConvertOptions& o, const HfModelConfig& c) {
  if (!o.name.empty()) return o.name;
  std::string n = c.name;
  while (!n.empty() && n.back() == '/') n.pop_back();
  if (!n.empty()) return fs::path(n).filename().string();
  fs::path d = fs::absolute(o.input_dir).lexically_normal();
  if (d.filename().empty()) d = d.parent_path();
  return d.filename().string();
}

std::string list_some(const std::vector<std::string>& v, size_t max_items = 10) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < max_items; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > max_items) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s;
}

}  // namespace

Vocab load_hf_vocab(const std::string& dir, int64_t n_vocab) {
  const fs::path tok = fs::path(dir) / "tokenizer.json";
  if (!fs::exists(tok))
    throw Error(tok.string() + " does not exist; moestream needs the HF tokenizer.json (or pass --no-vocab "
                "to write a file without a tokenizer)");
  const fs::path cfg = fs::path(dir) / "tokenizer_config.json";
  Vocab v = vocab_from_hf_tokenizer_json(tok.string(), fs::exists(cfg) ? cfg.string() : "");
  // transformers 4.43+ may keep the chat template in its own file.
  const fs::path jinja = fs::path(dir) / "chat_template.jinja";
  if (v.chat_template.empty() && fs::exists(jinja)) v.chat_template = read_text(jinja);
  if (v.n_tokens() > n_vocab)
    throw Error(tok.string() + " has " + std::to_string(v.n_tokens()) + " tokens but the model's vocab_size is " +
                std::to_string(n_vocab) + "; the tokenizer does not belong to this checkpoint");
  // The embedding usually has spare rows past the tokenizer's last id (sized
  // for hardware); GGUF wants one token per row, so pad as unused tokens.
  for (int64_t id = v.n_tokens(); id < n_vocab; ++id) {
    v.tokens.push_back("[PAD" + std::to_string(id) + "]");
    v.types.push_back(TokenType::Unused);
    if (!v.scores.empty()) v.scores.push_back(0.0f);
  }
  return v;
}

void write_model_metadata(GgufWriter& w, const HfModelConfig& c, ConvertType type, const std::string& name) {
  const std::string a = c.gguf_arch + ".";
  auto u32 = [](int64_t v) { return GgufValue::of_u32(static_cast<uint32_t>(v)); };
  w.set("general.architecture", GgufValue::of_string(c.gguf_arch));
  w.set("general.name", GgufValue::of_string(name));
  w.set("general.file_type", GgufValue::of_u32(gguf_file_type(type)));
  const bool quantized = type != ConvertType::F32 && type != ConvertType::F16 && type != ConvertType::BF16;
  if (quantized) w.set("general.quantization_version", GgufValue::of_u32(2));
  w.set(a + "vocab_size", u32(c.n_vocab));
  w.set(a + "context_length", u32(c.n_ctx));
  w.set(a + "embedding_length", u32(c.n_embd));
  w.set(a + "block_count", u32(c.n_layer));
  w.set(a + "feed_forward_length", u32(c.n_ff));
  w.set(a + "attention.head_count", u32(c.n_head));
  w.set(a + "attention.head_count_kv", u32(c.n_head_kv));
  w.set(a + "attention.key_length", u32(c.head_dim));
  w.set(a + "attention.value_length", u32(c.head_dim));
  w.set(a + "attention.layer_norm_rms_epsilon", GgufValue::of_f32(static_cast<float>(c.rms_eps)));
  w.set(a + "rope.freq_base", GgufValue::of_f32(static_cast<float>(c.rope_theta)));
  w.set(a + "rope.dimension_count", u32(c.n_rot()));
  if (!c.rope_scaling_type.empty()) {
    w.set(a + "rope.scaling.type", GgufValue::of_string(c.rope_scaling_type));
    w.set(a + "rope.scaling.factor", GgufValue::of_f32(static_cast<float>(c.rope_factor)));
  }
  if (c.rope_scaling_type == "yarn") {
    w.set(a + "rope.scaling.original_context_length", u32(c.rope_orig_ctx));
    if (c.yarn_beta_fast > 0) w.set(a + "rope.scaling.yarn_beta_fast", GgufValue::of_f32(static_cast<float>(c.yarn_beta_fast)));
    if (c.yarn_beta_slow > 0) w.set(a + "rope.scaling.yarn_beta_slow", GgufValue::of_f32(static_cast<float>(c.yarn_beta_slow)));
    if (c.yarn_ext_factor >= 0)
      w.set(a + "rope.scaling.yarn_ext_factor", GgufValue::of_f32(static_cast<float>(c.yarn_ext_factor)));
  }
  if (c.is_moe()) {
    w.set(a + "expert_count", u32(c.n_expert));
    w.set(a + "expert_used_count", u32(c.n_expert_used));
    w.set(a + "expert_feed_forward_length", u32(c.n_ff_exp));
    w.set(a + "expert_weights_norm", GgufValue::of_bool(c.norm_topk_prob));
  }
  if (c.arch == HfArch::GptOss) {
    w.set(a + "attention.sliding_window", u32(c.sliding_window));
    // llama.cpp's gpt-oss pattern is the even layers; another layer_types
    // pattern is written per layer (the loader and llama.cpp read the array).
    bool even = true;
    for (size_t il = 0; il < c.swa_layers.size(); ++il) even = even && c.swa_layers[il] == (il % 2 == 0);
    if (!even) {
      std::vector<GgufValue> swa;
      for (bool b : c.swa_layers) swa.push_back(GgufValue::of_bool(b));
      w.set(a + "attention.sliding_window_pattern", GgufValue::of_array(GgufType::BOOL, std::move(swa)));
    }
  }
  if (c.arch == HfArch::Qwen35Moe) {
    // block_count counts the MTP blocks written after the main stack.
    if (c.n_mtp > 0) {
      w.set(a + "block_count", u32(c.n_layer + c.n_mtp));
      w.set(a + "nextn_predict_layers", u32(c.n_mtp));
    }
    w.set(a + "expert_shared_feed_forward_length", u32(c.n_ff_shexp));
    w.set(a + "full_attention_interval", u32(c.full_attn_interval));
    // Each block's kind, MTP blocks (full attention) included: the loader
    // takes these over the interval, so any layer_types pattern converts.
    std::vector<GgufValue> recurrent;
    for (int64_t il = 0; il < c.n_layer + c.n_mtp; ++il)
      recurrent.push_back(GgufValue::of_bool(il < c.n_layer && c.is_linear_layer(il)));
    w.set(a + "attention.recurrent_layers", GgufValue::of_array(GgufType::BOOL, std::move(recurrent)));
    w.set(a + "ssm.conv_kernel", u32(c.lin_conv_kernel));
    w.set(a + "ssm.state_size", u32(c.lin_head_k));
    w.set(a + "ssm.group_count", u32(c.lin_k_heads));
    w.set(a + "ssm.time_step_rank", u32(c.lin_v_heads));
    w.set(a + "ssm.inner_size", u32(c.lin_v_heads * c.lin_head_v));
    std::vector<int32_t> sections = c.mrope_sections;
    if (sections.empty()) sections = {11, 11, 10};  // the reference's default
    sections.resize(4, 0);
    w.set(a + "rope.dimension_sections", GgufValue::of_i32s(sections));
  }
}

std::string describe_plan(const ConversionPlan& plan) {
  std::ostringstream o;
  for (const PlannedTensor& t : plan.tensors) {
    std::string shape;
    for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? " x " : "") + std::to_string(t.shape[i]);
    std::string src = t.slabs.empty() ? "?" : t.slabs[0].src->name;
    if (t.slabs.size() > 1) src += " (+" + std::to_string(t.slabs.size() - 1) + " slabs)";
    if (!t.slabs.empty() && t.slabs[0].permute_heads > 0) src += " [rope-permuted]";
    o << t.name << "  {" << shape << "}  " << type_name(t.type) << "  <- " << src;
    if (!t.type_note.empty()) o << "  (" << t.type_note << ")";
    o << '\n';
  }
  return o.str();
}

ConvertSummary convert_hf_to_gguf(const ConvertOptions& o, const std::function<void(const std::string&)>& log) {
  const auto t0 = std::chrono::steady_clock::now();
  auto note = [&](ConvertSummary& s, const std::string& msg) {
    s.notes.push_back(msg);
    if (log) log(msg);
  };
  if (o.output_path.empty()) throw Error("no output path given (-o OUT.gguf)");

  ConvertSummary s;
  s.config = read_hf_config(o.input_dir);
  const SafetensorsModel model(o.input_dir);
  const ConversionPlan plan = plan_conversion(s.config, model, o.type);
  if (!plan.unused.empty()) {
    const std::string msg = std::to_string(plan.unused.size()) +
                            " checkpoint tensor(s) have no place in the GGUF layout: " + list_some(plan.unused);
    if (!o.allow_unused)
      throw Error(msg + "; the checkpoint has parts moestream does not convert (converting would silently drop "
                  "them). Pass --allow-unused to convert anyway.");
    note(s, "warning: " + msg + " (dropped, --allow-unused)");
  }
  for (const std::string& i : plan.ignored) note(s, "skipped " + i);
  for (const PlannedTensor& t : plan.tensors)
    if (!t.type_note.empty()) note(s, t.name + ": " + t.type_note);

  Vocab vocab;
  if (o.with_vocab) vocab = load_hf_vocab(o.input_dir, s.config.n_vocab);

  // Everything checked: now write.
  GgufWriter w(o.output_path);
  HfModelConfig written = s.config;
  written.n_mtp = plan.n_mtp;  // MTP blocks only when the checkpoint had them
  write_model_metadata(w, written, o.type, default_name(o, s.config));
  if (o.with_vocab) write_vocab_metadata(w, vocab);
  for (const PlannedTensor& t : plan.tensors) {
    w.add_tensor(t.name, t.type, t.shape);
    ++s.type_counts[type_name(t.type)];
  }
  w.write_header();

  ThreadPool pool(o.threads);
  ProgressMeter progress(plan.source_bytes, o.progress);
  for (const PlannedTensor& t : plan.tensors) {
    progress.set_label(t.name);
    write_tensor(w, t, pool, progress);
  }
  w.finish();
  progress.finish();

  s.expert_layout = plan.expert_layout;
  s.n_tensors = plan.tensors.size();
  s.source_bytes = plan.source_bytes;
  s.output_bytes = plan.output_bytes;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace ms
