#include "cuda/device.h"

#include <atomic>
#include <cstdlib>
#include <string>
#include <utility>

#include "util/bytes.h"
#include "util/error.h"

namespace ms::cuda {

void check(cudaError_t err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return;
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + what + " failed: " +
              cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky-less error so later calls start clean
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device found";
  return n;
}

DeviceInfo device_info(int device) {
  cudaDeviceProp p{};
  MS_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceInfo info;
  info.id = device;
  info.name = p.name;
  info.sm_count = p.multiProcessorCount;
  info.cc_major = p.major;
  info.cc_minor = p.minor;
  info.total_bytes = p.totalGlobalMem;
  info.l2_bytes = p.l2CacheSize;
  info.smem_per_block_optin = p.sharedMemPerBlockOptin;
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess)
    info.mem_bus_width_bits = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, device) == cudaSuccess)
    info.mem_clock_khz = v;
  cudaGetLastError();
  int current = 0;
  MS_CUDA_CHECK(cudaGetDevice(&current));
  if (current == device) {
    size_t free_b = 0, total_b = 0;
    MS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    info.free_bytes = free_b;
  }
  return info;
}

std::string describe(const DeviceInfo& info) {
  return info.name + " (sm_" + std::to_string(info.cc_major) + std::to_string(info.cc_minor) + ", " +
         std::to_string(info.sm_count) + " SMs, " + format_bytes(info.total_bytes) + ", " +
         format_bytes(info.free_bytes) + " free)";
}

size_t free_device_bytes() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return free_b;
}

namespace {

void* device_malloc_or_throw(size_t bytes, const std::string& what) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // cudaErrorMemoryAllocation is not sticky; clear it
    throw Error("cannot allocate GPU memory for " + what + ": asked " + format_bytes(bytes) +
                ", GPU has " + format_bytes(free_device_bytes()) + " free (" +
                cudaGetErrorString(err) + "); lower --vram or the context size");
  }
  return p;
}

}  // namespace

// ---------------------------------------------------------------- DeviceArena
DeviceArena::DeviceArena(std::string name, size_t capacity) : name_(std::move(name)), capacity_(capacity) {
  if (capacity_ > 0)
    base_ = static_cast<char*>(device_malloc_or_throw(capacity_, "arena '" + name_ + "'"));
}

DeviceArena::~DeviceArena() {
  if (base_) cudaFree(base_);
}

DeviceArena::DeviceArena(DeviceArena&& o) noexcept
    : name_(std::move(o.name_)), base_(std::exchange(o.base_, nullptr)),
      capacity_(std::exchange(o.capacity_, 0)), used_(std::exchange(o.used_, 0)) {}

DeviceArena& DeviceArena::operator=(DeviceArena&& o) noexcept {
  if (this != &o) {
    if (base_) cudaFree(base_);
    name_ = std::move(o.name_);
    base_ = std::exchange(o.base_, nullptr);
    capacity_ = std::exchange(o.capacity_, 0);
    used_ = std::exchange(o.used_, 0);
  }
  return *this;
}

void* DeviceArena::alloc(size_t bytes, size_t align) {
  if (align < 16 || (align & (align - 1)) != 0)
    throw Error("arena '" + name_ + "': alignment " + std::to_string(align) + " is not a power of two >= 16");
  // The base comes from cudaMalloc (256-byte aligned); align offsets from it.
  const size_t start = (used_ + align - 1) & ~(align - 1);
  if (start > capacity_ || bytes > capacity_ - start) {
    throw Error("arena '" + name_ + "': asked " + format_bytes(bytes) + ", " + format_bytes(left()) +
                " left of " + format_bytes(capacity_) + "; GPU has " + format_bytes(free_device_bytes()) +
                " free. Size the arena larger (or lower the context / batch size)");
  }
  used_ = start + bytes;
  return base_ + start;
}

void DeviceArena::rewind(size_t m) {
  if (m > used_)
    throw Error("arena '" + name_ + "': rewind to " + std::to_string(m) + " past the used " +
                std::to_string(used_) + " bytes");
  used_ = m;
}

// ---------------------------------------------------------------- DeviceBuffer
DeviceBuffer::DeviceBuffer(size_t bytes, const char* what) : bytes_(bytes) {
  if (bytes_ > 0) ptr_ = device_malloc_or_throw(bytes_, what);
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

// ---------------------------------------------------------------- Stream
Stream::Stream() { MS_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}
Stream::Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_) cudaStreamDestroy(s_);
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}
void Stream::synchronize() const { MS_CUDA_CHECK(cudaStreamSynchronize(s_)); }

// ---------------------------------------------------------------- Event
Event::Event(bool timing) {
  MS_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}
Event::Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (e_) cudaEventDestroy(e_);
    e_ = std::exchange(o.e_, nullptr);
  }
  return *this;
}
void Event::record(cudaStream_t stream) { MS_CUDA_CHECK(cudaEventRecord(e_, stream)); }
void Event::synchronize() const { MS_CUDA_CHECK(cudaEventSynchronize(e_)); }
bool Event::done() const {
  const cudaError_t err = cudaEventQuery(e_);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  MS_CUDA_CHECK(err);
  return true;
}
float Event::ms_since(const Event& start) const {
  float ms = 0;
  MS_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
  return ms;
}
void Event::wait_on(cudaStream_t stream) const { MS_CUDA_CHECK(cudaStreamWaitEvent(stream, e_, 0)); }

// ---------------------------------------------------------------- PinnedBuffer
PinnedBuffer::PinnedBuffer(size_t bytes, bool mapped) : bytes_(bytes) {
  if (bytes_ == 0) return;
  const cudaError_t err = cudaHostAlloc(&ptr_, bytes_, mapped ? cudaHostAllocMapped : cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    ptr_ = nullptr;
    throw Error("cannot allocate " + format_bytes(bytes_) + " of pinned host memory: " +
                cudaGetErrorString(err) + " (check the locked-memory limit, ulimit -l)");
  }
}
void* PinnedBuffer::device_ptr() const {
  void* d = nullptr;
  MS_CUDA_CHECK(cudaHostGetDevicePointer(&d, ptr_, 0));
  return d;
}
PinnedBuffer::~PinnedBuffer() {
  if (ptr_) cudaFreeHost(ptr_);
}
PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

bool pdl_enabled() {
  static const bool capable = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major >= 9;
  }();
  return capable;
}

}  // namespace ms::cuda
