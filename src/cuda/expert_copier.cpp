#include "cuda/expert_copier.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "util/error.h"

namespace ms::cuda {

namespace {
uint64_t physical_ram() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

// MemAvailable from /proc/meminfo (bytes), or physical RAM when unreadable.
uint64_t available_ram() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kb = 0;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    std::fclose(f);
    if (kb) return static_cast<uint64_t>(kb) << 10;
  }
  return physical_ram();
}
}  // namespace

void ExpertCopier::make_copy(uint64_t host_bytes) {
  copy_ = PinnedBuffer(host_bytes);
  // Slot images (padding zeroed), filled in parallel over the pool: one
  // thread's reads from the page cache are far slower than the link
  // (bench/results/hybrid_bench.md, "Figures moved from code comments").
  auto* dst = static_cast<char*>(copy_.get());
  auto fill = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const ExpertSource& x = experts_[static_cast<size_t>(i)];
      char* slot = dst + copy_offset_[static_cast<size_t>(i)];
      std::memset(slot, 0, x.slot_bytes);
      for (int p = 0; p < 3; ++p) std::memcpy(slot + x.offset[p], x.part[p], x.bytes[p]);
    }
  };
  const auto n = static_cast<int64_t>(experts_.size());
  if (pool_) pool_->parallel_for(n, 1, fill);
  else fill(0, n);
}

ExpertCopier::ExpertCopier(std::vector<ExpertSource> experts, HostPin pin, ThreadPool* pool, size_t staging_chunk,
                           int staging_buffers)
    : experts_(std::move(experts)), pool_(pool) {
  // The mapping's range that holds every part (for registration and
  // read-ahead), and the slot images' offsets in a pinned copy.
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  uint64_t copy_bytes = 0;
  for (const ExpertSource& x : experts_) {
    for (int p = 0; p < 3; ++p) {
      if (x.offset[p] + x.bytes[p] > x.slot_bytes) throw Error("expert copier: a part does not fit its slot");
      if (x.bytes[p] == 0) continue;
      lo = std::min(lo, reinterpret_cast<uintptr_t>(x.part[p]));
      hi = std::max(hi, reinterpret_cast<uintptr_t>(x.part[p]) + x.bytes[p]);
    }
    copy_offset_.push_back(copy_bytes);
    copy_bytes += (x.slot_bytes + 255) & ~uint64_t(255);
  }
  const uint64_t host_bytes = hi > lo ? hi - lo : 0;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGE_SIZE));
  const uintptr_t b = lo & ~(page - 1);
  const uintptr_t e = (lo + host_bytes + page - 1) & ~(page - 1);
  // Auto stages: registering a large file mapping page-locks every page first
  // (minutes for a 16 GiB mapping: bench/results/hybrid_bench.md, "What
  // this says (and what is not done)"), far longer than a run may wait at
  // start-up. Registration stays available on request.
  const bool want_copy = pin == HostPin::Copy || (pin == HostPin::Auto && copy_bytes <= available_ram() / 2);
  if (want_copy && copy_bytes > 0) {
    try {
      make_copy(copy_bytes);
    } catch (const Error& e) {
      if (pin == HostPin::Copy) throw Error(std::string("--host-pin copy: ") + e.what() + "; use --host-pin staging");
      copy_ = PinnedBuffer();  // auto: fall back to the staging ring
    }
    if (copy_.get()) return;
  }
  const bool try_register = pin == HostPin::Register && host_bytes < physical_ram();
  if (try_register && host_bytes > 0) {
    // Read-only: the mapping is PROT_READ; the driver must not ask for write access.
    const cudaError_t err = cudaHostRegister(reinterpret_cast<void*>(b), e - b, cudaHostRegisterReadOnly);
    if (err == cudaSuccess) {
      reg_begin_ = reinterpret_cast<void*>(b);
      registered_ = true;
    } else {
      cudaGetLastError();  // clear the sticky-free error so later checks do not see it
      if (pin == HostPin::Register)
        throw Error(std::string("--host-pin register: cudaHostRegister of the model's experts (") +
                    std::to_string((e - b) >> 20) + " MiB) failed: " + cudaGetErrorString(err) +
                    "; use --host-pin staging");
    }
  }
  if (!registered_) {
    // Ask the kernel to read the experts ahead; staging copies then find them in RAM.
    if (host_bytes > 0) madvise(reinterpret_cast<void*>(b), e - b, MADV_WILLNEED);
    chunk_ = std::max<size_t>(1u << 20, staging_chunk);
    for (int i = 0; i < std::max(2, staging_buffers); ++i) {
      ring_.emplace_back(chunk_);
      ring_done_.push_back(std::make_unique<Event>(false));
      ring_used_.push_back(false);
    }
  }
}

ExpertCopier::~ExpertCopier() {
  cudaStreamSynchronize(stream_.get());
  if (registered_) cudaHostUnregister(reg_begin_);
}

void ExpertCopier::copy(void* dst, const void* src, size_t bytes) {
  bytes_ += bytes;
  ++n_copies_;
  if (copy_.get() || registered_) {
    MS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_.get()));
    return;
  }
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(chunk_, bytes - done);
    const size_t i = next_;
    next_ = (next_ + 1) % ring_.size();
    if (ring_used_[i]) ring_done_[i]->synchronize();  // its previous DMA has read it
    char* dst_host = static_cast<char*>(ring_[i].get());
    const char* src_host = s + done;
    if (pool_ && n >= (1u << 20)) {
      // 256 KiB pieces over the pool's threads.
      constexpr int64_t kPiece = 256 << 10;
      pool_->parallel_for((static_cast<int64_t>(n) + kPiece - 1) / kPiece, 1, [&](int64_t b, int64_t e) {
        const size_t lo = static_cast<size_t>(b * kPiece), hi = std::min(n, static_cast<size_t>(e * kPiece));
        std::memcpy(dst_host + lo, src_host + lo, hi - lo);
      });
    } else {
      std::memcpy(dst_host, src_host, n);
    }
    MS_CUDA_CHECK(cudaMemcpyAsync(d + done, ring_[i].get(), n, cudaMemcpyHostToDevice, stream_.get()));
    ring_done_[i]->record(stream_.get());
    ring_used_[i] = true;
    done += n;
  }
}

void ExpertCopier::copy_expert(size_t i, void* dst) {
  const ExpertSource& x = experts_.at(i);
  if (copy_.get()) {
    copy(dst, static_cast<const char*>(copy_.get()) + copy_offset_[i], x.slot_bytes);
    return;
  }
  for (int p = 0; p < 3; ++p)
    if (x.bytes[p]) copy(static_cast<char*>(dst) + x.offset[p], x.part[p], x.bytes[p]);
}

void ExpertCopier::record(cudaEvent_t e) { MS_CUDA_CHECK(cudaEventRecord(e, stream_.get())); }
void ExpertCopier::wait(cudaEvent_t e) { MS_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), e, 0)); }

}  // namespace ms::cuda
