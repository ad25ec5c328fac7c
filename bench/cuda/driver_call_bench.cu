// What the host pays per CUDA call, and what a host <-> GPU round trip costs,
// on this machine (the GPU machine runs under gVisor, where driver calls may
// trap): the figures behind the hybrid step's per-layer overhead.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 bench/cuda/driver_call_bench.cu -o driver_call_bench && ./driver_call_bench
//
// Rows: host microseconds per call (median of 5 batches of 1000 calls) for an
// empty kernel launch, 64-byte async copies each way (pinned), an event
// record, a stream wait on an event, a one-kernel graph launch; then round
// trips (median of 200): kernel + D2H + event record + cudaEventSynchronize
// (how the hybrid step reads routes back today), kernel + D2H +
// cudaStreamSynchronize, and a ping-pong through mapped pinned memory with no
// driver call on either side (a GPU kernel spinning on a host-written word,
// the host spinning on a GPU-written one).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "bench_check.cuh"

using Clock = std::chrono::steady_clock;

__global__ void empty_kernel() {}
__global__ void write_kernel(int* p, int v) { *p = v; }

// Waits until *from_host == v (or ~2 s pass), then writes v to *to_host.
__global__ void pong_kernel(const volatile int* from_host, volatile int* to_host, int v, int* timeouts) {
  long long start = clock64();
  while (*from_host != v) {
    if (clock64() - start > 4000000000LL) {
      atomicAdd(timeouts, 1);
      break;
    }
  }
  __threadfence_system();
  *to_host = v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double per_call_us(const std::function<void()>& call, cudaStream_t s) {
  std::vector<double> batches;
  for (int b = 0; b < 5; ++b) {
    CK(cudaStreamSynchronize(s));
    const auto t = Clock::now();
    for (int i = 0; i < 1000; ++i) call();
    batches.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count() / 1000);
    CK(cudaStreamSynchronize(s));
  }
  return median(batches);
}

double round_trip_us(const std::function<void()>& once) {
  std::vector<double> v;
  for (int i = 0; i < 220; ++i) {
    const auto t = Clock::now();
    once();
    if (i >= 20) v.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
  }
  return median(v);
}

int main() {
  cudaStream_t s, s2;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  int *d = nullptr, *h = nullptr, *timeouts = nullptr;
  CK(cudaMalloc(&d, 256));
  CK(cudaMalloc(&timeouts, sizeof(int)));
  CK(cudaMemset(timeouts, 0, sizeof(int)));
  CK(cudaHostAlloc(&h, 256, cudaHostAllocDefault));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  empty_kernel<<<1, 1, 0, s>>>();
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  empty_kernel<<<1, 1, 0, s>>>();  // warm-up
  CK(cudaStreamSynchronize(s));

  std::printf("| what | host µs |\n|---|---:|\n");
  std::printf("| empty kernel launch | %.2f |\n", per_call_us([&] { empty_kernel<<<1, 1, 0, s>>>(); }, s));
  std::printf("| cudaMemcpyAsync H2D 64 B (pinned) | %.2f |\n",
              per_call_us([&] { CK(cudaMemcpyAsync(d, h, 64, cudaMemcpyHostToDevice, s)); }, s));
  std::printf("| cudaMemcpyAsync D2H 64 B (pinned) | %.2f |\n",
              per_call_us([&] { CK(cudaMemcpyAsync(h, d, 64, cudaMemcpyDeviceToHost, s)); }, s));
  std::printf("| cudaEventRecord | %.2f |\n", per_call_us([&] { CK(cudaEventRecord(ev, s)); }, s));
  std::printf("| cudaStreamWaitEvent | %.2f |\n", per_call_us([&] { CK(cudaStreamWaitEvent(s2, ev, 0)); }, s));
  std::printf("| cudaGraphLaunch (1 kernel) | %.2f |\n", per_call_us([&] { CK(cudaGraphLaunch(ge, s)); }, s));
  std::printf("| round trip: kernel + D2H + event record + cudaEventSynchronize | %.2f |\n", round_trip_us([&] {
                empty_kernel<<<1, 1, 0, s>>>();
                CK(cudaMemcpyAsync(h, d, 64, cudaMemcpyDeviceToHost, s));
                CK(cudaEventRecord(ev, s));
                CK(cudaEventSynchronize(ev));
              }));
  std::printf("| round trip: kernel + D2H + cudaStreamSynchronize | %.2f |\n", round_trip_us([&] {
                empty_kernel<<<1, 1, 0, s>>>();
                CK(cudaMemcpyAsync(h, d, 64, cudaMemcpyDeviceToHost, s));
                CK(cudaStreamSynchronize(s));
              }));
  std::printf("| round trip: graph launch + event record + cudaEventSynchronize | %.2f |\n", round_trip_us([&] {
                CK(cudaGraphLaunch(ge, s));
                CK(cudaEventRecord(ev, s));
                CK(cudaEventSynchronize(ev));
              }));
  // Ping-pong through mapped memory: h[0] host -> GPU, h[32] GPU -> host.
  int* dh = nullptr;
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dh), h, 0));
  auto* to_gpu = reinterpret_cast<std::atomic<int>*>(h);
  auto* from_gpu = reinterpret_cast<std::atomic<int>*>(h + 32);
  to_gpu->store(0);
  from_gpu->store(0);
  int v = 0;
  std::vector<double> pp;
  bool stuck = false;
  for (int i = 0; i < 220 && !stuck; ++i) {
    ++v;
    pong_kernel<<<1, 1, 0, s>>>(dh, dh + 32, v, timeouts);
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // the kernel is spinning by now
    const auto t = Clock::now();
    to_gpu->store(v, std::memory_order_release);
    while (from_gpu->load(std::memory_order_acquire) != v) {
      if (Clock::now() - t > std::chrono::seconds(3)) {
        stuck = true;
        break;
      }
    }
    if (i >= 20) pp.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
  }
  CK(cudaStreamSynchronize(s));
  int n_timeouts = 0;
  CK(cudaMemcpy(&n_timeouts, timeouts, sizeof(int), cudaMemcpyDeviceToHost));
  if (stuck || pp.empty())
    std::printf("| ping-pong through mapped memory | did not complete (GPU timeouts: %d) |\n", n_timeouts);
  else
    std::printf("| ping-pong through mapped memory (host store -> spinning kernel sees it -> kernel store -> host sees it) | %.2f |\n",
                median(pp));
  std::printf("\nGPU-side timeouts in the ping-pong: %d\n", n_timeouts);
  return 0;
}
