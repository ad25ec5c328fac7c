// The GPU side of a hybrid decode step with no host round trip on a hit:
// each tiered layer checks on the device whether every routed expert is
// resident, and only when one is not does its expert compute wait for the
// host (which streams or CPU-computes the cold ones and then opens the gate).
//
//   check   reads the layer's routed ids, tests them against the resident
//           bitmap and the staging stamps (an expert copied ahead into a
//           staging slot this step counts as present), posts ids (+ the
//           next layer's prediction, + on a miss the FFN input) to a
//           mailbox in mapped host memory, stamped with the step's sequence
//           number last; on a hit it opens the gate itself
//   gate    one thread waits until a gate word holds the step's sequence
//           number, with a timeout. A layer has two: the experts' gate (the
//           miss's copies and slot table are in) and the combine's (the CPU's
//           rows are in), so the GPU computes its experts while the CPU does;
//           check opens both on a hit, the host's copy stream on a miss
//   rows    the combine's gate on a miss: waits until the host has written
//           the CPU's rows into the mailbox and stamped it (or until the
//           check opened the gate on a hit), then copies those rows to
//           device memory. No driver call and no copy stream on the host's
//           side, so the rows never queue behind the next layer's prefetch
//   combine moe_combine, except that the rows the host computed (host_mask)
//           come from host_y instead of the GPU's own output
//
// Mechanism only: what is resident, and what a miss does, is decided on the
// host (experts/residency.h, cuda/backend/hybrid_moe). Graph-capturable: the
// sequence number is read from device memory, never baked into a launch.
//
// CUDA-only header.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ms::cuda {

// One layer's mailbox in mapped (host-visible) memory. The device writes
// everything else first, then seq (after a system-wide fence); the host reads
// seq, then the rest.
struct GateMailbox {
  static constexpr int kMaxK = 32;
  uint32_t seq;       // the step whose routes these are
  uint32_t hit;       // 1: every routed expert resident, 2: resident or staged (the check opened the gates); 0: a miss
  int32_t ids[kMaxK];
  int32_t pred[kMaxK];
  // Written by the host on a miss with CPU experts, for gate_wait_rows: the
  // rows it computed (bit j: row j of y_of), then `open` = the step's
  // sequence number, last.
  uint32_t mask;
  uint32_t open;
  // followed by the FFN input (d floats, written by the device on a miss),
  // then k rows of d floats (the host's)
  static constexpr size_t kHeaderBytes = 512;  // the fields above, rounded up
  static size_t bytes(int64_t d, int k);
  static float* x_of(GateMailbox* m) { return reinterpret_cast<float*>(reinterpret_cast<char*>(m) + kHeaderBytes); }
  static float* y_of(GateMailbox* m, int64_t d) {
    return reinterpret_cast<float*>(reinterpret_cast<char*>(m) + kHeaderBytes + x_bytes(d));
  }
  static size_t x_bytes(int64_t d) { return (sizeof(float) * static_cast<size_t>(d) + 255) & ~size_t{255}; }
};
static_assert(sizeof(GateMailbox) <= GateMailbox::kHeaderBytes);

struct GateCheck {
  const uint32_t* resident = nullptr;  // the layer's bitmap: bit e of word e / 32
  // Optional, the layer's n_expert staging stamps: expert e counts as
  // present when staged[e] equals this step's sequence number (a staging
  // slot holds it, and the slot table points there).
  const uint32_t* staged = nullptr;
  const int32_t* ids = nullptr;        // k routed experts of the one token
  int k = 0;
  int n_expert = 0;
  const int32_t* pred = nullptr;       // the next tiered layer's prediction (n_pred ids), optional
  int n_pred = 0;
  const float* x = nullptr;            // the FFN input (d floats), posted on a miss
  int64_t d = 0;
  const uint32_t* seq = nullptr;       // device word: this step's sequence number
  uint32_t* gate = nullptr;            // device words: the layer's two gates (both opened on a hit)
  uint32_t* host_mask = nullptr;       // device word: cleared here (the host sets it on a miss)
  GateMailbox* box = nullptr;          // device address of the mapped mailbox
};
void gate_check(const GateCheck& c, cudaStream_t stream);

// Waits until *gate == *seq, or until timeout_ms has passed: then it writes
// 1 to *timed_out (mapped memory) and returns, so a host that died never
// leaves the device spinning forever.
void gate_wait(const uint32_t* seq, const uint32_t* gate, uint32_t* timed_out, uint32_t timeout_ms,
               cudaStream_t stream);

// The combine's gate of a miss. One block: waits until *gate == *seq (the
// check opened it: nothing to copy) or box->open == *seq (the host's rows
// are in the mapped mailbox: the rows of box->mask are copied to y, the mask
// to *mask), or until timeout_ms has passed (*timed_out = 1, as gate_wait).
struct GateRows {
  const uint32_t* seq = nullptr;
  const uint32_t* gate = nullptr;      // device word, opened by the check on a hit
  const GateMailbox* box = nullptr;    // device address of the mapped mailbox
  int k = 0;
  int64_t d = 0;
  float* y = nullptr;                  // device: k rows of d floats
  uint32_t* mask = nullptr;            // device word the combine reads
  uint32_t* timed_out = nullptr;
  uint32_t timeout_ms = 0;
};
void gate_wait_rows(const GateRows& g, cudaStream_t stream);

// The host's side of gate_wait_rows: after writing rows of the mailbox's
// y_of(), publish `mask` and then open the gate for step `seq`.
void open_host_rows(GateMailbox* box, uint32_t mask, uint32_t seq);

// One token: out = residual + sum_j w_j * (bit j of *host_mask ? host_y[j] : y[j]),
// rows of n floats, summed in j order as moe_combine does.
void moe_combine_host_rows(const float* y, const float* host_y, const uint32_t* host_mask, const float* weights,
                           int k, int64_t n, const float* residual, float* out, cudaStream_t stream);

}  // namespace ms::cuda
