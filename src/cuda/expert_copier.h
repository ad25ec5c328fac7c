// Host -> device copies of expert bytes on a dedicated copy stream, never
// from pageable memory on the hot path (pageable copies run ~5x slower):
//
//   Registered: the mapped file range holding the experts is page-locked in
//               place (cudaHostRegister, read-only), so copies DMA straight
//               from the page cache. Costs RAM pinned for the model's life.
//   Staging:    a ring of pinned buffers; each piece is memcpy'd from the
//               mapping into the next free buffer, then DMA'd. Used when
//               registering fails or is not wanted (little RAM).
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

enum class HostPin { Auto, Register, Staging };
// "auto", "register", "staging"; throws ms::Error otherwise.
HostPin parse_host_pin(const std::string& s);

class ExpertCopier {
 public:
  // [host_begin, host_begin + host_bytes): where every expert byte lives.
  // Auto stages (registering a 16 GiB mapping took minutes on the H100 host);
  // Register page-locks the mapping and throws if the driver refuses.
  // pool (optional): staging copies into the ring are split over its threads
  // (one thread copies ~8 GB/s from the page cache; the link takes ~55).
  ExpertCopier(const void* host_begin, uint64_t host_bytes, HostPin pin, ThreadPool* pool = nullptr,
               size_t staging_chunk = 8u << 20, int staging_buffers = 4);
  ~ExpertCopier();
  ExpertCopier(const ExpertCopier&) = delete;
  ExpertCopier& operator=(const ExpertCopier&) = delete;

  bool registered() const { return registered_; }
  const char* mode_name() const { return registered_ ? "registered (pinned in place)" : "pinned staging ring"; }
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
  Stream stream_;
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
