// Which sequence each token of a batch belongs to (issue #41: one kernel per
// op for any batch of tokens). The per-sequence state of a layer (KV cache
// rows, conv window, delta-rule state) of several sequences sits at
// base + slot * stride; token t works on slot slots[t]. The batch of one
// sequence is slots == null: every token on the base pointer as given (the
// single-sequence call). slots lives in device memory and is read by the
// kernels, so a captured graph replays with new slots: which sequences are in
// a batch does not enter the graph.
//
// Plain C++ (no CUDA types): shared by the launchers' headers.
#pragma once
#include <cstdint>

namespace ms::cuda {

struct SlotMap {
  const int32_t* slots = nullptr;  // device [n_tokens]; null: every token on slot 0
  int64_t stride = 0;              // units of the state's element type between slots
  int n_slots = 1;                 // a token whose slot is outside [0, n_slots) touches no state
};

}  // namespace ms::cuda
