// A fixed pool of worker threads for data-parallel loops. Decode issues many
// small parallel loops per token, so workers spin briefly before sleeping:
// waking a sleeping thread costs tens of microseconds, a spinning one ~1 µs.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ms {

class ThreadPool {
 public:
  // n_threads counts the calling thread, which works too; 0 = hardware threads.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end) over [0, n) in chunks of `grain` items, spread over
  // all threads (dynamic scheduling), and returns when every chunk is done.
  // Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Calls fn(thread_index, n_threads) once on each thread.
  void run_on_all(const std::function<void(int, int)>& fn);

 private:
  void worker(int index);
  void dispatch(const std::function<void(int, int)>& job);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  const std::function<void(int, int)>* job_ = nullptr;
  bool stop_ = false;
};

}  // namespace ms
