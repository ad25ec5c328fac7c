// Multi-sequence decode attention (src/cuda/attention_multi.h) against the
// scalar CPU reference (src/cpu/attention.h attention_ref, run on each row's
// slot alone) and against the single-sequence kernel (attention_decode) run
// row by row: rows of different slots and lengths (1, tile and split edges,
// 1023/1024/1025, a few thousand), GQA ratios, f16/f32/q8_0 caches, sinks and
// a sliding window. Every cache position a row must not read (past its length,
// and all of the unused slots) holds NaN, and outputs start as NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cpu/attention.h"
#include "cuda/attention.h"
#include "cuda/attention_multi.h"
#include "cuda_test_util.h"

namespace ms::cuda::test {
namespace {

enum class Kv { F16, F32, Q8_0 };
const char* kv_name(Kv t) { return t == Kv::F16 ? "f16" : t == Kv::F32 ? "f32" : "q8_0"; }

// n_slots caches of one layer, slot s at s * stride units of the element type;
// position p of slot s holds random keys/values when p < len[s], NaN otherwise.
struct Slots {
  Kv type = Kv::F16;
  int n_slots = 0, n_kv = 0, hd = 0;
  int64_t ctx = 0, stride = 0;  // units per slot
  std::vector<uint16_t> k16, v16;
  std::vector<float> k32, v32;
  std::vector<BlockQ8_0> k8, v8;
  DeviceBuffer dk, dv;
};

Slots make_slots(Kv type, int n_slots, int n_kv, int hd, int64_t ctx, const std::vector<int>& len, std::mt19937& rng) {
  Slots c;
  c.type = type;
  c.n_slots = n_slots;
  c.n_kv = n_kv;
  c.hd = hd;
  c.ctx = ctx;
  const int units = type == Kv::Q8_0 ? hd / QK : hd;
  c.stride = static_cast<int64_t>(n_kv) * ctx * units;
  const size_t rows = static_cast<size_t>(n_slots) * n_kv * ctx;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> row(hd);
  BlockQ8_0 nan_block{};
  nan_block.d = 0x7e00;  // f16 NaN
  for (int which = 0; which < 2; ++which) {
    std::vector<uint16_t>& h16 = which ? c.v16 : c.k16;
    std::vector<float>& h32 = which ? c.v32 : c.k32;
    std::vector<BlockQ8_0>& h8 = which ? c.v8 : c.k8;
    if (type == Kv::F16) h16.resize(rows * hd);
    if (type == Kv::F32) h32.resize(rows * hd);
    if (type == Kv::Q8_0) h8.resize(rows * units);
    for (size_t r = 0; r < rows; ++r) {
      const int slot = static_cast<int>(r / (static_cast<size_t>(n_kv) * ctx));
      const int64_t pos = static_cast<int64_t>(r % ctx);
      const bool valid = slot < static_cast<int>(len.size()) && pos < len[slot];
      for (auto& x : row) x = valid ? u(rng) * (which ? 1.f : 2.f) : NAN;
      if (type == Kv::F16)
        for (int d = 0; d < hd; ++d) h16[r * hd + d] = valid ? f32_to_f16(row[d]) : 0x7e00;
      if (type == Kv::F32) std::copy(row.begin(), row.end(), h32.begin() + static_cast<int64_t>(r * hd));
      if (type == Kv::Q8_0) {
        if (valid)
          quantize_row_ref(DType::Q8_0, row.data(), h8.data() + r * units, hd);
        else
          std::fill(h8.begin() + static_cast<int64_t>(r * units), h8.begin() + static_cast<int64_t>((r + 1) * units),
                    nan_block);
      }
    }
  }
  if (type == Kv::F16) { c.dk = upload(c.k16); c.dv = upload(c.v16); }
  if (type == Kv::F32) { c.dk = upload(c.k32); c.dv = upload(c.v32); }
  if (type == Kv::Q8_0) { c.dk = upload(c.k8); c.dv = upload(c.v8); }
  return c;
}

void run_multi(const AttentionShape& as, const float* q, const Slots& c, int n_rows, const int32_t* slots,
               const int32_t* lens, int max_span, float* out, void* scratch, cudaStream_t s,
               const AttentionExtras& x) {
  if (c.type == Kv::F16)
    attention_decode_multi(as, q, c.dk.as<uint16_t>(), c.dv.as<uint16_t>(), c.stride, c.n_slots, n_rows, slots, lens,
                           max_span, out, scratch, s, x);
  else if (c.type == Kv::F32)
    attention_decode_multi(as, q, c.dk.as<float>(), c.dv.as<float>(), c.stride, c.n_slots, n_rows, slots, lens,
                           max_span, out, scratch, s, x);
  else
    attention_decode_multi(as, q, c.dk.as<BlockQ8_0>(), c.dv.as<BlockQ8_0>(), c.stride, c.n_slots, n_rows, slots,
                           lens, max_span, out, scratch, s, x);
}

// attention_decode on slot `slot` alone.
void run_single(const AttentionShape& as, const float* q, const Slots& c, int slot, int max_kv_len,
                const int32_t* kv_len, float* out, void* scratch, cudaStream_t s, const AttentionExtras& x) {
  const int64_t off = slot * c.stride;
  if (c.type == Kv::F16)
    attention_decode(as, q, c.dk.as<uint16_t>() + off, c.dv.as<uint16_t>() + off, max_kv_len, kv_len, out, scratch, s,
                     x);
  else if (c.type == Kv::F32)
    attention_decode(as, q, c.dk.as<float>() + off, c.dv.as<float>() + off, max_kv_len, kv_len, out, scratch, s, x);
  else
    attention_decode(as, q, c.dk.as<BlockQ8_0>() + off, c.dv.as<BlockQ8_0>() + off, max_kv_len, kv_len, out, scratch,
                     s, x);
}

// The CPU reference for one row: the query at position len - 1 of its slot.
std::vector<float> reference(const ms::AttentionShape& as, const float* q, const Slots& c, int slot, int len,
                             const ms::AttentionExtras& x) {
  std::vector<float> out(static_cast<size_t>(as.n_head) * as.head_dim);
  const int64_t off = slot * c.stride;
  if (c.type == Kv::F16)
    ms::attention_ref(as, q, c.k16.data() + off, c.v16.data() + off, 1, len - 1, out.data(), x);
  else if (c.type == Kv::F32)
    ms::attention_ref(as, q, c.k32.data() + off, c.v32.data() + off, 1, len - 1, out.data(), x);
  else
    ms::attention_ref(as, q, c.k8.data() + off, c.v8.data() + off, 1, len - 1, out.data(), x);
  return out;
}

struct Shape {
  int n_head, n_kv, hd;
};

struct Case {
  Shape sh;
  int64_t ctx;
  std::vector<int> lens;  // one per row
  int window = 0;
  bool sinks = false;
};

// Rows compared bit for bit with attention_decode so far (a test asserts
// that its cases include some).
int g_bit_checks = 0;

// Runs one case for one cache type: rows in shuffled slots (n_rows + 3 slots,
// the spare ones NaN), checked against the reference and the single kernel.
void check_case(const Case& cs, Kv type, std::mt19937& rng, cudaStream_t s) {
  const Shape sh = cs.sh;
  if (type == Kv::Q8_0 && sh.hd % QK != 0) return;
  const int n_rows = static_cast<int>(cs.lens.size());
  const int n_slots = n_rows + 3;
  std::vector<int32_t> slot_of(n_slots);
  std::iota(slot_of.begin(), slot_of.end(), 0);
  std::shuffle(slot_of.begin(), slot_of.end(), rng);
  slot_of.resize(n_rows);
  std::vector<int> slot_len(n_slots, 0);
  for (int t = 0; t < n_rows; ++t) slot_len[slot_of[t]] = cs.lens[t];
  const Slots c = make_slots(type, n_slots, sh.n_kv, sh.hd, cs.ctx, slot_len, rng);
  const int max_span = *std::max_element(cs.lens.begin(), cs.lens.end());
  const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, cs.ctx, 1.f / std::sqrt(float(sh.hd))};
  const ms::AttentionShape ras{sh.n_head, sh.n_kv, sh.hd, cs.ctx, as.scale};
  const size_t row_floats = static_cast<size_t>(sh.n_head) * sh.hd;
  const auto q = random_floats(row_floats * n_rows, rng);
  const auto sinks = random_floats(static_cast<size_t>(sh.n_head), rng, -2.f, 3.f);
  DeviceBuffer dq = upload(q), dslots = upload(slot_of), dlens = upload(std::vector<int32_t>(cs.lens.begin(), cs.lens.end()));
  DeviceBuffer dsinks = upload(sinks);
  AttentionExtras x;
  x.window = cs.window;
  x.sinks = cs.sinks ? dsinks.as<float>() : nullptr;
  ms::AttentionExtras rx;
  rx.window = cs.window;
  rx.sinks = cs.sinks ? sinks.data() : nullptr;

  DeviceBuffer scratch(attention_decode_multi_scratch_bytes(as, n_rows, max_span));
  DeviceBuffer out = poisoned(row_floats * n_rows);
  run_multi(as, dq.as<float>(), c, n_rows, dslots.as<int32_t>(), dlens.as<int32_t>(), max_span, out.as<float>(),
            scratch.get(), s, x);
  const auto got = download<float>(out.get(), row_floats * n_rows);

  // the single-sequence kernel, row by row, in a launch sized for the same span
  DeviceBuffer single_scratch(attention_decode_scratch_bytes(as, max_span));
  device_fill(single_scratch.get(), 0, single_scratch.size());
  DeviceBuffer single_out = poisoned(row_floats);
  const bool same_splits =
      attention_decode_multi_splits(as, n_rows, std::min(max_span, cs.window > 0 ? cs.window : max_span)) ==
      attention_decode_multi_splits(as, 1, std::min(max_span, cs.window > 0 ? cs.window : max_span));
  const int visible = cs.window > 0 ? std::min(max_span, cs.window) : max_span;
  // attention_decode takes the tensor-core kernel past 1024 visible positions over f16 and q8_0
  const bool same_math = same_splits && (type == Kv::F32 || visible <= 1024);
  const double abs_tol = type == Kv::F32 ? 1e-5 : 2e-4, rel_tol = type == Kv::F32 ? 1e-4 : 1e-3;
  for (int t = 0; t < n_rows; ++t) {
    const std::string what = std::string(kv_name(type)) + " heads " + std::to_string(sh.n_head) + "/" +
                             std::to_string(sh.n_kv) + " hd " + std::to_string(sh.hd) + " row " + std::to_string(t) +
                             "/" + std::to_string(n_rows) + " slot " + std::to_string(slot_of[t]) + " len " +
                             std::to_string(cs.lens[t]) + " span " + std::to_string(max_span) + " window " +
                             std::to_string(cs.window) + (cs.sinks ? " sinks" : "");
    const auto want = reference(ras, q.data() + t * row_floats, c, slot_of[t], cs.lens[t], rx);
    int bad = 0;
    for (size_t i = 0; i < row_floats; ++i) {
      const float g = got[t * row_floats + i];
      if (!(std::fabs(g - want[i]) <= abs_tol + rel_tol * std::fabs(want[i])))
        if (++bad <= 3) ADD_FAILURE() << what << ": [" << i << "] got " << g << " want " << want[i];
    }
    EXPECT_EQ(bad, 0) << what;

    DeviceBuffer dlen1 = upload(std::vector<int32_t>{cs.lens[t]});
    poison(single_out.get(), row_floats * sizeof(float));
    run_single(as, dq.as<float>() + t * row_floats, c, slot_of[t], max_span, dlen1.as<int32_t>(),
               single_out.as<float>(), single_scratch.get(), s, x);
    const auto one = download<float>(single_out.get(), row_floats);
    if (same_math) {
      ++g_bit_checks;
      EXPECT_EQ(0, std::memcmp(one.data(), got.data() + t * row_floats, row_floats * sizeof(float)))
          << what << ": not the bits of attention_decode";
    } else {
      int off = 0;
      for (size_t i = 0; i < row_floats; ++i)
        if (!(std::fabs(one[i] - got[t * row_floats + i]) <= 2 * abs_tol + 2 * rel_tol * std::fabs(one[i]))) ++off;
      EXPECT_EQ(off, 0) << what << ": far from attention_decode";
    }
  }
}

const Shape kShapes[] = {{32, 4, 128}, {8, 8, 64}, {16, 1, 256}, {16, 2, 128}, {64, 4, 64}, {16, 8, 256}};

TEST(CudaAttentionMulti, ShortRowsMatchReferenceAndSingleKernel) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(31);
  Stream s;
  const int before = g_bit_checks;
  for (Kv type : {Kv::F16, Kv::F32, Kv::Q8_0})
    for (const Shape& sh : kShapes) {
      check_case({sh, 300, {1}}, type, rng, s);
      check_case({sh, 300, {37, 1, 128, 129, 31, 32, 33}}, type, rng, s);
      check_case({sh, 300, {5, 64, 65, 300, 2, 1, 100, 200, 17}}, type, rng, s);
    }
  // short spans split alike with 1 and 9 rows: most rows are compared bit for bit
  EXPECT_GT(g_bit_checks - before, 200);
}

TEST(CudaAttentionMulti, ManyRowsAcrossThe1024Edge) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(32);
  Stream s;
  for (Kv type : {Kv::F16, Kv::F32, Kv::Q8_0})
    for (const Shape& sh : {Shape{32, 4, 128}, Shape{16, 1, 256}, Shape{64, 8, 64}}) {
      check_case({sh, 1025, {1023, 1024, 1025, 1, 512}}, type, rng, s);
      check_case({sh, 1025, {1024, 3, 1000}}, type, rng, s);
      std::vector<int> lens(33);  // the most rows of a step, with tile-edge lengths
      for (int t = 0; t < 33; ++t) lens[t] = 1 + (t * 97) % 1025;
      lens[7] = 1025;
      check_case({sh, 1025, lens}, type, rng, s);
    }
}

TEST(CudaAttentionMulti, LongRowsMatchReference) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(33);
  Stream s;
  for (Kv type : {Kv::F16, Kv::F32, Kv::Q8_0})
    for (const Shape& sh : {Shape{32, 4, 128}, Shape{16, 2, 256}}) {
      check_case({sh, 4100, {4100}}, type, rng, s);
      check_case({sh, 4100, {4100, 3001, 1, 1025, 2048, 77}}, type, rng, s);
    }
}

// gpt-oss: 64 heads of 64 over 8 KV heads, sinks, and a 128-position window
// on lengths below, at and past it.
TEST(CudaAttentionMulti, SinksAndSlidingWindow) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(34);
  Stream s;
  for (Kv type : {Kv::F16, Kv::F32, Kv::Q8_0}) {
    check_case({{64, 8, 64}, 2100, {1, 100, 128, 129, 2100, 1500}, 128, true}, type, rng, s);
    check_case({{64, 8, 64}, 2100, {1, 100, 2100, 1025}, 0, true}, type, rng, s);
    check_case({{64, 8, 64}, 300, {1, 100, 129, 300}, 128, false}, type, rng, s);
  }
}

// Rows that read nothing (a slot out of range, a length of 0) get zeros; bad
// host arguments are refused by name.
TEST(CudaAttentionMulti, EmptyRowsAndBadArguments) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(35);
  Stream s;
  const Shape sh{8, 2, 64};
  const Slots c = make_slots(Kv::F16, 3, sh.n_kv, sh.hd, 64, {10, 20, 30}, rng);
  const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, 64, 0.125f};
  const size_t row_floats = static_cast<size_t>(sh.n_head) * sh.hd;
  const auto q = random_floats(row_floats * 4, rng);
  DeviceBuffer dq = upload(q), dslots = upload(std::vector<int32_t>{3, -1, 1, 0});
  DeviceBuffer dlens = upload(std::vector<int32_t>{10, 10, 0, 10});
  DeviceBuffer scratch(attention_decode_multi_scratch_bytes(as, 4, 64));
  DeviceBuffer out = poisoned(row_floats * 4);
  run_multi(as, dq.as<float>(), c, 4, dslots.as<int32_t>(), dlens.as<int32_t>(), 64, out.as<float>(), scratch.get(),
            s, {});
  const auto got = download<float>(out.get(), row_floats * 4);
  for (size_t i = 0; i < 3 * row_floats; ++i) ASSERT_EQ(got[i], 0.f) << i;
  for (size_t i = 3 * row_floats; i < 4 * row_floats; ++i) ASSERT_TRUE(std::isfinite(got[i])) << i;
  auto call = [&](int max_span, int n_slots, const AttentionShape& shape) {
    attention_decode_multi(shape, dq.as<float>(), c.dk.as<uint16_t>(), c.dv.as<uint16_t>(), c.stride, n_slots, 4,
                           dslots.as<int32_t>(), dlens.as<int32_t>(), max_span, out.as<float>(), scratch.get(), s);
  };
  EXPECT_THROW(call(65, 3, as), Error);
  EXPECT_THROW(call(0, 3, as), Error);
  EXPECT_THROW(call(64, 0, as), Error);
  EXPECT_THROW(call(64, 3, AttentionShape{6, 2, 80, 64, 0.1f}), Error);
  EXPECT_FALSE(attention_decode_multi_supported(AttentionShape{6, 2, 80, 64, 0.1f}));
  EXPECT_TRUE(attention_decode_multi_supported(as));
}

// Not a check: prints the time of one multi-row launch against the
// single-sequence kernel looped over the rows (Qwen3-30B-A3B's attention
// shape, f16 and q8_0 caches). Run with --gtest_also_run_disabled_tests; the
// figures go to bench/results/ by hand, with the GPU named.
TEST(CudaAttentionMulti, DISABLED_PrintTimings) {
  MS_REQUIRE_GPU();
  std::mt19937 rng(36);
  Stream s;
  const Shape sh{32, 4, 128};
  for (Kv type : {Kv::F16, Kv::Q8_0})
    for (int span : {512, 4096})
      for (int n_rows : {8, 32}) {
        const int64_t ctx = span;
        const Slots c = make_slots(type, n_rows, sh.n_kv, sh.hd, ctx, std::vector<int>(n_rows, span), rng);
        const AttentionShape as{sh.n_head, sh.n_kv, sh.hd, ctx, 1.f / std::sqrt(float(sh.hd))};
        const size_t row_floats = static_cast<size_t>(sh.n_head) * sh.hd;
        std::vector<int32_t> slots(n_rows), lens(n_rows);
        for (int t = 0; t < n_rows; ++t) { slots[t] = t; lens[t] = span - (t * 37) % (span / 2); }
        DeviceBuffer dq = upload(random_floats(row_floats * n_rows, rng)), dslots = upload(slots), dlens = upload(lens);
        DeviceBuffer out(row_floats * n_rows * sizeof(float)), scratch(attention_decode_multi_scratch_bytes(as, n_rows, span));
        DeviceBuffer single_scratch(attention_decode_scratch_bytes(as, span));
        device_fill(single_scratch.get(), 0, single_scratch.size());
        auto multi = [&] {
          run_multi(as, dq.as<float>(), c, n_rows, dslots.as<int32_t>(), dlens.as<int32_t>(), span, out.as<float>(),
                    scratch.get(), s, {});
        };
        auto loop = [&] {
          for (int t = 0; t < n_rows; ++t)
            run_single(as, dq.as<float>() + t * row_floats, c, t, span, dlens.as<int32_t>() + t,
                       out.as<float>() + t * row_floats, single_scratch.get(), s, {});
        };
        auto time_us = [&](auto&& f) {
          for (int i = 0; i < 5; ++i) f();
          cudaEvent_t a, b;
          MS_CUDA_CHECK(cudaEventCreate(&a));
          MS_CUDA_CHECK(cudaEventCreate(&b));
          MS_CUDA_CHECK(cudaEventRecord(a, s));
          for (int i = 0; i < 50; ++i) f();
          MS_CUDA_CHECK(cudaEventRecord(b, s));
          MS_CUDA_CHECK(cudaEventSynchronize(b));
          float ms = 0;
          MS_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
          cudaEventDestroy(a);
          cudaEventDestroy(b);
          return ms * 1000.f / 50;
        };
        const float tm = time_us(multi), tl = time_us(loop);
        std::printf("TIMING attention %s heads 32/4 hd 128 rows %d span %d (lens span-(37t mod span/2)): "
                    "multi %.1f us, attention_decode x rows %.1f us\n",
                    kv_name(type), n_rows, span, tm, tl);
      }
}

}  // namespace
}  // namespace ms::cuda::test
