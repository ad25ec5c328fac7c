// HybridMoe: set-up (buffers, slots, copier, cost probe, initial placement),
// passes, and the mechanism the planned and gated steps share (copies,
// staging, transit-slot reuse, residency bitmap). The planned step itself is
// engine/moe_step.h's, over the tiers of hybrid_tiers.cpp; the gated decode
// step (no round trip on a hit) is in hybrid_gated.cpp.
#include "cuda/backend/hybrid_moe.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "cuda/backend/hybrid_moe_impl.h"
#include "cuda/backend/hybrid_tiers.h"
#include "cuda/gemm.h"
#include "cuda/ops.h"
#include "util/error.h"

namespace ms {
using namespace hybrid_detail;

namespace {

// The step's expert scratch (hg) doubles as cuda::expert_ffn's scratch on
// all-GPU decode steps (and, for up to 16 tokens, pinned layers even when
// the step is built for no more; HybridMoe::scratch lends more). Its own use is
// P x n_ff floats, which at a small batch (-b 1: 8 rows) is less than
// expert_ffn needs for one token; this is an upper bound of expert_ffn's
// layout (expert_ffn.cu) at that many tokens.
size_t expert_ffn_bound(const ModelConfig& c, int max_tokens) {
  const size_t t = static_cast<size_t>(std::clamp(max_tokens, 1, 16));
  const size_t pairs = t * static_cast<size_t>(c.n_expert_used), D = c.n_embd, F = c.n_ff_exp;
  return align_up(cuda::q8act_bytes(static_cast<int64_t>(D), static_cast<int64_t>(t))) + 2 * align_up(pairs * F * 4) +
         align_up(cuda::q8act_bytes(static_cast<int64_t>(F), static_cast<int64_t>(pairs))) + align_up(pairs * D * 4) +
         align_up(4 * (3 * pairs + 2));
}

}  // namespace

size_t hybrid_detail::step_scratch_bytes(const ModelConfig& c, int max_tokens, int rows) {
  return std::max(align_up(static_cast<size_t>(rows) * c.n_ff_exp * 4), expert_ffn_bound(c, max_tokens));
}

int HybridMoe::buffer_rows(const ModelConfig& c, int max_tokens, int chunk_rows) {
  const int64_t P = int64_t{max_tokens} * c.n_expert_used;
  return static_cast<int>(chunk_rows > 0 ? std::min<int64_t>(P, chunk_rows) : P);
}

uint64_t HybridMoe::slot_bytes(const ExpertWeights& e) {
  return cuda::SlotGeometry::of(e.gate_bytes(), e.up_bytes(), e.down_bytes()).slot_bytes;
}

uint32_t HybridMoe::stage_bank(const ModelConfig& c, DecodePrefetch prefetch) {
  return StepScheduler::stage_bank(static_cast<uint32_t>(c.n_expert_used), prefetch);
}

uint64_t HybridMoe::buffer_bytes(const ModelConfig& c, int max_tokens, uint32_t transit_slots, uint64_t largest_slot,
                                 size_t n_pools, int chunk_rows) {
  const size_t P = static_cast<size_t>(max_tokens) * c.n_expert_used, D = c.n_embd, F = c.n_ff_exp;
  // Per-row buffers hold one chunk of rows; the pair outputs and the index
  // arrays every pair of the pass.
  const int rows = buffer_rows(c, max_tokens, chunk_rows);
  const size_t R = static_cast<size_t>(rows);
  const size_t G = group_entries(c, max_tokens, chunk_rows);
  size_t b = 0;
  b += align_up(R * D * 4) * 2;  // gathered inputs (reused for the CPU rows), compact outputs
  b += align_up(P * D * 4);      // pair outputs
  b += step_scratch_bytes(c, max_tokens, rows) + align_up(R * F * 4);  // gate (then SwiGLU; expert_ffn's scratch), up
  b += cuda::q8act_bytes(D, R) + cuda::q8act_bytes(F, R);
  b += align_up((3 * P + 2 * G - 1) * 4);  // row/pair/offset/expert/cpu index arrays
  b += static_cast<size_t>(largest_slot) * transit_slots * n_pools;
  b += align_up(static_cast<size_t>(c.n_layer) * c.n_expert * sizeof(void*));
  b += Impl::gate_bytes(c);
  return b;
}


void HybridMoe::Impl::allocate_buffers() {
  const size_t Pn = static_cast<size_t>(P()), Rn = static_cast<size_t>(R()), D = c.n_embd, F = c.n_ff_exp;
  arena = cuda::DeviceArena("hybrid expert buffers", buffer_bytes(c, opt.max_tokens, 0, 0, 0, opt.chunk_rows));
  xg = arena.alloc_n<float>(Rn * D);
  yc = arena.alloc_n<float>(Rn * D);
  exp_y = arena.alloc_n<float>(Pn * D);
  hg = static_cast<float*>(arena.alloc(step_scratch_bytes(c, opt.max_tokens, R())));
  hu = arena.alloc_n<float>(Rn * F);
  xg_q8 = cuda::q8act_view(arena.alloc(cuda::q8act_bytes(D, Rn)), D, Rn);
  h_q8 = cuda::q8act_view(arena.alloc(cuda::q8act_bytes(F, Rn)), F, Rn);
  idx = arena.alloc_n<int32_t>(idx_entries());
  ids_host = cuda::PinnedBuffer((Pn + static_cast<size_t>(c.n_expert_used)) * sizeof(int32_t));  // + a prediction
  x_host = cuda::PinnedBuffer(static_cast<size_t>(opt.max_tokens) * D * sizeof(float));
  idx_host = cuda::PinnedBuffer(idx_entries() * sizeof(int32_t));
  cpu_y_host = cuda::PinnedBuffer(Pn * D * sizeof(float));
  MS_CUDA_CHECK(cudaMemset(arena.base(), 0, arena.capacity()));
}

void HybridMoe::Impl::make_slots() {
  StepSchedulerOptions so;
  ResidencyConfig& rc = so.residency;
  rc.n_layer = static_cast<uint32_t>(c.n_layer);
  rc.n_expert = static_cast<uint32_t>(c.n_expert);
  rc.k = static_cast<uint32_t>(c.n_expert_used);
  rc.pool_bytes = opt.pool_bytes;
  rc.transit_slots = opt.transit_slots;
  rc.policy = opt.policy;
  rc.profile = opt.profile;
  so.tuning = opt.step;
  geom.resize(static_cast<size_t>(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    const ExpertWeights& e = w.layers[static_cast<size_t>(l)].experts;
    geom[static_cast<size_t>(l)] = cuda::SlotGeometry::of(e.gate_bytes(), e.up_bytes(), e.down_bytes());
    rc.slot_bytes.push_back(geom[static_cast<size_t>(l)].slot_bytes);
    so.expert_bytes.push_back(geom[static_cast<size_t>(l)].gate_bytes + geom[static_cast<size_t>(l)].up_bytes +
                              geom[static_cast<size_t>(l)].down_bytes);
  }
  sched = std::make_unique<StepScheduler>(so);
  res = &sched->residency();
  moe_step = std::make_unique<MoeStep>(c.n_expert, c.n_expert_used, sched.get());
  bank_size = res->stage_bank();
  const PoolLayout& layout = res->layout();
  std::vector<cuda::DeviceExpertSlots::PoolSpec> pools;
  for (const Pool& p : layout.pools)
    pools.push_back({p.slot_bytes, static_cast<uint32_t>(p.slots) + res->extra_slots()});
  std::vector<cuda::DeviceExpertSlots::LayerSpec> layers;
  for (int l = 0; l < c.n_layer; ++l) {
    const ExpertWeights& e = w.layers[static_cast<size_t>(l)].experts;
    layers.push_back({layout.pool_of_layer[static_cast<size_t>(l)], e.gate_type, e.up_type, e.down_type, e.n_embd,
                      e.n_ff, geom[static_cast<size_t>(l)]});
    if (static_cast<size_t>(l) < opt.expert_bias.size()) layers.back().bias = opt.expert_bias[static_cast<size_t>(l)];
  }
  slots = std::make_unique<cuda::DeviceExpertSlots>(pools, layers, c.n_expert);
  decode_path.assign(static_cast<size_t>(c.n_layer), 0);
  decode_scratch_bytes = step_scratch_bytes(c, opt.max_tokens, R());
  for (int l = 0; l < c.n_layer; ++l) {
    if (layout.pool_of_layer[static_cast<size_t>(l)] < 0) continue;
    const cuda::ExpertWeights& ew = slots->weights(l);
    uint8_t& p = decode_path[static_cast<size_t>(l)];
    if (cuda::expert_ffn_scratch_bytes(ew, 1, c.n_expert_used) <= decode_scratch_bytes) p |= kExpertFfn;
  }
}

void HybridMoe::Impl::make_copier() {
  std::vector<cuda::ExpertSource> src;
  first_source.assign(static_cast<size_t>(c.n_layer), -1);
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w.layers[static_cast<size_t>(l)];
    if (res->pool_of_layer(static_cast<uint32_t>(l)) < 0) continue;
    const cuda::SlotGeometry& g = geom[static_cast<size_t>(l)];
    first_source[static_cast<size_t>(l)] = static_cast<int64_t>(src.size());
    for (int e = 0; e < L.experts.n_expert; ++e) {
      cuda::ExpertSource x;
      x.part[0] = L.experts.gate(e), x.bytes[0] = g.gate_bytes, x.offset[0] = 0;
      x.part[1] = L.experts.up(e), x.bytes[1] = g.up_bytes, x.offset[1] = g.up_offset;
      x.part[2] = L.experts.down(e), x.bytes[2] = g.down_bytes, x.offset[2] = g.down_offset;
      x.slot_bytes = g.slot_bytes;
      src.push_back(x);
    }
  }
  copier = std::make_unique<cuda::ExpertCopier>(std::move(src), opt.host_pin, pool);
  // The CPU experts read the pinned copy when there is one: the mapping's
  // pages may then leave the page cache, and both readers share one copy.
  host_w = w;
  for (int l = 0; l < c.n_layer; ++l) {
    if (first_source[static_cast<size_t>(l)] < 0) continue;
    ExpertWeights& x = host_w.layers[static_cast<size_t>(l)].experts;
    for (int e = 0; e < x.n_expert; ++e) {
      const size_t i = source_index(l, e);
      x.gate_[static_cast<size_t>(e)] = static_cast<const uint8_t*>(copier->host_part(i, 0));
      x.up_[static_cast<size_t>(e)] = static_cast<const uint8_t*>(copier->host_part(i, 1));
      x.down_[static_cast<size_t>(e)] = static_cast<const uint8_t*>(copier->host_part(i, 2));
    }
  }
  // The CPU rounds activations as the GPU kernels do, so an expert gives the
  // same output (to float summation order) whichever side computes it.
  cpu = std::make_unique<CpuExpertExecutor>(host_w, *pool, ActRounding::Gpu);
}

void HybridMoe::Impl::measure_cost() {
  CostProbe probe;
  const int l = first_moe_layer();
  const int32_t pool = res->pool_of_layer(static_cast<uint32_t>(l));
  const uint32_t cache = static_cast<uint32_t>(res->layout().pools[static_cast<size_t>(pool)].slots);
  const uint64_t bytes = geom[static_cast<size_t>(l)].gate_bytes + geom[static_cast<size_t>(l)].up_bytes +
                         geom[static_cast<size_t>(l)].down_bytes;
  const int n_copy = static_cast<int>(std::min<uint32_t>(res->transit_slots(), static_cast<uint32_t>(c.n_expert)));
  // PCIe: the transit slots filled three times (the first pass warms up).
  for (int rep = 0; rep < 3; ++rep) {
    copier->record(copy0.get());
    for (int i = 0; i < n_copy; ++i) copy_expert(l, i, slots->slot_address(pool, static_cast<int32_t>(cache + i)));
    copier->record(copy1.get());
    copy1.synchronize();
  }
  probe.link_bytes = double(bytes) * n_copy;
  probe.link_s = copy1.ms_since(copy0) * 1e-3;
  // CPU: one token through 32 distinct experts (a repeated one would come
  // from the CPU's cache, not DRAM), spread over the MoE layers; the median
  // of 5 tries after a warm-up (single short tries varied by an order of
  // magnitude: bench/results/hybrid_bench.md, "What this says (and what is
  // not done)").
  std::vector<float> x(static_cast<size_t>(c.n_embd), 0.01f);
  constexpr int kProbeExperts = 32, kTries = 6;
  std::vector<float> y(static_cast<size_t>(kProbeExperts) * c.n_embd);
  std::vector<double> tries;
  uint64_t probe_bytes = 0;
  int next_expert = 0, next_layer = l;
  for (int rep = 0; rep < kTries; ++rep) {
    std::vector<ExpertWork> work;
    const int layer = next_layer;
    for (int e = 0; e < std::min(kProbeExperts, c.n_expert); ++e)
      work.push_back({(next_expert++) % c.n_expert, {0}, {e}});
    if (next_expert >= c.n_expert) next_expert = 0, next_layer = std::min(next_layer + 1, c.n_layer - 1);
    while (res->pool_of_layer(static_cast<uint32_t>(next_layer)) < 0 && next_layer + 1 < c.n_layer) ++next_layer;
    const auto t = Clock::now();
    cpu->compute(layer, x.data(), 1, work, y.data());
    if (rep > 0) tries.push_back(seconds_since(t));
    probe_bytes = work.size() * bytes;
  }
  std::sort(tries.begin(), tries.end());
  probe.cpu_bytes = double(probe_bytes);
  probe.cpu_s = tries.empty() ? 0 : tries[tries.size() / 2];
  // CPU arithmetic on a batch, for prompt passes: 32 tokens through 4
  // distinct experts, the median of 3 tries after a warm-up.
  constexpr int kBatch = 32, kBatchExperts = 4;
  std::vector<float> xb(static_cast<size_t>(kBatch) * c.n_embd, 0.01f);
  std::vector<float> yb(static_cast<size_t>(kBatch) * kBatchExperts * c.n_embd);
  tries.clear();
  for (int rep = 0; rep < 4; ++rep) {
    std::vector<ExpertWork> work;
    for (int j = 0; j < std::min(kBatchExperts, c.n_expert); ++j) {
      ExpertWork wk{(next_expert++) % c.n_expert, {}, {}};
      for (int t = 0; t < kBatch; ++t) wk.tokens.push_back(t), wk.slots.push_back(j * kBatch + t);
      work.push_back(std::move(wk));
    }
    const auto t = Clock::now();
    cpu->compute(l, xb.data(), kBatch, work, yb.data());
    if (rep > 0) tries.push_back(seconds_since(t));
  }
  std::sort(tries.begin(), tries.end());
  probe.batch_weight_bytes = double(bytes) * std::min(kBatchExperts, c.n_expert) * kBatch;
  probe.batch_s = tries[tries.size() / 2];
  // GPU: device-to-device copies (read + write) between the two halves of
  // the transit slots, scratch until the first step. Not the step buffers:
  // their size follows the batch (8 rows at -b 1), and copies that small
  // measure launch latency, not HBM (a 10x low figure sent most cold
  // experts to the CPU).
  const int half_n = std::max(1, n_copy / 2);
  const size_t n = static_cast<size_t>(half_n) * geom[static_cast<size_t>(l)].slot_bytes;
  void* src = slots->slot_address(pool, static_cast<int32_t>(cache));
  void* dst = slots->slot_address(pool, static_cast<int32_t>(cache + half_n));
  MS_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
  gpu0.record(stream);
  for (int i = 0; i < 5; ++i) MS_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
  gpu1.record(stream);
  gpu1.synchronize();
  probe.hbm_bytes = 2.0 * 5 * double(n);
  probe.hbm_s = gpu1.ms_since(gpu0) * 1e-3;
  sched->set_measured_cost(probe);  // the split uses this machine's figures from here on
}

void HybridMoe::Impl::place_initial() {
  mask_words = static_cast<uint32_t>((c.n_expert + 31) / 32);
  resident_host = cuda::PinnedBuffer(sizeof(uint32_t) * mask_words * static_cast<size_t>(c.n_layer));
  std::memset(resident_host.get(), 0, resident_host.size());
  for (const auto& [key, slot] : sched->initial_placement()) {
    set_resident(key, true);
    const int l = static_cast<int>(key / c.n_expert), e = static_cast<int>(key % c.n_expert);
    copy_expert(l, e, slots->slot_address(slot.pool, slot.slot));
    slots->point(l, e, slot.pool, slot.slot);
  }
  for (int l = 0; l < c.n_layer; ++l) slots->upload(l, stream);
  MS_CUDA_CHECK(cudaStreamSynchronize(copier->stream()));
  MS_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void HybridMoe::Impl::collect_timing(bool block) {
  if (timing_pending && (block || gpu1.done())) {
    gpu1.synchronize();
    tel.gpu_experts_s += gpu1.ms_since(gpu0) * 1e-3 * kTimingEvery;
    timing_pending = false;
  }
  if (copy_timing_pending && (block || copy1.done())) {
    copy1.synchronize();
    tel.copy_busy_s += copy1.ms_since(copy0) * 1e-3 * kTimingEvery;
    copy_timing_pending = false;
  }
}

void HybridMoe::Impl::wait_slot_free(SlotRef where) {
  const uint32_t cache_slots = static_cast<uint32_t>(res->layout().pools[static_cast<size_t>(where.pool)].slots);
  const uint32_t s = static_cast<uint32_t>(where.slot);
  if (s < cache_slots || s >= cache_slots + res->transit_slots()) return;
  const uint64_t q = transit_reader[static_cast<size_t>(where.pool)][s - cache_slots];
  if (q <= std::max(read_done, copy_waited)) return;
  copier->wait(event(read_events, q % kReadEvents).get());
  copy_waited = q;
}

void HybridMoe::Impl::mark_read(const StepPlan& sp, const std::vector<size_t>& wave) {
  bool recorded = false;
  for (size_t i : wave) {
    const SlotRef w = sp.where[i];
    if (!w.valid()) continue;
    const uint32_t cache_slots = static_cast<uint32_t>(res->layout().pools[static_cast<size_t>(w.pool)].slots);
    const uint32_t s = static_cast<uint32_t>(w.slot);
    if (s < cache_slots || s >= cache_slots + res->transit_slots()) continue;
    if (!recorded) {
      ++read_seq;
      event(read_events, read_seq % kReadEvents).record(stream);
      recorded = true;
    }
    transit_reader[static_cast<size_t>(w.pool)][s - cache_slots] = read_seq;
  }
}

void HybridMoe::Impl::init_prompt_stage() {
  transit_reader.assign(res->layout().pools.size(), std::vector<uint64_t>(res->transit_slots(), 0));
}

// Layer `layer`'s cold experts into the next transit slots, in the
// scheduler's copy groups (none where it computes them on the CPU rather
// than copy them); see ExpertResidency::stage_transit.
void HybridMoe::Impl::stage_prompt(const PromptStage& ps) {
  if (ps.layer < 0) return;
  const int layer = ps.layer;
  const StagePlan& st = *ps.plan;
  const int E = c.n_expert;
  if (timed && !copy0_recorded) {
    copier->record(copy0.get());
    copy0_recorded = true;
  }
  size_t group = 0, in_group = 0;
  for (size_t j = 0; j < st.copies.size(); ++j) {
    const auto& [key, where] = st.copies[j];
    wait_slot_free(where);
    copy_expert(layer, static_cast<int>(key % static_cast<uint32_t>(E)), slots->slot_address(where.pool, where.slot));
    ++in_group;
    if (j + 1 == ps.group_end[group]) {
      copier->record(event(ring_copied, group).get());
      timeline.mark(copier->stream(), in_group * geom[static_cast<size_t>(layer)].slot_bytes, layer, false);
      ++group, in_group = 0;
    }
  }
  if (timed) {
    copier->record(copy1.get());
    copy_timing_pending = true;
  }
}

// The streamed experts of one wave into their slots (copy stream), then the
// compute stream waits for them.
void HybridMoe::Impl::copy_wave(int il, const StepPlan& sp, const std::vector<size_t>& wave, size_t wv) {
  const int E = c.n_expert;
  uint64_t n = 0;
  for (size_t i : wave)
    if (sp.copy[i]) {
      const int e = static_cast<int>(sp.plan.experts[i].key % static_cast<uint32_t>(E));
      wait_slot_free(sp.where[i]);
      copy_planned(il, e, sp, i);
      ++n;
    }
  timeline.mark(copier->stream(), n * geom[static_cast<size_t>(il)].slot_bytes, il, true);
  copier->record(event(copied, wv).get());
  MS_CUDA_CHECK(cudaStreamWaitEvent(stream, event(copied, wv).get(), 0));
}

// Prefetch: the predicted experts of the next tiered layer (read back with
// this layer's routes) into the next staging bank, as many as the scheduler
// says (MoeStep::stage_decode, StepScheduler::stage_decode), on the copy
// stream behind this layer's own copies. The bank's previous contents were
// read by the layer that used them: the copies wait for that layer's compute.
void HybridMoe::Impl::stage_decode(int pred_layer, const DecodeStage& ds) {
  const int E = c.n_expert;
  if (ds.plan == nullptr || ds.plan->copies.empty()) return;
  const StagePlan& st = *ds.plan;
  const bool gated_pass = sched->gated_pass();
  // (A gated step needs no wait: the host serves layers in order, so the
  // bank's reader finished before this layer posted its routes.)
  if (!gated_pass) copier->wait(bank_free[st.bank].get());
  if (timed && !copy0_recorded) {
    copier->record(copy0.get());
    copy0_recorded = true;
  }
  for (const auto& [key, where] : st.copies)
    copy_expert(pred_layer, static_cast<int>(key % static_cast<uint32_t>(E)), slots->slot_address(where.pool, where.slot));
  // Gated, published (every predicted cold expert staged): the layer's check
  // may find its routes all resident or staged and go on without the host.
  // The slot table points at the staging slots and the stamps say "this
  // step", both behind the copies on the copy stream (the check sees a
  // stamp only once the copy and the table are in).
  if (ds.publish) {
    const size_t base = static_cast<size_t>(pred_layer) * static_cast<size_t>(E);
    uint32_t* stamp = staged_host.as<uint32_t>() + base;
    for (const auto& [key, where] : st.copies) {
      const int e = static_cast<int>(key % static_cast<uint32_t>(E));
      slots->point(pred_layer, e, where.pool, where.slot);
      stamp[e] = seq;
    }
    slots->upload(pred_layer, copier->stream());
    MS_CUDA_CHECK(cudaMemcpyAsync(staged_dev + base, stamp, sizeof(uint32_t) * static_cast<size_t>(E),
                                  cudaMemcpyHostToDevice, copier->stream()));
  }
  copier->record(stage_ready[st.bank].get());
  if (timed) {
    copier->record(copy1.get());
    copy_timing_pending = true;
  }
}

void HybridMoe::Impl::count_pairs(TierCounts& layer, TierCounts& pass, Tier t, uint64_t pairs) {
  uint64_t TierCounts::*field = t == Tier::Resident ? &TierCounts::resident
                                : t == Tier::Stream ? &TierCounts::streamed
                                                    : &TierCounts::host;
  layer.*field += pairs;
  pass.*field += pairs;
}

void HybridMoe::Impl::set_resident(ExpertKey key, bool on) {
  const uint32_t l = key / static_cast<uint32_t>(c.n_expert), e = key % static_cast<uint32_t>(c.n_expert);
  uint32_t& word = resident_host.as<uint32_t>()[l * mask_words + e / 32];
  const uint32_t bit = 1u << (e % 32);
  if (((word & bit) != 0) == on) return;
  word = on ? word | bit : word & ~bit;
  resident_dirty = true;
}

// What a plan admitted and evicted, into the resident bitmap.
void HybridMoe::Impl::note_residency(const ExpertPlan& plan) {
  for (ExpertKey k : plan.evicted) set_resident(k, false);
  for (ExpertKey k : plan.admitted) set_resident(k, true);
}

void HybridMoe::Impl::note_prediction(int il, const PredictionOutcome& o) {
  for (PrefetchCounts* pc : {&tel.prefetch, &tel.prefetch_layers[static_cast<size_t>(il)]}) {
    ++pc->layer_steps;
    pc->predicted += o.predicted;
    pc->correct += o.correct;
    pc->routed += o.routed;
    pc->staged += o.staged;
    pc->staged_used += o.staged_used;
    pc->staged_admitted += o.staged_admitted;
    pc->cold += o.cold;
  }
}

// One token whose experts are all on the GPU, after the step's copies: the
// kernel the all-resident decode runs (cuda::expert_ffn), over the slot
// table, so the result is its result bit for bit.
void HybridMoe::Impl::decode_on_gpu(int il, const float* x, const cuda::Q8Act& x_q8, const int32_t* ids,
                                    const float* wts, float* h, bool copies) {
  const cuda::ExpertWeights& ew = slots->weights(il);
  const int K = c.n_expert_used;
  if (timed) gpu0.record(stream);
  const bool q8 = cuda::matvec_takes_q8(ew.gate.type);
  cuda::expert_ffn(ew, x, q8 ? &x_q8 : nullptr, 1, K, ids, wts, h, h, hg, decode_scratch_bytes, stream);
  if (timed) {
    gpu1.record(stream);
    timing_pending = true;
    if (copies) {
      copier->record(copy1.get());
      copy_timing_pending = true;
    }
  }
}

// One layer step: engine/moe_step.h's sequence over this backend's tiers
// (hybrid_tiers.cpp).
void HybridMoe::Impl::run(int il, int n, const float* x, const cuda::Q8Act& x_q8, const int32_t* ids,
                          const float* wts, float* h, const HybridPrediction* pred) {
  const int K = c.n_expert_used;
  if (n > opt.max_tokens) throw Error("hybrid MoE: more tokens than the step's buffers hold");
  if (pred && (bank_size == 0 || pred->layer < 0 || pred->n <= 0 || pred->n > K)) pred = nullptr;
  copy0_recorded = false;
  HybridTiers tiers(*this, {x, &x_q8, ids, wts, h, pred});
  moe_step->set_chunk_rows(chunk_rows_for(n));
  moe_step->run(step, il, n, tiers);
}

HybridMoe::HybridMoe(const ModelWeights& w, const HybridMoeOptions& opt, cudaStream_t compute)
    : impl_(std::make_unique<Impl>(w, opt, compute)) {
  Impl& m = *impl_;
  const ModelConfig& c = w.cfg;
  if (!c.is_moe()) throw Error("hybrid MoE: the model has no routed experts");
  // Pair indices are int32 (and row copies go in launches of 65535 rows):
  // the bound is the index width, far past any batch the CLI accepts.
  if (opt.max_tokens < 1 || int64_t{opt.max_tokens} * c.n_expert_used * 5 + 2 * int64_t{c.n_expert} + 8 > INT32_MAX)
    throw Error("hybrid MoE: " + std::to_string(opt.max_tokens) + " tokens per pass is out of range");
  m.pool = opt.pool;
  if (!m.pool) {
    m.own_pool = std::make_unique<ThreadPool>(0);
    m.pool = m.own_pool.get();
  }
  auto t = Clock::now();
  auto stage = [&](const char* what) {
    if (opt.verbose_steps)
      std::fprintf(stderr, "moestream: hybrid start-up: %s (%.2f s)\n", what, seconds_since(t));
    t = Clock::now();
  };
  m.allocate_buffers();
  stage("buffers");
  m.make_slots();
  stage("slots");
  m.make_copier();
  if (m.copier->copied() && seconds_since(t) > 2.0)  // a long copy: say what the wait was
    std::fprintf(stderr, "moestream: experts copied to pinned host memory (%.1f GiB, %.1f s)\n",
                 double(m.copier->host_bytes()) / double(1ull << 30), seconds_since(t));
  stage(m.copier->mode_name());
  m.measure_cost();
  stage("cost model measured");
  m.place_initial();
  stage("initial placement copied");
  m.make_gates();
  m.init_prompt_stage();
  ExpertTelemetry& tl = m.tel;
  tl.hybrid = true;
  tl.policy = opt.policy;
  tl.host_pin = m.copier->mode_name();
  tl.pool_bytes = opt.pool_bytes;
  tl.cache_slots = m.res->layout().total_slots();
  tl.transit_slots = static_cast<uint64_t>(m.res->transit_slots()) * m.res->layout().pools.size();
  tl.experts_total = static_cast<uint64_t>(c.n_expert) * static_cast<uint64_t>(m.res->layout().pool_of_layer.size() -
                     std::count(m.res->layout().pool_of_layer.begin(), m.res->layout().pool_of_layer.end(), -1));
  tl.pcie_gbps = m.sched->cost().pcie_gbps;
  tl.cpu_gbps = m.sched->cost().cpu_gbps;
  tl.gpu_gbps = m.sched->cost().gpu_hbm_gbps;
  tl.layers.resize(static_cast<size_t>(c.n_layer));
  tl.prefetch_mode = decode_prefetch_name(opt.step.prefetch);
  tl.prefetch_layers.resize(static_cast<size_t>(c.n_layer));
}

HybridMoe::~HybridMoe() = default;

HybridMoe::Impl::~Impl() {
  const uint64_t n = prof.hits + prof.misses;
  if (!opt.serve_profile || n == 0) return;
  std::fprintf(stderr,
               "moestream: gated serve, us per layer step (%llu hits, %llu misses): timing %.1f, policy %.1f, "
               "enqueue %.1f, staging %.1f, deferred policy %.1f\n",
               (unsigned long long)prof.hits, (unsigned long long)prof.misses, 1e6 * prof.timing_s / n,
               1e6 * prof.policy_s / n, 1e6 * prof.enqueue_s / n, 1e6 * prof.stage_s / n, 1e6 * prof.settle_s / n);
  const StepScheduler::StagingStats& st = sched->staging_stats();
  if (st.stagings > 0)
    std::fprintf(stderr, "moestream: gated staging (auto): %.2f experts per staging, %.1f us from staging to routes\n",
                 st.staged_sum / double(st.stagings), 1e6 * st.gap_sum_s / double(st.stagings));
}

void HybridMoe::begin_pass(int n_tokens, bool gated) {
  Impl& m = *impl_;
  if (gated) {
    if (n_tokens != 1) throw Error("hybrid MoE: a gated pass is one decode token");
    m.begin_gated();
  }
  m.pass_tokens = n_tokens;
  m.pass_start = Clock::now();
  m.read_done = m.read_seq;  // end_pass synchronised: every read has run
  if (n_tokens > 1 && m.timeline.on()) m.timeline.begin(m.copier->stream());
  m.copy0_recorded = false;
  // A long pass: the scheduler plans it with the prompt's cost, and the
  // first tiered layer's stage starts now.
  if (m.sched->begin_pass(n_tokens, gated)) m.stage_prompt(m.sched->stage_prompt(m.step, m.sched->first_tiered(), n_tokens));
  m.pass_counts = TierCounts{};
  m.pass_cpu_s = 0;
}

void HybridMoe::set_draft_ranks(std::span<const int32_t> ranks) { impl_->moe_step->set_draft_ranks(ranks); }

void HybridMoe::confirm_drafts(int accepted) { impl_->moe_step->confirm_drafts(accepted); }

void HybridMoe::end_pass() {
  Impl& m = *impl_;
  MS_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  m.sched->end_pass();
  if (*m.timed_out_host != 0) {
    *m.timed_out_host = 0;
    throw Error("hybrid decode: a layer's experts waited over 20 s for the host; this step's output is wrong");
  }
  m.collect_timing();
  ExpertTelemetry& t = m.tel;
  const double s = seconds_since(m.pass_start);
  if (m.timeline.on()) {
    MS_CUDA_CHECK(cudaStreamSynchronize(m.copier->stream()));
    m.timeline.report(m.pass_tokens, s, m.sched->cost().pcie_gbps);
  }
  t.total_s += s;
  ++t.passes;
  t.tokens += static_cast<uint64_t>(m.pass_tokens);
  // Pinned layers ran on the backend's all-resident kernels: every pair resident.
  if (m.sched->pinned_layers() > 0) {
    const uint64_t pairs = static_cast<uint64_t>(m.pass_tokens) * static_cast<uint64_t>(m.c.n_expert_used);
    for (int l = 0; l < m.c.n_layer; ++l)
      if (m.sched->layer_pinned(static_cast<uint32_t>(l))) t.layers[static_cast<size_t>(l)].resident += pairs;
    m.pass_counts.resident += pairs * m.sched->pinned_layers();
  }
  if (m.pass_tokens == 1) {
    ++t.decode_tokens;
    t.decode.resident += m.pass_counts.resident;
    t.decode.streamed += m.pass_counts.streamed;
    t.decode.host += m.pass_counts.host;
  }
  ++m.step;
  if (m.opt.verbose_steps)
    std::fprintf(stderr, "step %llu: %d tokens, %.3f ms; pairs resident %llu, streamed %llu, CPU %llu (CPU %.3f ms)\n",
                 static_cast<unsigned long long>(m.step), m.pass_tokens, s * 1e3,
                 static_cast<unsigned long long>(m.pass_counts.resident),
                 static_cast<unsigned long long>(m.pass_counts.streamed),
                 static_cast<unsigned long long>(m.pass_counts.host), m.pass_cpu_s * 1e3);
}

void HybridMoe::run(int il, int n, const float* x, const cuda::Q8Act& x_q8, const int32_t* ids, const float* weights,
                    float* h, const HybridPrediction* pred) {
  impl_->run(il, n, x, x_q8, ids, weights, h, pred);
}

bool HybridMoe::gated_decode() const { return impl_->gated_supported(); }

void HybridMoe::enqueue_gated(int il, const float* x, const cuda::Q8Act& x_q8, const int32_t* ids,
                              const float* weights, float* h, const int32_t* pred_ids, int pred_layer) {
  impl_->enqueue_gated(il, x, x_q8, ids, weights, h, pred_ids, pred_layer);
}

void HybridMoe::serve_gated() { impl_->serve_gated(); }

bool HybridMoe::prefetching() const { return impl_->bank_size > 0; }

const cuda::ExpertWeights& HybridMoe::weights(int il) const { return impl_->slots->weights(il); }

bool HybridMoe::layer_pinned(int il) const {
  return il >= 0 && impl_->sched->layer_pinned(static_cast<uint32_t>(il));
}

// Every buffer from xg to the index arrays (allocated in that order, one
// arena) is idle while a pinned layer computes, as all their uses are on the
// compute stream: lent whole, they hold cuda::expert_ffn's scratch for a full
// prompt batch, so pinned layers take the all-resident kernels on prompts too
// rather than a round trip through run().
void* HybridMoe::scratch(size_t& bytes, bool whole) const {
  const Impl& m = *impl_;
  if (!whole) {
    bytes = m.decode_scratch_bytes;
    return m.hg;
  }
  bytes = static_cast<size_t>(reinterpret_cast<const char*>(m.idx) - reinterpret_cast<const char*>(m.xg));
  return m.xg;
}

ExpertTelemetry HybridMoe::telemetry() const {
  ExpertTelemetry t = impl_->tel;
  const ResidencyCounters& rc = impl_->res->counters();
  t.admitted = rc.admitted;
  t.evicted = rc.evicted;
  t.h2d_bytes = rc.copy_bytes;
  t.h2d_copies = rc.streamed;
  t.stage_bytes = rc.stage_bytes;
  return t;
}

uint64_t HybridMoe::device_bytes() const {
  return impl_->arena.capacity() + impl_->slots->capacity() + impl_->gate_arena.capacity();
}

}  // namespace ms
