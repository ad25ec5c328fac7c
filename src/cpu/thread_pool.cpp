#include "cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <system_error>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ms {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int n_threads, int spin_us) : ThreadPool(Options{n_threads, spin_us, 0}) {}

ThreadPool::ThreadPool(const Options& options) {
  int n_threads = options.n_threads;
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  requested_ = n_threads;
  spin_us_ = options.spin_us < 0 ? kDefaultSpinUs : std::min(options.spin_us, kMaxSpinUs);
  // More threads than cores: a spinning worker takes the core another one
  // needs, so sleep soon.
  if (static_cast<unsigned>(n_threads) > std::thread::hardware_concurrency()) spin_us_ = std::min(spin_us_, 50);
  // Workers read n_threads_ only inside a job, and no job runs before the
  // constructor returns, so it can still shrink below when a start fails.
  n_threads_ = n_threads;
  workers_.reserve(static_cast<size_t>(n_threads - 1));
  for (int i = 1; i < n_threads; ++i) {
    try {
      if (i == options.fail_thread_creation_at)
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                                "thread creation refused (injected by a test)");
      workers_.emplace_back([this, i] { worker(i); });
    } catch (const std::system_error& e) {
      // Out of threads (ulimit -u, kernel.threads-max, memory for stacks):
      // run with the workers started so far. A throw here would leave them
      // running with no one to stop them, and counting on the missing ones
      // would hang every run_on_all.
      start_error_ = e.what();
      break;
    }
  }
  n_threads_ = 1 + static_cast<int>(workers_.size());
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  { std::lock_guard<std::mutex> lock(mutex_); }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  const auto spin = std::chrono::microseconds(spin_us_);
  for (;;) {
    // Spin on the generation counter (a plain load: the line stays shared in
    // every core's cache until the caller bumps it), then sleep.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    if (gen == seen) {
      const auto spin_until = std::chrono::steady_clock::now() + spin;
      for (uint32_t spins = 1;; ++spins) {
        cpu_relax();
        gen = generation_.load(std::memory_order_acquire);
        if (gen != seen) break;
        // Past the first thousand pauses (some tens of µs; the gaps between a
        // decode step's loops are shorter), yield now and then: where there
        // are more threads than free cores, the thread we wait for may need
        // this core.
        if (spins >= 1024 && spins % 64 == 0) std::this_thread::yield();
        if (spins % 1024 == 0 && std::chrono::steady_clock::now() > spin_until) {
          std::unique_lock<std::mutex> lock(mutex_);
          // seq_cst pairs with the caller's bump-then-check of sleepers_: either
          // it sees this sleeper and notifies under the lock, or we see its bump.
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
          sleepers_.fetch_sub(1, std::memory_order_relaxed);
          gen = generation_.load(std::memory_order_acquire);
          break;
        }
      }
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    // Enter the call only while this generation's call is still open
    // (seq_cst against the caller's close-then-count, so that either the
    // caller sees this worker in active_ or the worker sees it closed).
    active_.fetch_add(1, std::memory_order_seq_cst);
    if (open_generation_.load(std::memory_order_seq_cst) == gen) {
      const std::function<void(int, int)>* job = job_.load(std::memory_order_acquire);
      (*job)(index, n_threads_);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
    active_.fetch_sub(1, std::memory_order_release);
  }
}

void ThreadPool::dispatch(const std::function<void(int, int)>& job, bool wait_all,
                          const std::function<bool()>& finished) {
  if (n_threads_ == 1) {
    job(0, 1);
    return;
  }
  // Only this thread (one caller at a time; not reentrant) changes
  // generation_ while the pool lives. The call is open before it is
  // published: a worker that sees the new generation must find it open.
  const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
  job_.store(&job, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  open_generation_.store(gen, std::memory_order_relaxed);
  generation_.store(gen, std::memory_order_seq_cst);  // publishes job_, pending_ and open_generation_
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }
  job(0, n_threads_);
  // Wait (yield now and then once it takes long: a worker that was
  // descheduled may need this core): for every worker, or for the work.
  auto wait = [](const auto& done) {
    for (uint32_t spins = 1; !done(); ++spins) {
      cpu_relax();
      if (spins >= 1024 && spins % 64 == 0) std::this_thread::yield();
    }
  };
  if (wait_all) wait([&] { return pending_.load(std::memory_order_acquire) == 0; });
  else wait(finished);
  // Close the call, then wait for the workers inside it to leave: the job
  // (the caller's stack) must outlive them.
  open_generation_.store(0, std::memory_order_seq_cst);
  wait([&] { return active_.load(std::memory_order_seq_cst) == 0; });
}

void ThreadPool::run_on_all(const std::function<void(int, int)>& fn) { dispatch(fn, true, {}); }

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  // Chunks handed out from a shared counter (dynamic): a thread that starts
  // late -- descheduled, or still finishing the previous call's tail -- leaves
  // its share to the others instead of holding up the call.
  const int64_t n_chunks = (n + grain - 1) / grain;
  alignas(64) std::atomic<int64_t> next{0};
  alignas(64) std::atomic<int64_t> done{0};
  dispatch(
      [&](int, int) {
        for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < n_chunks;
             c = next.fetch_add(1, std::memory_order_relaxed)) {
          fn(c * grain, std::min(n, (c + 1) * grain));
          done.fetch_add(1, std::memory_order_release);
        }
      },
      /*wait_all=*/false, [&] { return done.load(std::memory_order_acquire) == n_chunks; });
}

}  // namespace ms
