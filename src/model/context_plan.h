// How long a context memory allows: the KV cache's cost per token (the
// attention layers' K and V in the cache's type, plus the fixed recurrent
// state of linear-attention layers), and the choice of `--ctx`:
//   --ctx N  (N > 0): N tokens, or an error when its KV cache does not fit,
//            giving the largest context that does;
//   --ctx 0  the model's trained context (GGUF context_length), when memory
//            allows; else the largest that fits (a power of two below 1024
//            tokens, a multiple of 1024 above), said in one line.
// Pure arithmetic: the backends' memory figures come in as ContextMemory
// (the CLI fills it from RAM, or from the VRAM budget's plan).
#pragma once
#include <cstdint>
#include <string>

namespace ms {

struct ModelHParams;

// Bytes the sequence state of one slot takes: `per_token` for each token of
// context (K and V of every attention layer), plus `fixed` whatever the length.
struct KvCost {
  uint64_t per_token = 0;
  uint64_t fixed = 0;
  uint64_t bytes(int64_t ctx, int slots = 1) const {
    return (per_token * static_cast<uint64_t>(ctx > 0 ? ctx : 0) + fixed) * static_cast<uint64_t>(slots > 0 ? slots : 1);
  }
};
// kv_bytes_per_32: the cache type's bytes per 32 elements (engine/kv_cache.h: kv_bytes_per_32).
KvCost kv_cost(const ModelHParams& hp, int kv_bytes_per_32);
// "f16, 96.0 MiB per 1k tokens: 48 attention layers x 4 KV heads x (128 + 128)".
std::string describe_kv_cost(const ModelHParams& hp, const KvCost& cost, const std::string& kv_type);

// The memory a context may take, in bytes (for all slots together).
struct ContextMemory {
  // The most the KV caches may take at all: an explicit --ctx, or what the
  // run needs, beyond it is an error. 0: unknown (no check).
  uint64_t limit = 0;
  // CUDA: the room left with every routed expert resident (0: none). --ctx 0
  // keeps the experts resident when the model's context, or at least
  // kAutoFloor tokens of it, fits here.
  uint64_t resident = 0;
  // What --ctx 0 may take otherwise (CPU: half the RAM; CUDA with tiered
  // experts: half the budget's room, the other half stays for expert slots).
  uint64_t automatic = 0;
  std::string where;  // what the numbers are, for messages: "this machine's RAM (62.8 GiB)"
};

struct ContextChoice {
  int64_t ctx = 0;
  bool capped = false;  // below the model's context because memory does not allow more
  std::string note;     // one line saying why, when capped
};

// The least a capped --ctx 0 keeps experts resident for (else it tiers them).
constexpr int64_t kAutoFloor = 4096;

// The largest context of `slots` slots whose KV caches fit `room` bytes,
// rounded down to a power of two (< 1024) or a multiple of 1024; 0 if none.
int64_t largest_context(const KvCost& cost, uint64_t room, int slots = 1);

// requested: --ctx (0: the model's); needed: the least this run needs (the
// prompt plus -n; 0: nothing known); n_ctx_train: the model's context (0:
// unknown, taken as kAutoFloor). Throws ms::Error naming --ctx and the largest
// context that fits when an explicit one (or the one needed) does not.
// needed_is_all: the run never holds more than `needed` tokens (a bounded
// `run`); then, where the model's context would push experts out of VRAM,
// --ctx 0 takes only what is needed and leaves the rest to expert slots.
ContextChoice choose_context(int64_t requested, int64_t needed, int64_t n_ctx_train, const KvCost& cost,
                             const ContextMemory& mem, int slots = 1, bool needed_is_all = false);

}  // namespace ms
