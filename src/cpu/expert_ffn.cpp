#include "cpu/expert_ffn.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "cpu/matvec.h"
#include "cpu/matvec_many.h"
#include "cpu/ops.h"
#include "quant/gpu_q8.h"
#include "quant/quant.h"
#include "util/error.h"

namespace ms {
namespace {

void check_weights(DType t, int64_t cols, const char* what) {
  const TypeInfo& info = type_info(t);
  if (!info.computable)
    throw Error(std::string("expert FFN: ") + what + " weights of type " + info.name + " have no CPU kernel");
  row_bytes(t, cols);      // throws for cols not a multiple of the block
  act_row_bytes(t, cols);  // likewise for the activation format
}

// Everything compute() could trip over, checked before it starts: an error
// then leaves y untouched, and no exception is thrown inside a parallel region
// (where it could not reach the caller).
void check_work(const ExpertFfnWeights& w, int n_tokens, const std::vector<ExpertWork>& work) {
  if (n_tokens < 0) throw Error("expert FFN: negative token count");
  check_weights(w.gate_type, w.n_embd, "gate");
  check_weights(w.up_type, w.n_embd, "up");
  check_weights(w.down_type, w.n_ff, "down");
  if (w.up.size() != w.gate.size() || w.down.size() != w.gate.size())
    throw Error("expert FFN: gate, up and down have different expert counts");
  for (const ExpertWork& item : work) {
    if (item.expert < 0 || item.expert >= w.n_expert())
      throw Error("expert FFN: expert id " + std::to_string(item.expert) + " out of range (" +
                  std::to_string(w.n_expert()) + " experts)");
    if (item.tokens.size() != item.slots.size())
      throw Error("expert FFN: expert " + std::to_string(item.expert) + " has " + std::to_string(item.tokens.size()) +
                  " tokens but " + std::to_string(item.slots.size()) + " slots");
    for (int32_t t : item.tokens)
      if (t < 0 || t >= n_tokens)
        throw Error("expert FFN: token " + std::to_string(t) + " out of range (" + std::to_string(n_tokens) +
                    " tokens)");
    for (int32_t s : item.slots)
      if (s < 0) throw Error("expert FFN: negative slot " + std::to_string(s));
  }
}

}  // namespace

std::vector<ExpertWork> group_by_expert(const int32_t* ids, int n_tokens, int k, int n_expert) {
  std::vector<int> count(static_cast<size_t>(n_expert), 0);
  for (int p = 0; p < n_tokens * k; ++p) {
    if (ids[p] < 0 || ids[p] >= n_expert)
      throw Error("router chose expert " + std::to_string(ids[p]) + " of " + std::to_string(n_expert));
    ++count[static_cast<size_t>(ids[p])];
  }
  std::vector<int> index(static_cast<size_t>(n_expert), -1);
  std::vector<ExpertWork> work;
  for (int e = 0; e < n_expert; ++e)
    if (count[static_cast<size_t>(e)]) {
      index[static_cast<size_t>(e)] = static_cast<int>(work.size());
      work.push_back({e, {}, {}});
      work.back().tokens.reserve(static_cast<size_t>(count[static_cast<size_t>(e)]));
      work.back().slots.reserve(static_cast<size_t>(count[static_cast<size_t>(e)]));
    }
  for (int t = 0; t < n_tokens; ++t)
    for (int j = 0; j < k; ++j) {
      ExpertWork& w = work[static_cast<size_t>(index[static_cast<size_t>(ids[t * k + j])])];
      w.tokens.push_back(t);
      w.slots.push_back(t * k + j);
    }
  return work;
}

void ExpertFfn::compute(const ExpertFfnWeights& w, const float* x, int n_tokens, const std::vector<ExpertWork>& work,
                        float* y) {
  check_work(w, n_tokens, work);
  int64_t n_pairs = 0;
  for (const ExpertWork& item : work) n_pairs += static_cast<int64_t>(item.tokens.size());
  if (n_pairs == 0) return;
  const int64_t D = w.n_embd, F = w.n_ff;

  // Inputs quantized once per token for the gate (and up, if its format
  // differs). A matrix uses the GPU's Q8 form when asked and its type has it,
  // and always where the CPU's default is that form (Q8_0: matvec_many.h).
  auto use_gpu_q8 = [this](DType t) {
    return (rounding_ == ActRounding::Gpu && gpu_q8_supported(t)) || input_takes_gpu_q8(t);
  };
  const bool gpu_g = use_gpu_q8(w.gate_type), gpu_u = use_gpu_q8(w.up_type), gpu_d = use_gpu_q8(w.down_type);
  const int64_t ga = gpu_g ? gpu_q8_row_bytes(D) : act_row_bytes(w.gate_type, D);
  const int64_t ua = gpu_u ? gpu_q8_row_bytes(D) : act_row_bytes(w.up_type, D);
  act_gate_.resize(static_cast<size_t>(ga * n_tokens));
  if (gpu_g) quantize_rows_gpu_q8(pool_, x, n_tokens, D, act_gate_.data());
  else quantize_rows(pool_, w.gate_type, x, n_tokens, D, act_gate_.data());
  const bool same_act =
      gpu_g == gpu_u && (gpu_g || type_info(w.gate_type).vec_dot_type == type_info(w.up_type).vec_dot_type);
  if (!same_act) {
    act_up_.resize(static_cast<size_t>(ua * n_tokens));
    if (gpu_u) quantize_rows_gpu_q8(pool_, x, n_tokens, D, act_up_.data());
    else quantize_rows(pool_, w.up_type, x, n_tokens, D, act_up_.data());
  }

  // Pair p (in work order) gets rows p of gate_ and up_.
  gate_.resize(static_cast<size_t>(n_pairs * F));
  up_.resize(static_cast<size_t>(n_pairs * F));
  std::vector<MatmulJob> jobs;
  jobs.reserve(2 * work.size());
  int64_t p0 = 0;
  for (const ExpertWork& item : work) {
    const int64_t n = static_cast<int64_t>(item.tokens.size());
    const size_t e = static_cast<size_t>(item.expert);
    jobs.push_back(
        {w.gate_type, w.gate[e], F, D, act_gate_.data(), item.tokens.data(), n, gate_.data() + p0 * F, gpu_g});
    jobs.push_back({w.up_type, w.up[e], F, D, same_act ? act_gate_.data() : act_up_.data(), item.tokens.data(), n,
                    up_.data() + p0 * F, gpu_u});
    p0 += n;
  }
  matmul_many(pool_, jobs.data(), static_cast<int>(jobs.size()));

  // SwiGLU, then the down projection's input quantized per pair.
  // Both per pair row, in one parallel loop for a batch (serial for a few
  // pairs, where starting the pool would cost more than the work).
  // (The GPU's SwiGLU is the same float expression, x / (1 + expf(-x)) * up;
  // its expf and the C library's may differ in the last bit.)
  const int64_t da = gpu_d ? gpu_q8_row_bytes(F) : act_row_bytes(w.down_type, F);
  act_down_.resize(static_cast<size_t>(da * n_pairs));
  pair_expert_.clear();
  for (const ExpertWork& item : work) pair_expert_.insert(pair_expert_.end(), item.tokens.size(), item.expert);
  auto swiglu_quantize = [&](int64_t p_begin, int64_t p_end) {
    float* g = gate_.data() + p_begin * F;
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int64_t e = pair_expert_[static_cast<size_t>(p)];
      if (w.gate_bias) add_inplace(gate_.data() + p * F, w.gate_bias + e * F, F);
      if (w.up_bias) add_inplace(up_.data() + p * F, w.up_bias + e * F, F);
    }
    if (w.clamped_swiglu) swiglu_oai(g, up_.data() + p_begin * F, g, (p_end - p_begin) * F, w.alpha, w.limit);
    else silu_mul(g, up_.data() + p_begin * F, g, (p_end - p_begin) * F);
    if (gpu_d) {
      for (int64_t p = p_begin; p < p_end; ++p)
        quantize_row_gpu_q8(gate_.data() + p * F, act_down_.data() + p * da, F);
    } else {
      quantize_activations(w.down_type, g, F, p_end - p_begin, act_down_.data() + p_begin * da);
    }
  };
  if (n_pairs < 16) swiglu_quantize(0, n_pairs);
  else pool_.parallel_for(n_pairs, 4, swiglu_quantize);

  // Down: a work item's pairs are consecutive rows of act_down_; outputs go
  // to rows of up_ (reused), then to their slots of y.
  jobs.clear();
  up_.resize(static_cast<size_t>(n_pairs * D));
  p0 = 0;
  for (const ExpertWork& item : work) {
    const int64_t n = static_cast<int64_t>(item.tokens.size());
    jobs.push_back({w.down_type, w.down[static_cast<size_t>(item.expert)], D, F, act_down_.data() + p0 * da, nullptr,
                    n, up_.data() + p0 * D, gpu_d});
    p0 += n;
  }
  matmul_many(pool_, jobs.data(), static_cast<int>(jobs.size()));
  pair_slot_.clear();
  for (const ExpertWork& item : work) pair_slot_.insert(pair_slot_.end(), item.slots.begin(), item.slots.end());
  auto scatter = [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p) {
      float* out = y + static_cast<int64_t>(pair_slot_[static_cast<size_t>(p)]) * D;
      std::copy_n(up_.data() + p * D, D, out);
      if (w.down_bias) add_inplace(out, w.down_bias + static_cast<int64_t>(pair_expert_[static_cast<size_t>(p)]) * D, D);
    }
  };
  if (n_pairs < 16) scatter(0, n_pairs);
  else pool_.parallel_for(n_pairs, 8, scatter);
}

void expert_ffn_ref(const ExpertFfnWeights& w, int expert, const float* x, float* y) {
  const int64_t D = w.n_embd, F = w.n_ff;
  const size_t e = static_cast<size_t>(expert);
  std::vector<float> row(static_cast<size_t>(std::max(D, F))), h(static_cast<size_t>(F));
  const int64_t gb = row_bytes(w.gate_type, D), ub = row_bytes(w.up_type, D), db = row_bytes(w.down_type, F);
  for (int64_t r = 0; r < F; ++r) {
    dequantize_row_ref(w.gate_type, w.gate[e] + r * gb, row.data(), D);
    double g = 0;
    for (int64_t c = 0; c < D; ++c) g += static_cast<double>(row[c]) * x[c];
    dequantize_row_ref(w.up_type, w.up[e] + r * ub, row.data(), D);
    double u = 0;
    for (int64_t c = 0; c < D; ++c) u += static_cast<double>(row[c]) * x[c];
    if (w.gate_bias) g += w.gate_bias[static_cast<int64_t>(e) * F + r];
    if (w.up_bias) u += w.up_bias[static_cast<int64_t>(e) * F + r];
    if (w.clamped_swiglu) {
      const float gf = static_cast<float>(g), uf = static_cast<float>(u);
      swiglu_oai_ref(&gf, &uf, &h[r], 1, w.alpha, w.limit);
    } else {
      h[r] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
    }
  }
  for (int64_t r = 0; r < D; ++r) {
    dequantize_row_ref(w.down_type, w.down[e] + r * db, row.data(), F);
    double acc = 0;
    for (int64_t c = 0; c < F; ++c) acc += static_cast<double>(row[c]) * h[c];
    if (w.down_bias) acc += w.down_bias[static_cast<int64_t>(e) * D + r];
    y[r] = static_cast<float>(acc);
  }
}

}  // namespace ms
