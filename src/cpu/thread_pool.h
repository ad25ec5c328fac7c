// A fixed pool of worker threads for data-parallel loops. Decode issues a few
// hundred small parallel loops per token (six per layer), so starting one
// must cost microseconds: idle workers spin on an atomic generation counter
// (no lock on the hot path) for a while before they sleep on a condition
// variable -- waking a sleeping thread costs tens of microseconds (more on a
// VM, where the wake-up is an inter-processor interrupt), a spinning one
// about one cache-line transfer.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ms {

class ThreadPool {
 public:
  struct Options {
    int n_threads = 0;  // counts the calling thread, which works too; 0 = hardware threads
    int spin_us = -1;   // how long idle workers spin before sleeping; < 0 = kDefaultSpinUs
    // Tests: creating the worker thread with this index (1 .. n_threads-1)
    // throws std::system_error as std::thread does when the OS refuses one
    // (EAGAIN: a process or user thread limit). 0 = never.
    int fail_thread_creation_at = 0;
  };
  // n_threads counts the calling thread, which works too; 0 = hardware threads.
  // spin_us: how long idle workers spin before sleeping; < 0 = kDefaultSpinUs.
  explicit ThreadPool(int n_threads = 0, int spin_us = -1);
  // Where the OS refuses a worker thread, the pool runs with the threads it
  // got (size() < requested(); start_error() says why) instead of failing:
  // every call still completes, on fewer threads.
  explicit ThreadPool(const Options& options);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // The thread count asked for (0 resolved to the hardware threads).
  int requested() const { return requested_; }
  // Empty, or why fewer than requested() threads run (the OS's message).
  const std::string& start_error() const { return start_error_; }

  // Calls fn(begin, end) over [0, n) in chunks of `grain` items, spread over
  // all threads (dynamic scheduling), and returns when every chunk is done.
  // Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Calls fn(thread_index, n_threads) once on each thread.
  void run_on_all(const std::function<void(int, int)>& fn);

  // How long an idle worker spins before it sleeps, by default (`-t`'s
  // commands take --spin-us). Longer keeps the pool responsive across the
  // serial gaps between parallel loops (sampling, the last layer's head), at
  // the cost of busy cores while idle; measurements: bench/results/cpu_bench.md,
  // cuda_bench.md and hybrid_bench.md.
  static constexpr int kDefaultSpinUs = 2000;
  // The largest spin_us accepted (longer is a typo, not a tuning).
  static constexpr int kMaxSpinUs = 1000000;

 private:
  void worker(int index);
  // Publishes job to the workers and runs it on the calling thread too.
  // wait_all: returns once every worker has run it (run_on_all); otherwise
  // once `finished()` holds, without waiting for workers that have not
  // started yet (a descheduled worker -- common on a VM -- would otherwise
  // hold up every call): late ones then skip the job instead of running it.
  void dispatch(const std::function<void(int, int)>& job, bool wait_all, const std::function<bool()>& finished);

  int n_threads_;
  int requested_;
  int spin_us_;
  std::string start_error_;
  std::vector<std::thread> workers_;
  // Hot state, together on one cache line (a worker's start then costs one
  // line transfer): workers poll generation_ and decrement pending_; the
  // caller writes job_ before bumping generation_.
  alignas(64) std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<const std::function<void(int, int)>*> job_{nullptr};
  // Workers inside the current job; open_generation_: the generation of the
  // call workers may still enter (0: none -- it has returned or is
  // returning). One value for both, not a flag beside generation_: a worker
  // late for call g must never take call g+1's "open" for its own (it would
  // run g+1's job before g+1 was published, and again once it was).
  std::atomic<int> active_{0};
  std::atomic<uint64_t> open_generation_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;  // only for sleeping and waking
  std::condition_variable wake_;
};

}  // namespace ms
