// Kernel harness for the decode path on one GPU (llm.c style): times each
// quantized matvec at the shapes of Qwen3-30B-A3B (and a few other kernels),
// reports GB/s of weight bytes beside the measured copy / read bandwidth, and
// compares kernel variants (the dp4a kernel of src/cuda against a variant that
// keeps f32 activations and dequantizes weights to float) after checking they
// agree.
//
// Timing (graph_timer.cuh, shared with quant_types_bench.cu): each
// measurement is a CUDA graph of kPerGraph back-to-back launches (no CPU
// launch overhead in the numbers), replayed kReps times; the median replay /
// kPerGraph is reported. Launches rotate over copies of the weights totalling
// more than 4x the L2 cache, so weights come from HBM.
//
// Build (tools/gpu_check.sh does this after the CMake build):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Isrc bench/cuda/kernel_bench.cu \
//        build-gpu/libmoestream_cuda.a build-gpu/libms_quant.a build-gpu/libms_util.a -lcublas -o kernel_bench
// Usage: kernel_bench [--quick]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda/attention.h"
#include "cuda/quant_dot.cuh"
#include "cuda/device.h"
#include "cuda/expert_ffn.h"
#include "cuda/gemm.h"
#include "cuda/matvec.h"
#include "cuda/ops.h"
#include "quant/half.h"
#include "quant/types.h"
#include "util/error.h"
#include "graph_timer.cuh"

using namespace ms;
using namespace ms::cuda;

namespace {

int kPerGraph = 20;
int kReps = 15;

// Median time of one launch in microseconds (graph_timer.cuh).
double time_us(cudaStream_t s, const std::function<void(int)>& launch) {
  return graph_median_us(s, kPerGraph, kReps, launch);
}

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Random weights with sane scales (as the tests make them). Fast (xorshift,
// a table of float values) since the output matrix is up to 600 MB.
std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int64_t rb = row_bytes(t, cols);
  std::vector<uint8_t> w(static_cast<size_t>(rb * rows));
  uint64_t st = (static_cast<uint64_t>(rng()) << 32) | rng() | 1;
  auto next = [&st]() {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return st;
  };
  if (t == DType::F16 || t == DType::BF16 || t == DType::F32) {
    std::uniform_real_distribution<float> f(-1.f, 1.f);
    float table[4096];
    for (float& v : table) v = f(rng);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = table[next() & 4095];
      if (t == DType::F16) put_f16(&w[i * 2], v);
      else if (t == DType::BF16) { const uint16_t h = f32_to_bf16(v); std::memcpy(&w[i * 2], &h, 2); }
      else std::memcpy(&w[i * 4], &v, 4);
    }
    return w;
  }
  size_t i = 0;
  for (; i + 8 <= w.size(); i += 8) {
    const uint64_t v = next();
    std::memcpy(&w[i], &v, 8);
  }
  for (; i < w.size(); ++i) w[i] = static_cast<uint8_t>(next());
  const TypeInfo& info = type_info(t);
  for (int64_t b = 0; b < rows * cols / info.block_size; ++b) {
    uint8_t* blk = &w[b * info.type_size];
    if (t == DType::Q4_0 || t == DType::Q8_0) put_f16(blk, 0.01f);
    if (t == DType::Q4_K || t == DType::Q5_K) { put_f16(blk, 0.002f); put_f16(blk + 2, 0.002f); }
    if (t == DType::Q6_K) put_f16(blk + 208, 0.001f);
    if (t == DType::MXFP4) blk[0] = 120;
  }
  return w;
}

// ---------------------------------------------------------------- variant B
// Q4_K with f32 activations staged in shared memory; weights dequantized to
// float on the fly (no activation quantization). Same geometry as the dp4a
// kernel: TPR lanes per row, items = pairs of 32-element sub-blocks.
template <int TPR>
__global__ void __launch_bounds__(128) q4k_f32act_kernel(const uint8_t* __restrict__ w, int64_t rows,
                                                         int64_t row_bytes, int n_items, const float* __restrict__ x,
                                                         int64_t cols, float* __restrict__ y) {
  extern __shared__ float xs[];
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) xs[i] = x[i];
  __syncthreads();
  const int lane = threadIdx.x % TPR;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (128 / TPR) + threadIdx.x / TPR;
  const int64_t rr = r < rows ? r : rows - 1;
  const uint8_t* row = w + rr * row_bytes;
  float acc = 0.f;
  for (int it = lane; it < n_items; it += TPR) {
    const int b = it >> 2, p = it & 3;
    const uint8_t* blk = row + b * 144;
    const uint4 q0 = dev::ld16(blk + 16 + 32 * p), q1 = dev::ld16(blk + 32 + 32 * p);
    const uint32_t dd = dev::ld4(blk), s0 = dev::ld4(blk + 4), s1 = dev::ld4(blk + 8), s2 = dev::ld4(blk + 12);
    const float d = dev::f16_bits_to_f32(dd), dmin = dev::f16_bits_to_f32(dd >> 16);
    const int j = (2 * p) & 3;
    float sc[2], mn[2];
    for (int h = 0; h < 2; ++h) {
      uint32_t s, m;
      if (p < 2) {
        s = dev::byte_of(s0, j + h) & 63;
        m = dev::byte_of(s1, j + h) & 63;
      } else {
        s = (dev::byte_of(s2, j + h) & 15) | ((dev::byte_of(s0, j + h) >> 6) << 4);
        m = (dev::byte_of(s2, j + h) >> 4) | ((dev::byte_of(s1, j + h) >> 6) << 4);
      }
      sc[h] = d * static_cast<float>(s);
      mn[h] = dmin * static_cast<float>(m);
    }
    const uint32_t wq[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    const float* xl = xs + b * 256 + 64 * p;
    float dl = 0.f, dh = 0.f, sl = 0.f, sh = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 a = *reinterpret_cast<const float4*>(xl + 4 * i);
      const float4 c = *reinterpret_cast<const float4*>(xl + 32 + 4 * i);
      const uint32_t v = wq[i];
      dl += a.x * (v & 15) + a.y * ((v >> 8) & 15) + a.z * ((v >> 16) & 15) + a.w * ((v >> 24) & 15);
      dh += c.x * ((v >> 4) & 15) + c.y * ((v >> 12) & 15) + c.z * ((v >> 20) & 15) + c.w * ((v >> 28) & 15);
      sl += a.x + a.y + a.z + a.w;
      sh += c.x + c.y + c.z + c.w;
    }
    acc += sc[0] * dl + sc[1] * dh - mn[0] * sl - mn[1] * sh;
  }
  for (int o = TPR / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0 && r < rows) y[r] = acc;
}

void launch_q4k_f32act(const void* w, int64_t rows, int64_t cols, const float* x, float* y, cudaStream_t s) {
  const int n_items = static_cast<int>(cols / 64);
  const int64_t rb = row_bytes(DType::Q4_K, cols);
  const size_t smem = sizeof(float) * cols;
  if (n_items > 16) {
    q4k_f32act_kernel<32><<<static_cast<unsigned>((rows + 3) / 4), 128, smem, s>>>(
        static_cast<const uint8_t*>(w), rows, rb, n_items, x, cols, y);
  } else {
    q4k_f32act_kernel<16><<<static_cast<unsigned>((rows + 7) / 8), 128, smem, s>>>(
        static_cast<const uint8_t*>(w), rows, rb, n_items, x, cols, y);
  }
  MS_CUDA_CHECK_LAUNCH();
}

// Pure read bandwidth: sum of a large buffer with 16-byte loads.
__global__ void read_kernel(const uint4* __restrict__ p, size_t n, unsigned* out) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *out = acc;  // keeps the loads alive
}

struct Weights {
  std::vector<DeviceBuffer> copies;  // each holds n_mats matrices back to back
  std::vector<DeviceBuffer> tables;  // per copy: device table of matrix pointers
  int64_t mat_bytes = 0;
};

Weights make_weights(DType t, int64_t rows, int64_t cols, int n_mats, size_t l2, std::mt19937& rng) {
  Weights w;
  w.mat_bytes = row_bytes(t, cols) * rows;
  const size_t per_copy = static_cast<size_t>(w.mat_bytes) * n_mats;
  int n_copies = static_cast<int>(std::max<size_t>(2, (4 * l2 + per_copy - 1) / per_copy));
  n_copies = std::min(n_copies, 64);
  const auto host = random_weights(t, rows, cols, rng);
  for (int c = 0; c < n_copies; ++c) {
    DeviceBuffer b(per_copy, "bench weights");
    for (int m = 0; m < n_mats; ++m)
      MS_CUDA_CHECK(cudaMemcpy(b.as<uint8_t>() + m * w.mat_bytes, host.data(), w.mat_bytes, cudaMemcpyHostToDevice));
    std::vector<const void*> tbl(n_mats);
    for (int m = 0; m < n_mats; ++m) tbl[m] = b.as<uint8_t>() + m * w.mat_bytes;
    DeviceBuffer dt(sizeof(void*) * n_mats);
    MS_CUDA_CHECK(cudaMemcpy(dt.get(), tbl.data(), sizeof(void*) * n_mats, cudaMemcpyHostToDevice));
    w.copies.push_back(std::move(b));
    w.tables.push_back(std::move(dt));
  }
  return w;
}

struct Shape {
  const char* name;
  int64_t rows, cols;
  int n_mats;
};

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (quick) { kPerGraph = 10; kReps = 7; }
  try {
    std::string why;
    if (device_count(&why) == 0) {
      std::printf("kernel_bench: no CUDA device (%s)\n", why.c_str());
      return 1;
    }
    const DeviceInfo info = device_info(0);
    std::printf("# moestream kernel bench\n\ndevice: %s\n\n", describe(info).c_str());
    Stream s;
    std::mt19937 rng(1);

    // ---------------------------------------------------------- roofline
    const size_t bw_bytes = size_t{1} << 30;
    DeviceBuffer src(bw_bytes), dst(bw_bytes), sink(16);
    MS_CUDA_CHECK(cudaMemset(src.get(), 1, bw_bytes));
    const double copy_us = time_us(s, [&](int) {
      MS_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bw_bytes, cudaMemcpyDeviceToDevice, s));
    });
    const double copy_gbs = 2.0 * bw_bytes / copy_us / 1e3;  // read + write
    const double read_us = time_us(s, [&](int) {
      read_kernel<<<info.sm_count * 8, 512, 0, s>>>(src.as<uint4>(), bw_bytes / 16, sink.as<unsigned>());
    });
    const double read_gbs = bw_bytes / read_us / 1e3;
    std::printf("| bandwidth | GB/s |\n|---|---:|\n");
    std::printf("| device-to-device copy (read+write bytes) | %.0f |\n", copy_gbs);
    std::printf("| read-only kernel (16-byte loads) | %.0f |\n\n", read_gbs);
    src = DeviceBuffer();
    dst = DeviceBuffer();

    // ---------------------------------------------------------- matvec table
    const std::vector<Shape> shapes = {
        {"ffn gate/up, 8 experts", 768, 2048, 8},
        {"ffn down, 8 experts", 2048, 768, 8},
        {"attn q", 4096, 2048, 1},
        {"attn o", 2048, 4096, 1},
        {"output", 151936, 2048, 1},
    };
    const std::vector<DType> types = {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0,
                                      DType::Q4_0, DType::MXFP4, DType::BF16, DType::F16};
    std::printf("Quantized matvec (one token), Qwen3-30B-A3B shapes. GB/s = weight bytes / time; "
                "%% = of the read-only bandwidth.\n\n");
    std::printf("| shape | rows x cols x mats | type | MB | us | GB/s | %% read bw |\n|---|---|---|---:|---:|---:|---:|\n");
    DeviceBuffer xbuf(sizeof(float) * 4096), xq(q8act_bytes(4096, 1)), ybuf(sizeof(float) * 151936 * 8);
    {
      std::vector<float> x(4096);
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      for (auto& v : x) v = u(rng);
      MS_CUDA_CHECK(cudaMemcpy(xbuf.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    }
    double q4k_attn_mv_us = 0;  // q, k, v, o matvecs, for the per-token estimate
    double q4k_output_us = 0;
    for (const Shape& sh : shapes) {
      for (DType t : types) {
        if (quick && t != DType::Q4_K && t != DType::Q6_K && t != DType::Q8_0) continue;
        const Weights w = make_weights(t, sh.rows, sh.cols, sh.n_mats, info.l2_bytes, rng);
        MatvecInput in;
        in.f32 = xbuf.as<float>();
        if (matvec_takes_q8(t)) {
          in.q8 = q8act_view(xq.get(), sh.cols, 1);
          quantize_q8act(xbuf.as<float>(), sh.cols, 1, in.q8, s);
        }
        std::vector<int32_t> ids(sh.n_mats);
        for (int i = 0; i < sh.n_mats; ++i) ids[i] = i;
        DeviceBuffer dids(sizeof(int32_t) * sh.n_mats);
        MS_CUDA_CHECK(cudaMemcpy(dids.get(), ids.data(), sizeof(int32_t) * sh.n_mats, cudaMemcpyHostToDevice));
        const size_t nc = w.copies.size();
        const double us = time_us(s, [&](int i) {
          MatrixSet m;
          m.type = t;
          m.rows = sh.rows;
          m.cols = sh.cols;
          MatvecGroups g;
          if (sh.n_mats > 1) {
            m.table = w.tables[i % nc].as<const void* const>();
            g.max_groups = sh.n_mats;
            g.x_div = sh.n_mats;
            g.expert = dids.as<int32_t>();
          } else {
            m.base = w.copies[i % nc].get();
          }
          matvec(m, in, g, ybuf.as<float>(), sh.rows, nullptr, s);
        });
        const double mb = static_cast<double>(w.mat_bytes) * sh.n_mats / 1e6;
        const double gbs = mb / us * 1e3;  // MB per us = TB/s
        std::printf("| %s | %lld x %lld x %d | %s | %.1f | %.1f | %.0f | %.0f%% |\n", sh.name,
                    static_cast<long long>(sh.rows), static_cast<long long>(sh.cols), sh.n_mats, type_name(t), mb, us,
                    gbs, 100.0 * gbs / read_gbs);
        if (t == DType::Q4_K) {
          if (sh.rows == 151936) q4k_output_us = us;
          else if (sh.n_mats == 1) q4k_attn_mv_us += us * (sh.rows == 4096 ? 1.25 : 1.0);  // q (+ k, v = 1/4 of q), o
        }
        std::fflush(stdout);
      }
    }

    // ---------------------------------------------------------- variants
    std::printf("\nVariant comparison, Q4_K dense matvec: A = dp4a on int8 activations (src/cuda), "
                "B = f32 activations in shared memory, weights dequantized to float.\n\n");
    std::printf("| rows x cols | A us | B us | A GB/s | B GB/s | max rel diff A-B |\n|---|---:|---:|---:|---:|---:|\n");
    for (const auto& rc : {std::pair<int64_t, int64_t>{6144, 2048}, {4096, 2048}, {2048, 4096}, {16384, 768}, {151936, 2048}}) {
      const int64_t rows = rc.first, cols = rc.second;
      const Weights w = make_weights(DType::Q4_K, rows, cols, 1, info.l2_bytes, rng);
      MatvecInput in;
      in.q8 = q8act_view(xq.get(), cols, 1);
      quantize_q8act(xbuf.as<float>(), cols, 1, in.q8, s);
      DeviceBuffer ya(sizeof(float) * rows), yb(sizeof(float) * rows);
      const size_t nc = w.copies.size();
      const double ua = time_us(s, [&](int i) {
        linear(DType::Q4_K, w.copies[i % nc].get(), rows, cols, in, 1, ya.as<float>(), nullptr, s);
      });
      const double ub = time_us(s, [&](int i) {
        launch_q4k_f32act(w.copies[i % nc].get(), rows, cols, xbuf.as<float>(), yb.as<float>(), s);
      });
      linear(DType::Q4_K, w.copies[0].get(), rows, cols, in, 1, ya.as<float>(), nullptr, s);
      launch_q4k_f32act(w.copies[0].get(), rows, cols, xbuf.as<float>(), yb.as<float>(), s);
      MS_CUDA_CHECK(cudaStreamSynchronize(s));
      std::vector<float> ha(rows), hb(rows);
      MS_CUDA_CHECK(cudaMemcpy(ha.data(), ya.get(), rows * 4, cudaMemcpyDeviceToHost));
      MS_CUDA_CHECK(cudaMemcpy(hb.data(), yb.get(), rows * 4, cudaMemcpyDeviceToHost));
      double scale = 0, diff = 0;
      for (int64_t r = 0; r < rows; ++r) scale = std::max(scale, std::fabs(double(hb[r])));
      for (int64_t r = 0; r < rows; ++r) diff = std::max(diff, std::fabs(double(ha[r]) - hb[r]) / (scale + 1e-30));
      const double mb = static_cast<double>(w.mat_bytes) / 1e6;
      std::printf("| %lld x %lld | %.1f | %.1f | %.0f | %.0f | %.1e |\n", static_cast<long long>(rows),
                  static_cast<long long>(cols), ua, ub, mb / ua * 1e3, mb / ub * 1e3, diff);
      std::fflush(stdout);
    }

    // ---------------------------------------------------------- prompt batches
    std::printf("\nPrompt batch, dense: matvec over N vectors (8 per pass, dp4a) vs tensor-core matmul: f16 WMMA "
                "(f32 activations, weights dequantized element-wise into shared memory) and int8 mma.sync (Q8 "
                "activations, weights unpacked to int8; the kernel matmul() takes when given x.q8); float weights (BF16, "
                "F32) take the f32 SIMT kernel in both matmul columns. TFLOPS = "
                "2*rows*cols*N / time. rel diff: int8 vs matvec, max |a-b| / max |b|.\n\n");
    std::printf("| type | rows x cols | N | matvec us | wmma us | int8 us | matvec TFLOPS | wmma TFLOPS | int8 TFLOPS "
                "| rel diff |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    struct PB { DType t; int64_t rows, cols; std::vector<int> ns; };
    const std::vector<PB> pbs = {
        {DType::Q4_K, 4096, 2048, {8, 32, 128, 512}}, {DType::Q4_K, 2048, 4096, {512}},
        {DType::Q4_K, 768, 2048, {8, 32, 128, 512}},  {DType::Q4_K, 2048, 768, {32, 512}},
        {DType::Q5_K, 4096, 2048, {512}},             {DType::Q6_K, 4096, 2048, {512}},
        {DType::Q8_0, 4096, 2048, {512}},             {DType::Q4_0, 4096, 2048, {512}},
        {DType::MXFP4, 4096, 2048, {512}},
        // float weights: both matmul columns are the f32 SIMT kernel (gemm_float.cu)
        {DType::BF16, 4096, 2048, {32, 512}},         {DType::F32, 2048, 2048, {512}},
    };
    double q4k_q512_us = 0, q4k_o512_us = 0;  // for the prompt estimate
    for (const PB& pb : pbs) {
      if (quick && pb.t != DType::Q4_K) continue;
      const int64_t rows = pb.rows, cols = pb.cols;
      const Weights w = make_weights(pb.t, rows, cols, 1, info.l2_bytes, rng);
      const size_t nc = w.copies.size();
      for (int n : pb.ns) {
        if (quick && n > 128) continue;
        std::vector<float> hx(static_cast<size_t>(n * cols));
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        for (auto& v : hx) v = u(rng);
        DeviceBuffer dx(hx.size() * 4), dq(q8act_bytes(cols, n)), ya(sizeof(float) * rows * n),
            yb(sizeof(float) * rows * n), yc(sizeof(float) * rows * n);
        MS_CUDA_CHECK(cudaMemcpy(dx.get(), hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
        MatvecInput in;
        in.f32 = dx.as<float>();
        in.q8 = q8act_view(dq.get(), cols, n);
        quantize_q8act(dx.as<float>(), cols, n, in.q8, s);
        MatvecInput in_f32;
        in_f32.f32 = dx.as<float>();
        auto run = [&](int i, const MatvecInput& x, float* y) {
          MatrixSet m;
          m.type = pb.t;
          m.rows = rows;
          m.cols = cols;
          m.base = w.copies[i % nc].get();
          MatvecGroups g;
          g.per_group = n;
          matmul(m, x, g, y, rows, nullptr, s);
        };
        const double ua = time_us(s, [&](int i) {
          linear(pb.t, w.copies[i % nc].get(), rows, cols, in, n, ya.as<float>(), nullptr, s);
        });
        const double ub = time_us(s, [&](int i) { run(i, in_f32, yb.as<float>()); });
        const double uc = time_us(s, [&](int i) { run(i, in, yc.as<float>()); });
        run(0, in, yc.as<float>());
        linear(pb.t, w.copies[0].get(), rows, cols, in, n, ya.as<float>(), nullptr, s);
        MS_CUDA_CHECK(cudaStreamSynchronize(s));
        std::vector<float> ha(rows * n), hc(rows * n);
        MS_CUDA_CHECK(cudaMemcpy(ha.data(), ya.get(), ha.size() * 4, cudaMemcpyDeviceToHost));
        MS_CUDA_CHECK(cudaMemcpy(hc.data(), yc.get(), hc.size() * 4, cudaMemcpyDeviceToHost));
        double scale = 0, diff = 0;
        for (float v : ha) scale = std::max(scale, std::fabs(double(v)));
        for (size_t i = 0; i < ha.size(); ++i) diff = std::max(diff, std::fabs(double(ha[i]) - hc[i]));
        diff /= scale + 1e-30;
        if (pb.t == DType::Q4_K && n == 512 && rows == 4096) q4k_q512_us = uc;
        if (pb.t == DType::Q4_K && n == 512 && rows == 2048 && cols == 4096) q4k_o512_us = uc;
        const double flop = 2.0 * rows * cols * n;
        std::printf("| %s | %lld x %lld | %d | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %.1e |\n", type_name(pb.t),
                    static_cast<long long>(rows), static_cast<long long>(cols), n, ua, ub, uc, flop / ua * 1e-6,
                    flop / ub * 1e-6, flop / uc * 1e-6, diff);
        std::fflush(stdout);
      }
    }

    // ---------------------------------------------------------- other decode kernels
    std::printf("\nOther decode kernels (Qwen3-30B-A3B: d_model 2048, 32 q heads / 4 kv heads of 128, "
                "128 experts, k 8, d_ff 768).\n\n| kernel | us |\n|---|---:|\n");
    {
      const int64_t d_model = 2048, d_ff = 768;
      const int n_expert = 128, k = 8;
      // expert FFN, one token: Q4_K gate/up/down from a table of 128 slots
      const Weights gw = make_weights(DType::Q4_K, d_ff, d_model, n_expert, 0, rng);
      const Weights dw = make_weights(DType::Q4_K, d_model, d_ff, n_expert, 0, rng);
      ExpertWeights ew;
      ew.n_expert = n_expert;
      ew.gate = {DType::Q4_K, d_ff, d_model};
      ew.up = {DType::Q4_K, d_ff, d_model};
      ew.down = {DType::Q4_K, d_model, d_ff};
      ew.gate.table = gw.tables[0].as<const void* const>();
      ew.up.table = gw.tables[1].as<const void* const>();
      ew.down.table = dw.tables[0].as<const void* const>();
      std::vector<int32_t> ids(k);
      std::vector<float> wts(k, 1.f / k);
      for (int j = 0; j < k; ++j) ids[j] = (j * 37 + 5) % n_expert;
      DeviceBuffer dids(4 * k), dwts(4 * k), out(4 * d_model * 64), xin(4 * d_model * 64);
      MS_CUDA_CHECK(cudaMemcpy(dids.get(), ids.data(), 4 * k, cudaMemcpyHostToDevice));
      MS_CUDA_CHECK(cudaMemcpy(dwts.get(), wts.data(), 4 * k, cudaMemcpyHostToDevice));
      MS_CUDA_CHECK(cudaMemset(xin.get(), 0, 4 * d_model * 64));
      const size_t sb = expert_ffn_scratch_bytes(ew, 1, k);
      DeviceBuffer scratch(sb);
      const double ffn_us = time_us(s, [&](int) {
        expert_ffn(ew, xin.as<float>(), nullptr, 1, k, dids.as<int32_t>(), dwts.as<float>(), out.as<float>(),
                   out.as<float>(), scratch.get(), sb, s);
      });
      std::printf("| expert FFN, 1 token, k=8, Q4_K (5 launches, weights partly L2-resident) | %.1f |\n", ffn_us);

      // batches through the grouped path: 32 tokens (matvec and GEMM), and a
      // 512-token prompt (GEMM), ids spread over all experts
      double ffn512_us = 0;
      for (int nt : {32, 512}) {
        std::vector<int32_t> bids(static_cast<size_t>(nt) * k);
        std::vector<float> bw(bids.size(), 1.f / k);
        for (int t = 0; t < nt; ++t)
          for (int j = 0; j < k; ++j) bids[t * k + j] = (t * 53 + j * 16 + t / 7) % n_expert;
        DeviceBuffer dbids(4 * bids.size()), dbw(4 * bids.size()), bx(4 * d_model * nt), bout(4 * d_model * nt);
        MS_CUDA_CHECK(cudaMemcpy(dbids.get(), bids.data(), 4 * bids.size(), cudaMemcpyHostToDevice));
        MS_CUDA_CHECK(cudaMemcpy(dbw.get(), bw.data(), 4 * bw.size(), cudaMemcpyHostToDevice));
        {
          std::vector<float> hx(static_cast<size_t>(d_model) * nt);
          std::uniform_real_distribution<float> u(-1.f, 1.f);
          for (auto& v : hx) v = u(rng);
          MS_CUDA_CHECK(cudaMemcpy(bx.get(), hx.data(), 4 * hx.size(), cudaMemcpyHostToDevice));
        }
        const size_t sbn = expert_ffn_scratch_bytes(ew, nt, k);
        DeviceBuffer scr(sbn);
        for (int gemm : {0, 1}) {
          if (nt == 512 && !gemm) continue;
          ExpertWeights path = ew;
          path.gemm_min_tokens = gemm ? 2 : 0;
          const double us = time_us(s, [&](int) {
            expert_ffn(path, bx.as<float>(), nullptr, nt, k, dbids.as<int32_t>(), dbw.as<float>(), bout.as<float>(),
                       bout.as<float>(), scr.get(), sbn, s);
          });
          if (nt == 512) ffn512_us = us;
          const double flop = 2.0 * 3 * d_model * d_ff * nt * k;
          std::printf("| expert FFN, %d tokens, k=8, Q4_K (grouped, %s) | %.1f (%.1f TFLOPS) |\n", nt,
                      gemm ? "int8 GEMM" : "matvec", us, flop / us * 1e-6);
        }
      }
      std::fflush(stdout);

      DeviceBuffer nw(4 * d_model), q8b(q8act_bytes(d_model, 1));
      MS_CUDA_CHECK(cudaMemset(nw.get(), 0, 4 * d_model));
      Q8Act q8 = q8act_view(q8b.get(), d_model, 1);
      const double norm_us = time_us(s, [&](int) {
        rmsnorm(xin.as<float>(), nw.as<float>(), out.as<float>(), 1, d_model, 1e-6f, s, &q8);
      });
      std::printf("| rmsnorm 2048 + q8 | %.1f |\n", norm_us);

      DeviceBuffer logits(4 * n_expert), rid(4 * k), rw(4 * k);
      MS_CUDA_CHECK(cudaMemset(logits.get(), 0, 4 * n_expert));
      const double router_us = time_us(s, [&](int) {
        router_topk(logits.as<float>(), 1, n_expert, k, RouterMode::SoftmaxTopK, true, rid.as<int32_t>(),
                    rw.as<float>(), s);
      });
      std::printf("| router top-8 of 128 | %.1f |\n", router_us);

      AttentionShape as{32, 4, 128, 32768, 1.f / std::sqrt(128.f)};
      DeviceBuffer kc(2 * 4 * 32768 * 128), vc(2 * 4 * 32768 * 128), q(4 * 32 * 128), ao(4 * 32 * 128);
      MS_CUDA_CHECK(cudaMemset(kc.get(), 0, kc.size()));
      MS_CUDA_CHECK(cudaMemset(vc.get(), 0, vc.size()));
      MS_CUDA_CHECK(cudaMemset(q.get(), 0, q.size()));
      MS_CUDA_CHECK(cudaDeviceSynchronize());  // memsets run on the legacy stream, s does not wait for them
      double attn512 = 0;
      for (int len : {128, 512, 4096, 32768}) {
        DeviceBuffer sc(attention_decode_scratch_bytes(as, len));
        MS_CUDA_CHECK(cudaMemset(sc.get(), 0, sc.size()));  // attention.h: zero before first use
        MS_CUDA_CHECK(cudaDeviceSynchronize());
        const double us = time_us(s, [&](int) {
          attention_decode(as, q.as<float>(), kc.as<uint16_t>(), vc.as<uint16_t>(), len, nullptr, ao.as<float>(),
                           sc.get(), s);
        });
        if (len == 512) attn512 = us;
        std::printf("| attention decode, 32/4 heads x 128, kv %d | %.1f |\n", len, us);
      }
      DeviceBuffer pq(4 * 512 * 32 * 128), po(4 * 512 * 32 * 128);
      MS_CUDA_CHECK(cudaMemset(pq.get(), 0, pq.size()));
      const double pre_us = time_us(s, [&](int) {
        attention_prefill(as, pq.as<float>(), kc.as<uint16_t>(), vc.as<uint16_t>(), 512, 0, po.as<float>(), s);
      });
      std::printf("| attention prefill, 512 tokens (flash kernel, f16 cache) | %.1f |\n", pre_us);
      {  // the f32 cache (--kv-type f32): twice the bytes
        DeviceBuffer kf(4 * 4 * 32768 * 128), vf(4 * 4 * 32768 * 128);
        MS_CUDA_CHECK(cudaMemset(kf.get(), 0, kf.size()));
        MS_CUDA_CHECK(cudaMemset(vf.get(), 0, vf.size()));
        MS_CUDA_CHECK(cudaDeviceSynchronize());
        for (int len : {512, 4096, 32768}) {
          DeviceBuffer sc(attention_decode_scratch_bytes(as, len));
          MS_CUDA_CHECK(cudaMemset(sc.get(), 0, sc.size()));  // attention.h: zero before first use
          MS_CUDA_CHECK(cudaDeviceSynchronize());
          const double us = time_us(s, [&](int) {
            attention_decode(as, q.as<float>(), kf.as<float>(), vf.as<float>(), len, nullptr, ao.as<float>(), sc.get(),
                             s);
          });
          std::printf("| attention decode, f32 cache, 32/4 heads x 128, kv %d | %.1f |\n", len, us);
        }
        const double us = time_us(s, [&](int) {
          attention_prefill(as, pq.as<float>(), kf.as<float>(), vf.as<float>(), 512, 0, po.as<float>(), s);
        });
        std::printf("| attention prefill, f32 cache, 512 tokens | %.1f |\n", us);
      }

      // Per-token kernel-time estimate for tg (48 layers), all Q4_K, no launch gaps:
      // per layer 2 rmsnorm + q/k/v/o + attention + router + expert FFN; + output head.
      const double layer = 2 * norm_us + q4k_attn_mv_us + attn512 + router_us + ffn_us;
      const double est = 48 * layer + q4k_output_us;
      std::printf("\nRough decode estimate (kernel time only, Q4_K everywhere, kv 512): per layer 2 rmsnorm + "
                  "q/k/v/o matvecs %.1f us + attention + router + expert FFN = %.1f us; token = 48 layers + output "
                  "head = %.0f us -> %.0f tok/s (target 297). Not counted: rope, q/k norms, kv append, launch "
                  "gaps between graph nodes of different kernels.\n",
                  q4k_attn_mv_us, layer, est, 1e6 / est);
      if (q4k_q512_us > 0 && ffn512_us > 0) {
        const double player = 1.25 * q4k_q512_us + q4k_o512_us + ffn512_us + pre_us;
        std::printf("\nRough pp512 estimate (kernel time only, Q4_K, int8 GEMM): per layer q/k/v %.1f + o %.1f + "
                    "expert FFN %.1f + attention prefill %.1f = %.1f us; 48 layers = %.1f ms -> %.0f tok/s (target "
                    "8000). Not counted: norms, rope, router, kv append, quantize, embedding, output head.\n",
                    1.25 * q4k_q512_us, q4k_o512_us, ffn512_us, pre_us, player, 48 * player / 1e3,
                    512.0 / (48 * player) * 1e6);
      }
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "kernel_bench: %s\n", e.what());
    return 1;
  }
}
