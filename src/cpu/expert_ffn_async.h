// The CPU expert FFN (cpu/expert_ffn.h) run off the caller's thread, for the
// hybrid step: the GPU driver thread starts the CPU's share of a layer,
// enqueues its own launches and copies, and then waits for the CPU.
//
//   ExpertFfnAsync cpu(expert_ffn_layers(weights), pool);  // engine/expert_executor.h
//   cpu.begin(layer, x, n_tokens, std::move(work), y);     // returns at once
//   ... enqueue GPU work, memcpy ...                       // the caller is free
//   cpu.wait();                                            // y is complete
//
// The computation runs on a driver thread owned by this object, which drives
// `pool` (it takes the part parallel_for gives its caller). The result is
// bit-identical to ExpertFfn::compute on the same pool and inputs.
//
// Rules (the caller's side of the bargain):
// - Between begin() and wait() the caller must not use `pool` (ThreadPool is
//   not reentrant: another parallel_for would race the driver's). Give the
//   caller's own CPU work another pool, or do it after wait().
// - x and y must stay valid, x unchanged and y otherwise unused, until wait()
//   returns. Only the rows of y named by the work's slots are written.
// - begin() and wait() alternate, from one thread at a time: a second begin()
//   without wait() throws ms::Error (and leaves the one in flight running),
//   and so does wait() without begin().
// - An error of the computation (bad expert id, token, weights) is thrown by
//   wait(), which leaves the object idle and ready for the next begin().
//
// Handing over costs about a cache-line transfer while the driver is still
// spinning from its last job (ThreadPool::spin_microseconds(), then it
// sleeps); the caller spins likewise in wait(). Size `pool` so that it, the
// driver and the caller's thread do not fight for cores (the driver is the
// pool's thread 0: pool.size() - 1 workers + driver + caller).
#pragma once
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "cpu/expert_ffn.h"
#include "cpu/thread_pool.h"

namespace ms {

class ExpertFfnAsync {
 public:
  // layers: each layer's experts, indexed by the layer number begin() takes
  // (views: the weights must outlive this object). spin_us < 0:
  // ThreadPool::spin_microseconds(). rounding: as ExpertFfn's.
  ExpertFfnAsync(std::vector<ExpertFfnWeights> layers, ThreadPool& pool, int spin_us = -1,
                 ActRounding rounding = ActRounding::Native);
  // Waits for a computation still in flight (its error is dropped), then
  // stops the driver thread.
  ~ExpertFfnAsync();
  ExpertFfnAsync(const ExpertFfnAsync&) = delete;
  ExpertFfnAsync& operator=(const ExpertFfnAsync&) = delete;

  // Starts y[slot] = FFN_e(x[token]) for the work items of `layer` (moved in:
  // the driver reads them while the caller goes on) and returns at once.
  // Throws ms::Error, starting nothing, for a layer out of range or a begin()
  // not yet waited for.
  void begin(int layer, const float* x, int n_tokens, std::vector<ExpertWork> work, float* y);
  // Blocks until the computation begun last is complete, then rethrows its
  // exception if it failed.
  void wait();
  // Between begin() and wait().
  bool busy() const { return state_.load(std::memory_order_acquire) != kIdle; }

 private:
  enum : int { kIdle, kBegun, kDone };
  void drive();
  template <class Ready>
  void await(Ready ready);

  const std::vector<ExpertFfnWeights> layers_;
  ExpertFfn ffn_;
  int spin_us_;
  // The job and its outcome: written by begin() before kBegun is published,
  // read by the driver after it sees kBegun; error_ written by the driver
  // before kDone is published.
  int layer_ = 0;
  const float* x_ = nullptr;
  int n_tokens_ = 0;
  std::vector<ExpertWork> work_;
  float* y_ = nullptr;
  std::exception_ptr error_;
  // kIdle -> kBegun (begin) -> kDone (driver) -> kIdle (wait). Changed under
  // mutex_ so a sleeper cannot miss it; read without it while spinning.
  std::atomic<int> state_{kIdle};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable changed_;
  std::thread driver_;  // last: starts once everything above exists
};

}  // namespace ms
