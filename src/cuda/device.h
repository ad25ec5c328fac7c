// CUDA device plumbing: error checking, device queries, memory arenas, and RAII
// wrappers for streams, events and pinned host memory.
//
// CUDA-only header: include it only from code built when MOESTREAM_HAVE_CUDA is
// defined (src/cuda, tests/cuda, bench/cuda). It includes the CUDA runtime API
// header (plain C, compiles with the host compiler).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ms::cuda {

// Throws ms::Error("<file>:<line>: <what> failed: <cuda error name>: <string>")
// when `err` is not cudaSuccess. Use through MS_CUDA_CHECK.
void check(cudaError_t err, const char* what, const char* file, int line);

#define MS_CUDA_CHECK(expr) ::ms::cuda::check((expr), #expr, __FILE__, __LINE__)
// After a kernel launch: catches launch-configuration errors (not async faults).
#define MS_CUDA_CHECK_LAUNCH() ::ms::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

// ---------------------------------------------------------------- queries
struct DeviceInfo {
  int id = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  size_t total_bytes = 0;
  size_t free_bytes = 0;
  int l2_bytes = 0;
  size_t smem_per_block_optin = 0;  // max dynamic shared memory per block (opt-in)
  int mem_bus_width_bits = 0;       // 0 where the runtime does not report it
  int mem_clock_khz = 0;
};

// Number of usable CUDA devices; 0 (never throws) when there is no driver, no
// device, or the runtime fails. `why` (optional) gets the reason when 0.
int device_count(std::string* why = nullptr);
DeviceInfo device_info(int device);
// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB, 78.5 GiB free)"
std::string describe(const DeviceInfo& info);
// Free device memory now, in bytes (cudaMemGetInfo on the current device).
size_t free_device_bytes();

// ---------------------------------------------------------------- arena
// One cudaMalloc per purpose (weights, KV cache, activations, expert slots),
// sized up front; allocations are bump pointers inside it. Nothing is freed
// individually: reset() or rewind(mark) release everything after a point.
// Running out is an ms::Error that names the arena and says how much was asked,
// how much is left, and how much the GPU has free.
class DeviceArena {
 public:
  DeviceArena() = default;
  // Allocates `capacity` bytes on the current device. Throws ms::Error saying how
  // much was asked and how much is free when cudaMalloc fails.
  DeviceArena(std::string name, size_t capacity);
  ~DeviceArena();
  DeviceArena(DeviceArena&& o) noexcept;
  DeviceArena& operator=(DeviceArena&& o) noexcept;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // `bytes` aligned to `align` (a power of two, at least 16). Never returns null
  // for bytes > 0; throws ms::Error on overflow.
  void* alloc(size_t bytes, size_t align = 256);
  template <class T>
  T* alloc_n(size_t n, size_t align = 256) {
    return static_cast<T*>(alloc(n * sizeof(T), align));
  }

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t left() const { return capacity_ - used_; }
  const std::string& name() const { return name_; }
  void* base() const { return base_; }

  size_t mark() const { return used_; }
  void rewind(size_t mark);  // throws if mark > used()
  void reset() { used_ = 0; }

 private:
  std::string name_;
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

// A standalone device allocation (tests, benches, one-off buffers). Same error
// message as the arena on failure.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, const char* what = "buffer");
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  // The address kernels use (mapped buffers only; throws otherwise).
  void* device_ptr() const;
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// ---------------------------------------------------------------- streams/events
class Stream {
 public:
  // Non-blocking with respect to the legacy default stream.
  Stream();
  ~Stream();
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return s_; }
  operator cudaStream_t() const { return s_; }
  void synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  // timing=false makes a cheaper event for ordering only.
  explicit Event(bool timing = true);
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t stream);
  void synchronize() const;
  bool done() const;                     // cudaEventQuery, throws on real errors
  float ms_since(const Event& start) const;  // elapsed from start to this event
  void wait_on(cudaStream_t stream) const;   // stream waits for this event

 private:
  cudaEvent_t e_ = nullptr;
};

// ---------------------------------------------------------------- pinned host
// Page-locked host memory (cudaHostAlloc), for fast asynchronous H2D/D2H copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // mapped: kernels may read and write it too, at device_ptr() (zero-copy).
  explicit PinnedBuffer(size_t bytes, bool mapped = false);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* get() const { return ptr_; }
  // The address kernels use (mapped buffers only; throws otherwise).
  void* device_ptr() const;
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace ms::cuda
