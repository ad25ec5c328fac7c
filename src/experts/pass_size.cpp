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

double cold_at(const PassSizeInputs& in, int b) {
  const double c0 = double(in.expert_bytes) - double(in.room_bytes);
  return std::max(0.0, c0 + double(b) * in.bytes_per_token);
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

PassSize choose_pass_size(const PassSizeInputs& in) {
  validate(in);
  PassSize r;
  const int64_t upper64 = in.ctx > 0 ? std::min<int64_t>(in.max_tokens, in.ctx) : in.max_tokens;
  const int upper = static_cast<int>(upper64);
  const bool ctx_bounds = in.ctx > 0 && in.ctx < in.max_tokens;
  if (!in.tiered) {
    r.tokens = std::min(in.floor_tokens, upper);
    r.bound = r.tokens < in.floor_tokens ? PassSize::Bound::Context : PassSize::Bound::Resident;
    r.why = "prompt passes of " + std::to_string(r.tokens) + " tokens: every routed expert is resident, nothing streams" +
            (r.bound == PassSize::Bound::Context ? " (bounded by the context)" : "");
    return r;
  }
  const double R = in.link_gbps * 1e9, t = in.compute_s_per_token, m = in.bytes_per_token;
  auto share = [&](int b) { return cold_at(in, b) / R / (double(b) * t); };
  // The smallest pass from the floor up whose streaming stays within the target share.
  double need = in.floor_tokens;
  PassSize::Bound bound = PassSize::Bound::Floor;
  if (share(in.floor_tokens) > in.stream_share) {
    const double gain = in.stream_share * R * t - m;  // bytes of link budget each token adds
    const double c0 = double(in.expert_bytes) - double(in.room_bytes);
    need = gain > 0 ? std::max<double>(in.floor_tokens, std::ceil(c0 / gain / kRound) * kRound)
                    : std::numeric_limits<double>::infinity();
    bound = PassSize::Bound::Link;
  }
  const double mem_cap = m > 0 ? std::floor(in.memory_share * double(in.room_bytes) / m)
                               : std::numeric_limits<double>::infinity();
  double b = need;
  if (b > mem_cap) {
    b = mem_cap >= 2 * kRound ? std::floor(mem_cap / kRound) * kRound : mem_cap;
    bound = PassSize::Bound::Memory;
  }
  if (b > upper) {
    b = upper;
    bound = ctx_bounds ? PassSize::Bound::Context : PassSize::Bound::Largest;
  }
  const int least = std::min(in.min_tokens, upper);
  if (b < least) b = least;  // the memory bound gives way to the least pass (the pool shrinks instead)
  r.tokens = static_cast<int>(b);
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
      r.why += fmt("the smallest pass within %.0f%%", 100.0 * in.stream_share);
      break;
    case PassSize::Bound::Memory:
      r.why += "bounded by VRAM: its buffers (" + format_bytes(static_cast<uint64_t>(m)) + " a token) may take " +
               fmt("%.0f%% of the ", 100.0 * in.memory_share) + format_bytes(in.room_bytes) + " left for experts";
      break;
    case PassSize::Bound::Context: r.why += "bounded by the context (" + std::to_string(in.ctx) + ")"; break;
    case PassSize::Bound::Largest: r.why += "bounded by the largest batch (" + std::to_string(in.max_tokens) + ")"; break;
    case PassSize::Bound::Resident: break;
  }
  return r;
}

}  // namespace ms
