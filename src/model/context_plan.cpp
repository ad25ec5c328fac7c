#include "model/context_plan.h"

#include <algorithm>
#include <cstdio>

#include "model/hparams.h"
#include "util/bytes.h"
#include "util/error.h"

namespace ms {
namespace {

// Down to a power of two below 1024 tokens, a multiple of 1024 above.
int64_t round_context(int64_t n) {
  if (n >= 1024) return n - n % 1024;
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return n >= 1 ? p : 0;
}

std::string tokens_text(int64_t n) { return std::to_string(n) + " tokens"; }

}  // namespace

KvCost kv_cost(const ModelHParams& hp, int kv_bytes_per_32) {
  KvCost c;
  c.per_token = hp.kv_cache_bytes(1, kv_bytes_per_32);
  c.fixed = hp.recurrent_state_bytes();
  return c;
}

std::string describe_kv_cost(const ModelHParams& hp, const KvCost& cost, const std::string& kv_type) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s, %s per 1k tokens: %d attention layers x %lld KV heads x (%lld + %lld)",
                kv_type.c_str(), format_bytes(cost.per_token * 1024).c_str(), hp.n_attention_layers(),
                static_cast<long long>(hp.n_head_kv), static_cast<long long>(hp.head_dim),
                static_cast<long long>(hp.head_dim_v));
  std::string s = buf;
  if (cost.fixed > 0) s += " + " + format_bytes(cost.fixed) + " of recurrent state";
  return s;
}

int64_t largest_context(const KvCost& cost, uint64_t room, int slots) {
  const uint64_t n = static_cast<uint64_t>(std::max(slots, 1));
  if (cost.per_token == 0) return int64_t{1} << 40;  // no K/V at all: memory sets no bound
  if (room < cost.fixed * n) return 0;
  const uint64_t tokens = (room - cost.fixed * n) / (cost.per_token * n);
  return round_context(static_cast<int64_t>(std::min<uint64_t>(tokens, uint64_t{1} << 40)));
}

ContextChoice choose_context(int64_t requested, int64_t needed, int64_t n_ctx_train, const KvCost& cost,
                             const ContextMemory& mem, int slots, bool needed_is_all) {
  auto fits = [&](int64_t ctx, uint64_t room) { return cost.bytes(ctx, slots) <= room; };
  const std::string per_slot = slots > 1 ? " x " + std::to_string(slots) + " slots" : "";
  ContextChoice c;
  if (requested > 0) {
    if (mem.limit > 0 && !fits(requested, mem.limit)) {
      const uint64_t one = cost.bytes(requested, 1);
      throw Error("--ctx " + std::to_string(requested) + per_slot + ": its KV cache takes " +
                  format_bytes(cost.bytes(requested, slots)) + ", more than " + mem.where +
                  " allows; the largest context that fits is " +
                  tokens_text(std::min(largest_context(cost, mem.limit, slots), std::max<int64_t>(requested - 1, 0))) +
                  (slots > 1 ? " per slot (or " + std::to_string(one > 0 ? mem.limit / one : 0) + " slots at --ctx " +
                                   std::to_string(requested) + ")"
                             : ""));
    }
    c.ctx = requested;
    return c;
  }
  const int64_t train = n_ctx_train > 0 ? n_ctx_train : kAutoFloor;
  const int64_t want = std::max(train, needed);
  const bool known = mem.limit > 0 || mem.resident > 0 || mem.automatic > 0;
  if (!known || (mem.resident > 0 && fits(want, mem.resident)) || (mem.resident == 0 && fits(want, mem.automatic))) {
    c.ctx = want;
    return c;
  }
  // A bounded run at a tiered budget: K/V beyond its need would only take
  // expert slots (the model's context fitting beside every expert returned above).
  if (needed_is_all && needed > 0 && want > needed && (mem.limit == 0 || fits(needed, mem.limit))) {
    c.ctx = needed;
    c.capped = true;
    c.note = "context " + tokens_text(needed) + per_slot + ": what the prompt and -n need (the model's " +
             tokens_text(train) + " would take " + format_bytes(cost.bytes(want, slots)) +
             " of KV cache from expert slots; --ctx N to choose)";
    return c;
  }
  // The model's context does not fit where it should: the largest that does.
  const int64_t resident_fit = mem.resident > 0 ? largest_context(cost, mem.resident, slots) : 0;
  std::string why;
  if (resident_fit >= std::min(train, kAutoFloor)) {
    c.ctx = std::min(resident_fit, want);
    why = "with every expert resident in " + mem.where;
  } else if (fits(want, mem.automatic)) {
    c.ctx = want;  // fits beside a tiered expert pool
    return c;
  } else {
    c.ctx = std::min(largest_context(cost, mem.automatic, slots), want);
    why = mem.resident > 0 ? "in half of " + mem.where + " (the rest for expert slots)" : "in half of " + mem.where;
  }
  if (c.ctx < needed) {
    // What the run needs overrides the automatic share, within the limit.
    if (mem.limit > 0 && !fits(needed, mem.limit))
      throw Error("the prompt and -n need " + tokens_text(needed) + per_slot + " of context, whose KV cache takes " +
                  format_bytes(cost.bytes(needed, slots)) + ", more than " + mem.where +
                  " allows; the largest context that fits is " + tokens_text(largest_context(cost, mem.limit, slots)));
    c.ctx = needed;
  }
  if (c.ctx < want) {
    c.capped = true;
    c.note = "context " + tokens_text(c.ctx) + per_slot + " (the model's " + tokens_text(train) + " would take " +
             format_bytes(cost.bytes(want, slots)) + " of KV cache; " + tokens_text(c.ctx) + " fit " + why +
             "; --ctx N to choose)";
  }
  return c;
}

}  // namespace ms
