// HybridTiers: the CUDA mechanism of each tier of the MoE step (see
// hybrid_tiers.h). The calls come in engine/moe_step.cpp's order; the
// launches and stream operations are the planned step's as before the move
// to src/engine (the same kernels in the same order: results bit for bit).
#include "cuda/backend/hybrid_tiers.h"

#include <algorithm>
#include <string>

#include "cuda/expert_bias.h"
#include "cuda/gemm.h"
#include "cuda/ops.h"
#include "util/error.h"

namespace ms {
using namespace hybrid_detail;

namespace {

// Row copies of any count: the kernels take at most 65535 rows a launch (the
// grid's y dimension), and a long prompt's wave has up to n_tokens x k.
constexpr int kRowsPerLaunch = 65535;

void gather_rows_any(const float* src, const int32_t* rows, int n_rows, int64_t n, float* dst, cudaStream_t s) {
  for (int r = 0; r < n_rows; r += kRowsPerLaunch)
    cuda::gather_rows(src, rows + r, std::min(kRowsPerLaunch, n_rows - r), n, dst + static_cast<int64_t>(r) * n, s);
}

void scatter_rows_any(const float* src, const int32_t* rows, int n_rows, int64_t n, float* dst, cudaStream_t s) {
  for (int r = 0; r < n_rows; r += kRowsPerLaunch)
    cuda::scatter_rows(src + static_cast<int64_t>(r) * n, rows + r, std::min(kRowsPerLaunch, n_rows - r), n, dst, s);
}

}  // namespace

// ---- route: ids (and the input for small passes; the prediction) to the host
MoeRoutes HybridTiers::fetch_routes(int il, int n, bool with_input) {
  HybridMoe::Impl& m = m_;
  const int np = n * m.c.n_expert_used;
  const int64_t D = m.c.n_embd;
  const HybridPrediction* pred = in_.pred;
  const auto t0 = Clock::now();
  auto* ids_h = m.ids_host.as<int32_t>();
  const bool pred_follows = pred && pred->ids == in_.ids + np;
  MS_CUDA_CHECK(cudaMemcpyAsync(ids_h, in_.ids, sizeof(int32_t) * (np + (pred_follows ? pred->n : 0)),
                                cudaMemcpyDeviceToHost, m.stream));
  if (pred && !pred_follows)
    MS_CUDA_CHECK(cudaMemcpyAsync(ids_h + np, pred->ids, sizeof(int32_t) * pred->n, cudaMemcpyDeviceToHost, m.stream));
  input_fetched_ = with_input;
  if (with_input)
    MS_CUDA_CHECK(cudaMemcpyAsync(m.x_host.get(), in_.x, sizeof(float) * n * D, cudaMemcpyDeviceToHost, m.stream));
  m.routes_ready.record(m.stream);
  m.timeline.mark_compute(m.stream, il, 0);
  const uint64_t reads_before = m.read_seq;
  m.routes_ready.synchronize();
  m.read_done = reads_before;  // every compute queued before the routes has run
  m.tel.route_wait_s += seconds_since(t0);
  // A prompt's stage keeps the copy stream busy past this point: waiting
  // for its timing would hold back this layer's own copies.
  m.collect_timing(!m.sched->stages_prompt(n));
  m.timed = m.layer_steps++ % HybridMoe::Impl::kTimingEvery == 0;
  t_plan_ = Clock::now();
  MoeRoutes r;
  r.ids = ids_h;
  if (pred) {
    r.pred_ids = ids_h + np;
    r.pred_layer = pred->layer;
    r.pred_n = pred->n;
  }
  return r;
}

// The plan into the resident bitmap and telemetry; a decode staging bank the
// compute waits for (a prompt's stage is waited for per wave instead).
void HybridTiers::planned(int il, const LayerSchedule& ls, const MoeStepTables& t) {
  HybridMoe::Impl& m = m_;
  const StepPlan& sp = *ls.plan;
  m.note_residency(sp.plan);
  if (sp.prediction.predicted && !ls.from_prompt_stage) m.note_prediction(il, sp.prediction);
  bank_ = ls.bank;
  if (bank_ >= 0) MS_CUDA_CHECK(cudaStreamWaitEvent(m.stream, m.stage_ready[bank_].get(), 0));
  // A pinned layer comes here only when the backend's kernels could not take
  // the pass (scratch): end_pass counts its pairs, so they are not counted here.
  if (m.sched->layer_pinned(static_cast<uint32_t>(il))) return;
  const uint32_t E = static_cast<uint32_t>(m.c.n_expert);
  for (const PlannedExpert& pe : sp.plan.experts)
    HybridMoe::Impl::count_pairs(m.tel.layers[static_cast<size_t>(il)], m.pass_counts, pe.tier,
                                 static_cast<uint64_t>(t.pairs_of(static_cast<int>(pe.key % E))));
}

void HybridTiers::point(int il, int e, SlotRef where) { m_.slots->point(il, e, where.pool, where.slot); }

bool HybridTiers::decode_kernels_take(int il) const {
  return (m_.decode_path[static_cast<size_t>(il)] & HybridMoe::Impl::kExpertFfn) != 0;
}

// Decode with every expert on the GPU: no row bookkeeping, the all-resident
// kernel (cuda::expert_ffn) over the slot table, after every copy.
void HybridTiers::decode_on_device(int il, const StepPlan& sp, const std::vector<size_t>& all, bool copies) {
  HybridMoe::Impl& m = m_;
  m.slots->upload(il, m.stream);
  if (copies) {
    if (m.timed) m.copier->record(m.copy0.get()), m.copy0_recorded = true;
    m.copy_wave(il, sp, all, 0);
  }
  m.decode_on_gpu(il, in_.x, *in_.x_q8, in_.ids, in_.weights, in_.h, copies);
  m.mark_read(sp, all);
  if (bank_ >= 0) m.bank_free[bank_].record(m.stream);
}

// The CPU's input, if it was not fetched with the routes: ahead of the waves
// so that waiting for it does not wait for them.
void HybridTiers::fetch_input(int, int n) {
  HybridMoe::Impl& m = m_;
  MS_CUDA_CHECK(cudaMemcpyAsync(m.x_host.get(), in_.x, sizeof(float) * n * m.c.n_embd, cudaMemcpyDeviceToHost, m.stream));
  m.x_ready.record(m.stream);
}

// The slot table and the row tables, in the device index buffer's layout
// [token_of_row | pair_of_row | offsets | group_expert | cpu_pair].
// Unchunked tables have groups + 1 offsets; chunked ones (MoeStep row
// chunks) an end entry per chunk among their `groups` entries.
void HybridTiers::upload_tables(int il, const MoeStepTables& t) {
  HybridMoe::Impl& m = m_;
  const size_t P = static_cast<size_t>(m.P()), G = static_cast<size_t>(m.G());
  const size_t n_offsets = std::min(t.group_offset.size(), static_cast<size_t>(t.groups) + 1);
  if (static_cast<size_t>(t.rows) > P || n_offsets > G || static_cast<size_t>(t.groups) > G - 1 ||
      static_cast<size_t>(t.host_rows) > P)
    throw Error("hybrid MoE: the step's tables (" + std::to_string(t.rows) + " rows, " + std::to_string(t.groups) +
                " groups) do not fit its index buffer");
  int32_t* idx_h = m.idx_host.as<int32_t>();
  auto put = [](int32_t* dst, const std::vector<int32_t>& v, size_t count) {
    std::copy(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(count), dst);
  };
  put(idx_h, t.token_of_row, static_cast<size_t>(t.rows));
  put(idx_h + P, t.pair_of_row, static_cast<size_t>(t.rows));
  put(idx_h + 2 * P, t.group_offset, n_offsets);
  put(idx_h + 2 * P + G, t.group_expert, static_cast<size_t>(t.groups));
  put(idx_h + 2 * P + 2 * G - 1, t.host_pair, static_cast<size_t>(t.host_rows));
  m.slots->upload(il, m.stream);
  MS_CUDA_CHECK(cudaMemcpyAsync(m.idx, idx_h, sizeof(int32_t) * (2 * P + 2 * G - 1 + static_cast<size_t>(t.host_rows)),
                                cudaMemcpyHostToDevice, m.stream));
}

void HybridTiers::begin_waves(int, bool any_copy) {
  HybridMoe::Impl& m = m_;
  if (any_copy && m.timed) {
    m.copier->record(m.copy0.get());
    m.copy0_recorded = true;
    m.copy_timing_pending = true;
  }
  if (m.timed) m.gpu0.record(m.stream);
}

void HybridTiers::copy_wave(int il, const StepPlan& sp, const std::vector<size_t>& wave, size_t index) {
  m_.copy_wave(il, sp, wave, index);
}

// One wave's rows: gathered into consecutive rows, gate/up -> SwiGLU -> down
// per group (one expert), each output scattered to its pair index.
void HybridTiers::compute_wave(int il, int n, const StepPlan& sp, const std::vector<size_t>& wave, const MoeWave& w) {
  HybridMoe::Impl& m = m_;
  const cudaStream_t stream = m.stream;
  const int64_t D = m.c.n_embd, F = m.c.n_ff_exp;
  if (w.prompt_group >= 0)
    MS_CUDA_CHECK(cudaStreamWaitEvent(stream, m.event(m.ring_copied, static_cast<size_t>(w.prompt_group)).get(), 0));
  const cuda::ExpertWeights& ew = m.slots->weights(il);
  const bool batch = n >= m.opt.gemm_min_batch;
  const bool biased = ew.biased_or_clamped();
  const int r0 = w.row_begin, nr = w.row_end - w.row_begin;
  // The first buffer row of the wave: its pass row, or 0 for a row chunk
  // (MoeStep row chunks: offsets count from the chunk's first row, and the
  // per-row buffers hold one chunk). Every step below is per row or per
  // group at the offsets, so a row's result does not depend on the chunk.
  const int64_t b0 = m.moe_step->chunk_rows() > 0 ? 0 : r0;
  if (b0 + nr > m.R()) throw Error("hybrid MoE: a wave of " + std::to_string(nr) + " rows overruns the step's buffers");
  cuda::MatvecGroups g;
  g.max_groups = w.group_end - w.group_begin;
  g.per_group = w.max_rows;
  // About one row an expert (decode steps of several sequences): the
  // one-vector matvec kernel (MatvecGroups::typical_per_group).
  const bool thin = cuda::one_vector_groups(nr, g.max_groups);
  if (thin) g.typical_per_group = 1;
  g.n_expert = m.c.n_expert;
  g.expert = m.group_expert() + w.group_begin;
  g.offsets = m.offsets() + w.group_begin;
  // A prompt's wave: the all-resident step's kernels over the rows, each
  // reading its token's row of the pass's Q8 input in place and writing its
  // pair's row of exp_y (no gather, requantization or scatter). Buffer row
  // b0 + i is position b0 + i of the groups' offsets, pass row r0 + i.
  if (batch && !thin && in_.x_q8->q != nullptr && cuda::grouped_rows_ffn_supported(ew)) {
    cuda::GroupedRows gr;
    gr.groups = g;
    gr.first = static_cast<int>(b0);
    gr.rows = nr;
    gr.x = *in_.x_q8;
    gr.token_of = m.token_of_row() + (r0 - b0);
    gr.out_of = m.pair_of_row() + (r0 - b0);
    gr.h = m.hg;
    gr.u = m.hu;
    gr.h_q8 = m.h_q8;
    gr.y = m.exp_y;
    cuda::grouped_rows_ffn(ew, gr, stream);
    m.mark_read(sp, wave);
    return;
  }
  gather_rows_any(in_.x, m.token_of_row() + r0, nr, D, m.xg + b0 * D, stream);
  cuda::MatvecInput in;
  in.f32 = m.xg;
  if (cuda::matvec_takes_q8(ew.gate.type)) {
    cuda::quantize_q8act(m.xg + b0 * D, D, nr, cuda::q8act_rows(m.xg_q8, b0), stream);
    in.q8 = m.xg_q8;
  }
  // gpt-oss: each row's expert biases and the clamped SwiGLU after gate
  // and up apart (the fused SwiGLU matvec has neither); the row's expert is
  // the layer's device route of its pair.
  const cuda::ExpertRows rows{in_.ids, m.pair_of_row() + r0, nr};
  if (batch) {
    cuda::matmul(ew.gate, in, g, m.hg, F, nullptr, stream);
    cuda::matmul(ew.up, in, g, m.hu, F, nullptr, stream);
    if (biased) cuda::expert_rows_act(ew, m.hg + b0 * F, m.hu + b0 * F, rows, stream);
    else cuda::silu_mul(m.hg + b0 * F, m.hu + b0 * F, m.hg + b0 * F, static_cast<int64_t>(nr) * F, stream);
  } else if (biased) {
    cuda::matvec(ew.gate, in, g, m.hg, F, nullptr, stream);
    cuda::matvec(ew.up, in, g, m.hu, F, nullptr, stream);
    cuda::expert_rows_act(ew, m.hg + b0 * F, m.hu + b0 * F, rows, stream);
  } else {
    cuda::matvec_glu(ew.gate, ew.up, in, g, m.hg, F, stream);
  }
  cuda::MatvecInput hin;
  hin.f32 = m.hg;
  if (cuda::matvec_takes_q8(ew.down.type)) {
    cuda::quantize_q8act(m.hg + b0 * F, F, nr, cuda::q8act_rows(m.h_q8, b0), stream);
    hin.q8 = m.h_q8;
  }
  if (batch) cuda::matmul(ew.down, hin, g, m.yc, D, nullptr, stream);
  else cuda::matvec(ew.down, hin, g, m.yc, D, nullptr, stream);
  if (biased) cuda::expert_rows_down_bias(ew, m.yc + b0 * D, rows, stream);
  scatter_rows_any(m.yc + b0 * D, m.pair_of_row() + r0, nr, D, m.exp_y, stream);
  m.mark_read(sp, wave);
}

void HybridTiers::end_waves(int il, bool any_copy) {
  HybridMoe::Impl& m = m_;
  if (any_copy && m.timed) m.copier->record(m.copy1.get());
  m.timeline.mark_compute(m.stream, il, 1);
  if (bank_ >= 0) m.bank_free[bank_].record(m.stream);
}

void HybridTiers::stage_decode(int layer, const DecodeStage& ds) { m_.stage_decode(layer, ds); }

void HybridTiers::stage_prompt(const PromptStage& ps) { m_.stage_prompt(ps); }

void HybridTiers::enqueued(int) { m_.tel.plan_s += seconds_since(t_plan_); }

// ---- CPU experts, while the GPU runs the waves; their rows then go up and
// to their pair indices.
void HybridTiers::compute_share(const MoeShare& s) {
  HybridMoe::Impl& m = m_;
  const int64_t D = m.c.n_embd;
  if (!input_fetched_) m.x_ready.synchronize();
  const auto t0 = Clock::now();
  m.cpu->compute(s.layer, m.x_host.as<float>(), s.n_tokens, *s.work, m.cpu_y_host.as<float>());
  const double sec = seconds_since(t0);
  m.tel.cpu_experts_s += sec;
  m.pass_cpu_s += sec;
  // The gathered-input buffer is free once the waves ran (same stream); it
  // holds R() rows (one chunk where passes are chunked), so the rows go up
  // R() at a time, each to its pair index (upload_tables put the share's
  // pair_of_row on the device as cpu_pair) as before.
  const int piece = m.R();
  for (int r = 0; r < s.rows; r += piece) {
    const int nr = std::min(piece, s.rows - r);
    MS_CUDA_CHECK(cudaMemcpyAsync(m.xg, m.cpu_y_host.as<float>() + static_cast<int64_t>(r) * D,
                                  sizeof(float) * static_cast<size_t>(nr) * D, cudaMemcpyHostToDevice, m.stream));
    scatter_rows_any(m.xg, m.cpu_pair() + r, nr, D, m.exp_y, m.stream);
  }
}

// ---- combine: every pair at its index, summed in fixed order
void HybridTiers::combine(int il, int n) {
  HybridMoe::Impl& m = m_;
  cuda::moe_combine(m.exp_y, in_.weights, n, m.c.n_expert_used, m.c.n_embd, in_.h, in_.h, m.stream);
  m.timeline.mark_compute(m.stream, il, 2);
  if (m.timed) {
    m.gpu1.record(m.stream);
    m.timing_pending = true;
  }
}

}  // namespace ms
