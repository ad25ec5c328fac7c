// The routed-expert FFN of one MoE layer on the CPU:
//   y[slot] = down_e(silu(gate_e x[token]) * up_e x[token])
// or, with biases and gpt-oss's clamped SwiGLU (cpu/ops.h: swiglu_oai),
//   y[slot] = down_e(swiglu_oai(gate_e x + bg_e, up_e x + bu_e)) + bd_e
// for every (token, slot) pair the router sent to expert e. The engine's
// CpuExpertExecutor (engine/expert_executor.h), which the hybrid step also
// uses, runs this code.
//
// cpu/ sits below model/ in the library layering, so the weights come as
// plain data (types, dims, one pointer per expert and matrix), not as
// ModelWeights; engine/expert_executor.h builds them from a model.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "cpu/thread_pool.h"
#include "quant/types.h"

namespace ms {

// One expert's share of a layer's routing.
struct ExpertWork {
  int expert = 0;
  std::vector<int32_t> tokens;  // rows of x
  std::vector<int32_t> slots;   // rows of y (token * k + j), same length as tokens
};

// Groups a layer's routing (ids [n_tokens][k]) by expert, in increasing
// expert id; within an expert, tokens in increasing order. Throws ms::Error
// for an id outside [0, n_expert).
std::vector<ExpertWork> group_by_expert(const int32_t* ids, int n_tokens, int k, int n_expert);

// One layer's routed experts. gate_e and up_e are n_ff rows x n_embd cols,
// down_e is n_embd rows x n_ff cols, row-major in their types' row layout;
// gate[e], up[e], down[e] point at expert e's matrices (n_expert entries each).
// A view: the pointer arrays and the weights must outlive its users.
struct ExpertFfnWeights {
  int64_t n_embd = 0, n_ff = 0;
  DType gate_type = DType::F32, up_type = DType::F32, down_type = DType::F32;
  std::span<const uint8_t* const> gate, up, down;
  // Optional f32 biases, contiguous per expert (null: none): gate and up
  // [n_expert][n_ff], down [n_expert][n_embd] (gpt-oss).
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
  // The activation: silu(g) * u, or the clamped SwiGLU with these constants.
  bool clamped_swiglu = false;
  float alpha = 1.702f, limit = 7.0f;
  int n_expert() const { return static_cast<int>(gate.size()); }
};

// How the expert FFN rounds its activations (the gate/up input x and the
// down projection's input silu(gate) * up) before the integer dots:
//   Native: the CPU backend's default (input_takes_gpu_q8, matvec_many.h):
//           the GPU's Q8 form for Q8_0 weights, each other type's
//           vec_dot_type (Q8_K per 256 for the K-quants, Q8_0 with an f16
//           scale for Q4_0/MXFP4).
//   Gpu:    to the CUDA kernels' Q8 form (per 32, f32 scale; quant/gpu_q8.h)
//           for the types the GPU runs with Q8 activations (Q4_0, Q8_0,
//           Q4_K, Q5_K, Q6_K, MXFP4), with the GPU kernels' per-block
//           formulas. In the hybrid mode, experts the CPU computes then match
//           the GPU's to float summation order (~1e-6 relative) instead of
//           ~1e-3, so greedy decoding follows the all-GPU run. Other types
//           (F32/F16/BF16 take f32 on both sides; the rest have no GPU
//           kernel) stay Native. Slower than Native on the CPU (one scale per
//           32 instead of per 256 in the K-quant dots).
enum class ActRounding { Native, Gpu };

// The expert FFN over a ThreadPool, with its scratch kept between calls. All
// work items of a call share two parallel regions (gate+up of every expert,
// then down), so each expert's weight rows are read once per call whatever
// its token count. Results do not depend on the pool's size.
class ExpertFfn {
 public:
  explicit ExpertFfn(ThreadPool& pool, ActRounding rounding = ActRounding::Native)
      : pool_(pool), rounding_(rounding) {}
  ExpertFfn(const ExpertFfn&) = delete;
  ExpertFfn& operator=(const ExpertFfn&) = delete;

  // x: [n_tokens][n_embd]; y: n_embd floats per slot. Writes exactly the
  // rows named by the work items' slots and leaves every other row of y
  // alone. Throws ms::Error, before computing or writing anything, for an
  // expert id or token out of range, a negative slot, tokens and slots of
  // different lengths, or weights the CPU kernels cannot run. One call at a
  // time (the scratch is shared).
  void compute(const ExpertFfnWeights& w, const float* x, int n_tokens, const std::vector<ExpertWork>& work,
               float* y);

  ThreadPool& pool() { return pool_; }
  ActRounding rounding() const { return rounding_; }

 private:
  ThreadPool& pool_;
  ActRounding rounding_;
  std::vector<uint8_t> act_gate_, act_up_, act_down_;
  std::vector<float> gate_, up_;
  std::vector<int32_t> pair_slot_;  // slot of each pair, in work order
  std::vector<int32_t> pair_expert_;  // expert of each pair, in work order (biases)
};

// The reference the fast path is tested against: one (expert, x) pair,
// weights dequantized to f32, double accumulation, no threads.
void expert_ffn_ref(const ExpertFfnWeights& w, int expert, const float* x, float* y);

}  // namespace ms
