// Every CUDA launcher of src/cuda's headers and the registry cases that
// cover it (launchers.h). Keep in step with tests/backend_ops/README.md:
// launcher_coverage_test.cpp checks the headers, this list, the registry and
// the README against each other.
#include "backend_ops/launchers.h"

#include <cctype>
#include <regex>

namespace ms::backend_ops {

const std::vector<Launcher>& cuda_launchers() {
  // The *_multi kernels (several sequences' rows in one launch) are being
  // merged into the single-sequence kernels; their cases come with that work.
  static const char* kMulti = "the *_multi kernels are being merged into the single kernels (issue #41); "
                              "their cases come with that change (ops_cuda_batch.cpp). "
                              "tests/cuda/*_multi_test.cpp compare them with the single kernels";
  static const std::vector<Launcher> k = {
      // ops.h
      {"cuda::rmsnorm", "ops.h", {"rms_norm/cuda", "rms_norm_q8/cuda"}, ""},
      {"cuda::add", "ops.h", {"add/cuda"}, ""},
      {"cuda::silu_mul", "ops.h", {"silu_mul/cuda"}, ""},
      {"cuda::rope", "ops.h", {"rope/cuda"}, ""},
      {"cuda::router_topk", "ops.h", {"router_topk/cuda"}, ""},
      {"cuda::moe_combine", "ops.h", {"moe_combine/cuda", "expert_ffn_gpu_q8/cuda_unfused"}, ""},
      {"cuda::scatter_rows", "ops.h", {"scatter_rows/cuda"}, ""},
      {"cuda::gather_rows", "ops.h", {"gather_rows/cuda"}, ""},
      {"cuda::embed_rows", "ops.h", {"dequantize_q4_K/cuda_embed", "dequantize_f16/cuda_embed"}, ""},
      {"cuda::kv_append", "ops.h", {"kv_append_f16/cuda", "kv_append_f32/cuda", "kv_append_q8_0/cuda"}, ""},
      // gated_ops.h
      {"cuda::split_q_gate", "gated_ops.h", {"split_q_gate/cuda"}, ""},
      {"cuda::mul_sigmoid", "gated_ops.h", {"mul_sigmoid/cuda"}, ""},
      {"cuda::add_row_bias", "gated_ops.h", {"add_row_bias/cuda"}, ""},
      {"cuda::scale_rows_sigmoid", "gated_ops.h", {"scale_rows_sigmoid/cuda"}, ""},
      // expert_bias.h
      {"cuda::expert_rows_act", "expert_bias.h", {"expert_rows_act/cuda"}, ""},
      {"cuda::expert_rows_down_bias", "expert_bias.h", {"expert_rows_down_bias/cuda"}, ""},
      // expert_gate.h
      {"cuda::gate_check", "expert_gate.h", {"gate_check/cuda"}, ""},
      {"cuda::gate_wait", "expert_gate.h", {"gate_wait/cuda"}, ""},
      {"cuda::gate_wait_rows", "expert_gate.h", {"gate_wait_rows/cuda"}, ""},
      {"cuda::moe_combine_host_rows", "expert_gate.h", {"moe_combine_host_rows/cuda"}, ""},
      // expert_ffn.h
      {"cuda::expert_ffn", "expert_ffn.h",
       {"expert_ffn_gpu_q8/cuda", "expert_ffn_gpu_q8/cuda_table_x_q8", "expert_ffn_gpu_q8/cuda_gemm_from_2",
        "expert_ffn_biased/cuda"},
       ""},
      {"cuda::grouped_rows_ffn", "expert_ffn.h", {"grouped_rows_ffn/cuda"}, ""},
      {"cuda::moe_group_by_expert", "expert_ffn.h", {"moe_group_by_expert/cuda"}, ""},
      // attention.h, attention_decode_long.h (the long kernel runs inside
      // attention_decode past 1024 visible positions: the decode cases at 1030+)
      {"cuda::attention_decode", "attention.h",
       {"attention_decode_f16/cuda", "attention_decode_f32/cuda", "attention_decode_q8_0/cuda",
        "attention_extras_f16/cuda_decode"},
       ""},
      {"cuda::attention_prefill", "attention.h",
       {"attention_prefill_f16/cuda", "attention_prefill_f32/cuda", "attention_prefill_q8_0/cuda",
        "attention_extras_q8_0/cuda_prefill"},
       ""},
      {"cuda::attention_prefill_tiled", "attention.h", {"attention_prefill_f16/cuda_tiled"}, ""},
      {"cuda::decode_long::launch", "attention_decode_long.h",
       {"attention_decode_f16/cuda", "attention_decode_q8_0/cuda", "attention_extras_f16/cuda_decode"}, ""},
      {"cuda::decode_long::merge", "attention_decode_long.h",
       {"attention_decode_f16/cuda", "attention_extras_q8_0/cuda_decode"}, ""},
      {"cuda::attention_decode_multi", "attention_multi.h", {}, kMulti},
      // delta_net.h, delta_net_multi.h
      {"cuda::conv1d_silu", "delta_net.h", {"delta_conv1d_silu/cuda"}, ""},
      {"cuda::delta_prepare_qk", "delta_net.h", {"delta_prepare_qk/cuda"}, ""},
      {"cuda::delta_gates", "delta_net.h", {"delta_gates/cuda"}, ""},
      {"cuda::delta_rule", "delta_net.h", {"delta_rule_token/cuda", "delta_rule_chunked/cuda_token"}, ""},
      {"cuda::delta_rule_chunked", "delta_net.h", {"delta_rule_chunked/cuda", "delta_rule_chunked/cuda_tf32"}, ""},
      {"cuda::delta_rule_prompt", "delta_net.h", {"delta_rule_token/cuda_prompt", "delta_rule_chunked/cuda_prompt"}, ""},
      {"cuda::gated_rmsnorm", "delta_net.h", {"gated_rmsnorm/cuda"}, ""},
      {"cuda::conv1d_silu_multi", "delta_net_multi.h", {}, kMulti},
      {"cuda::delta_rule_multi", "delta_net_multi.h", {}, kMulti},
      // gemm.h
      {"cuda::matmul", "gemm.h", {"dot_q8_q4_K/cuda_matmul_int8", "vec_dot_bf16/cuda_matmul_f32"}, ""},
      {"cuda::matmul_stacked", "gemm.h", {"dot_q8_q4_K/cuda_matmul_stacked", "vec_dot_f16/cuda_matmul_stacked"}, ""},
      // kv_multi.h
      {"cuda::kv_append_multi", "kv_multi.h", {}, kMulti},
      {"cuda::batch_qk_prologue_multi", "kv_multi.h", {}, kMulti},
      // matvec.h
      {"cuda::quantize_q8act", "matvec.h", {"quantize_gpu_q8/cuda"}, ""},
      {"cuda::matvec", "matvec.h",
       {"dot_q8_q4_K/cuda_matvec", "matvec_groups/cuda", "matvec_groups/cuda_table", "matvec_groups/cuda_one_vector"},
       ""},
      {"cuda::matvec_glu", "matvec.h", {"matvec_glu_q8/cuda"}, ""},
      {"cuda::matvec_combine", "matvec.h", {"matvec_combine/cuda", "expert_ffn_gpu_q8/cuda"}, ""},
      {"cuda::linear", "matvec.h", {"dot_q8_q6_K/cuda_matvec", "vec_dot_f32/cuda_matvec"}, ""},
      // backend/decode_fused.h, backend/prefill_fused.h
      {"cuda::decode_qk_prologue", "backend/decode_fused.h", {"qk_prologue_f16/cuda_decode", "qk_prologue_f32/cuda_decode"}, ""},
      {"cuda::rmsnorm_row_q8", "backend/decode_fused.h", {"rms_norm_q8/cuda_row"}, ""},
      {"cuda::router_decode_f32", "backend/decode_fused.h", {"router_decode_f32/cuda"}, ""},
      {"cuda::batch_qk_prologue", "backend/prefill_fused.h",
       {"qk_prologue_f16/cuda_batch", "qk_prologue_f32/cuda_batch", "qk_prologue_f16/cuda_batch_stacked_row"}, ""},
  };
  return k;
}

namespace {

// The text without comments, string literals' contents and preprocessor lines.
std::string code_only(const std::string& in) {
  std::string out;
  bool line_start = true;
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '/' && i + 1 < in.size() && in[i + 1] == '/') {
      while (i < in.size() && in[i] != '\n') ++i;
      out += '\n';
      line_start = true;
      continue;
    }
    if (c == '/' && i + 1 < in.size() && in[i + 1] == '*') {
      const size_t e = in.find("*/", i + 2);
      i = e == std::string::npos ? in.size() : e + 1;
      out += ' ';
      continue;
    }
    if (line_start && c == '#') {  // a directive, with its continuation lines
      while (i < in.size() && !(in[i] == '\n' && in[i - 1] != '\\')) ++i;
      out += '\n';
      continue;
    }
    if (c == '"') {
      out += '"';
      for (++i; i < in.size() && in[i] != '"'; ++i)
        if (in[i] == '\\') ++i;
      out += '"';
      continue;
    }
    if (c == '\n') line_start = true;
    else if (!std::isspace(static_cast<unsigned char>(c))) line_start = false;
    out += c;
  }
  return out;
}

}  // namespace

std::vector<std::string> launchers_declared_in(const std::string& header_text) {
  const std::string code = code_only(header_text);
  static const std::regex ns_re(R"(namespace\s+([A-Za-z_][\w:]*)\s*$)");
  static const std::regex name_re(R"(([A-Za-z_]\w*)\s*\($)");
  std::vector<std::string> scopes;  // namespace names; "" for any other brace
  std::vector<std::string> found;
  std::string stmt;
  auto at_namespace_scope = [&] {
    for (const std::string& s : scopes)
      if (s.empty()) return false;
    return true;
  };
  auto consider = [&] {
    if (!at_namespace_scope() || stmt.find("cudaStream_t") == std::string::npos) return;
    const size_t paren = stmt.find('(');
    if (paren == std::string::npos) return;
    const std::string head = stmt.substr(0, paren + 1);
    if (head.find("using ") != std::string::npos || head.find("typedef") != std::string::npos) return;
    std::smatch m;
    if (!std::regex_search(head, m, name_re)) return;
    std::string q;
    for (const std::string& s : scopes) q += s + "::";
    if (q.rfind("ms::", 0) == 0) q = q.substr(4);
    q += m[1].str();
    for (const std::string& f : found)
      if (f == q) return;  // an overload
    found.push_back(q);
  };
  int parens = 0;
  for (char c : code) {
    if (c == '(') ++parens;
    if (c == ')') --parens;
    if (parens > 0) {  // default arguments such as `= {}` are not scopes
      stmt += c;
      continue;
    }
    if (c == '{') {
      consider();
      std::smatch m;
      const std::string trimmed = std::regex_replace(stmt, std::regex(R"(\s+$)"), "");
      if (std::regex_search(trimmed, m, ns_re)) scopes.push_back(m[1].str());
      else scopes.push_back("");
      stmt.clear();
    } else if (c == '}') {
      if (!scopes.empty()) scopes.pop_back();
      stmt.clear();
    } else if (c == ';') {
      consider();
      stmt.clear();
    } else {
      stmt += c;
    }
  }
  return found;
}

}  // namespace ms::backend_ops
