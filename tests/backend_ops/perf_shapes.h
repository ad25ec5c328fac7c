// The benchmark models' shapes the perf mode times the ops at (the shapes of
// moestream gen's presets, src/engine/synthetic_model.cpp; weight types as
// the quantizations benchmarked in bench/results: Q4_K_M for the Qwen
// models, MXFP4 experts for gpt-oss).
#pragma once
#include <string>
#include <vector>

#include "cpu/delta_net.h"
#include "model/rope_router.h"
#include "quant/types.h"

namespace ms::backend_ops {

struct PerfModel {
  std::string name;
  int64_t n_embd = 0;
  int n_head = 0, n_kv = 0, head_dim = 0, n_rot = 0;
  float rope_base = 1e6f;
  int window = 0;      // sliding-window layers (0: none)
  bool sinks = false;  // attention sinks
  int n_expert = 0, k = 0;
  int64_t n_ff_exp = 0;
  RouterMode router_mode = RouterMode::SoftmaxTopK;
  bool renorm = true;
  bool biases = false;  // expert biases and the clamped SwiGLU (gpt-oss)
  int64_t n_vocab = 0;
  DType dense_type = DType::Q4_K, expert_type = DType::Q4_K, down_type = DType::Q6_K, embd_type = DType::Q4_K;
  DeltaNetShape delta;  // n_k_heads 0: no Gated DeltaNet layers
};

inline const std::vector<PerfModel>& perf_models() {
  static const std::vector<PerfModel> k = [] {
    std::vector<PerfModel> v;
    PerfModel q3;
    q3.name = "Qwen3-30B-A3B";
    q3.n_embd = 2048;
    q3.n_head = 32;
    q3.n_kv = 4;
    q3.head_dim = q3.n_rot = 128;
    q3.n_expert = 128;
    q3.k = 8;
    q3.n_ff_exp = 768;
    q3.n_vocab = 151936;
    v.push_back(q3);
    PerfModel q35 = q3;
    q35.name = "Qwen3.6-35B-A3B";
    q35.n_head = 16;
    q35.n_kv = 2;
    q35.head_dim = 256;
    q35.n_rot = 64;
    q35.rope_base = 1e7f;
    q35.n_expert = 256;
    q35.n_ff_exp = 512;
    q35.n_vocab = 248320;
    q35.delta.n_k_heads = 16;
    q35.delta.n_v_heads = 32;
    q35.delta.head_k = q35.delta.head_v = 128;
    v.push_back(q35);
    PerfModel oss;
    oss.name = "gpt-oss-20b";
    oss.n_embd = 2880;
    oss.n_head = 64;
    oss.n_kv = 8;
    oss.head_dim = oss.n_rot = 64;
    oss.rope_base = 150000.f;
    oss.window = 128;
    oss.sinks = true;
    oss.n_expert = 32;
    oss.k = 4;
    oss.n_ff_exp = 2880;
    oss.n_vocab = 201088;
    oss.router_mode = RouterMode::TopKSoftmax;
    oss.renorm = false;
    oss.biases = true;
    oss.dense_type = DType::Q8_0;
    oss.embd_type = DType::Q8_0;
    oss.expert_type = oss.down_type = DType::MXFP4;
    v.push_back(oss);
    return v;
  }();
  return k;
}

}  // namespace ms::backend_ops
