// HybridMoe's gated decode step: one captured graph per token, in which every
// tiered layer checks on the GPU whether its routed experts are resident
// (cuda/expert_gate.h). On a hit the GPU goes on at once; on a miss its
// expert compute waits at the layer's gate while the host, which follows
// the mailboxes layer by layer, streams the cold experts and opens that gate
// from the copy stream behind them, computes the rest on the CPU, and then
// queues the next tiered layer's prefetch on the copy stream. The CPU's rows
// go into the layer's mailbox, and a word there opens the combine's gate:
// no driver call, and nothing queued behind other copies.
//
// Why this is safe without events between the streams: the host serves the
// layers in order, and it sees layer L's mailbox only once the compute
// stream has finished everything before L's check. So when it serves L,
//   - the transit slots and the staging bank it reuses were read by layers
//     that have finished;
//   - if L is a miss the compute stream is stopped at L's gate: a cache slot
//     it refills or evicts is read by no running kernel, and a later layer
//     checks only after the gate opens, behind the bitmap's upload on the
//     copy stream;
//   - the copy stream never waits for the compute stream, so the host never
//     blocks on a stream stopped at a gate.
// A hit changes nothing on the device (no admission without a copy).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/backend/hybrid_moe_impl.h"
#include "util/error.h"

namespace ms {
using namespace hybrid_detail;

namespace {
// A gate the host never opens gives up after this long (the host died or
// hung); end_pass then reports the step as failed.
constexpr uint32_t kGateTimeoutMs = 20000;
// The host gives up on a layer's mailbox after this long.
constexpr double kMailboxTimeoutS = 30.0;
}  // namespace

bool HybridMoe::Impl::gated_supported() const {
  if (!opt.gated) return false;
  if (c.n_expert_used > cuda::GateMailbox::kMaxK) return false;
  for (int l = 0; l < c.n_layer; ++l)
    if (res->pool_of_layer(static_cast<uint32_t>(l)) >= 0 && (decode_path[static_cast<size_t>(l)] & kExpertFfn) == 0)
      return false;
  return true;
}

void HybridMoe::Impl::make_gates() {
  const size_t NL = static_cast<size_t>(c.n_layer), K = static_cast<size_t>(c.n_expert_used);
  const size_t D = static_cast<size_t>(c.n_embd);
  gated.assign(NL, 0);
  gated_pred.assign(NL, -1);
  box_bytes = cuda::GateMailbox::bytes(c.n_embd, c.n_expert_used);
  mailbox = cuda::PinnedBuffer(box_bytes * NL + kAlign, true);
  std::memset(mailbox.get(), 0, mailbox.size());
  mailbox_dev = static_cast<char*>(mailbox.device_ptr());
  timed_out_host = reinterpret_cast<uint32_t*>(mailbox.as<char>() + box_bytes * NL);
  timed_out_dev = reinterpret_cast<uint32_t*>(mailbox_dev + box_bytes * NL);
  gate_arena = cuda::DeviceArena("hybrid gates", gate_bytes(c));
  seq_dev = gate_arena.alloc_n<uint32_t>(1);
  host_mask_dev = gate_arena.alloc_n<uint32_t>(1);
  gate_dev = gate_arena.alloc_n<uint32_t>(2 * NL);
  resident_dev = gate_arena.alloc_n<uint32_t>(NL * mask_words);
  staged_dev = gate_arena.alloc_n<uint32_t>(NL * static_cast<size_t>(c.n_expert));
  staged_host = cuda::PinnedBuffer(NL * static_cast<size_t>(c.n_expert) * sizeof(uint32_t));
  std::memset(staged_host.get(), 0, staged_host.size());
  host_y_dev = gate_arena.alloc_n<float>(K * D);
  MS_CUDA_CHECK(cudaMemset(gate_arena.base(), 0, gate_arena.capacity()));
  gate_src = cuda::PinnedBuffer(2 * sizeof(uint32_t));
  std::memset(gate_src.get(), 0, gate_src.size());
  MS_CUDA_CHECK(cudaMemcpy(resident_dev, resident_host.get(), resident_host.size(), cudaMemcpyHostToDevice));
  resident_dirty = false;
}

uint64_t HybridMoe::Impl::gate_bytes(const ModelConfig& c) {
  const size_t NL = static_cast<size_t>(c.n_layer), words = static_cast<size_t>((c.n_expert + 31) / 32);
  return 4 * kAlign + align_up(2 * NL * 4) + align_up(NL * words * 4) + align_up(NL * static_cast<size_t>(c.n_expert) * 4) +
         align_up(static_cast<size_t>(c.n_expert_used) * static_cast<size_t>(c.n_embd) * 4);
}

void HybridMoe::Impl::upload_resident(cudaStream_t s) {
  MS_CUDA_CHECK(cudaMemcpyAsync(resident_dev, resident_host.get(), resident_host.size(), cudaMemcpyHostToDevice, s));
  resident_dirty = false;
}

void HybridMoe::Impl::begin_gated() {
  if (++seq == 0) seq = 1;  // gates start at 0
  gate_src.as<uint32_t>()[0] = gate_src.as<uint32_t>()[1] = seq;
  MS_CUDA_CHECK(cudaMemcpyAsync(seq_dev, gate_src.get(), sizeof(uint32_t), cudaMemcpyHostToDevice, stream));
  if (resident_dirty) upload_resident(stream);  // prompts admit and evict too
}

// Captured into the decode graph, once per tiered layer.
void HybridMoe::Impl::enqueue_gated(int il, const float* x, const cuda::Q8Act& x_q8, const int32_t* ids,
                                    const float* wts, float* h, const int32_t* pred_ids, int pred_layer) {
  const int K = c.n_expert_used;
  gated[static_cast<size_t>(il)] = 1;
  gated_pred[static_cast<size_t>(il)] = pred_ids != nullptr && bank_size > 0 ? pred_layer : -1;
  cuda::GateCheck gc;
  gc.resident = resident_dev + static_cast<size_t>(il) * mask_words;
  if (bank_size > 0) gc.staged = staged_dev + static_cast<size_t>(il) * static_cast<size_t>(c.n_expert);
  gc.ids = ids;
  gc.k = K;
  gc.n_expert = c.n_expert;
  gc.pred = pred_ids;
  gc.n_pred = gated_pred[static_cast<size_t>(il)] >= 0 ? K : 0;
  gc.x = x;
  gc.d = c.n_embd;
  gc.seq = seq_dev;
  gc.gate = gate_dev + 2 * il;
  gc.host_mask = host_mask_dev;
  gc.box = reinterpret_cast<cuda::GateMailbox*>(mailbox_dev + static_cast<size_t>(il) * box_bytes);
  cuda::gate_check(gc, stream);
  cuda::gate_wait(seq_dev, gate_dev + 2 * il, timed_out_dev, kGateTimeoutMs, stream);
  const cuda::ExpertWeights& ew = slots->weights(il);
  const bool q8 = cuda::matvec_takes_q8(ew.gate.type);
  cuda::GateRows gr;
  gr.seq = seq_dev;
  gr.gate = gate_dev + 2 * il + 1;
  gr.box = gc.box;
  gr.k = K;
  gr.d = c.n_embd;
  gr.y = host_y_dev;
  gr.mask = host_mask_dev;
  gr.timed_out = timed_out_dev;
  gr.timeout_ms = kGateTimeoutMs;
  cuda::HostRows hr;
  hr.y = host_y_dev;
  hr.mask = host_mask_dev;
  hr.gate = &gr;
  cuda::expert_ffn(ew, x, q8 ? &x_q8 : nullptr, 1, K, ids, wts, h, h, hg, decode_scratch_bytes, stream, &hr);
}

// Opens layer il's experts' gate (which 0) or its combine's (1), or both
// (which -1), on the copy stream behind what the host enqueued there.
void HybridMoe::Impl::open_gate(int il, int which) {
  const size_t n = which < 0 ? 2 : 1;
  MS_CUDA_CHECK(cudaMemcpyAsync(gate_dev + 2 * il + std::max(which, 0), gate_src.get(), sizeof(uint32_t) * n,
                                cudaMemcpyHostToDevice, copier->stream()));
}

// Lets every gate of the step pass (the step's output is then garbage), so
// that an error on the host never leaves the GPU waiting.
void HybridMoe::Impl::release_gates() {
  for (int il = 0; il < c.n_layer; ++il)
    if (gated[static_cast<size_t>(il)])
      cudaMemcpyAsync(gate_dev + 2 * il, gate_src.get(), 2 * sizeof(uint32_t), cudaMemcpyHostToDevice,
                      copier->stream());
  cudaStreamSynchronize(copier->stream());
  cudaStreamSynchronize(stream);
  cudaGetLastError();
  sched->end_pass();
}

void HybridMoe::Impl::serve_gated() {
  try {
    for (int il = 0; il < c.n_layer; ++il)
      if (gated[static_cast<size_t>(il)]) serve_layer(il);
  } catch (...) {
    release_gates();
    throw;
  }
}

// Waits for layer il's mailbox of this step.
const cuda::GateMailbox& HybridMoe::Impl::await_box(int il) {
  const cuda::GateMailbox* b = box(il);
  const volatile uint32_t* posted = &b->seq;
  const auto t0 = Clock::now();
  for (uint64_t spins = 1; *posted != seq; ++spins) {
    if (spins % 4096 != 0) continue;
    const cudaError_t st = cudaStreamQuery(stream);
    if (st != cudaSuccess && st != cudaErrorNotReady) MS_CUDA_CHECK(st);
    if (st == cudaSuccess && *posted != seq)
      throw Error("hybrid decode: the step ended without layer " + std::to_string(il) + " posting its routes");
    if (seconds_since(t0) > kMailboxTimeoutS)
      throw Error("hybrid decode: no routes from layer " + std::to_string(il) + " after 30 s");
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  tel.route_wait_s += seconds_since(t0);
  return *b;
}

void HybridMoe::Impl::serve_layer(int il) {
  const int K = c.n_expert_used, E = c.n_expert;
  const cuda::GateMailbox& b = await_box(il);
  const auto t_plan = Clock::now();
  sched->note_routes(static_cast<uint32_t>(il), seq, t_plan);  // the stretch since this step staged it
  // Earlier samples, only if done: never wait here, where the GPU may be
  // stopped at this layer's gate while the copy stream still prefetches.
  collect_timing(false);
  copy0_recorded = false;
  const auto t_policy = Clock::now();
  prof.timing_s += std::chrono::duration<double>(t_policy - t_plan).count();
  // A new sample only once the last one is in (its events are reused).
  timed = layer_steps++ % kTimingEvery == 0 && !copy_timing_pending;
  int32_t ids[cuda::GateMailbox::kMaxK], pred[cuda::GateMailbox::kMaxK];
  std::memcpy(ids, b.ids, sizeof(int32_t) * K);
  std::memcpy(pred, b.pred, sizeof(int32_t) * K);
  const bool hit = b.hit != 0;
  // The GPU went on with some experts in staging slots: its cache slots may
  // be in use by the layers after, so this plan must not change any.
  const bool staged_hit = b.hit == 2;
  // The plan through the engine's step (its host work has the CPU's row j at
  // pair j): the same grouping and scheduler call as the planned step.
  const StepPlan& sp = *moe_step->plan(step, il, ids, 1, true, !staged_hit).plan;
  const MoeStepTables& tables = moe_step->tables();
  const std::vector<ExpertWork>& cpu_work = tables.host_work;
  const auto t_enqueue = Clock::now();
  prof.policy_s += std::chrono::duration<double>(t_enqueue - t_policy).count();
  note_residency(sp.plan);
  if (sp.prediction.predicted) note_prediction(il, sp.prediction);
  TierCounts& lc = tel.layers[static_cast<size_t>(il)];
  uint32_t mask = 0;

  if (hit) {
    // The device found every expert resident (or, on a staged hit, in this
    // step's staging slots); the policy must agree (the bitmap and the
    // stamps mirror it), and a hit copies nothing.
    for (size_t i = 0; i < sp.plan.experts.size(); ++i) {
      const PlannedExpert& pe = sp.plan.experts[i];
      const bool present = pe.tier == Tier::Resident || (staged_hit && pe.staged);
      if (!present || sp.copy[i])
        throw Error("hybrid decode: layer " + std::to_string(il) +
                    " was present on the device but not in the residency policy (a bug)");
      count_pairs(lc, pass_counts, pe.tier, static_cast<uint64_t>(tables.pairs_of(static_cast<int>(pe.key % E))));
    }
    ++tel.gated_hits;
    tel.gated_staged_hits += staged_hit;
  } else {
    ++tel.gated_misses;
    bool copies = false;
    for (size_t i = 0; i < sp.plan.experts.size(); ++i) {
      const PlannedExpert& pe = sp.plan.experts[i];
      const int e = static_cast<int>(pe.key % static_cast<uint32_t>(E));
      count_pairs(lc, pass_counts, pe.tier, static_cast<uint64_t>(tables.pairs_of(e)));
      if (pe.tier == Tier::Host) continue;  // in cpu_work
      slots->point(il, e, sp.where[i].pool, sp.where[i].slot);
      if (sp.copy[i]) {
        if (!copies && timed) copier->record(copy0.get()), copy0_recorded = true;
        copies = true;
        copy_planned(il, e, sp, i);
      }
    }
    for (const ExpertWork& wk : cpu_work)
      for (int32_t j : wk.slots) mask |= 1u << j;  // the CPU's row j is pair j
    if (copies && timed) {
      copier->record(copy1.get());
      copy_timing_pending = true;
    }
    slots->upload(il, copier->stream());
    if (resident_dirty) upload_resident(copier->stream());
    // Without CPU experts both gates open behind the copies; with them the
    // GPU's experts go on while the CPU computes, and the combine's gate
    // opens from here once the CPU's rows are in the mailbox.
    open_gate(il, cpu_work.empty() ? -1 : 0);
  }
  double cpu_s = 0;
  const auto t_cpu = Clock::now();
  prof.enqueue_s += std::chrono::duration<double>(t_cpu - t_enqueue).count();
  if (!cpu_work.empty()) {
    sched->note_host_overhead(std::chrono::duration<double>(t_cpu - t_plan).count());
    cuda::GateMailbox* bx = box(il);
    cpu->compute(il, cuda::GateMailbox::x_of(bx), 1, cpu_work, cuda::GateMailbox::y_of(bx, c.n_embd));
    cuda::open_host_rows(bx, mask, seq);
    cpu_s = seconds_since(t_cpu);
    tel.cpu_experts_s += cpu_s;
    pass_cpu_s += cpu_s;
  }
  // The next tiered layer's predicted experts, on the copy stream behind
  // this layer's copies. After the CPU's experts, not before: the link's
  // DMA reads host memory as the CPU does, and running both at once slowed
  // the CPU's experts (on the critical path) on the GPU machine
  // (bench/results/hybrid_bench.md, "Run 13", "Host memory is one limit for
  // the copy engine and the CPU").
  const int target = gated_pred[static_cast<size_t>(il)];
  const auto t_stage = Clock::now();
  if (target >= 0) {
    sched->note_staged(static_cast<uint32_t>(target), seq, t_stage);
    stage_decode(target, moe_step->stage_decode(step, target, pred, K));
  }
  const auto t_settle = Clock::now();
  prof.stage_s += std::chrono::duration<double>(t_settle - t_stage).count();
  // The policy's deferred bookkeeping (the adaptive policy's shadow caches),
  // now that this layer's gates are open.
  res->settle();
  prof.settle_s += seconds_since(t_settle);
  ++(hit ? prof.hits : prof.misses);
  tel.plan_s += seconds_since(t_plan) - cpu_s;
}

}  // namespace ms
