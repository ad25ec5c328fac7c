// Quantized matrix x vector on the CPU, as decode runs it: GB/s of weight
// bytes for Qwen3-30B-A3B's expert shapes (768x2048 gate/up, 2048x768 down)
// and attention-sized 2048x4096 / 4096x2048, beside the machine's plain read
// bandwidth measured in the same run (1 thread and all threads).
//
// The weights rotate over a working set far larger than the caches
// (--ws_mib=256 by default), so the numbers are DRAM numbers, which is what
// decode sees. After the Google Benchmark output a compact table is printed:
//   type  shape  threads  GB/s  % of read bandwidth  kernel path
//
// Besides single matrices it times the 8-expert FFN of a decode step issued as
// two matvec_batch calls (experts8), the same kernel on a matrix kept in cache
// (hot: the compute ceiling), the same with 8 tokens (tok8: prompt
// processing), and an empty parallel_for (pool: the fixed cost of every
// parallel call). k-avx2 / k-avx512 rows call one ISA level's row kernel
// directly on the in-cache matrix (one thread, activations quantized once),
// so the AVX2 and AVX-512 kernels of a type compare in one run, whatever the
// dispatcher picks. g-* / gd-* rows do the same for the GPU Q8 row kernels
// (the tiered mode's CPU experts), in cache and from DRAM.
//
// Usage: quant_matvec_bench [--ws_mib=N] [--threads=1,8,16] [--types=q4_K,iq2_xxs] [--quick]
//                           [google benchmark flags]
//   --ws_mib   working set the weights rotate over (default 256; use more
//              than the L3: a 300 MiB L3 wants 1024)
//   --threads  thread counts to run (default: 1 and all hardware threads)
//   --types    weight types to time (default q4_K q5_K q6_K q8_0 q4_0 mxfp4 bf16)
//   --quick    fewer shapes (expert shapes only) and short runs
//   e.g. --benchmark_repetitions=3 for medians over repetitions
#include <benchmark/benchmark.h>
#include <emmintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cpu/matvec.h"
#include "cpu/thread_pool.h"
#include "quant/gpu_q8.h"
#include "quant/gpu_q8_sub32.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "quant/simd_kernels.h"
#include "util/cpu_features.h"
#include "util/split.h"

namespace {

using ms::DType;

int64_t g_ws_bytes = int64_t{256} << 20;
bool g_quick = false;
std::vector<int> g_threads;  // --threads=1,8,16; default 1 and all
std::vector<DType> g_types;  // --types=iq2_xxs,q3_K; default the common decode types

ms::ThreadPool& pool_for(int threads) {
  static std::map<int, std::unique_ptr<ms::ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ms::ThreadPool>(threads);
  return *p;
}
int all_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// ---------------------------------------------------------------- weights
// One buffer of valid blocks of one type, larger than the working set; any
// matrix shape of that type is a view of consecutive blocks in it.
struct WeightPool {
  DType type = DType::F32;
  std::vector<uint8_t> bytes;
};

void fill_blocks(DType t, uint8_t* p, int64_t n_bytes) {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (int64_t i = 0; i + 8 <= n_bytes; i += 8) {  // xorshift: fast, not constant
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    std::memcpy(p + i, &s, 8);
  }
  const ms::TypeInfo& info = ms::type_info(t);
  const uint16_t scale = ms::f32_to_f16(0.01f);
  for (int64_t b = 0; b + info.type_size <= n_bytes; b += info.type_size) {
    uint8_t* blk = p + b;
    switch (t) {  // keep scales finite: NaN/denormal scales would time odd paths
      case DType::Q4_0: case DType::Q8_0: case DType::Q5_0: case DType::IQ4_NL: case DType::IQ4_XS:
      case DType::IQ1_S: case DType::IQ2_XXS: case DType::IQ2_XS: case DType::IQ2_S: case DType::IQ3_XXS:
      case DType::IQ3_S:
        std::memcpy(blk, &scale, 2);
        break;
      case DType::Q4_K: case DType::Q5_K: case DType::Q4_1: case DType::Q5_1:
        std::memcpy(blk, &scale, 2), std::memcpy(blk + 2, &scale, 2);
        break;
      case DType::Q2_K: std::memcpy(blk + 80, &scale, 2), std::memcpy(blk + 82, &scale, 2); break;
      case DType::Q3_K: std::memcpy(blk + 108, &scale, 2); break;
      case DType::TQ1_0: std::memcpy(blk + 52, &scale, 2); break;
      case DType::TQ2_0: std::memcpy(blk + 64, &scale, 2); break;
      case DType::IQ1_M:  // the f16 scale sits in the top nibbles of the 4 scale words
        for (int k = 0; k < 4; ++k) blk[49 + 2 * k] = static_cast<uint8_t>((blk[49 + 2 * k] & 0x0F) | (((scale >> (4 * k)) & 0xF) << 4));
        break;
      case DType::Q6_K: std::memcpy(blk + 208, &scale, 2); break;
      case DType::MXFP4: blk[0] = 120; break;
      case DType::BF16:
        for (int k = 0; k + 2 <= info.type_size; k += 2) blk[k + 1] = static_cast<uint8_t>(0x3c + (blk[k + 1] & 1));
        break;
      default: break;
    }
  }
}

const WeightPool& weights(DType t, int64_t matrix_bytes) {
  static WeightPool wp;
  const int64_t want = std::max<int64_t>(g_ws_bytes, 2 * matrix_bytes) + matrix_bytes;
  if (wp.type != t || static_cast<int64_t>(wp.bytes.size()) < want) {
    wp.bytes.clear();
    wp.bytes.shrink_to_fit();
    wp.bytes.resize(static_cast<size_t>(want));
    fill_blocks(t, wp.bytes.data(), want);
    wp.type = t;
  }
  return wp;
}

// ---------------------------------------------------------------- results for the table
// key "kind/type/shape/tN" -> GB/s of each repetition (or µs for the pool).
std::map<std::string, std::vector<double>> g_results;
std::vector<std::string> g_order;

// ---------------------------------------------------------------- read bandwidth
int64_t sum_bytes(const uint8_t* p, int64_t n) {
  __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm_add_epi64(a0, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i)));
    a1 = _mm_add_epi64(a1, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 16)));
    a2 = _mm_add_epi64(a2, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 32)));
    a3 = _mm_add_epi64(a3, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 48)));
  }
  const __m128i s = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
  int64_t out[2];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), s);
  return out[0] + out[1];
}

// read/-/-/tN: a plain multi-threaded sum over the working set.
void BM_ReadBandwidth(benchmark::State& state, int threads) {
  ms::ThreadPool& pool = pool_for(threads);
  const int64_t n = std::max<int64_t>(g_ws_bytes, int64_t{64} << 20);
  static std::vector<uint8_t> buf;
  if (static_cast<int64_t>(buf.size()) < n + 64) buf.assign(static_cast<size_t>(n + 64), 1);
  const uint8_t* base =
      reinterpret_cast<const uint8_t*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63});
  const int64_t chunk = int64_t{1} << 20;
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    pool.parallel_for(n / chunk, 1, [&](int64_t b, int64_t e) {
      int64_t s = 0;
      for (int64_t c = b; c < e; ++c) s += sum_bytes(base + c * chunk, chunk);
      sink.fetch_add(s, std::memory_order_relaxed);
    });
  }
  benchmark::DoNotOptimize(sink.load());
  state.SetBytesProcessed(state.iterations() * n);
}

// pool/-/-/tN: one empty parallel_for over all threads (the fixed cost every
// parallel matvec pays), reported in µs.
void BM_PoolDispatch(benchmark::State& state, int threads) {
  ms::ThreadPool& pool = pool_for(threads);
  std::atomic<int64_t> sink{0};
  for (auto _ : state) pool.parallel_for(threads, 1, [&](int64_t b, int64_t) { sink.fetch_add(b); });
  benchmark::DoNotOptimize(sink.load());
}

std::vector<float> random_x(int64_t n) {
  std::vector<float> x(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng);
  return x;
}

// matvec/type/RxC/tN: one matrix x vector per call (x quantized in the call),
// rotating over the working set. hot/...: the same matrix every call (in
// cache): the kernel's compute ceiling.
void BM_Matvec(benchmark::State& state, DType t, int64_t rows, int64_t cols, int threads, bool hot) {
  ms::ThreadPool& pool = pool_for(threads);
  const int64_t mbytes = rows * ms::row_bytes(t, cols);
  const WeightPool& wp = weights(t, mbytes);
  const int64_t n_mats = hot ? 1 : static_cast<int64_t>(wp.bytes.size()) / mbytes;
  const std::vector<float> x = random_x(cols);
  std::vector<float> y(rows);
  int64_t k = 0;
  for (auto _ : state) {
    ms::matvec(pool, t, wp.bytes.data() + (k % n_mats) * mbytes, rows, cols, x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    ++k;
  }
  state.SetBytesProcessed(state.iterations() * mbytes);
  state.SetLabel(ms::vec_dot_path(t));
}

// k-avx2|k-avx512/type/768x2048/t1: one ISA level's row kernel on the
// in-cache matrix, all 768 rows per call, activations quantized once.
void BM_Kernel(benchmark::State& state, DType t, ms::simd::VecDotRowsFn fn) {
  constexpr int64_t rows = 768, cols = 2048;
  const int64_t rb = ms::row_bytes(t, cols);
  const WeightPool& wp = weights(t, rows * rb);
  const std::vector<float> x = random_x(cols);
  std::vector<uint8_t> act(ms::act_row_bytes(t, cols));
  ms::quantize_row_act(ms::type_info(t).vec_dot_type, x.data(), act.data(), cols);
  std::vector<float> y(rows);
  for (auto _ : state) {
    fn(cols, wp.bytes.data(), rb, rows, act.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * rows * rb);
}

// g-old|g-avx2|g-avx512/type/768x2048/t1 (in cache) and gd-.../t1 (DRAM: the
// matrix rotates over the working set): the GPU Q8 row kernels (quant/gpu_q8.h)
// that the tiered mode's CPU-computed experts use, called directly, one
// thread, activations quantized once. g-old is the decode-then-dot AVX2
// kernel of the sub-block formats (gpu_q8_sub32_avx2.cpp; the scalar
// reference for Q6_K), g-avx2 / g-avx512 the kernels the dispatcher takes at
// that ISA level (for the sub-block formats and Q6_K the SIMD-decoding ones
// of gpu_q8_sub32_simd.h).
void BM_GpuQ8Kernel(benchmark::State& state, DType t, ms::simd::GpuQ8RowsFn fn, bool hot) {
  constexpr int64_t rows = 768, cols = 2048;
  const int64_t rb = ms::row_bytes(t, cols), mbytes = rows * rb;
  const WeightPool& wp = weights(t, mbytes);
  const int64_t n_mats = hot ? 1 : static_cast<int64_t>(wp.bytes.size()) / mbytes;
  const std::vector<float> x = random_x(cols);
  std::vector<uint8_t> act(static_cast<size_t>(ms::gpu_q8_row_bytes(cols)));
  ms::quantize_row_gpu_q8(x.data(), act.data(), cols);
  std::vector<float> y(rows);
  int64_t k = 0;
  for (auto _ : state) {
    fn(cols, wp.bytes.data() + (k++ % n_mats) * mbytes, rb, rows, act.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * mbytes);
}

// The scalar GPU Q8 reference of Q6_K as a row kernel (its "old" path: there
// was no AVX2 GPU Q8 kernel for Q6_K).
void gpu_q8_ref_rows_q6_K(int64_t n, const void* w, int64_t stride, int64_t rows, const void* a, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    out[r] = ms::vec_dot_gpu_q8_ref(DType::Q6_K, n, static_cast<const uint8_t*>(w) + r * stride, a);
}

// tok8/type/768x2048/t1: prompt processing's compute ceiling: ms::matmul of
// one in-cache expert matrix with 8 tokens (the mean tokens per expert of a
// 128-token Qwen3-30B-A3B prompt). GB/s counts weight bytes times tokens, so
// it compares with hot/... (one token); the ratio is what the multi-token
// kernel (vec_dot_rows_tokens) gains by unpacking each row once.
void BM_Tokens8(benchmark::State& state, DType t) {
  ms::ThreadPool& pool = pool_for(1);
  constexpr int64_t kTokens = 8, rows = 768, cols = 2048;
  const int64_t mbytes = rows * ms::row_bytes(t, cols);
  const WeightPool& wp = weights(t, mbytes);
  const std::vector<float> x = random_x(cols * kTokens);
  std::vector<float> y(rows * kTokens);
  for (auto _ : state) {
    ms::matmul(pool, t, wp.bytes.data(), rows, cols, x.data(), kTokens, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * mbytes * kTokens);
  state.SetLabel(ms::vec_dot_path(t));
}

// experts8/type/ffn/tN: the decode step's host-computed experts: 8 experts'
// gate and up (768x2048 each) in one matvec_batch, then their downs
// (2048x768) in another, as the engine should issue them.
void BM_Experts8(benchmark::State& state, DType t, int threads) {
  ms::ThreadPool& pool = pool_for(threads);
  constexpr int kExperts = 8;
  const int64_t ff = 768, d = 2048;
  const int64_t mbytes = ff * ms::row_bytes(t, d);  // gate, up and down have the same size
  const int64_t set_bytes = 3 * kExperts * mbytes;
  const WeightPool& wp = weights(t, set_bytes);
  const int64_t n_sets = static_cast<int64_t>(wp.bytes.size()) / set_bytes;
  const std::vector<float> x = random_x(d), h = random_x(ff);
  std::vector<uint8_t> ax(ms::act_row_bytes(t, d)), ah(ms::act_row_bytes(t, ff));
  std::vector<float> gu(2 * kExperts * ff), out(kExperts * d);
  std::vector<ms::MatvecJob> up(2 * kExperts), down(kExperts);
  int64_t k = 0;
  for (auto _ : state) {
    const uint8_t* base = wp.bytes.data() + (k++ % n_sets) * set_bytes;
    ms::quantize_activations(t, x.data(), d, 1, ax.data());
    for (int e = 0; e < 2 * kExperts; ++e) up[e] = {t, base + e * mbytes, ff, d, ax.data(), gu.data() + e * ff};
    ms::matvec_batch(pool, up.data(), 2 * kExperts);
    ms::quantize_activations(t, h.data(), ff, 1, ah.data());  // stands in for silu(gate)*up
    for (int e = 0; e < kExperts; ++e)
      down[e] = {t, base + (2 * kExperts + e) * mbytes, d, ff, ah.data(), out.data() + e * d};
    ms::matvec_batch(pool, down.data(), kExperts);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * set_bytes);
  state.SetLabel(ms::vec_dot_path(t));
}

// A reporter that also keeps each repetition's GB/s (or µs) for the table.
class TableReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      std::string key = r.run_name.function_name;  // the name we registered
      double v;
      if (key.rfind("pool/", 0) == 0) {
        v = r.GetAdjustedRealTime();  // in the benchmark's unit: µs
      } else {
        const auto it = r.counters.find("bytes_per_second");
        if (it == r.counters.end()) continue;
        v = it->second.value / 1e9;
      }
      if (!g_results.count(key)) g_order.push_back(key);
      g_results[key].push_back(v);
    }
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

void print_table() {
  std::map<std::string, double> read_bw;  // "tN" -> median GB/s
  for (const auto& [key, v] : g_results) {
    const auto p = ms::split_list(key, '/');
    if (p[0] == "read") read_bw[p[3]] = median(v);
  }
  std::printf("\n%-9s %-6s %-10s %7s %9s %9s %8s  %s\n", "kind", "type", "shape", "threads", "GB/s", "best", "% read",
              "(median over repetitions; % of the median plain read at the same thread count)");
  for (const std::string& key : g_order) {
    const auto p = ms::split_list(key, '/');
    if (p.size() < 4) continue;
    const std::vector<double>& v = g_results[key];
    const double best = *std::max_element(v.begin(), v.end()), med = median(v);
    if (p[0] == "pool") {
      std::printf("%-9s %-6s %-10s %7s %9s %9s %8s  %.1f us per empty parallel_for\n", p[0].c_str(), "-", "-",
                  p[3].c_str() + 1, "-", "-", "-", med);
      continue;
    }
    char pct[32] = "-";
    const auto it = read_bw.find(p[3]);
    if (p[0] != "read" && it != read_bw.end() && it->second > 0)
      std::snprintf(pct, sizeof pct, "%.0f%%", 100.0 * med / it->second);
    std::printf("%-9s %-6s %-10s %7s %9.2f %9.2f %8s\n", p[0].c_str(), p[1].c_str(), p[2].c_str(), p[3].c_str() + 1,
                med, best, pct);
  }
}

void register_all() {
  const int nt = all_threads();
  std::vector<int> thread_counts = g_threads;
  if (thread_counts.empty()) {
    thread_counts.push_back(1);
    if (nt > 1) thread_counts.push_back(nt);
  }
  const double min_time = g_quick ? 0.1 : 0.3;
  auto reg = [&](const std::string& name, auto fn, auto... args) {
    benchmark::RegisterBenchmark(name.c_str(), fn, args...)
        ->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(min_time);
  };
  for (int th : thread_counts) reg("read/-/-/t" + std::to_string(th), BM_ReadBandwidth, th);
  for (int th : thread_counts)
    if (th > 1) reg("pool/-/-/t" + std::to_string(th), BM_PoolDispatch, th);
  struct Shape { int64_t rows, cols; };
  std::vector<Shape> shapes = {{768, 2048}, {2048, 768}};
  if (!g_quick) shapes.push_back({2048, 4096}), shapes.push_back({4096, 2048});
  if (g_types.empty())
    g_types = {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0, DType::Q4_0, DType::MXFP4, DType::BF16};
  for (DType t : g_types) {
    const std::string tn = ms::type_name(t);
    reg("hot/" + tn + "/768x2048/t1", BM_Matvec, t, int64_t{768}, int64_t{2048}, 1, true);
    reg("tok8/" + tn + "/768x2048/t1", BM_Tokens8, t);
    if (ms::simd::cpu_supports_avx2())
      if (auto fn = ms::simd::vec_dot_rows_kernel_avx2(t)) reg("k-avx2/" + tn + "/768x2048/t1", BM_Kernel, t, fn);
    if (ms::simd::cpu_supports_avx512())
      if (auto fn = ms::simd::vec_dot_rows_kernel_avx512(t)) reg("k-avx512/" + tn + "/768x2048/t1", BM_Kernel, t, fn);
    if (ms::gpu_q8_supported(t) && ms::simd::cpu_supports_avx2()) {
      std::vector<std::pair<std::string, ms::simd::GpuQ8RowsFn>> gk;
      if (auto fn = ms::simd::gpu_q8_sub32_generic_kernel_avx2(t)) gk.emplace_back("old", fn);
      if (t == DType::Q6_K) gk.emplace_back("old", gpu_q8_ref_rows_q6_K);
      if (auto fn = ms::simd::gpu_q8_rows_kernel_avx2(t)) gk.emplace_back("avx2", fn);
      else if (auto fn2 = ms::simd::gpu_q8_sub32_fast_kernel_avx2(t)) gk.emplace_back("avx2", fn2);  // Q6_K
      if (ms::simd::cpu_supports_avx512())
        if (auto fn = ms::simd::gpu_q8_sub32_fast_kernel_avx512(t)) gk.emplace_back("avx512", fn);
      for (const auto& [name, fn] : gk) {
        reg("g-" + name + "/" + tn + "/768x2048/t1", BM_GpuQ8Kernel, t, fn, true);
        reg("gd-" + name + "/" + tn + "/768x2048/t1", BM_GpuQ8Kernel, t, fn, false);
      }
    }
    for (const Shape& s : shapes)
      for (int th : thread_counts)
        reg("matvec/" + tn + "/" + std::to_string(s.rows) + "x" + std::to_string(s.cols) + "/t" + std::to_string(th),
            BM_Matvec, t, s.rows, s.cols, th, false);
    for (int th : thread_counts) reg("experts8/" + tn + "/ffn/t" + std::to_string(th), BM_Experts8, t, th);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (!std::strncmp(argv[i], "--ws_mib=", 9)) {
      g_ws_bytes = std::max<int64_t>(1, std::atoll(argv[i] + 9)) << 20;
    } else if (!std::strncmp(argv[i], "--threads=", 10)) {
      for (const char* p = argv[i] + 10; *p;) {
        const int th = std::atoi(p);
        if (th > 0) g_threads.push_back(th);
        while (*p && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    } else if (!std::strncmp(argv[i], "--types=", 8)) {
      std::string list = argv[i] + 8;
      for (size_t p = 0; p <= list.size();) {
        const size_t q = std::min(list.find(',', p), list.size());
        if (q > p) g_types.push_back(ms::parse_type(list.substr(p, q - p)));
        p = q + 1;
      }
    } else if (!std::strcmp(argv[i], "--quick")) {
      g_quick = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  std::printf("cpu features: %s; working set %lld MiB; %d hardware threads\n", ms::cpu_features_string().c_str(),
              static_cast<long long>(g_ws_bytes >> 20), all_threads());
  register_all();
  TableReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_table();
  benchmark::Shutdown();
  return 0;
}
