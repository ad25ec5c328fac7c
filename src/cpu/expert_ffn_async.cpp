#include "cpu/expert_ffn_async.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "util/error.h"

namespace ms {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

}  // namespace

ExpertFfnAsync::ExpertFfnAsync(std::vector<ExpertFfnWeights> layers, ThreadPool& pool, int spin_us,
                               ActRounding rounding)
    : layers_(std::move(layers)), ffn_(pool, rounding), spin_us_(spin_us < 0 ? ThreadPool::spin_microseconds() : spin_us) {
  // More busy threads than cores (the pool's workers, the driver and the
  // caller): a spinning thread takes the core another one needs, so sleep soon.
  if (static_cast<unsigned>(pool.size()) + 1 > std::thread::hardware_concurrency()) spin_us_ = std::min(spin_us_, 50);
  driver_ = std::thread([this] { drive(); });
}

ExpertFfnAsync::~ExpertFfnAsync() {
  // A computation in flight still reads x and writes y: let it end first.
  if (state_.load(std::memory_order_acquire) == kBegun)
    await([this] { return state_.load(std::memory_order_acquire) == kDone; });
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_release);
  }
  changed_.notify_all();
  driver_.join();
}

// Spins on `ready` for spin_us_ (a hand-over then costs a cache-line
// transfer), then sleeps on the condition variable.
template <class Ready>
void ExpertFfnAsync::await(Ready ready) {
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
  for (uint32_t spins = 1; !ready(); ++spins) {
    cpu_relax();
    // Past the first thousand pauses, yield now and then: where threads
    // outnumber free cores, the thread we wait for may need this one.
    if (spins >= 1024 && spins % 64 == 0) std::this_thread::yield();
    if (spins % 1024 == 0 && std::chrono::steady_clock::now() > spin_until) {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, ready);
      return;
    }
  }
}

void ExpertFfnAsync::begin(int layer, const float* x, int n_tokens, std::vector<ExpertWork> work, float* y) {
  if (state_.load(std::memory_order_acquire) != kIdle)
    throw Error("ExpertFfnAsync::begin: the previous begin() has not been waited for");
  if (layer < 0 || layer >= static_cast<int>(layers_.size()))
    throw Error("ExpertFfnAsync::begin: layer " + std::to_string(layer) + " out of range (" +
                std::to_string(layers_.size()) + " layers)");
  layer_ = layer;
  x_ = x;
  n_tokens_ = n_tokens;
  work_ = std::move(work);
  y_ = y;
  error_ = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    state_.store(kBegun, std::memory_order_release);
  }
  changed_.notify_all();
}

void ExpertFfnAsync::wait() {
  if (state_.load(std::memory_order_acquire) == kIdle)
    throw Error("ExpertFfnAsync::wait: nothing was begun");
  await([this] { return state_.load(std::memory_order_acquire) == kDone; });
  std::exception_ptr error = std::exchange(error_, nullptr);
  // Only this thread leaves kDone, and nobody waits for kIdle: no lock needed.
  state_.store(kIdle, std::memory_order_release);
  if (error) std::rethrow_exception(error);
}

void ExpertFfnAsync::drive() {
  for (;;) {
    await([this] {
      return state_.load(std::memory_order_acquire) == kBegun || stop_.load(std::memory_order_acquire);
    });
    // The destructor waits for a job in flight, so stop never overtakes one.
    if (state_.load(std::memory_order_acquire) != kBegun) return;
    try {
      ffn_.compute(layers_[static_cast<size_t>(layer_)], x_, n_tokens_, work_, y_);
    } catch (...) {
      error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      state_.store(kDone, std::memory_order_release);
    }
    changed_.notify_all();
  }
}

}  // namespace ms
