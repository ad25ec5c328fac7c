// `moestream inspect FILE.gguf [--vram 12G] [--ctx 4096] [--json] [--no-tensors] [--metadata] [--check]`:
// what a GGUF holds (file, architecture, tokenizer, tensor types and their
// bytes, tensors, MTP blocks), whether moestream can run it (and if not, the
// tensor and reason), how its bytes split between dense weights and routed
// experts, and what a VRAM budget leaves for experts. --check also scans every
// weight for NaN/Inf (a corrupt download; model/weight_check.h). The sums
// live in src/model (tested there); this file only prints them.
// `--devices 0,1 --vram 12G|0:12G,1:20G` adds where every layer and expert
// would live on several GPUs (experts/device_placement.h; planned, not run).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "cli/device_flags.h"
#include "experts/device_placement.h"
#include "engine/kv_cache.h"
#include "format/gguf.h"
#include "model/context_plan.h"
#include "model/hparams.h"
#include "model/tensor_roles.h"
#include "model/weight_check.h"
#include "model/weights.h"
#include "util/bytes.h"
#include "util/error.h"

namespace ms::cli {
namespace {

struct InspectArgs {
  std::string path, vram, devices;
  double peer_gbps = 25;
  int64_t ctx = 4096;
  KvType kv_type = KvType::F16;  // --kv-type: the KV cache's bytes in the budget
  bool json = false, no_tensors = false, metadata = false, check = false;
};

// Whether the model binds for running: "" when it does, else the reason
// (the binder names the tensor and its type or shape).
std::string load_problem(const GgufFile& f) {
  try {
    (void)bind_weights(f);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// "3 (blk.3.*)" or "2 (blk.40.*, blk.41.*)"
std::string mtp_layers_str(const ModelHParams& h) {
  std::string s;
  for (int64_t il = h.n_layer - h.n_layer_nextn; il < h.n_layer; ++il)
    s += (s.empty() ? "" : ", ") + std::string("blk.") + std::to_string(il) + ".*";
  return s;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "{";
  for (size_t k = 0; k < s.size(); ++k) {
    if (k) out += ", ";
    out += std::to_string(s[k]);
  }
  return out + "}";
}

std::string num(double d, const char* fmt = "%g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, d);
  return buf;
}

// "1.2 GiB (1288490188 B)"
std::string bytes_both(uint64_t b) {
  return b < 1024 ? format_bytes(b) : format_bytes(b) + " (" + std::to_string(b) + " B)";
}

struct TokenizerSummary {
  std::string model, pre;
  int64_t n_tokens = 0;
  int64_t bos = -1, eos = -1;
  std::string bos_text, eos_text;
  bool chat_template = false;
};

TokenizerSummary read_tokenizer(const GgufFile& f) {
  TokenizerSummary t;
  t.model = f.get_string("tokenizer.ggml.model", "");
  t.pre = f.get_string("tokenizer.ggml.pre", "");
  const GgufValue* toks = f.find("tokenizer.ggml.tokens");
  const bool have_tokens = toks && toks->type == GgufType::ARRAY;
  if (have_tokens) t.n_tokens = static_cast<int64_t>(toks->arr.size());
  auto id_text = [&](const char* key, int64_t& id, std::string& text) {
    id = f.get_int(key, -1);
    if (have_tokens && id >= 0 && id < t.n_tokens && toks->arr[static_cast<size_t>(id)].type == GgufType::STRING)
      text = toks->arr[static_cast<size_t>(id)].s;
  };
  id_text("tokenizer.ggml.bos_token_id", t.bos, t.bos_text);
  id_text("tokenizer.ggml.eos_token_id", t.eos, t.eos_text);
  t.chat_template = f.has("tokenizer.chat_template");
  return t;
}

// Layers of the main stack with attention, as "all 48" or "12 of 48: 3, 7,
// 11, ..." (MTP blocks are not run by the forward pass: no KV cache there).
std::string attention_layers_str(const ModelHParams& h) {
  const int64_t trunk = h.n_layer - h.n_layer_nextn;
  int n = 0;
  for (int64_t il = 0; il < trunk && il < static_cast<int64_t>(h.layer_has_attention.size()); ++il)
    n += h.layer_has_attention[static_cast<size_t>(il)] ? 1 : 0;
  std::string s = n == trunk ? "all " + std::to_string(n) : std::to_string(n) + " of " + std::to_string(trunk);
  int shown = 0;
  for (int64_t il = 0; n != trunk && il < trunk && il < static_cast<int64_t>(h.layer_has_attention.size()); ++il) {
    if (!h.layer_has_attention[static_cast<size_t>(il)]) continue;
    if (shown == 8) {
      s += ", ...";
      break;
    }
    s += (shown++ ? ", " : ": ") + std::to_string(il);
  }
  if (h.n_layer_nextn > 0) s += " (MTP blocks not counted)";
  return s;
}

std::string kv_formula(const ModelHParams& h, int64_t ctx, KvType type) {
  int64_t kv_heads = 0;  // summed over the main stack's layers with attention (counts may differ per layer)
  int n_attn = 0;
  const size_t trunk = static_cast<size_t>(std::max<int64_t>(h.n_layer - h.n_layer_nextn, 0));
  for (size_t il = 0; il < h.n_head_kv_layer.size() && il < trunk; ++il)
    if (h.layer_has_attention[il]) kv_heads += h.n_head_kv_layer[il], ++n_attn;
  return std::to_string(ctx) + " tokens x " + std::to_string(kv_heads) + " KV heads (over " + std::to_string(n_attn) +
         " attention layers) x (" + std::to_string(h.head_dim) + " + " + std::to_string(h.head_dim_v) + ") dims x " +
         (type == KvType::Q8_0   ? "34 B / 32 (q8_0 K and V: blocks of 32 int8 + f16 scale)"
          : type == KvType::F32 ? "4 B (F32 K and V)"
                                : "2 B (F16 K and V)");
}

std::string reserve_formula(const ModelHParams& h) {
  return format_bytes(kVramFixedReserve) + " fixed (CUDA context, activations, workspaces) + f32 logits of " +
         std::to_string(kVramLogitRows) + " tokens x " + std::to_string(h.n_vocab) + " vocab";
}

// ---------------------------------------------------------------- devices

// The placement's view of the file: each layer's dense weights and KV cache
// at `ctx` (a recurrent layer's state instead), its experts, the embedding
// and the head apart; the reserve on every device; an f32 hidden state.
PlacementModel placement_model(const GgufFile& f, const ModelHParams& h, const WeightSplit& split, int64_t ctx,
                               int kv32) {
  PlacementModel m;
  m.k = static_cast<uint32_t>(std::max<int64_t>(h.n_expert_used, 0));
  m.reserve_bytes = vram_reserve_bytes(h.n_vocab);
  m.hidden_bytes = static_cast<uint64_t>(std::max<int64_t>(h.n_embd, 1)) * 4;
  const size_t trunk = static_cast<size_t>(std::max<int64_t>(h.n_layer - h.n_layer_nextn, 0));
  const auto n_rec = static_cast<uint64_t>(std::count(h.layer_is_recurrent.begin(), h.layer_is_recurrent.end(), true));
  for (const LayerSplit& l : split.layers) {
    PlacementLayer& p = m.layers.emplace_back();
    const size_t il = static_cast<size_t>(l.layer);
    p.dense_bytes = l.dense_bytes;
    if (il < trunk && il < h.layer_has_attention.size() && h.layer_has_attention[il] && il < h.n_head_kv_layer.size())
      p.kv_bytes = static_cast<uint64_t>(ctx) * static_cast<uint64_t>(h.n_head_kv_layer[il]) *
                   static_cast<uint64_t>(h.head_dim + h.head_dim_v) * static_cast<uint64_t>(kv32) / 32;
    else if (il < h.layer_is_recurrent.size() && h.layer_is_recurrent[il] && n_rec > 0)
      p.kv_bytes = h.recurrent_state_bytes() / n_rec;
    if (l.n_expert > 0 && l.one_expert_bytes > 0) {
      p.n_expert = static_cast<uint32_t>(l.n_expert);
      p.expert_bytes = l.one_expert_bytes;
    }
  }
  for (const auto& t : f.tensors()) {
    const TensorClass c = classify_tensor(t.name);
    if (c.layer >= 0) continue;
    (c.role == TensorRole::TokenEmbd ? m.embed_bytes : m.head_bytes) += t.nbytes;
  }
  if (m.k == 0) m.k = 1;  // a dense model: no experts to route (the planner checks k only for MoE layers)
  return m;
}

std::vector<PlacementDevice> placement_devices(const InspectArgs& a) {
  const std::vector<int> ids = parse_devices(a.devices);
  if (a.vram.empty()) throw Error("--devices " + a.devices + " needs --vram: each device's budget (12G) or 0:12G,1:20G");
  const std::vector<uint64_t> budgets = parse_device_vram(a.vram, ids);
  const CostModel cost;
  std::vector<PlacementDevice> devs;
  for (size_t d = 0; d < ids.size(); ++d)
    devs.push_back({.id = ids[d], .budget = budgets[d], .link_gbps = cost.pcie_gbps, .hbm_gbps = cost.gpu_hbm_gbps});
  return devs;
}

nlohmann::json placement_json(const DevicePlacement& p) {
  nlohmann::json devs = nlohmann::json::array();
  for (const DevicePlan& d : p.devices)
    devs.push_back({{"id", d.id}, {"first_layer", d.first_layer}, {"end_layer", d.end_layer}, {"budget", d.budget},
                    {"used_bytes", d.used_bytes()}, {"fixed_bytes", d.fixed_bytes},
                    {"own_expert_bytes", d.own_expert_bytes}, {"hosted_expert_bytes", d.hosted_expert_bytes},
                    {"n_own", d.n_own}, {"n_hosted", d.n_hosted}, {"n_stream", d.n_stream}, {"n_cpu", d.n_cpu}});
  const PlacementCost& c = p.cost;
  return {{"devices", devs},
          {"predicted_s_per_token", c.total_s()},
          {"dense_s", c.dense_s}, {"owner_s", c.owner_s}, {"peer_s", c.peer_s}, {"stream_s", c.stream_s},
          {"cpu_s", c.cpu_s}, {"handoff_s", c.handoff_s}, {"head_s", c.head_s},
          {"link_bytes_per_token", c.link_bytes}, {"peer_bytes_per_token", c.peer_bytes}};
}

// ---------------------------------------------------------------- text

void print_text(const InspectArgs& a, const GgufFile& f, const ModelHParams& h, const TokenizerSummary& tok,
                const std::vector<TypeBytes>& types, const std::string& load_err, const WeightSplit& split,
                const VramPlan& plan, bool with_budget) {
  std::printf("file:          %s\n", f.path().c_str());
  std::printf("size:          %s\n", bytes_both(f.file_size()).c_str());
  std::printf("gguf:          version %u, alignment %" PRIu64 ", %zu tensors, %zu metadata keys, data at byte %" PRIu64 "\n",
              f.version(), f.alignment(), f.tensors().size(), f.metadata().size(), f.data_offset());

  std::printf("\narchitecture:  %s%s%s\n", h.arch.empty() ? "(none)" : h.arch.c_str(),
              h.name.empty() ? "" : ("  \"" + h.name + "\"").c_str(), h.known_arch ? "" : "  (not an architecture moestream knows)");
  std::printf("  layers %" PRId64 ", n_embd %" PRId64 ", heads %" PRId64 " (KV %" PRId64 "), head dim %" PRId64 " (V %" PRId64
              "), trained context %" PRId64 "\n",
              h.n_layer, h.n_embd, h.n_head, h.n_head_kv, h.head_dim, h.head_dim_v, h.n_ctx_train);
  if (h.is_moe())
    std::printf("  experts %" PRId64 " (top %" PRId64 ", shared %" PRId64 ") of FFN width %" PRId64 "%s; dense FFN width %" PRId64 "\n",
                h.n_expert, h.n_expert_used, h.n_expert_shared, h.n_ff_exp,
                h.expert_weights_norm ? (*h.expert_weights_norm ? ", weights renormalised" : ", weights not renormalised") : "",
                h.n_ff);
  else
    std::printf("  dense FFN width %" PRId64 " (no routed experts)\n", h.n_ff);
  std::printf("  rope base %s, rms eps %s, vocab %" PRId64 "\n", num(h.rope_freq_base).c_str(), num(h.rms_eps).c_str(), h.n_vocab);
  if (h.n_layer_nextn > 0)
    std::printf("  MTP (multi-token prediction): %" PRId64 " block%s, %s with nextn.* tensors; loaded for drafting, "
                "not run by the forward pass (block_count %" PRId64 " includes %s)\n",
                h.n_layer_nextn, h.n_layer_nextn > 1 ? "s" : "", mtp_layers_str(h).c_str(), h.n_layer,
                h.n_layer_nextn > 1 ? "them" : "it");
  std::printf("  attention layers (KV cache): %s\n", attention_layers_str(h).c_str());
  if (h.sliding_window > 0) {  // gpt-oss: which layers see only the last sliding_window tokens
    std::string which;
    for (size_t il = 0; il < h.layer_is_swa.size(); ++il)
      if (h.layer_is_swa[il]) which += (which.empty() ? "" : ",") + std::to_string(il);
    std::printf("  sliding window %" PRId64 " on layers %s (the others: full attention)\n", h.sliding_window,
                which.empty() ? "none" : which.c_str());
  }
  for (const std::string& p : h.problems) std::printf("  warning: %s\n", p.c_str());

  if (tok.model.empty()) {
    std::printf("\ntokenizer:     none in this file\n");
  } else {
    std::printf("\ntokenizer:     %s%s%s, %" PRId64 " tokens, chat template: %s\n", tok.model.c_str(),
                tok.pre.empty() ? "" : ", pre ", tok.pre.c_str(), tok.n_tokens, tok.chat_template ? "yes" : "no");
    std::printf("  bos %" PRId64 " %s, eos %" PRId64 " %s\n", tok.bos, GgufValue::of_string(tok.bos_text).to_display().c_str(),
                tok.eos, GgufValue::of_string(tok.eos_text).to_display().c_str());
  }

  if (a.metadata) {
    std::printf("\nmetadata:\n");
    for (const auto& [k, v] : f.metadata())
      std::printf("  %-44s %-8s %s\n", k.c_str(),
                  v.type == GgufType::ARRAY ? ("[" + std::string(gguf_type_name(v.elem_type)) + "]").c_str() : gguf_type_name(v.type),
                  v.to_display().c_str());
  }

  std::printf("\ntypes:\n  %-8s  %7s  %12s  %6s  %s\n", "type", "tensors", "bytes", "share", "");
  for (const TypeBytes& t : types)
    std::printf("  %-8s  %7d  %12s  %5.1f%%  %s\n", type_name(t.type), t.n_tensors, format_bytes(t.bytes).c_str(),
                f.file_size() ? 100.0 * static_cast<double>(t.bytes) / static_cast<double>(f.file_size()) : 0.0,
                t.computable ? "" : "moestream cannot compute with this type");
  std::printf("runs:          %s\n", load_err.empty() ? "yes (every tensor the architecture needs is present, "
                                                          "with the expected shape and a type moestream computes)"
                                                        : ("no: " + load_err).c_str());

  if (!a.no_tensors) {
    size_t w = 4;
    for (const auto& t : f.tensors()) w = std::max(w, t.name.size());
    std::printf("\ntensors:\n  %-*s  %-7s  %-22s  %s\n", static_cast<int>(w), "name", "type", "shape", "bytes");
    for (const auto& t : f.tensors())
      std::printf("  %-*s  %-7s  %-22s  %s\n", static_cast<int>(w), t.name.c_str(), type_name(t.type),
                  shape_str(t.shape).c_str(), format_bytes(t.nbytes).c_str());
  }

  std::printf("\nsplit (dense weights stay in VRAM; routed experts are tiered):\n");
  std::printf("  %-6s  %12s  %12s  %8s  %12s\n", "layer", "dense", "experts", "n_expert", "one expert");
  for (const LayerSplit& l : split.layers)
    std::printf("  %-6d  %12s  %12s  %8" PRId64 "  %12s\n", l.layer, format_bytes(l.dense_bytes).c_str(),
                format_bytes(l.expert_bytes).c_str(), l.n_expert, format_bytes(l.one_expert_bytes).c_str());
  std::printf("  global tensors (embeddings, output head, final norm): %s in %d tensors\n",
              format_bytes(split.global_bytes).c_str(), split.n_global_tensors);
  std::printf("  dense total:   %s\n", bytes_both(split.dense_bytes).c_str());
  std::printf("  experts total: %s in %" PRId64 " experts\n", bytes_both(split.expert_bytes).c_str(), split.total_experts);
  std::printf("  one expert:    %s (gate + up + down of the largest expert in one layer)\n",
              bytes_both(split.one_expert_bytes).c_str());

  std::printf("\nVRAM at --ctx %" PRId64 ":\n", a.ctx);
  std::printf("  dense weights  %12s\n", format_bytes(plan.dense_bytes).c_str());
  std::printf("  KV cache       %12s  = %s\n", format_bytes(plan.kv_bytes).c_str(),
              kv_formula(h, a.ctx, a.kv_type).c_str());
  if (const auto n_rec = std::count(h.layer_is_recurrent.begin(), h.layer_is_recurrent.end(), true); n_rec > 0)
    std::printf("                               (the %lld layers without attention keep a recurrent state instead: %s, included)\n",
                static_cast<long long>(n_rec), format_bytes(h.recurrent_state_bytes()).c_str());
  const KvCost cost = kv_cost(h, kv_bytes_per_32(a.kv_type));
  std::printf("  KV per token   %12s  (%s)\n", format_bytes(cost.per_token).c_str(),
              describe_kv_cost(h, cost, kv_type_name(a.kv_type)).c_str());
  std::printf("  reserve        %12s  = %s\n", format_bytes(plan.reserve_bytes).c_str(), reserve_formula(h).c_str());
  std::printf("  minimum        %12s  (dense + KV + reserve: experts all outside VRAM)\n", format_bytes(plan.minimum_bytes).c_str());
  std::printf("  everything     %12s  (minimum + every routed expert)\n", format_bytes(plan.everything_bytes).c_str());
  if (!with_budget) return;
  std::printf("  budget         %12s\n", format_bytes(plan.budget).c_str());
  // The longest contexts this budget holds (experts tiered / all resident).
  const uint64_t fixed = plan.dense_bytes + plan.reserve_bytes;
  const uint64_t avail = plan.budget > fixed ? plan.budget - fixed : 0;
  std::printf("  largest context that fits: %" PRId64 " tokens (experts outside VRAM), %" PRId64
              " tokens with every expert resident; the model's: %" PRId64 "\n",
              largest_context(cost, avail), avail > split.expert_bytes ? largest_context(cost, avail - split.expert_bytes) : 0,
              h.n_ctx_train);
  if (!plan.fits_minimum) {
    std::printf("  the budget is below the minimum: at least %s is needed (short by %s); "
                "lower --ctx to shrink the KV cache\n",
                format_bytes(plan.minimum_bytes).c_str(), format_bytes(plan.shortfall).c_str());
    return;
  }
  std::printf("  room           %12s  = budget - minimum, for routed experts\n", format_bytes(plan.room).c_str());
  std::printf("  experts that fit: %" PRId64 " of %" PRId64 " (%.1f%%), about %d of %zu layers' experts%s\n",
              plan.experts_fit, plan.total_experts, 100.0 * plan.fraction, plan.layers_fit,
              static_cast<size_t>(std::count_if(split.layers.begin(), split.layers.end(),
                                                [](const LayerSplit& l) { return l.expert_bytes > 0; })),
              plan.fits_everything ? " (the whole model fits)" : "");
}

// ---------------------------------------------------------------- json

nlohmann::json to_json(const InspectArgs& a, const GgufFile& f, const ModelHParams& h, const TokenizerSummary& tok,
                       const std::vector<TypeBytes>& types, const std::string& load_err, const WeightSplit& split,
                       const VramPlan& plan, bool with_budget) {
  using nlohmann::json;
  json j;
  j["file"] = {{"path", f.path()}, {"size", f.file_size()}, {"version", f.version()},
               {"alignment", f.alignment()}, {"data_offset", f.data_offset()},
               {"n_tensors", f.tensors().size()}, {"n_metadata", f.metadata().size()}};
  json hp = {{"architecture", h.arch}, {"name", h.name}, {"known_architecture", h.known_arch},
             {"n_layer", h.n_layer}, {"n_embd", h.n_embd}, {"n_ff", h.n_ff}, {"n_ff_exp", h.n_ff_exp},
             {"n_head", h.n_head}, {"n_head_kv", h.n_head_kv}, {"head_dim", h.head_dim},
             {"head_dim_v", h.head_dim_v}, {"n_ctx_train", h.n_ctx_train}, {"n_expert", h.n_expert},
             {"n_expert_used", h.n_expert_used}, {"n_expert_shared", h.n_expert_shared},
             {"rope_freq_base", h.rope_freq_base}, {"rms_eps", h.rms_eps}, {"n_vocab", h.n_vocab},
             {"full_attention_interval", h.full_attention_interval}, {"problems", h.problems}};
  hp["expert_weights_norm"] = h.expert_weights_norm ? json(*h.expert_weights_norm) : json(nullptr);
  json attn = json::array();
  for (size_t il = 0; il < h.layer_has_attention.size(); ++il)
    if (h.layer_has_attention[il]) attn.push_back(il);
  hp["attention_layers"] = attn;
  hp["n_layer_nextn"] = h.n_layer_nextn;
  json mtp = json::array();
  for (int64_t il = h.n_layer - h.n_layer_nextn; il < h.n_layer; ++il) mtp.push_back(il);
  hp["mtp_layers"] = mtp;
  j["hparams"] = hp;
  json ty = json::array();
  for (const TypeBytes& t : types)
    ty.push_back({{"type", type_name(t.type)}, {"n_tensors", t.n_tensors}, {"bytes", t.bytes}, {"computable", t.computable}});
  j["types"] = ty;
  j["runs"] = load_err.empty();
  if (!load_err.empty()) j["load_error"] = load_err;
  j["tokenizer"] = {{"model", tok.model}, {"pre", tok.pre}, {"n_tokens", tok.n_tokens}, {"bos_id", tok.bos},
                    {"bos", tok.bos_text}, {"eos_id", tok.eos}, {"eos", tok.eos_text},
                    {"chat_template", tok.chat_template}};
  if (a.metadata) {
    json md = json::object();
    for (const auto& [k, v] : f.metadata()) md[k] = v.to_display();
    j["metadata"] = md;
  }
  if (!a.no_tensors) {
    json ts = json::array();
    for (const auto& t : f.tensors()) {
      const TensorClass c = classify_tensor(t.name);
      ts.push_back({{"name", t.name}, {"type", type_name(t.type)}, {"shape", t.shape}, {"bytes", t.nbytes},
                    {"offset", f.data_offset() + t.offset}, {"role", role_name(c.role)}, {"layer", c.layer},
                    {"expert", c.expert}});
    }
    j["tensors"] = ts;
  }
  json layers = json::array();
  for (const LayerSplit& l : split.layers)
    layers.push_back({{"layer", l.layer}, {"dense_bytes", l.dense_bytes}, {"expert_bytes", l.expert_bytes},
                      {"n_dense_tensors", l.n_dense_tensors}, {"n_expert_tensors", l.n_expert_tensors},
                      {"n_expert", l.n_expert}, {"one_expert_bytes", l.one_expert_bytes}});
  j["split"] = {{"layers", layers}, {"global_bytes", split.global_bytes}, {"dense_bytes", split.dense_bytes},
                {"expert_bytes", split.expert_bytes}, {"total_experts", split.total_experts},
                {"one_expert_bytes", split.one_expert_bytes}};
  json v = {{"ctx", a.ctx}, {"dense_bytes", plan.dense_bytes}, {"kv_bytes", plan.kv_bytes},
            {"kv_type", kv_type_name(a.kv_type)}, {"kv_formula", kv_formula(h, a.ctx, a.kv_type)},
            {"reserve_bytes", plan.reserve_bytes}, {"reserve_formula", reserve_formula(h)},
            {"minimum_bytes", plan.minimum_bytes}, {"everything_bytes", plan.everything_bytes}};
  const KvCost cost = kv_cost(h, kv_bytes_per_32(a.kv_type));
  v["kv_bytes_per_1k_tokens"] = cost.per_token * 1024;
  v["kv_fixed_bytes"] = cost.fixed;
  v["n_ctx_train"] = h.n_ctx_train;
  if (with_budget) {
    const uint64_t fixed = plan.dense_bytes + plan.reserve_bytes;
    const uint64_t avail = plan.budget > fixed ? plan.budget - fixed : 0;
    v["ctx_fits_max"] = largest_context(cost, avail);
    v["ctx_fits_max_resident"] = avail > split.expert_bytes ? largest_context(cost, avail - split.expert_bytes) : 0;
    v["budget"] = plan.budget;
    v["fits_minimum"] = plan.fits_minimum;
    v["shortfall"] = plan.shortfall;
    v["room"] = plan.room;
    v["experts_fit"] = plan.experts_fit;
    v["total_experts"] = plan.total_experts;
    v["fraction"] = plan.fraction;
    v["layers_fit"] = plan.layers_fit;
    v["fits_everything"] = plan.fits_everything;
  }
  j["vram"] = v;
  return j;
}

RegisterCommand reg("inspect", [](CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  auto* sub = app.add_subcommand("inspect", "Show a GGUF's architecture, tokenizer, tensors, dense/expert split "
                                            "and what fits in a VRAM budget");
  sub->add_option("file", a->path, "GGUF model file")->required();
  sub->add_option("--vram", a->vram,
                  "VRAM budget (e.g. 12G, 24GiB, 8000M): how many experts fit; with --devices, each device's "
                  "(12G) or per device (0:12G,1:20G)");
  sub->add_option("--devices", a->devices,
                  "GPUs of one host, e.g. 0,1: also print where every layer and expert would live on them (planned; "
                  "multi-GPU execution is not built yet, docs/multi_gpu.md)")
      ->option_text("LIST");
  sub->add_option("--peer-gbps", a->peer_gbps, "--devices: device-to-device GB/s the plan assumes")
      ->capture_default_str();
  sub->add_option("--ctx", a->ctx, "context length the KV cache is sized for (0: the model's)")->capture_default_str();
  add_kv_type_option(*sub, &a->kv_type);
  sub->add_flag("--json", a->json, "print one JSON object instead of text");
  sub->add_flag("--no-tensors", a->no_tensors, "leave out the tensor table");
  sub->add_flag("--metadata", a->metadata, "also list every metadata key and value");
  sub->add_flag("--check", a->check,
                "also scan every weight for NaN/Inf (float values, every quant block's scales; reads the whole "
                "file, progress on stderr); exit status 1 if one is found");
  return [a]() -> int {
    if (a->ctx < 0) throw Error("--ctx must be >= 0 tokens (0: the model's context), got " + std::to_string(a->ctx));
    const auto f = GgufFile::open(a->path);
    const ModelHParams h = inspect_hparams(*f);
    if (a->ctx == 0) a->ctx = h.n_ctx_train > 0 ? h.n_ctx_train : kAutoFloor;  // the model's context
    const TokenizerSummary tok = read_tokenizer(*f);
    const WeightSplit split = split_weights(*f);
    const bool multi = !a->devices.empty();
    const bool with_budget = !a->vram.empty() && !multi;
    check_kv_head_dim(a->kv_type, h.head_dim);
    check_kv_head_dim(a->kv_type, h.head_dim_v);
    const int kv32 = kv_bytes_per_32(a->kv_type);
    const VramPlan plan =
        with_budget ? plan_vram(split, h, parse_bytes(a->vram), a->ctx, kv32) : vram_needs(split, h, a->ctx, kv32);
    std::optional<DevicePlacement> placement;
    if (multi) {
      if (!(a->peer_gbps > 0 && std::isfinite(a->peer_gbps)))
        throw Error("--peer-gbps must be a positive number of GB/s, got " + std::to_string(a->peer_gbps));
      const std::vector<PlacementDevice> devs = placement_devices(*a);
      PlacementRates rates;
      rates.peer_gbps = a->peer_gbps;
      placement = plan_device_placement(placement_model(*f, h, split, a->ctx, kv32), devs, rates);
    }
    const std::vector<TypeBytes> types = bytes_by_type(*f);
    const std::string load_err = load_problem(*f);
    std::optional<WeightCheck> check;
    double check_s = 0;
    if (a->check) {
      const auto t0 = std::chrono::steady_clock::now();
      check = check_weights(*f, [&](uint64_t done, uint64_t total) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "\rcheck: %s of %s (%.0f%%), %.1f s", format_bytes(done).c_str(), format_bytes(total).c_str(),
                     total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0, s);
        if (done == total) std::fprintf(stderr, "\n");
      });
      check_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    if (a->json) {
      nlohmann::json j = to_json(*a, *f, h, tok, types, load_err, split, plan, with_budget);
      if (placement) j["placement"] = placement_json(*placement);
      if (check) {
        nlohmann::json bad = nlohmann::json::array();
        for (const BadValue& b : check->bad)
          bad.push_back({{"tensor", b.tensor}, {"type", type_name(b.type)}, {"block", b.block}, {"field", b.field},
                         {"value", b.nan ? "nan" : "inf"}});
        j["check"] = {{"ok", check->bad.empty()}, {"bytes_scanned", check->bytes_scanned},
                      {"tensors_scanned", check->tensors_scanned}, {"skipped", check->skipped}, {"bad", bad},
                      {"seconds", check_s}};
      }
      // Replace invalid UTF-8 (some vocabularies hold raw bytes) rather than fail.
      std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      print_text(*a, *f, h, tok, types, load_err, split, plan, with_budget);
      if (placement) {
        const CostModel cost;
        std::printf("\ndevices (planned, not run: multi-GPU execution is not built yet; docs/multi_gpu.md) at --ctx "
                    "%" PRId64 ", uniform routing, links %.0f GB/s, peers %.0f GB/s, CPU %.0f GB/s:\n%s",
                    a->ctx, cost.pcie_gbps, a->peer_gbps, cost.cpu_gbps, describe_placement(*placement).c_str());
      }
      if (check) {
        std::printf("\ncheck:         %d tensors, %s scanned in %.1f s", check->tensors_scanned,
                    format_bytes(check->bytes_scanned).c_str(), check_s);
        if (!check->skipped.empty()) std::printf(" (%zu integer tensors have no floats to check)", check->skipped.size());
        std::printf("\n");
        if (check->bad.empty()) {
          std::printf("  every float value and every block's scales are finite\n");
        } else {
          std::printf("  CORRUPT: %zu tensor%s NaN/Inf; the first: %s\n", check->bad.size(),
                      check->bad.size() > 1 ? "s hold" : " holds", check->bad[0].describe().c_str());
          for (size_t k = 1; k < check->bad.size() && k < 10; ++k) std::printf("  also %s\n", check->bad[k].describe().c_str());
          if (check->bad.size() > 10) std::printf("  ... and %zu more\n", check->bad.size() - 10);
          std::printf("  the file is damaged (re-download it; compare its checksum)\n");
        }
      }
    }
    return check && !check->bad.empty() ? 1 : 0;
  };
});

}  // namespace
}  // namespace ms::cli
