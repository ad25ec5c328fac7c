// Do the copy engine's host->device DMA and the CPU's own reads share the
// host's memory bandwidth? The hybrid step reads every cold expert from host
// memory once per token, by DMA (streamed) or by the CPU (computed there);
// if the two share one limit, the decode floor has a fourth term: all cold
// bytes over that limit, whatever the split.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 bench/cuda/host_contention_bench.cu -o host_contention_bench
//   ./host_contention_bench [threads...]        (default: 16 12 8)
//
// Rows, each over ~1.5 s: pinned H2D copies alone (64 MiB each, from a 2 GiB
// pinned buffer); CPU threads summing a second 2 GiB pinned buffer alone;
// then both at once. GB/s = 1e9 bytes per second.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "bench_check.cuh"

using Clock = std::chrono::steady_clock;
constexpr size_t kBuf = size_t{2} << 30, kChunk = size_t{64} << 20;
constexpr double kSeconds = 1.5;

struct Rates {
  double h2d = 0, cpu = 0;
};

// Copies chunk after chunk until `stop`; sets gbps.
static void copy_loop(const char* src, void* dst, cudaStream_t s, const std::atomic<bool>& stop, double& gbps) {
  size_t bytes = 0, off = 0;
  const auto t0 = Clock::now();
  while (!stop.load(std::memory_order_relaxed)) {
    for (int i = 0; i < 4; ++i) {
      CK(cudaMemcpyAsync(dst, src + off, kChunk, cudaMemcpyHostToDevice, s));
      off = (off + kChunk) % kBuf;
      bytes += kChunk;
    }
    CK(cudaStreamSynchronize(s));
  }
  gbps = double(bytes) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
}

// n threads each sum their own slice of `buf` over and over until `stop`.
static double read_loop(const char* buf, int n, const std::atomic<bool>& stop) {
  std::vector<std::thread> th;
  std::vector<uint64_t> bytes(static_cast<size_t>(n), 0), sink(static_cast<size_t>(n), 0);
  const size_t slice = kBuf / static_cast<size_t>(n) / 64 * 64;
  const auto t0 = Clock::now();
  for (int t = 0; t < n; ++t)
    th.emplace_back([&, t] {
      const uint64_t* p = reinterpret_cast<const uint64_t*>(buf + slice * static_cast<size_t>(t));
      const size_t words = slice / 8;
      uint64_t acc = 0, done = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (size_t i = 0; i < words; i += 8)
          acc += p[i] + p[i + 1] + p[i + 2] + p[i + 3] + p[i + 4] + p[i + 5] + p[i + 6] + p[i + 7];
        done += slice;
      }
      bytes[static_cast<size_t>(t)] = done;
      sink[static_cast<size_t>(t)] = acc;
    });
  for (auto& x : th) x.join();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  uint64_t total = 0, keep = 0;
  for (int t = 0; t < n; ++t) total += bytes[static_cast<size_t>(t)], keep ^= sink[static_cast<size_t>(t)];
  if (keep == 42) std::printf(" ");  // keeps the sums alive
  return double(total) / s / 1e9;
}

static Rates run(const char* a, const char* b, void* dev, cudaStream_t s, bool copy, int threads) {
  std::atomic<bool> stop{false};
  Rates r;
  std::thread copier;
  if (copy) copier = std::thread([&] { copy_loop(a, dev, s, stop, r.h2d); });
  std::thread reader;
  if (threads > 0) reader = std::thread([&] { r.cpu = read_loop(b, threads, stop); });
  std::this_thread::sleep_for(std::chrono::duration<double>(kSeconds));
  stop = true;
  if (copier.joinable()) copier.join();
  if (reader.joinable()) reader.join();
  return r;
}

int main(int argc, char** argv) {
  std::vector<int> threads;
  for (int i = 1; i < argc; ++i) threads.push_back(std::atoi(argv[i]));
  if (threads.empty()) threads = {16, 12, 8};
  char *a = nullptr, *b = nullptr;
  void* dev = nullptr;
  CK(cudaHostAlloc(reinterpret_cast<void**>(&a), kBuf, cudaHostAllocDefault));
  CK(cudaHostAlloc(reinterpret_cast<void**>(&b), kBuf, cudaHostAllocDefault));
  std::memset(a, 1, kBuf);
  std::memset(b, 2, kBuf);
  CK(cudaMalloc(&dev, kChunk));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  run(a, b, dev, s, true, threads.front());  // warm-up
  std::printf("| threads | H2D alone | CPU read alone | H2D with CPU | CPU with H2D | sum alone | sum together |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int n : threads) {
    const Rates h = run(a, b, dev, s, true, 0);
    const Rates c = run(a, b, dev, s, false, n);
    const Rates both = run(a, b, dev, s, true, n);
    std::printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", n, h.h2d, c.cpu, both.h2d, both.cpu, h.h2d + c.cpu,
                both.h2d + both.cpu);
  }
  CK(cudaFree(dev));
  CK(cudaFreeHost(a));
  CK(cudaFreeHost(b));
  return 0;
}
