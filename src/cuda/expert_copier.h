// Host -> device copies of expert bytes on a dedicated copy stream, never
// from pageable memory on the hot path (pageable copies run several times
// slower: bench/results/hybrid_bench.md, "Figures moved from code comments"):
//
//   Copy:       the experts are copied once, at start-up, into page-locked
//               host memory laid out as the VRAM slots are (gate, up, down
//               of an expert at the slot's offsets), so an expert crosses
//               the link in one DMA at the link's rate, costing the CPU
//               nothing; the CPU experts read the same copy. Costs the
//               experts' size in RAM for the model's life.
//   Registered: the mapped file range holding the experts is page-locked in
//               place (cudaHostRegister, read-only), so copies DMA straight
//               from the page cache. Costs RAM pinned for the model's life.
//   Staging:    a ring of pinned buffers; each piece is memcpy'd from the
//               mapping into the next free buffer, then DMA'd. Used when
//               RAM is short: no second copy of the experts, but the CPU
//               does the memcpy (3x the DRAM traffic of a DMA).
//
// Copies are ordered on stream(); callers make the compute stream wait on an
// event recorded there. Decides nothing about what to copy.
//
// CUDA-only header.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "cuda/device.h"
#include "cuda/host_pin.h"

namespace ms::cuda {

// One expert as the copier sees it: its three matrices in the model's
// mapping, and where each goes inside a slot of `slot_bytes`.
struct ExpertSource {
  const void* part[3] = {};    // gate, up, down (host)
  uint64_t bytes[3] = {};
  uint64_t offset[3] = {};     // within the slot
  uint64_t slot_bytes = 0;
};

class ExpertCopier {
 public:
  // experts: every expert the copier may be asked for, by index. Auto copies
  // when they take at most half the available RAM, else stages (registering
  // a large mapping takes minutes: bench/results/hybrid_bench.md, "What this
  // says (and what is not done)"); Copy and Register throw if the driver
  // refuses.
  // pool (optional): the start-up copy and staging copies into the ring are
  // split over its threads (one thread's copy from the page cache is far
  // slower than the link: hybrid_bench.md, "Figures moved from code comments").
  ExpertCopier(std::vector<ExpertSource> experts, HostPin pin, ThreadPool* pool = nullptr,
               size_t staging_chunk = 8u << 20, int staging_buffers = 4);
  ~ExpertCopier();
  ExpertCopier(const ExpertCopier&) = delete;
  ExpertCopier& operator=(const ExpertCopier&) = delete;

  bool registered() const { return registered_; }
  bool copied() const { return copy_.get() != nullptr; }
  uint64_t host_bytes() const { return copy_.size(); }  // the pinned copy's size (0 without one)
  const char* mode_name() const {
    return copy_.get() ? "pinned host copy" : registered_ ? "registered (pinned in place)" : "pinned staging ring";
  }
  size_t n_experts() const { return experts_.size(); }
  // Where the host's readers (the CPU experts) should read part p of expert
  // i: inside the pinned copy when there is one, else the mapping.
  const void* host_part(size_t i, int p) const {
    if (!copy_.get()) return experts_.at(i).part[p];
    return static_cast<const char*>(copy_.get()) + copy_offset_.at(i) + experts_[i].offset[p];
  }
  cudaStream_t stream() const { return stream_.get(); }

  // The slot at dst (device, slot_bytes) <- expert i, enqueued on stream():
  // one DMA from the pinned copy, else one per part.
  void copy_expert(size_t i, void* dst);
  // Records `e` on the copy stream after everything enqueued so far.
  void record(cudaEvent_t e);
  // Makes the copy stream wait for work of another stream (before reusing a
  // slot that work reads).
  void wait(cudaEvent_t e);

  uint64_t bytes_copied() const { return bytes_; }
  uint64_t copies() const { return n_copies_; }

 private:
  void make_copy(uint64_t host_bytes);
  // dst (device) <- src (host: the pinned copy, the registered range, or
  // through the staging ring), enqueued on stream().
  void copy(void* dst, const void* src, size_t bytes);

  Stream stream_;
  std::vector<ExpertSource> experts_;
  std::vector<uint64_t> copy_offset_;  // expert i's slot image in copy_
  PinnedBuffer copy_;
  void* reg_begin_ = nullptr;
  bool registered_ = false;
  uint64_t bytes_ = 0, n_copies_ = 0;
  size_t chunk_ = 0;
  ThreadPool* pool_ = nullptr;
  std::vector<PinnedBuffer> ring_;
  std::vector<std::unique_ptr<Event>> ring_done_;
  std::vector<bool> ring_used_;
  size_t next_ = 0;
};

}  // namespace ms::cuda
