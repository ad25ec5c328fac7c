// The thread pool: every index of a parallel_for runs exactly once for any
// size, grain and thread count; run_on_all reaches every thread once; workers
// that went to sleep wake for the next call (a lost wake-up would hang the
// test); pools are created and destroyed while workers spin or sleep; where
// the OS refuses a worker thread, the pool runs on the threads it got.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "cpu/thread_pool.h"

namespace ms {
namespace {

void expect_each_once(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  for (auto& h : hits) h.store(0);
  pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
    ASSERT_LE(0, b);
    ASSERT_LT(b, e);
    ASSERT_LE(e, n);
    if (pool.size() > 1) ASSERT_LE(e - b, grain);  // one thread takes the whole range at once
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " grain=" << grain << " i=" << i;
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 16, 17, 100, 1001})
      for (int64_t grain : {1, 2, 3, 64, 5000}) expect_each_once(pool, n, grain);
  }
}

TEST(ThreadPool, ManyBackToBackCalls) {
  ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 300; ++rep)
    pool.parallel_for(37, 3, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
    });
  EXPECT_EQ(sum.load(), int64_t{300} * (36 * 37 / 2));
}

// parallel_for returns once its chunks are done, not once every worker has
// checked in: with more threads than cores many workers wake after the call
// returned (or during the next one) and must then skip the old call, never
// run a chunk twice or touch the finished call's state. Each call's counts
// live on its own stack frame, so a late worker writing into a finished call
// would show up as a wrong count in a later one.
TEST(ThreadPool, LateWorkersSkipFinishedCalls) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int spin_us : {0, 50}) {
    ThreadPool pool(3 * hw + 2, spin_us);
    for (int rep = 0; rep < 3000; ++rep) {
      const int64_t n = 1 + rep % 29, grain = 1 + rep % 3;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "rep " << rep << " i " << i;
    }
  }
}

TEST(ThreadPool, RunOnAllReachesEveryThreadOnce) {
  for (int threads : {1, 2, 6}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(threads));
      for (auto& s : seen) s.store(0);
      pool.run_on_all([&](int tid, int nt) {
        ASSERT_EQ(nt, threads);
        ASSERT_GE(tid, 0);
        ASSERT_LT(tid, nt);
        seen[static_cast<size_t>(tid)].fetch_add(1);
      });
      for (auto& s : seen) ASSERT_EQ(s.load(), 1);
    }
  }
}

// spin_us = 0: workers sleep almost at once, so every call after a pause
// goes through the wake-up path.
TEST(ThreadPool, SleepingWorkersWakeUp) {
  ThreadPool pool(3, 0);
  for (int rep = 0; rep < 30; ++rep) {
    std::this_thread::sleep_for(std::chrono::microseconds(rep % 3 == 0 ? 2000 : 50 * rep));
    expect_each_once(pool, 90, 1);
  }
}

TEST(ThreadPool, CreateAndDestroyWhileSpinningOrSleeping) {
  for (int rep = 0; rep < 20; ++rep) {
    ThreadPool pool(3, rep % 2 ? 0 : 1000);
    if (rep % 3) expect_each_once(pool, 10, 1);
    if (rep % 4 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// std::thread throws std::system_error when the OS has no thread left (the
// pool used to let it escape with workers running, or count on the missing
// ones and hang): every call still runs each index once, on fewer threads.
TEST(ThreadPool, RefusedWorkerThreadLeavesAWorkingSmallerPool) {
  for (int fail_at : {1, 2, 5}) {
    ThreadPool::Options o;
    o.n_threads = 6;
    o.spin_us = fail_at == 2 ? 0 : 1000;
    o.fail_thread_creation_at = fail_at;
    ThreadPool pool(o);
    EXPECT_EQ(pool.requested(), 6);
    EXPECT_EQ(pool.size(), fail_at) << "workers 1.." << fail_at - 1 << " started, then creation failed";
    EXPECT_NE(pool.start_error().find("refused"), std::string::npos) << pool.start_error();
    for (int rep = 0; rep < 5; ++rep) expect_each_once(pool, 97, 3);
    std::vector<std::atomic<int>> seen(static_cast<size_t>(pool.size()));
    pool.run_on_all([&](int i, int n) {
      EXPECT_EQ(n, pool.size());
      seen[static_cast<size_t>(i)].fetch_add(1);
    });
    for (auto& s : seen) EXPECT_EQ(s.load(), 1);
  }
  ThreadPool full(ThreadPool::Options{3, -1, 0});
  EXPECT_EQ(full.size(), 3);
  EXPECT_TRUE(full.start_error().empty());
}

}  // namespace
}  // namespace ms
