#include "cuda/expert_copier.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "util/error.h"

namespace ms::cuda {

HostPin parse_host_pin(const std::string& s) {
  if (s == "auto" || s.empty()) return HostPin::Auto;
  if (s == "register") return HostPin::Register;
  if (s == "staging") return HostPin::Staging;
  throw Error("--host-pin " + s + ": expected auto, register or staging");
}

namespace {
uint64_t physical_ram() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}
}  // namespace

ExpertCopier::ExpertCopier(const void* host_begin, uint64_t host_bytes, HostPin pin, size_t staging_chunk,
                           int staging_buffers) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGE_SIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(host_begin) & ~(page - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(host_begin) + host_bytes + page - 1) & ~(page - 1);
  const bool try_register = pin == HostPin::Register || (pin == HostPin::Auto && host_bytes < physical_ram() / 2);
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
  if (registered_) {
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
    std::memcpy(ring_[i].get(), s + done, n);
    MS_CUDA_CHECK(cudaMemcpyAsync(d + done, ring_[i].get(), n, cudaMemcpyHostToDevice, stream_.get()));
    ring_done_[i]->record(stream_.get());
    ring_used_[i] = true;
    done += n;
  }
}

void ExpertCopier::record(cudaEvent_t e) { MS_CUDA_CHECK(cudaEventRecord(e, stream_.get())); }
void ExpertCopier::wait(cudaEvent_t e) { MS_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), e, 0)); }

}  // namespace ms::cuda
