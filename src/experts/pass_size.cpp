#include "experts/pass_size.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "util/bytes.h"
#include "util/error.h"

namespace ms {
namespace {

constexpr int kRound = 64;  // pass sizes chosen by arithmetic are multiples of this (where above it)

// Routed expert bytes outside the cache slots with passes of b tokens.
double cold_at(const PassSizeInputs& in, int b) {
  double slots = std::max(0.0, double(in.room_bytes) - double(b) * in.bytes_per_token);
  if (in.slot_cap_bytes >= 0) slots = std::min(slots, double(in.slot_cap_bytes));
  return std::max(0.0, double(in.expert_bytes) - slots);
}

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), f, a, b, c);
  return buf;
}

void validate(const PassSizeInputs& in) {
  if (in.min_tokens < 1 || in.floor_tokens < in.min_tokens || in.max_tokens < in.min_tokens)
    throw Error("pass size: need 1 <= min_tokens <= floor_tokens and min_tokens <= max_tokens");
  if (in.ctx < 0) throw Error("pass size: negative context");
  if (!(in.stream_share > 0) || !(in.memory_share > 0) || in.memory_share > 1)
    throw Error("pass size: stream_share must be > 0 and memory_share in (0, 1]");
  if (!in.tiered) return;
  if (!(in.link_gbps > 0) || !std::isfinite(in.link_gbps)) throw Error("pass size: the link rate must be positive");
  if (!(in.compute_s_per_token > 0) || !std::isfinite(in.compute_s_per_token))
    throw Error("pass size: the compute time per token must be positive");
  if (!(in.bytes_per_token >= 0) || !std::isfinite(in.bytes_per_token))
    throw Error("pass size: bytes per token must be >= 0");
}

}  // namespace

double estimate_prompt_s_per_token(double active_weights, double tflops) {
  if (!(active_weights > 0) || !(tflops > 0)) throw Error("prompt compute estimate: weights and rate must be positive");
  return 2.0 * active_weights / (tflops * 1e12);
}

int linear_buffers_from(int chunk_rows, int k) {
  if (k < 1 || chunk_rows < 0)
    throw Error("pass size: " + std::to_string(k) + " experts a token and chunks of " + std::to_string(chunk_rows) +
                " rows make no buffer layout");
  const int64_t tokens = (int64_t{chunk_rows} + k - 1) / k;  // a pass of this many fills a chunk
  return static_cast<int>(std::max<int64_t>(kRound, (tokens + kRound - 1) / kRound * kRound));
}

PassSize choose_pass_size(const PassSizeInputs& in) {
  validate(in);
  PassSize r;
  const int64_t upper64 = in.ctx > 0 ? std::min<int64_t>(in.max_tokens, in.ctx) : in.max_tokens;
  const int upper = static_cast<int>(upper64);
  const bool ctx_bounds = in.ctx > 0 && in.ctx < in.max_tokens;
  if (!in.tiered) {
    // Without a per-token size the memory bound is unknown: the floor, as
    // the budget's reserve has always held it.
    int want = in.floor_tokens;
    bool by_memory = false;
    if (in.bytes_per_token > 0 && in.resident_tokens > in.floor_tokens) {
      const double fit = double(in.room_bytes) / in.bytes_per_token;
      const int fit64 = static_cast<int>(std::min<double>(in.resident_tokens, fit) / 64) * 64;
      want = std::max(in.floor_tokens, fit64);
      by_memory = fit64 < in.resident_tokens;
    }
    r.tokens = std::min(want, upper);
    r.bound = r.tokens < want ? PassSize::Bound::Context
              : by_memory     ? PassSize::Bound::Memory
                              : PassSize::Bound::Resident;
    r.why = "prompt passes of " + std::to_string(r.tokens) + " tokens: every routed expert is resident, nothing streams" +
            (r.bound == PassSize::Bound::Context  ? " (bounded by the context)"
             : r.bound == PassSize::Bound::Memory ? " (bounded by the VRAM left for the pass's buffers)"
                                                  : "");
    return r;
  }
  const double R = in.link_gbps * 1e9, t = in.compute_s_per_token, m = in.bytes_per_token;
  auto share = [&](int b) { return cold_at(in, b) / R / (double(b) * t); };
  const double inf = std::numeric_limits<double>::infinity();
  // Memory: up to the floor a pass may take everything the budget leaves
  // (below it, streaming every cold expert once per few tokens costs far
  // more than the cache those bytes would hold); above it, memory_share.
  const double fit_all = m > 0 ? double(in.room_bytes) / m : inf;
  const double share_cap = m > 0 ? in.memory_share * double(in.room_bytes) / m : inf;
  const int least = std::min(in.min_tokens, upper);
  const double lower_d = std::min<double>(in.floor_tokens, fit_all);
  const double mem_upper = std::max(lower_d, share_cap);
  const int top = static_cast<int>(std::min<double>(upper, mem_upper));
  PassSize::Bound cap_bound = mem_upper < upper ? PassSize::Bound::Memory
                              : ctx_bounds      ? PassSize::Bound::Context
                                                : PassSize::Bound::Largest;
  int b = 0;
  PassSize::Bound bound = PassSize::Bound::Floor;
  bool reached = true;
  if (top < in.floor_tokens) {
    // Memory or the context hold less than the floor: the largest that fits.
    b = top >= 2 * kRound ? top / kRound * kRound : top;
    bound = cap_bound;
  } else {
    // The smallest pass from the floor up (in steps of kRound) within the
    // target share; none: the one with the least share.
    int best = in.floor_tokens;
    b = -1;
    for (int c = in.floor_tokens;; c = std::min(top, (c / kRound + 1) * kRound)) {
      if (share(c) <= in.stream_share) {
        b = c;
        break;
      }
      if (share(c) < share(best)) best = c;
      if (c >= top) break;
    }
    if (b >= 0) {
      bound = b == in.floor_tokens ? PassSize::Bound::Floor : PassSize::Bound::Link;
    } else {
      b = best;
      reached = false;
      bound = b == top ? cap_bound : PassSize::Bound::Link;
    }
  }
  b = std::max(b, least);  // no room at all: the least pass (the buffers come out of the reserve)
  r.tokens = b;
  r.bound = bound;
  r.cold_bytes = cold_at(in, r.tokens);
  r.link_s = r.cold_bytes / R;
  r.compute_s = double(r.tokens) * t;
  r.why = "prompt passes of " + std::to_string(r.tokens) + " tokens: the cold experts (" +
          format_bytes(static_cast<uint64_t>(r.cold_bytes)) + ") stream once per pass" +
          fmt(" in %.3f s at %.0f GB/s, %.0f%% of", r.link_s, in.link_gbps, 100.0 * r.link_s / r.compute_s) +
          fmt(" the pass's ~%.3f s of compute (est.); ", r.compute_s);
  switch (bound) {
    case PassSize::Bound::Floor: r.why += "the floor size already keeps streaming small"; break;
    case PassSize::Bound::Link:
      r.why += reached ? fmt("the smallest pass within %.0f%%", 100.0 * in.stream_share)
                       : std::string("the least share any pass reaches");
      break;
    case PassSize::Bound::Memory:
      r.why += "bounded by VRAM: its buffers (" + format_bytes(static_cast<uint64_t>(m)) + " a token) may take " +
               (top < in.floor_tokens ? std::string("all") : fmt("%.0f%%", 100.0 * in.memory_share)) + " of the " +
               format_bytes(in.room_bytes) + " left for experts and buffers";
      break;
    case PassSize::Bound::Context: r.why += "bounded by the context (" + std::to_string(in.ctx) + ")"; break;
    case PassSize::Bound::Largest: r.why += "bounded by the largest batch (" + std::to_string(in.max_tokens) + ")"; break;
    case PassSize::Bound::Resident: break;
  }
  return r;
}

namespace {

// The pass chosen with a line's buffers added to the inputs'.
PassSize under_line(const PassSizeInputs& in, const BufferLine& line) {
  if (!(line.fixed_bytes >= 0) || !(line.bytes_per_token >= 0) || !std::isfinite(line.fixed_bytes) ||
      !std::isfinite(line.bytes_per_token))
    throw Error("pass size: a buffer line's bytes must be finite and >= 0");
  PassSizeInputs x = in;
  x.bytes_per_token += line.bytes_per_token;
  x.room_bytes = double(in.room_bytes) > line.fixed_bytes ? in.room_bytes - static_cast<uint64_t>(line.fixed_bytes) : 0;
  return choose_pass_size(x);
}

// Of the passes under two lines: true for the first.
bool first_of_two(const PassSizeInputs& in, const PassSize& a, const PassSize& b) {
  if (!in.tiered) return a.tokens >= b.tokens;
  auto reached = [&](const PassSize& p) { return p.compute_s > 0 && p.link_s <= in.stream_share * p.compute_s; };
  if (reached(a) && reached(b)) return a.tokens <= b.tokens;
  return a.tokens >= b.tokens;
}

}  // namespace

PassSize choose_chunked_pass_size(const PassSizeInputs& in, const BufferLine& whole, const BufferLine& chunked) {
  const PassSize a = under_line(in, whole), b = under_line(in, chunked);
  return first_of_two(in, a, b) ? a : b;
}

PassPlan choose_pass_plan(const PassSizeInputs& in, const PassLayout& whole, const PassLayout& chunked,
                          std::span<const PassLayout> tight) {
  PassPlan plan;
  {
    const PassSize a = under_line(in, whole.line), b = under_line(in, chunked.line);
    const bool first = first_of_two(in, a, b);
    plan.size = first ? a : b;
    plan.layout = first ? whole : chunked;
  }
  // The prompt ring's pass stands where it holds the floor, or all that the
  // context or the largest batch allow below it.
  const int64_t upper = in.ctx > 0 ? std::min<int64_t>(in.max_tokens, in.ctx) : in.max_tokens;
  if (!in.tiered || plan.size.tokens >= std::min<int64_t>(in.floor_tokens, upper)) return plan;
  const PassLayout* best = nullptr;
  PassSize best_size;
  for (const PassLayout& t : tight) {
    const PassSize p = under_line(in, t.line);
    if (best == nullptr || p.tokens > best_size.tokens ||
        (p.tokens == best_size.tokens && t.line.fixed_bytes < best->line.fixed_bytes))
      best = &t, best_size = p;
  }
  if (best == nullptr || best_size.tokens <= plan.size.tokens) return plan;
  plan.size = best_size;
  plan.layout = *best;
  plan.tight = true;
  plan.size.why += "; the budget holds no prompt ring for passes this long: the experts stream through " +
                   std::to_string(best->transit_slots) + " transit slots a pool (copies of one half behind the "
                   "other's compute)" +
                   (best->chunk_rows > 0 ? ", the step's rows in chunks of " + std::to_string(best->chunk_rows) : "");
  return plan;
}

}  // namespace ms
