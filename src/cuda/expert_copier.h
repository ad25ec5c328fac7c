// Host -> device copies of expert bytes on a dedicated copy stream, never
// from pageable memory on the hot path (pageable copies run ~5x slower):
//
//   Copy:       the experts are copied once, at start-up, into page-locked
//               host memory; copies DMA straight from it at the link's rate
//               and cost the CPU nothing, and the CPU experts read the same
//               copy. Costs the experts' size in RAM for the model's life.
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

namespace ms::cuda {

enum class HostPin { Auto, Copy, Register, Staging };
// "auto", "copy", "register", "staging"; throws ms::Error otherwise.
HostPin parse_host_pin(const std::string& s);

class ExpertCopier {
 public:
  // [host_begin, host_begin + host_bytes): where every expert byte lives.
  // Auto copies when the range takes at most half the available RAM, else
  // stages (registering a 16 GiB mapping took minutes on the H100 host);
  // Copy and Register throw if the driver refuses.
  // pool (optional): staging copies into the ring are split over its threads
  // (one thread copies ~8 GB/s from the page cache; the link takes ~55).
  ExpertCopier(const void* host_begin, uint64_t host_bytes, HostPin pin, ThreadPool* pool = nullptr,
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
  // Where the host's readers (the CPU experts) should read a byte of the
  // range: inside the pinned copy when there is one, else `src` itself.
  const void* host_view(const void* src) const {
    if (!copy_.get()) return src;
    return static_cast<const char*>(copy_.get()) + (static_cast<const char*>(src) - static_cast<const char*>(src_begin_));
  }
  cudaStream_t stream() const { return stream_.get(); }

  // dst (device) <- src (host, inside the range), enqueued on stream().
  void copy(void* dst, const void* src, size_t bytes);
  // Records `e` on the copy stream after everything enqueued so far.
  void record(cudaEvent_t e);
  // Makes the copy stream wait for work of another stream (before reusing a
  // slot that work reads).
  void wait(cudaEvent_t e);

  uint64_t bytes_copied() const { return bytes_; }
  uint64_t copies() const { return n_copies_; }

 private:
  void make_copy(uint64_t host_bytes);

  Stream stream_;
  const void* src_begin_ = nullptr;
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
