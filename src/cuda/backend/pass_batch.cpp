// CudaBackend's prompt pass size when none is given (Options::max_batch 0,
// `-b 0`): the inputs of experts/pass_size.h from this model, this budget and
// this machine, and the decision applied. The arithmetic lives there (unit
// tested without a GPU); here only what it is fed:
//   - the routed experts' bytes, and what the budget leaves for cache slots
//     and per-token buffers once the dense weights, the KV cache, the
//     reserve and the hybrid step's fixed buffers are counted (as make_hybrid
//     counts them);
//   - the per-token bytes of the activations and of the hybrid step's rows
//     (their layouts measured at two sizes);
//   - the link rate, measured here with one pinned copy (HybridMoe measures
//     it again later with the real expert copies), or --cost pcie_gbps;
//   - the prompt compute per token, estimated from the active weights.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "cuda/backend/cuda_backend_impl.h"
#include "cuda/device.h"
#include "experts/cost_model.h"
#include "experts/pass_size.h"
#include "experts/step_scheduler.h"
#include "util/error.h"

namespace ms {
namespace {

// Pinned host -> device rate: one 32 MiB copy after a warm-up, the best of three.
double measure_link_gbps(cudaStream_t stream) {
  constexpr size_t kBytes = size_t{32} << 20;
  cuda::PinnedBuffer host(kBytes);
  cuda::DeviceArena dev("link probe", kBytes);
  void* dst = dev.alloc(kBytes);
  cuda::Event t0(true), t1(true);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    t0.record(stream);
    MS_CUDA_CHECK(cudaMemcpyAsync(dst, host.get(), kBytes, cudaMemcpyHostToDevice, stream));
    t1.record(stream);
    t1.synchronize();
    const double s = t1.ms_since(t0) * 1e-3;
    if (rep > 0 && s > 0) best = std::max(best, double(kBytes) / s / 1e9);
  }
  return best > 0 ? best : CostModel().pcie_gbps;
}

// Weights one prompt token passes through: every dense matrix of every
// layer and n_expert_used experts (the output head only for the last token:
// left out).
double active_weights(const ModelWeights& w) {
  const ModelConfig& c = w.cfg;
  double n = 0;
  for (const LayerWeights& L : w.layers) {
    for (const TensorView* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down, &L.router,
                                &L.ssm_qkv, &L.ssm_z, &L.ssm_alpha, &L.ssm_beta, &L.ssm_out, &L.shexp_gate,
                                &L.shexp_up, &L.shexp_down, &L.shexp_router})
      if (*t) n += double(t->rows) * double(t->cols);
    if (L.experts.n_expert > 0) n += double(c.n_expert_used) * 3.0 * double(L.experts.n_embd) * double(L.experts.n_ff);
  }
  return std::max(n, 1.0);
}

}  // namespace

int CudaBackend::Impl::choose_batch(const VramPlan& plan, int64_t kv_ctx) {
  PassSizeInputs in;
  in.tiered = tiered;
  in.ctx = kv_ctx;
  if (!tiered) {
    // Every expert resident: the pass's buffers may take what the device has
    // free after the weights and K/V (less the automatic budget's margin) and,
    // under a --vram budget, the budget's slack beyond the whole model plus
    // half its reserve (the tiered case's share of it).
    auto act_bytes = [&](int b) {
      const int keep = B;
      B = b;
      cuda::Layout measure;
      layout_activations(measure);
      B = keep;
      return double(measure.used);
    };
    constexpr int kLo = 64, kHi = 64 + 1024;
    const double lo = act_bytes(kLo), hi = act_bytes(kHi);
    in.bytes_per_token = std::max(0.0, (hi - lo) / (kHi - kLo));
    const double at_zero = lo - kLo * in.bytes_per_token;
    double avail = double(cuda::free_device_bytes()) - double(CudaBackend::kAutoMargin);
    if (plan.budget > 0)
      avail = std::min(avail, double(plan.budget) - double(plan.everything_bytes) + double(plan.reserve_bytes) / 2);
    avail -= at_zero;
    in.room_bytes = avail > 0 ? static_cast<uint64_t>(avail) : 0;
    pass = choose_pass_size(in);
    return pass.tokens;
  }
  uint64_t expert_bytes = 0, largest = 0;
  std::map<uint64_t, int> sizes;
  for (const LayerWeights& L : w.layers)
    if (L.experts.n_expert > 0) {
      const uint64_t b = HybridMoe::slot_bytes(L.experts);
      expert_bytes += b * static_cast<uint64_t>(L.experts.n_expert);
      largest = std::max(largest, b);
      sizes[b] = 1;
    }
  // The bytes that grow with the pass, at two sizes (the layouts are linear
  // in it), as lines (experts/pass_size.h, BufferLine) per layout of the
  // step's buffers (PassLayout): with the prompt ring, every row with its
  // own buffer rows (exact while a pass fills no chunk) and, from the pass
  // that fills the step's row chunk on, the chunk's rows a fixed cost; for
  // budgets that hold no prompt ring beside a floor-sized pass, the ring of
  // two waves decode takes and small row chunks.
  const uint32_t bank_slots = 2 * HybridMoe::stage_bank(c, opt.tiered.step.prefetch);
  auto pass_bytes = [&](int b, uint32_t transit, int chunk_rows) {
    const int keep = B;
    B = b;
    cuda::Layout measure;
    layout_activations(measure);
    B = keep;
    return double(measure.used) +
           double(HybridMoe::buffer_bytes(c, b, transit + bank_slots, largest, sizes.size(), chunk_rows));
  };
  auto layout = [&](uint32_t transit, int chunk_rows) {
    const int lo_tokens = linear_buffers_from(chunk_rows, c.n_expert_used), hi_tokens = lo_tokens + 1024;
    const double lo = pass_bytes(lo_tokens, transit, chunk_rows), hi = pass_bytes(hi_tokens, transit, chunk_rows);
    PassLayout l;
    l.line.bytes_per_token = std::max(0.0, (hi - lo) / (hi_tokens - lo_tokens));
    l.line.fixed_bytes = std::max(0.0, lo - lo_tokens * l.line.bytes_per_token);
    l.transit_slots = transit;
    l.chunk_rows = chunk_rows;
    return l;
  };
  const uint32_t ring =
      opt.tiered.transit_slots > 0 ? opt.tiered.transit_slots : StepScheduler::prompt_transit(c.n_expert);
  const PassLayout whole = layout(ring, 0), chunked = layout(ring, kHybridChunkRows);
  // A transit count asked for is kept: no tight layout of another ring.
  std::vector<PassLayout> tight;
  if (opt.tiered.transit_slots == 0) tight.push_back(layout(StepScheduler::kDecodeTransit, kHybridStreamChunkRows));
  // What make_hybrid's pool gets before the buffers (see over_with there).
  const double avail = double(plan.room) + double(plan.dense_bytes + plan.kv_bytes + plan.reserve_bytes / 2) -
                       double(weight_bytes() + kv.bytes());
  in.room_bytes = avail > 0 ? static_cast<uint64_t>(avail) : 0;
  in.slot_cap_bytes = static_cast<int64_t>(plan.room);  // the reserve's half takes buffers, never slots
  in.expert_bytes = expert_bytes;
  if (opt.tiered.step.cost.sets(&CostModel::pcie_gbps)) {
    CostModel given;
    given.apply(opt.tiered.step.cost);
    in.link_gbps = given.pcie_gbps;
  } else {
    in.link_gbps = measure_link_gbps(stream);
  }
  in.compute_s_per_token = estimate_prompt_s_per_token(active_weights(w));
  const PassPlan chosen = choose_pass_plan(in, whole, chunked, tight);
  pass = chosen.size;
  // The roomy layouts' buffers keep the default chunk, as before (rows
  // beyond a pass's pairs are never allocated).
  pass_chunk_rows = chosen.tight ? chosen.layout.chunk_rows : kHybridChunkRows;
  return pass.tokens;
}

}  // namespace ms
