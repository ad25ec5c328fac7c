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
//
// Both halves are engine/moe_step.h's step: the captured device half is its
// resident plan (GatedDeviceTier), the host's serve of a layer its gated plan
// (GatedTiers: routes from the mailbox, the device tier's copies and the
// gate, the host tier's rows into the mailbox, then the staging).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/backend/hybrid_moe_impl.h"
#include "engine/moe_tiers.h"
#include "util/error.h"

namespace ms {
using namespace hybrid_detail;

namespace {
// A gate the host never opens gives up after this long (the host died or
// hung); end_pass then reports the step as failed.
constexpr uint32_t kGateTimeoutMs = 20000;
// The host gives up on a layer's mailbox after this long.
constexpr double kMailboxTimeoutS = 30.0;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

// The device half of a gated decode token (captured into the decode graph):
// the step's resident plan, whose device checks residency itself.
class GatedDeviceTier final : public MoeTiers {
 public:
  struct Inputs {
    const float* x;
    const cuda::Q8Act* x_q8;
    const int32_t* ids;
    const float* weights;
    float* h;
    const int32_t* pred_ids;
    int pred_layer;
  };
  GatedDeviceTier(HybridMoe::Impl& m, const Inputs& in) : m_(m), in_(in) {}
  bool device_runs_layer(int, int) const override { return true; }
  void run_on_device(int il, int) override {
    m_.enqueue_gate_and_experts(il, in_.x, *in_.x_q8, in_.ids, in_.weights, in_.h, in_.pred_ids, in_.pred_layer);
  }
  // The resident plan reads nothing back.
  MoeRoutes fetch_routes(int, int, bool) override { throw Error("hybrid decode: a gated layer's device half has no host routes"); }
  void compute_share(const MoeShare&) override {}
  void combine(int, int) override {}

 private:
  HybridMoe::Impl& m_;
  Inputs in_;
};

// The host half of a gated decode token, one layer: what the step's gated
// plan asks, in its order (engine/moe_tiers.h).
class GatedTiers final : public MoeTiers {
 public:
  explicit GatedTiers(HybridMoe::Impl& m) : m_(m) {}

  // The routes from the layer's mailbox (the device posted them at its check).
  MoeRoutes fetch_routes(int il, int, bool) override {
    HybridMoe::Impl& m = m_;
    const int K = m.c.n_expert_used;
    const cuda::GateMailbox& b = m.await_box(il);
    t_plan_ = Clock::now();
    m.sched->note_routes(static_cast<uint32_t>(il), m.seq, t_plan_);  // the stretch since this step staged it
    // Earlier samples, only if done: never wait here, where the GPU may be
    // stopped at this layer's gate while the copy stream still prefetches.
    m.collect_timing(false);
    m.copy0_recorded = false;
    t_policy_ = Clock::now();
    m.prof.timing_s += seconds_between(t_plan_, t_policy_);
    // A new sample only once the last one is in (its events are reused).
    m.timed = m.layer_steps++ % HybridMoe::Impl::kTimingEvery == 0 && !m.copy_timing_pending;
    std::memcpy(ids_, b.ids, sizeof(int32_t) * K);
    std::memcpy(pred_, b.pred, sizeof(int32_t) * K);
    MoeRoutes r;
    r.ids = ids_;
    r.gated = true;
    r.arrived = t_plan_;
    // The GPU went on with every expert resident, or (2) with some in
    // staging slots: its cache slots may then be in use by the layers after,
    // so this plan must not change any.
    r.present = b.hit != 0;
    r.staged = b.hit == 2;
    const int target = m.gated_pred[static_cast<size_t>(il)];
    if (target >= 0) {
      r.pred_ids = pred_;
      r.pred_layer = target;
      r.pred_n = K;
    }
    present_ = r.present;
    staged_ = r.staged;
    return r;
  }

  void planned(int il, const LayerSchedule& ls, const MoeStepTables& t) override {
    HybridMoe::Impl& m = m_;
    t_ = &t;
    t_enqueue_ = Clock::now();
    m.prof.policy_s += seconds_between(t_policy_, t_enqueue_);
    const StepPlan& sp = *ls.plan;
    m.note_residency(sp.plan);
    if (sp.prediction.predicted) m.note_prediction(il, sp.prediction);
    TierCounts& lc = m.tel.layers[static_cast<size_t>(il)];
    for (const PlannedExpert& pe : sp.plan.experts)
      HybridMoe::Impl::count_pairs(lc, m.pass_counts, pe.tier,
                                   static_cast<uint64_t>(t.pairs_of(static_cast<int>(pe.key % static_cast<uint32_t>(m.c.n_expert)))));
    if (present_) {
      ++m.tel.gated_hits;
      m.tel.gated_staged_hits += staged_;
    } else {
      ++m.tel.gated_misses;
    }
    t_stage_ = Clock::now();
  }

  void point(int il, int e, SlotRef where) override { m_.slots->point(il, e, where.pool, where.slot); }

  // A miss: the device tier's copies, its slot table and the bitmap behind
  // them on the copy stream, then the experts' gate (and the combine's, when
  // the host has no rows to add).
  void decode_on_device(int il, const StepPlan& sp, const std::vector<size_t>& experts, bool) override {
    HybridMoe::Impl& m = m_;
    const int E = m.c.n_expert;
    bool copies = false;
    for (size_t i : experts) {
      if (!sp.copy[i]) continue;
      if (!copies && m.timed) m.copier->record(m.copy0.get()), m.copy0_recorded = true;
      copies = true;
      m.copy_planned(il, static_cast<int>(sp.plan.experts[i].key % static_cast<uint32_t>(E)), sp, i);
    }
    if (copies && m.timed) {
      m.copier->record(m.copy1.get());
      m.copy_timing_pending = true;
    }
    m.slots->upload(il, m.copier->stream());
    if (m.resident_dirty) m.upload_resident(m.copier->stream());
    // Without CPU experts both gates open behind the copies; with them the
    // GPU's experts go on while the CPU computes, and the combine's gate
    // opens from combine() once the CPU's rows are in the mailbox.
    m.open_gate(il, t_->host_work.empty() ? -1 : 0);
    t_stage_ = Clock::now();
  }

  // The CPU's rows into the layer's mailbox (row j is pair j).
  void compute_share(const MoeShare& s) override {
    HybridMoe::Impl& m = m_;
    const auto t_cpu = Clock::now();
    end_enqueue(t_cpu);
    cuda::GateMailbox* bx = m.box(s.layer);
    m.cpu->compute(s.layer, cuda::GateMailbox::x_of(bx), 1, *s.work, cuda::GateMailbox::y_of(bx, m.c.n_embd));
    mask_ = 0;
    for (const ExpertWork& wk : *s.work)
      for (int32_t row : wk.slots) mask_ |= 1u << s.pair(row);
    cpu_s_ = seconds_since(t_cpu);
    m.tel.cpu_experts_s += cpu_s_;
    m.pass_cpu_s += cpu_s_;
  }

  // The CPU's rows join the device's sum: a word in the mailbox opens the
  // combine's gate.
  void combine(int il, int) override {
    cuda::open_host_rows(m_.box(il), mask_, m_.seq);
    t_stage_ = Clock::now();
  }

  // The next tiered layer's predicted experts, on the copy stream behind
  // this layer's copies (the step queues them after the CPU's experts).
  void stage_decode(int layer, const DecodeStage& ds) override {
    HybridMoe::Impl& m = m_;
    end_enqueue(t_stage_);
    m.sched->note_staged(static_cast<uint32_t>(layer), m.seq, t_stage_);
    m.stage_decode(layer, ds);
    m.prof.stage_s += seconds_since(t_stage_);
  }

  // Served: the policy's deferred bookkeeping (the adaptive policy's shadow
  // caches), now that this layer's gates are open.
  void enqueued(int) override {
    HybridMoe::Impl& m = m_;
    const auto t_settle = Clock::now();
    end_enqueue(t_settle);
    m.res->settle();
    m.prof.settle_s += seconds_since(t_settle);
    ++(present_ ? m.prof.hits : m.prof.misses);
    m.tel.plan_s += seconds_since(t_plan_) - cpu_s_;
  }

 private:
  // The serve profile's enqueue part ends at the first of the CPU's rows,
  // the staging or the end.
  void end_enqueue(Clock::time_point t) {
    if (enqueue_counted_) return;
    enqueue_counted_ = true;
    m_.prof.enqueue_s += seconds_between(t_enqueue_, t);
  }

  HybridMoe::Impl& m_;
  int32_t ids_[cuda::GateMailbox::kMaxK] = {}, pred_[cuda::GateMailbox::kMaxK] = {};
  bool present_ = false, staged_ = false, enqueue_counted_ = false;
  const MoeStepTables* t_ = nullptr;
  uint32_t mask_ = 0;
  double cpu_s_ = 0;
  Clock::time_point t_plan_, t_policy_, t_enqueue_, t_stage_;
};

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

// Captured into the decode graph, once per tiered layer: the step's
// resident plan over the gated device tier.
void HybridMoe::Impl::enqueue_gated(int il, const float* x, const cuda::Q8Act& x_q8, const int32_t* ids,
                                    const float* wts, float* h, const int32_t* pred_ids, int pred_layer) {
  GatedDeviceTier tier(*this, {x, &x_q8, ids, wts, h, pred_ids, pred_layer});
  moe_step->run(step, il, 1, tier);
}

// The residency check, the gate, the experts over the slot table with the
// host's rows in the sum.
void HybridMoe::Impl::enqueue_gate_and_experts(int il, const float* x, const cuda::Q8Act& x_q8, const int32_t* ids,
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

// Layer il's host half: the step's gated plan over GatedTiers.
void HybridMoe::Impl::serve_layer(int il) {
  GatedTiers tiers(*this);
  moe_step->run(step, il, 1, tiers);
}

}  // namespace ms
