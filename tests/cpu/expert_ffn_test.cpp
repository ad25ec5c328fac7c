// The CPU expert FFN (cpu/expert_ffn.h), on random experts of several quant
// types and odd sizes: the fast path against the scalar reference, the same
// bits for any pool size, and exactly the rows it was given written (y
// poisoned with NaN first).
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

// The CPU's share of a layer (the hybrid step hands it every other expert):
// exactly the rows of its work items are written, for decode, a few tokens
// and the parallel paths (>= 16 pairs).
TEST(ExpertFfn, WritesExactlyItsRows) {
  ThreadPool pool(2);
  ExpertFfn ffn(pool);
  std::mt19937 rng(7);
  for (const Config& c : kConfigs) {
    const int n_expert = 6;
    RandomExperts layer(c.gate, c.up, c.down, n_expert, c.n_embd, c.n_ff, 21);
    for (int n : {1, 3, 7, 33})
      for (int k : {1, 2, 3}) {
        const std::string what = describe(c) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
        const std::vector<float> x = gaussian(n * c.n_embd, static_cast<uint32_t>(n * 10 + k));
        const std::vector<int32_t> ids = random_routes(n, k, n_expert, rng);
        const std::vector<ExpertWork> work = cpu_share(ids, n, k, n_expert, n % 2);
        std::vector<float> y = poisoned_y(n, k, c.n_embd);
        ffn.compute(layer.w, x.data(), n, work, y.data());
        expect_exactly_written(y, work, c.n_embd, what);
      }
  }
}

}  // namespace
}  // namespace ms
