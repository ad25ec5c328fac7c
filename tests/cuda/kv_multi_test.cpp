// Per-row slot + position KV appends and the fused attention prologue
// (src/cuda/kv_multi.h) against the single-sequence kernels run row by row
// on each row's slot (kv_append, batch_qk_prologue: the same bits) and the
// CPU's cache store (kv_store) for f16 and f32: rows of distinct random
// slots at random positions (some outside the cache, one slot out of range:
// nothing written), the unused slots and untouched positions poisoned and
// checked unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cpu/attention.h"
#include "cuda/backend/prefill_fused.h"
#include "cuda/kv_multi.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

// n rows: distinct slots from 0..n_slots-1 (row 2, when there is one, gets
// slot n_slots: out of range) and positions in [0, ctx) (the last row, when
// n > 3, at ctx: outside).
struct Rows {
  std::vector<int32_t> slots, pos;
};
Rows random_rows(int n, int n_slots, int64_t ctx, std::mt19937& rng) {
  Rows r;
  std::vector<int32_t> perm(n_slots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int t = 0; t < n; ++t) {
    r.slots.push_back(t == 2 ? n_slots : perm[t]);
    r.pos.push_back(n > 3 && t == n - 1 ? static_cast<int32_t>(ctx)
                                        : static_cast<int32_t>(rng() % static_cast<uint32_t>(ctx)));
  }
  return r;
}

template <class T>
size_t units_per_row(int hd) {
  return std::is_same_v<T, BlockQ8_0> ? static_cast<size_t>(hd / QK) : static_cast<size_t>(hd);
}

// Same bytes in two caches.
template <class T>
void expect_same_cache(const DeviceBuffer& a, const DeviceBuffer& b, size_t units, const std::string& what) {
  const auto x = download<uint8_t>(a.get(), units * sizeof(T)), y = download<uint8_t>(b.get(), units * sizeof(T));
  EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size())) << what;
}

template <class T>
void check_append(int n, int n_kv, int hd, std::mt19937& rng, cudaStream_t s) {
  const int n_slots = n + 2;
  const int64_t ctx = 70;
  const size_t row_units = units_per_row<T>(hd);
  const int64_t stride = static_cast<int64_t>(n_kv) * ctx * row_units;
  const size_t units = static_cast<size_t>(n_slots) * stride;
  const Rows r = random_rows(n, n_slots, ctx, rng);
  const auto k = random_floats(static_cast<size_t>(n) * n_kv * hd, rng, -3.f, 3.f);
  const auto v = random_floats(k.size(), rng, -3.f, 3.f);
  DeviceBuffer dk = upload(k), dv = upload(v), dslots = upload(r.slots), dpos = upload(r.pos);
  DeviceBuffer mk(units * sizeof(T)), mv(units * sizeof(T)), sk(units * sizeof(T)), sv(units * sizeof(T));
  for (DeviceBuffer* b : {&mk, &mv, &sk, &sv}) poison(b->get(), units * sizeof(T));
  kv_append_multi(dk.as<float>(), dv.as<float>(), n, n_kv, hd, dslots.as<int32_t>(), dpos.as<int32_t>(), mk.as<T>(),
                  mv.as<T>(), stride, n_slots, ctx, s);
  for (int t = 0; t < n; ++t) {
    if (r.slots[t] >= n_slots) continue;
    const int64_t off = r.slots[t] * stride;
    kv_append(dk.as<float>() + static_cast<int64_t>(t) * n_kv * hd, dv.as<float>() + static_cast<int64_t>(t) * n_kv * hd,
              1, n_kv, hd, dpos.as<int32_t>() + t, sk.as<T>() + off, sv.as<T>() + off, ctx, s);
  }
  const std::string what = "kv_append_multi n " + std::to_string(n) + " n_kv " + std::to_string(n_kv) + " hd " +
                           std::to_string(hd) + " bytes/unit " + std::to_string(sizeof(T));
  expect_same_cache<T>(mk, sk, units, what + " (k)");
  expect_same_cache<T>(mv, sv, units, what + " (v)");
  // f16 and f32: also the CPU cache store's values, row by row
  if constexpr (!std::is_same_v<T, BlockQ8_0>) {
    const auto got = download<T>(mk.get(), units);
    const ms::AttentionShape as{n_kv, n_kv, hd, ctx, 1.f};
    std::vector<T> want_k(static_cast<size_t>(stride)), want_v(want_k.size());
    for (int t = 0; t < n; ++t) {
      if (r.slots[t] >= n_slots || r.pos[t] >= ctx) continue;
      ms::kv_store(as, k.data() + static_cast<int64_t>(t) * n_kv * hd, v.data() + static_cast<int64_t>(t) * n_kv * hd,
                   1, r.pos[t], want_k.data(), want_v.data());
      for (int h = 0; h < n_kv; ++h) {
        const size_t o = (static_cast<size_t>(h) * ctx + r.pos[t]) * hd;
        EXPECT_EQ(0, std::memcmp(want_k.data() + o, got.data() + r.slots[t] * stride + o, hd * sizeof(T)))
            << what << " row " << t << " head " << h << ": not the CPU cache's bits";
      }
    }
  }
}

TEST(CudaKvMulti, AppendEqualsSingleAppendPerRow) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(41);
  Stream s;
  for (int n : {1, 3, 8, 33})
    for (int n_kv : {1, 4}) {
      check_append<uint16_t>(n, n_kv, 128, rng, s);
      check_append<float>(n, n_kv, 128, rng, s);
      check_append<BlockQ8_0>(n, n_kv, 128, rng, s);
      check_append<uint16_t>(n, n_kv, 80, rng, s);
      check_append<BlockQ8_0>(n, n_kv, 64, rng, s);
    }
}

// The multi prologue against batch_qk_prologue on each row alone (f16, f32:
// one fused kernel each; q8_0: the f32 prologue's q, k and kv_append).
template <class T>
void check_prologue(int n, int n_head, int n_kv, int hd, int n_rot, RopeMode mode, std::mt19937& rng,
                    cudaStream_t s) {
  const int n_slots = n + 2;
  const int64_t ctx = 50;
  const size_t row_units = units_per_row<T>(hd);
  const int64_t stride = static_cast<int64_t>(n_kv) * ctx * row_units;
  const size_t units = static_cast<size_t>(n_slots) * stride;
  const Rows r = random_rows(n, n_slots, ctx, rng);
  const auto q = random_floats(static_cast<size_t>(n) * n_head * hd, rng, -2.f, 2.f);
  const auto k = random_floats(static_cast<size_t>(n) * n_kv * hd, rng, -2.f, 2.f);
  const auto v = random_floats(k.size(), rng, -2.f, 2.f);
  const auto qn = random_floats(static_cast<size_t>(hd), rng, 0.5f, 1.5f), kn = random_floats(qn.size(), rng, 0.5f, 1.5f);
  RopeScaling sc;
  sc.mscale = 1.1f;
  DeviceBuffer dq = upload(q), dk = upload(k), dv = upload(v), dqn = upload(qn), dkn = upload(kn);
  DeviceBuffer dslots = upload(r.slots), dpos = upload(r.pos);
  DeviceBuffer mk(units * sizeof(T)), mv(units * sizeof(T)), sk(units * sizeof(T)), sv(units * sizeof(T));
  for (DeviceBuffer* b : {&mk, &mv, &sk, &sv}) poison(b->get(), units * sizeof(T));
  batch_qk_prologue_multi(dq.as<float>(), dk.as<float>(), dv.as<float>(), n, n_head, n_kv, hd, dqn.as<float>(),
                          dkn.as<float>(), 1e-6f, n_rot, dslots.as<int32_t>(), dpos.as<int32_t>(), 10000.f, sc, mode,
                          mk.as<T>(), mv.as<T>(), stride, n_slots, ctx, s);
  // single: fresh copies of the inputs, a row at a time
  DeviceBuffer q1 = upload(q), k1 = upload(k);
  const size_t fsize = static_cast<size_t>(n_kv) * ctx * hd;  // an f32 scratch cache for the q8_0 case
  DeviceBuffer fk(fsize * sizeof(float)), fv(fsize * sizeof(float));
  for (int t = 0; t < n; ++t) {
    float* qr = q1.as<float>() + static_cast<int64_t>(t) * n_head * hd;
    float* kr = k1.as<float>() + static_cast<int64_t>(t) * n_kv * hd;
    const float* vr = dv.as<float>() + static_cast<int64_t>(t) * n_kv * hd;
    const bool slot_ok = r.slots[t] < n_slots;
    const int64_t off = slot_ok ? r.slots[t] * stride : 0;
    if constexpr (std::is_same_v<T, BlockQ8_0>) {
      batch_qk_prologue(qr, kr, vr, 1, n_head, n_kv, hd, dqn.as<float>(), dkn.as<float>(), 1e-6f, n_rot,
                        dpos.as<int32_t>() + t, 10000.f, sc, mode, fk.as<float>(), fv.as<float>(), ctx, s);
      if (slot_ok) kv_append(kr, vr, 1, n_kv, hd, dpos.as<int32_t>() + t, sk.as<T>() + off, sv.as<T>() + off, ctx, s);
    } else {
      // a row of an out-of-range slot: its q and k still roped, the cache left alone (a scratch cache here)
      T* kc = slot_ok ? sk.as<T>() + off : reinterpret_cast<T*>(fk.as<float>());
      T* vc = slot_ok ? sv.as<T>() + off : reinterpret_cast<T*>(fv.as<float>());
      batch_qk_prologue(qr, kr, vr, 1, n_head, n_kv, hd, dqn.as<float>(), dkn.as<float>(), 1e-6f, n_rot,
                        dpos.as<int32_t>() + t, 10000.f, sc, mode, kc, vc, ctx, s);
    }
  }
  const std::string what = "prologue_multi n " + std::to_string(n) + " heads " + std::to_string(n_head) + "/" +
                           std::to_string(n_kv) + " hd " + std::to_string(hd) + " bytes/unit " +
                           std::to_string(sizeof(T));
  const auto a = download<float>(dq.get(), q.size()), b = download<float>(q1.get(), q.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << what << " (q)";
  const auto c = download<float>(dk.get(), k.size()), d = download<float>(k1.get(), k.size());
  EXPECT_EQ(0, std::memcmp(c.data(), d.data(), c.size() * 4)) << what << " (k)";
  expect_same_cache<T>(mk, sk, units, what + " (k cache)");
  expect_same_cache<T>(mv, sv, units, what + " (v cache)");
}

TEST(CudaKvMulti, PrologueEqualsSingleProloguePerRow) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(42);
  Stream s;
  for (int n : {1, 5, 33}) {
    check_prologue<uint16_t>(n, 32, 4, 128, 128, RopeMode::Neox, rng, s);
    check_prologue<float>(n, 32, 4, 128, 64, RopeMode::Normal, rng, s);
    check_prologue<BlockQ8_0>(n, 32, 4, 128, 128, RopeMode::Neox, rng, s);
    check_prologue<uint16_t>(n, 64, 8, 64, 64, RopeMode::Neox, rng, s);
    check_prologue<BlockQ8_0>(n, 16, 2, 256, 64, RopeMode::Neox, rng, s);
  }
}

TEST(CudaKvMulti, BadArgumentsAreRefused) {
  MS_REQUIRE_GPU();
  Stream s;
  DeviceBuffer buf(4096);
  EXPECT_THROW(kv_append_multi(buf.as<float>(), buf.as<float>(), 1, 1, 48, buf.as<int32_t>(), buf.as<int32_t>(),
                               buf.as<BlockQ8_0>(), buf.as<BlockQ8_0>(), 10, 1, 4, s),
               Error);
  EXPECT_THROW(kv_append_multi(buf.as<float>(), buf.as<float>(), 1, 1, 64, buf.as<int32_t>(), buf.as<int32_t>(),
                               buf.as<float>(), buf.as<float>(), 10, 0, 4, s),
               Error);
}

}  // namespace
}  // namespace ms::cuda::test
