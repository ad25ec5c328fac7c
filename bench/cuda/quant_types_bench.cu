// Every quantized weight type on the CUDA kernels, beside Q4_K: the decode
// matvec (one token; 8 experts of an FFN through a slot table, and one dense
// attention matrix) and the int8 GEMM of a prompt batch (512 vectors), at
// Qwen3-30B-A3B shapes. Weights rotate over copies larger than 4x the L2
// cache, so they come from HBM; timed as kernel_bench times (graph_timer.cuh:
// a CUDA graph of back-to-back launches, median of the replays).
//
// Build (after the CMake build, as tools/gpu_check.sh builds kernel_bench):
//   nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -Isrc bench/cuda/quant_types_bench.cu \
//        <kernels lib> build-gpu/libms_quant.a build-gpu/libms_util.a -lcublas -o quant_types_bench
// Usage: quant_types_bench
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda/device.h"
#include "cuda/gemm.h"
#include "cuda/matvec.h"
#include "cuda/quant_tables.h"
#include "quant/types.h"
#include "util/error.h"
#include "graph_timer.cuh"

using namespace ms;
using namespace ms::cuda;

namespace {

constexpr int kPerGraph = 20, kReps = 11;

double time_us(cudaStream_t s, const std::function<void(int)>& launch) {
  return graph_median_us(s, kPerGraph, kReps, launch);
}

// Random bytes with every f16 field of the block set to a small scale is not
// needed for timing: the kernels do the same work whatever the values (NaN
// included), so the weights are plain random bytes.
std::vector<uint8_t> random_bytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> v(n);
  uint64_t st = (static_cast<uint64_t>(rng()) << 32) | rng() | 1;
  for (auto& b : v) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    b = static_cast<uint8_t>(st);
  }
  return v;
}

struct Copies {
  std::vector<DeviceBuffer> bufs, tables;
  int64_t mat_bytes = 0;
};
Copies make_copies(DType t, int64_t rows, int64_t cols, int n_mats, size_t l2, std::mt19937& rng) {
  Copies c;
  c.mat_bytes = row_bytes(t, cols) * rows;
  const size_t per_copy = static_cast<size_t>(c.mat_bytes) * n_mats;
  const int n = std::min<int>(64, std::max<size_t>(2, (4 * l2 + per_copy - 1) / per_copy));
  const auto host = random_bytes(per_copy, rng);
  for (int i = 0; i < n; ++i) {
    DeviceBuffer b(per_copy, "bench weights");
    MS_CUDA_CHECK(cudaMemcpy(b.get(), host.data(), per_copy, cudaMemcpyHostToDevice));
    std::vector<const void*> tbl(n_mats);
    for (int m = 0; m < n_mats; ++m) tbl[m] = b.as<uint8_t>() + m * c.mat_bytes;
    DeviceBuffer dt(sizeof(void*) * n_mats);
    MS_CUDA_CHECK(cudaMemcpy(dt.get(), tbl.data(), sizeof(void*) * n_mats, cudaMemcpyHostToDevice));
    c.bufs.push_back(std::move(b));
    c.tables.push_back(std::move(dt));
  }
  return c;
}

}  // namespace

int main() {
  try {
    std::string why;
    if (device_count(&why) == 0) {
      std::printf("quant_types_bench: no CUDA device (%s)\n", why.c_str());
      return 1;
    }
    const DeviceInfo info = device_info(0);
    prepare_quant_tables();  // before the graph captures
    std::printf("# quant types bench\n\ndevice: %s\n\n", describe(info).c_str());
    std::printf("| type | bits/weight | ffn gate 768x2048 x8 experts: us | GB/s | attn q 4096x2048: us | GB/s | "
                "int8 GEMM 4096x2048 n=512: us | vs q4_K |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
    Stream s;
    std::mt19937 rng(7);
    const int64_t n_max = 512, k_max = 2048;
    std::vector<float> x(static_cast<size_t>(n_max * k_max));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (auto& v : x) v = u(rng);
    DeviceBuffer dx(sizeof(float) * x.size()), xq(q8act_bytes(k_max, n_max)), y(sizeof(float) * 4096 * n_max);
    MS_CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), sizeof(float) * x.size(), cudaMemcpyHostToDevice));
    const int n_exp = 8;
    std::vector<int32_t> ids(n_exp);
    for (int i = 0; i < n_exp; ++i) ids[i] = i;
    DeviceBuffer dids(sizeof(int32_t) * n_exp);
    MS_CUDA_CHECK(cudaMemcpy(dids.get(), ids.data(), sizeof(int32_t) * n_exp, cudaMemcpyHostToDevice));
    double q4k_gemm = 0;
    for (DType t : {DType::Q4_K, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K,
                    DType::TQ1_0, DType::TQ2_0, DType::IQ4_NL, DType::IQ4_XS, DType::IQ2_XXS, DType::IQ2_XS,
                    DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S, DType::IQ1_S, DType::IQ1_M}) {
      const TypeInfo& ti = type_info(t);
      const double bpw = 8.0 * static_cast<double>(ti.type_size) / static_cast<double>(ti.block_size);
      MatvecInput in;
      in.q8 = q8act_view(xq.get(), k_max, 1);
      quantize_q8act(dx.as<float>(), k_max, 1, in.q8, s);
      // 8 experts of the FFN gate (768 x 2048) through a slot table
      const Copies fe = make_copies(t, 768, 2048, n_exp, info.l2_bytes, rng);
      const double ffn_us = time_us(s, [&](int i) {
        MatrixSet m;
        m.type = t;
        m.rows = 768;
        m.cols = 2048;
        m.table = fe.tables[i % fe.tables.size()].as<const void* const>();
        MatvecGroups g;
        g.max_groups = n_exp;
        g.x_div = n_exp;
        g.expert = dids.as<int32_t>();
        matvec(m, in, g, y.as<float>(), 768, nullptr, s);
      });
      // one dense matrix
      const Copies at = make_copies(t, 4096, 2048, 1, info.l2_bytes, rng);
      const double attn_us = time_us(s, [&](int i) {
        linear(t, at.bufs[i % at.bufs.size()].get(), 4096, 2048, in, 1, y.as<float>(), nullptr, s);
      });
      // prompt batch
      double gemm_us = 0;
      if (matmul_int8_supported(t) && info.cc_major >= 8) {
        in.q8 = q8act_view(xq.get(), k_max, n_max);
        quantize_q8act(dx.as<float>(), k_max, n_max, in.q8, s);
        gemm_us = time_us(s, [&](int i) {
          MatrixSet m;
          m.type = t;
          m.rows = 4096;
          m.cols = 2048;
          m.base = at.bufs[i % at.bufs.size()].get();
          MatvecGroups g;
          g.per_group = static_cast<int>(n_max);
          matmul(m, in, g, y.as<float>(), 4096, nullptr, s);
        });
        if (t == DType::Q4_K) q4k_gemm = gemm_us;
      }
      const double ffn_mb = static_cast<double>(fe.mat_bytes) * n_exp / 1e6, attn_mb = at.mat_bytes / 1e6;
      char gemm_cell[64] = "matvec path", ratio[32] = "-";
      if (gemm_us > 0) {
        std::snprintf(gemm_cell, sizeof gemm_cell, "%.1f", gemm_us);
        if (q4k_gemm > 0) std::snprintf(ratio, sizeof ratio, "%.2fx", gemm_us / q4k_gemm);
      }
      std::printf("| %s | %.2f | %.1f | %.0f | %.1f | %.0f | %s | %s |\n", ti.name, bpw, ffn_us, ffn_mb / ffn_us * 1e3,
                  attn_us, attn_mb / attn_us * 1e3, gemm_cell, ratio);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quant_types_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
