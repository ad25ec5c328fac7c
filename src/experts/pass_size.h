// How many prompt tokens one forward pass takes (the CUDA backend's batch,
// `-b 0`), from the arithmetic of a tiered prompt: every pass streams each
// cold expert over the link once, for all of its tokens, so the link's share
// of a pass falls as the pass grows; the pass's buffers (activations and the
// hybrid step's per-token rows) come out of the same VRAM as the expert
// cache, so a longer pass also makes more experts cold.
//
// With B tokens per pass, per-token buffer bytes m, link rate R, GPU compute
// t per token, routed expert bytes X and `room` for slots and buffers:
//   slots(B) = min(cap, max(0, room - B m))   cold(B) = max(0, X - slots(B))
//   link(B) = cold(B) / R   compute(B) = B t   share(B) = link(B) / compute(B)
// While experts are cold, share falls with B towards m / (R t). The choice
// is the smallest B from the floor (where the GPU already runs at its prompt
// rate) up, in steps of 64, with share(B) <= the target share (none: the B
// of least share), bounded by the memory the budget leaves for the buffers
// (all of it up to the floor; beyond, a share of it, so a tight budget keeps
// small passes and decode keeps most of its cache), by the context and by
// the largest batch. Every expert resident: nothing streams; the pass is
// resident_tokens where the memory left for the buffers holds it, never
// less than the floor: longer passes give each expert's GEMM more rows (256
// experts top-8 get 16 tokens each from a 512-token pass) and pay a pass's
// fixed costs fewer times (passes of 8192 against 2048: bench/results/
// long_context.md, session 7).
//
// Pure arithmetic: the CUDA backend measures or estimates the inputs and
// applies the result; unit tests on CI (tests/experts/pass_size_test.cpp).
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace ms {

struct PassSizeInputs {
  bool tiered = false;            // some routed experts live outside VRAM
  uint64_t expert_bytes = 0;      // every routed expert's weights
  // VRAM the budget leaves for expert cache slots and the pass's per-token
  // buffers together (after dense weights, KV cache, reserve, and the
  // step's fixed buffers: transit ring, tables).
  uint64_t room_bytes = 0;
  // The cache slots never take more than this (-1: no bound): the budget's
  // room for experts, when room_bytes also counts a reserve that only the
  // buffers may use.
  int64_t slot_cap_bytes = -1;
  double bytes_per_token = 0;     // per-token buffers (activations + the hybrid step's rows)
  double link_gbps = 0;           // host -> device copies (pinned)
  double compute_s_per_token = 0; // GPU prompt compute per token (estimate or measurement)
  int64_t ctx = 0;                // no pass is longer than the context (0: no bound)

  double stream_share = 0.10;     // target: the link's time per pass over its compute
  double memory_share = 1.0 / 3;  // the per-token buffers take at most this share of room_bytes
  int floor_tokens = 512;         // the GPU's prompt rate is reached from about here
  // Every expert resident: the pass wanted when room_bytes / bytes_per_token
  // holds it (bytes_per_token 0: no memory bound given, the floor).
  int resident_tokens = 8192;
  int min_tokens = 16;            // the least a pass may be (memory permitting or not)
  int max_tokens = 16384;         // the largest batch the CLI accepts
};

struct PassSize {
  int tokens = 0;
  // What the choice was bounded by.
  enum class Bound { Resident, Floor, Link, Memory, Context, Largest } bound = Bound::Floor;
  double cold_bytes = 0;  // at `tokens`
  double link_s = 0;      // cold_bytes over the link, once per pass
  double compute_s = 0;   // the pass's compute (tokens x compute_s_per_token)
  // One line for `run -v` / bench: the size and why.
  std::string why;
};

// Estimated GPU prompt compute per token: 2 flops per active weight (dense
// weights plus n_expert_used experts) at an effective rate. The default rate
// is what moestream's prompt path reaches on the GPU machine for the Qwen3-30B-A3B
// shape (bench/results/long_context.md, hybrid_bench.md); attention's growth
// with depth is left out (it only makes compute larger and the link's share
// smaller).
constexpr double kPromptTflopsEstimate = 50;
double estimate_prompt_s_per_token(double active_weights, double tflops = kPromptTflopsEstimate);

// The hybrid step's buffers are per (token, expert) row of one chunk of at
// most chunk_rows rows (a fixed cost once a pass fills a chunk) and per pair
// of the pass: linear in the pass's tokens only from the pass that fills a
// chunk. This is the least pass, a multiple of 64 (at least 64), from which
// two measurements give the per-token bytes and, extrapolated to 0 tokens,
// the fixed ones (an overestimate for shorter passes, never an under-).
// chunk_rows 0: no chunks, linear from the start (64). Throws ms::Error for
// k < 1 or chunk_rows < 0.
int linear_buffers_from(int chunk_rows, int k);

// The hybrid step's buffers as two lines, each an upper bound of the true
// bytes at every pass: `whole`, every row with its own buffer rows (exact up
// to the pass that fills a chunk), and `chunked`, the rows' buffers a fixed
// chunk (exact from that pass on). in.room_bytes and in.bytes_per_token are
// the room before the lines' fixed bytes and the other per-token bytes
// (activations), to which each line adds its own.
struct BufferLine {
  double fixed_bytes = 0;
  double bytes_per_token = 0;
};
// choose_pass_size under either line (both are safe): where both reach the
// target share, the shorter pass (the nearer to the smallest that truly
// does); otherwise the longer (more tokens per cold expert streamed).
PassSize choose_chunked_pass_size(const PassSizeInputs& in, const BufferLine& whole, const BufferLine& chunked);

// Throws ms::Error on inputs that make no sense (negative or zero rates for a
// tiered model, floor above max, ...).
PassSize choose_pass_size(const PassSizeInputs& in);

// A way the tiered step can lay out its buffers for a pass: the transit
// ring of each slot pool (the streamed experts' staging area: waves of half
// of it, so the link copies wave i + 1 while the GPU computes wave i), the
// row chunk of its per-row buffers (0: none), and their bytes as a line
// (the ring's slots and a chunk's rows in fixed_bytes).
struct PassLayout {
  BufferLine line;
  uint32_t transit_slots = 0;  // per slot pool
  int chunk_rows = 0;
};

struct PassPlan {
  PassSize size;
  PassLayout layout;   // the buffers to build for it
  bool tight = false;  // one of the tight layouts (below)
};

// The pass and its buffers. `whole` and `chunked` carry the prompt ring
// (room to stage a layer's experts ahead of its routes) and are chosen
// between as choose_chunked_pass_size does; that choice stands wherever it
// holds the floor (or the context's or largest batch's bound below it).
// Where the budget holds less, nearly every routed expert is cold anyway:
// each pass sends most of every layer's experts over the link (or to the
// CPU) once, so the link's bytes per prompt token are about the experts'
// bytes over the pass, and a prompt ring that leaves room only for passes
// of a few tokens multiplies them by the floor over those few. Then the
// `tight` layouts are tried (a ring of two waves, small row
// chunks: the ring's lead only hides a layer's first copies; the chunks hold
// a wave's rows): the one with the longest pass (ties: the smallest fixed
// bytes, which leave the most to cache slots) where it is longer than the
// prompt ring's. Throws as choose_chunked_pass_size does.
PassPlan choose_pass_plan(const PassSizeInputs& in, const PassLayout& whole, const PassLayout& chunked,
                          std::span<const PassLayout> tight);

}  // namespace ms
