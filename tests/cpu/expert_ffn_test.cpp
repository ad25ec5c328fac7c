// The CPU expert FFN (cpu/expert_ffn.h) and its asynchronous form
// (cpu/expert_ffn_async.h), on random experts of several quant types and odd
// sizes: the fast path against the scalar reference, and the same bits for
// any pool size; begin/wait bit-identical to the synchronous call, writing
// exactly the rows it was given (y poisoned with NaN first); errors coming
// out of wait(); misuse refused; many rounds; destruction idle or busy.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cpu/expert_ffn.h"
#include "cpu/expert_ffn_async.h"
#include "cpu/thread_pool.h"
#include "quant/ref_test_util.h"
#include "util/error.h"

namespace ms {
namespace {

using testing_ref::gaussian;

// Random experts of one layer, quantized with the reference quantizer.
struct RandomExperts {
  std::vector<std::vector<uint8_t>> gate, up, down;
  std::vector<const uint8_t*> gate_p, up_p, down_p;
  ExpertFfnWeights w;

  RandomExperts(DType gt, DType ut, DType dt, int n_expert, int64_t D, int64_t F, uint32_t seed) {
    // Scaled like the synthetic models (1/sqrt(fan_in)), so values stay O(1).
    auto matrix = [&](DType t, int64_t rows, int64_t cols, uint32_t s) {
      const std::vector<float> v = gaussian(rows * cols, s, 1.0f / std::sqrt(static_cast<float>(cols)));
      std::vector<uint8_t> q(static_cast<size_t>(rows * row_bytes(t, cols)));
      for (int64_t r = 0; r < rows; ++r)
        quantize_row_ref(t, v.data() + r * cols, q.data() + r * row_bytes(t, cols), cols);
      return q;
    };
    for (int e = 0; e < n_expert; ++e) {
      const uint32_t s = seed * 1000 + static_cast<uint32_t>(e) * 3;
      gate.push_back(matrix(gt, F, D, s));
      up.push_back(matrix(ut, F, D, s + 1));
      down.push_back(matrix(dt, D, F, s + 2));
    }
    for (int e = 0; e < n_expert; ++e) {
      gate_p.push_back(gate[static_cast<size_t>(e)].data());
      up_p.push_back(up[static_cast<size_t>(e)].data());
      down_p.push_back(down[static_cast<size_t>(e)].data());
    }
    w = {D, F, gt, ut, dt, gate_p, up_p, down_p};
  }
};

struct Config {
  DType gate, up, down;
  int64_t n_embd, n_ff;
};

// Mixes as models ship them (q4_K_M: q4_K gate/up, q6_K down), one where gate
// and up take different activation formats, the 32-blocks, and odd float sizes.
const Config kConfigs[] = {
    {DType::Q4_K, DType::Q4_K, DType::Q6_K, 256, 512},
    {DType::Q4_K, DType::Q8_0, DType::Q5_K, 256, 256},
    {DType::Q8_0, DType::Q8_0, DType::Q8_0, 96, 160},
    {DType::Q4_0, DType::Q4_0, DType::Q8_0, 64, 96},
    {DType::F16, DType::BF16, DType::F16, 50, 30},
    {DType::F32, DType::F32, DType::F32, 37, 19},
};

std::string describe(const Config& c) {
  return std::string(type_name(c.gate)) + "/" + type_name(c.up) + "/" + type_name(c.down) + " " +
         std::to_string(c.n_embd) + "x" + std::to_string(c.n_ff);
}

std::vector<int32_t> random_routes(int n_tokens, int k, int n_expert, std::mt19937& rng) {
  std::vector<int32_t> ids;
  for (int t = 0; t < n_tokens; ++t) {
    std::set<int32_t> picked;
    while (static_cast<int>(picked.size()) < k) picked.insert(static_cast<int32_t>(rng() % n_expert));
    for (int32_t e : picked) ids.push_back(e);
  }
  return ids;
}

// The poison: a NaN with a payload no computation produces, compared bitwise.
constexpr uint32_t kPoisonBits = 0x7fc0beefu;
const float kPoison = std::bit_cast<float>(kPoisonBits);
bool is_poison(float v) { return std::bit_cast<uint32_t>(v) == kPoisonBits; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ExpertFfn, MatchesReferencePerPair) {
  ThreadPool pool(2);
  ExpertFfn ffn(pool);
  std::mt19937 rng(5);
  for (const Config& c : kConfigs) {
    const int n_expert = 5, n = 7, k = 2;
    RandomExperts ex(c.gate, c.up, c.down, n_expert, c.n_embd, c.n_ff, 11);
    const std::vector<float> x = gaussian(n * c.n_embd, 3);
    const std::vector<int32_t> ids = random_routes(n, k, n_expert, rng);
    std::vector<float> y(static_cast<size_t>(n * k * c.n_embd), kPoison), ref(static_cast<size_t>(c.n_embd));
    ffn.compute(ex.w, x.data(), n, group_by_expert(ids.data(), n, k, n_expert), y.data());
    for (int p = 0; p < n * k; ++p) {
      expert_ffn_ref(ex.w, ids[static_cast<size_t>(p)], x.data() + (p / k) * c.n_embd, ref.data());
      double num = 0, den = 0;
      for (int64_t i = 0; i < c.n_embd; ++i) {
        const double d = y[static_cast<size_t>(p * c.n_embd + i)] - ref[static_cast<size_t>(i)];
        num += d * d;
        den += static_cast<double>(ref[static_cast<size_t>(i)]) * ref[static_cast<size_t>(i)];
      }
      EXPECT_LT(std::sqrt(num / den), 3e-2) << describe(c) << " pair " << p;
    }
  }
}

// Tiles and chunks change with the pool's size; the numbers must not.
TEST(ExpertFfn, SameBitsForAnyPoolSize) {
  std::mt19937 rng(6);
  for (const Config& c : kConfigs) {
    const int n_expert = 4, n = 19, k = 2;
    RandomExperts ex(c.gate, c.up, c.down, n_expert, c.n_embd, c.n_ff, 13);
    const std::vector<float> x = gaussian(n * c.n_embd, 8);
    const std::vector<int32_t> ids = random_routes(n, k, n_expert, rng);
    const std::vector<ExpertWork> work = group_by_expert(ids.data(), n, k, n_expert);
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<float> y(static_cast<size_t>(n * k * c.n_embd), kPoison);
      ExpertFfn(pool).compute(ex.w, x.data(), n, work, y.data());
      if (first.empty()) first = y;
      EXPECT_TRUE(same_bits(y, first)) << describe(c) << " threads " << threads;
    }
  }
}

// The CPU's share of a layer, as the hybrid step hands it over: every other
// expert of the routing (the rest go to the GPU), so some slots stay unwritten.
std::vector<ExpertWork> cpu_share(const std::vector<int32_t>& ids, int n, int k, int n_expert, int parity) {
  std::vector<ExpertWork> all = group_by_expert(ids.data(), n, k, n_expert), mine;
  for (size_t i = 0; i < all.size(); ++i)
    if (static_cast<int>(i % 2) == parity) mine.push_back(all[i]);
  return mine;
}

// y of n*k slots plus two guard rows past the end, all poisoned.
std::vector<float> poisoned_y(int n, int k, int64_t D) {
  return std::vector<float>(static_cast<size_t>((n * k + 2) * D), kPoison);
}

// Rows named by `work` hold finite values, every other row is still poison.
void expect_exactly_written(const std::vector<float>& y, const std::vector<ExpertWork>& work, int64_t D,
                            const std::string& what) {
  std::vector<bool> written(y.size() / static_cast<size_t>(D), false);
  for (const ExpertWork& w : work)
    for (int32_t s : w.slots) written[static_cast<size_t>(s)] = true;
  for (size_t row = 0; row < written.size(); ++row)
    for (int64_t i = 0; i < D; ++i) {
      const float v = y[row * static_cast<size_t>(D) + static_cast<size_t>(i)];
      if (written[row]) {
        ASSERT_TRUE(std::isfinite(v)) << what << ": row " << row << " was not written";
      } else {
        ASSERT_TRUE(is_poison(v)) << what << ": row " << row << " was written";
      }
    }
}

TEST(ExpertFfnAsync, BitIdenticalToSyncAndWritesExactlyItsRows) {
  ThreadPool pool(2);
  ExpertFfn sync(pool);
  std::mt19937 rng(7);
  for (const Config& c : kConfigs) {
    const int n_expert = 6;
    RandomExperts layer0(c.gate, c.up, c.down, n_expert, c.n_embd, c.n_ff, 21);
    RandomExperts layer1(c.gate, c.up, c.down, n_expert, c.n_embd, c.n_ff, 22);
    ExpertFfnAsync async({layer0.w, layer1.w}, pool);
    // 1 token (decode), a few, and enough pairs for the parallel paths (>= 16).
    for (int n : {1, 3, 7, 33})
      for (int k : {1, 2, 3}) {
        const std::string what = describe(c) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
        const int layer = (n + k) % 2;
        const ExpertFfnWeights& w = layer ? layer1.w : layer0.w;
        const std::vector<float> x = gaussian(n * c.n_embd, static_cast<uint32_t>(n * 10 + k));
        const std::vector<int32_t> ids = random_routes(n, k, n_expert, rng);
        const std::vector<ExpertWork> work = cpu_share(ids, n, k, n_expert, n % 2);
        std::vector<float> y_sync = poisoned_y(n, k, c.n_embd), y_async = poisoned_y(n, k, c.n_embd);
        sync.compute(w, x.data(), n, work, y_sync.data());
        async.begin(layer, x.data(), n, work, y_async.data());
        EXPECT_TRUE(async.busy());
        async.wait();
        EXPECT_FALSE(async.busy());
        EXPECT_TRUE(same_bits(y_async, y_sync)) << what;
        expect_exactly_written(y_async, work, c.n_embd, what);
      }
  }
}

// The caller runs its own parallel work (on another pool) between begin and
// wait, as the GPU driver thread enqueues launches and copies.
TEST(ExpertFfnAsync, CallerWorksBetweenBeginAndWait) {
  ThreadPool pool(2), callers_pool(1);
  RandomExperts ex(DType::Q4_K, DType::Q4_K, DType::Q6_K, 4, 256, 256, 31);
  ExpertFfn sync(pool);
  ExpertFfnAsync async({ex.w}, pool);
  std::mt19937 rng(3);
  const int n = 9, k = 2;
  const std::vector<float> x = gaussian(n * 256, 4);
  const std::vector<int32_t> ids = random_routes(n, k, 4, rng);
  const std::vector<ExpertWork> work = group_by_expert(ids.data(), n, k, 4);
  std::vector<float> y_sync = poisoned_y(n, k, 256), y_async = poisoned_y(n, k, 256);
  sync.compute(ex.w, x.data(), n, work, y_sync.data());
  async.begin(0, x.data(), n, work, y_async.data());
  std::vector<double> other(1000);
  callers_pool.parallel_for(1000, 10, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) other[static_cast<size_t>(i)] = std::sqrt(static_cast<double>(i));
  });
  async.wait();
  EXPECT_EQ(other[999], std::sqrt(999.0));
  EXPECT_TRUE(same_bits(y_async, y_sync));
}

TEST(ExpertFfnAsync, ErrorsComeOutOfWaitAndLeaveYAlone) {
  ThreadPool pool(2);
  RandomExperts ex(DType::Q8_0, DType::Q8_0, DType::Q8_0, 3, 64, 64, 41);
  ExpertFfnAsync async({ex.w}, pool);
  const int n = 4, k = 1;
  const std::vector<float> x = gaussian(n * 64, 5);
  std::vector<ExpertWork> bad_expert = {{0, {0, 1}, {0, 1}}, {3, {2}, {2}}};  // 3 experts: id 3 is out of range
  std::vector<ExpertWork> bad_token = {{1, {0, 4}, {0, 3}}};                  // token 4 of 4
  std::vector<ExpertWork> bad_slots = {{1, {0, 1}, {0}}};                     // tokens and slots differ
  for (const auto& work : {bad_expert, bad_token, bad_slots}) {
    std::vector<float> y = poisoned_y(n, k, 64);
    async.begin(0, x.data(), n, work, y.data());
    EXPECT_THROW(async.wait(), Error);
    EXPECT_FALSE(async.busy());
    for (float v : y) ASSERT_TRUE(is_poison(v));
  }
  // Weights the CPU cannot run (an unsupported type): also from wait().
  ExpertFfnWeights odd = ex.w;
  odd.down_type = DType::I16;  // a GGUF type with no CPU kernel
  ExpertFfnAsync async_odd({odd}, pool);
  std::vector<float> y = poisoned_y(n, k, 64);
  async_odd.begin(0, x.data(), n, {{0, {0}, {0}}}, y.data());
  EXPECT_THROW(async_odd.wait(), Error);
  // The object is ready for the next job after an error.
  const std::vector<ExpertWork> good = {{2, {1, 3}, {1, 3}}};
  ExpertFfn sync(pool);
  std::vector<float> y_sync = poisoned_y(n, k, 64), y_async = poisoned_y(n, k, 64);
  sync.compute(ex.w, x.data(), n, good, y_sync.data());
  async.begin(0, x.data(), n, good, y_async.data());
  async.wait();
  EXPECT_TRUE(same_bits(y_async, y_sync));
}

TEST(ExpertFfnAsync, MisuseIsRefused) {
  ThreadPool pool(2);
  RandomExperts ex(DType::Q8_0, DType::Q8_0, DType::Q8_0, 3, 64, 64, 51);
  ExpertFfnAsync async({ex.w}, pool);
  const std::vector<float> x = gaussian(2 * 64, 6);
  const std::vector<ExpertWork> work = {{1, {0, 1}, {0, 1}}};
  std::vector<float> y = poisoned_y(2, 1, 64), y_sync = poisoned_y(2, 1, 64);
  EXPECT_THROW(async.wait(), Error);                                // nothing begun
  EXPECT_THROW(async.begin(1, x.data(), 2, work, y.data()), Error);   // one layer only
  EXPECT_THROW(async.begin(-1, x.data(), 2, work, y.data()), Error);
  EXPECT_FALSE(async.busy());
  async.begin(0, x.data(), 2, work, y.data());
  EXPECT_THROW(async.begin(0, x.data(), 2, work, y.data()), Error);  // not waited for
  async.wait();                                                      // the first one is intact
  ExpertFfn(pool).compute(ex.w, x.data(), 2, work, y_sync.data());
  EXPECT_TRUE(same_bits(y, y_sync));
  EXPECT_THROW(async.wait(), Error);  // already waited for
}

// Hand-overs in both regimes: threads still spinning from the last job, and
// threads that went to sleep (spin 0); layers alternate, some rounds have no
// work at all.
TEST(ExpertFfnAsync, ManyBeginWaitRounds) {
  ThreadPool pool(2);
  RandomExperts a(DType::Q4_0, DType::Q4_0, DType::Q8_0, 5, 64, 32, 61);
  RandomExperts b(DType::F32, DType::F32, DType::F32, 5, 64, 32, 62);
  ExpertFfn sync(pool);
  for (int spin_us : {-1, 0}) {
    ExpertFfnAsync async({a.w, b.w}, pool, spin_us);
    std::mt19937 rng(static_cast<uint32_t>(spin_us + 2));
    for (int round = 0; round < 300; ++round) {
      const int n = 1 + round % 5, k = 2, layer = round % 2;
      const std::vector<float> x = gaussian(n * 64, static_cast<uint32_t>(round));
      const std::vector<int32_t> ids = random_routes(n, k, 5, rng);
      const std::vector<ExpertWork> work = round % 7 == 3 ? std::vector<ExpertWork>{} : cpu_share(ids, n, k, 5, round % 2);
      std::vector<float> y_sync = poisoned_y(n, k, 64), y_async = poisoned_y(n, k, 64);
      sync.compute(layer ? b.w : a.w, x.data(), n, work, y_sync.data());
      async.begin(layer, x.data(), n, work, y_async.data());
      async.wait();
      ASSERT_TRUE(same_bits(y_async, y_sync)) << "spin " << spin_us << " round " << round;
    }
  }
}

TEST(ExpertFfnAsync, DestroyIdleOrBusy) {
  ThreadPool pool(2);
  RandomExperts ex(DType::Q8_0, DType::Q8_0, DType::Q8_0, 3, 64, 64, 71);
  { ExpertFfnAsync never_used({ex.w}, pool); }
  { ExpertFfnAsync sleeping({ex.w}, pool, 0); }
  const int n = 20, k = 2;
  const std::vector<float> x = gaussian(n * 64, 8);
  std::mt19937 rng(9);
  const std::vector<int32_t> ids = random_routes(n, k, 3, rng);
  const std::vector<ExpertWork> work = group_by_expert(ids.data(), n, k, 3);
  std::vector<float> y = poisoned_y(n, k, 64), y_sync = poisoned_y(n, k, 64);
  {
    ExpertFfnAsync busy({ex.w}, pool);
    busy.begin(0, x.data(), n, work, y.data());
  }  // the destructor lets the computation finish before x and y can go
  ExpertFfn(pool).compute(ex.w, x.data(), n, work, y_sync.data());
  EXPECT_TRUE(same_bits(y, y_sync));
  {
    ExpertFfnAsync failed({ex.w}, pool);
    failed.begin(0, x.data(), n, {{7, {0}, {0}}}, y.data());
  }  // an error nobody waited for is dropped
}

}  // namespace
}  // namespace ms
