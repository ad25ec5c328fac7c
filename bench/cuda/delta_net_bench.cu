// The Gated DeltaNet prompt recurrence of one layer on one GPU, at the shape
// of Qwen3.6-35B-A3B (16 key heads, 32 value heads, heads of 128): the
// token-by-token kernel (delta_rule) against the chunked form
// (delta_rule_chunked, 3xTF32 and plain tf32) for prompts of 64 .. 8192
// tokens, after checking that the chunked outputs and state agree with the
// token-by-token ones from the same state. Prints a markdown table.
//
// Timing: CUDA events around each launch, 2 warm-up launches, the median of
// `reps` (fewer for the slow cases). The inputs (q/k/v rows, gates) are
// random, q and k l2-normalised by the engine's delta_prepare_qk.
//
// Build (after a CMake build of libmoestream_cuda with CUDA on, as
// tools/gpu_check.sh builds kernel_bench):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Isrc bench/cuda/delta_net_bench.cu \
//        <libmoestream_cuda.a without its backend objects> libms_util.a -o delta_net_bench
// Usage: delta_net_bench [tokens ...]   (default 16 32 64 128 256 512 1024 2048 8192)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "cpu/delta_net.h"
#include "cuda/delta_net.h"
#include "cuda/device.h"
#include "util/error.h"

using namespace ms;
using namespace ms::cuda;

namespace {

std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

DeviceBuffer upload(const std::vector<float>& v) {
  DeviceBuffer b(v.size() * sizeof(float), "bench buffer");
  MS_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  return b;
}

std::vector<float> download(const DeviceBuffer& b, size_t n) {
  MS_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> v(n);
  MS_CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

// Largest |a - b| over the largest |b|.
double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double mx = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    mx = std::max(mx, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return mx / scale;
}

// Median microseconds of one call of `fn` on stream s.
double median_us(cudaStream_t s, int reps, const std::function<void()>& fn) {
  Event a, b;
  fn();
  fn();
  MS_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    a.record(s);
    fn();
    b.record(s);
    MS_CUDA_CHECK(cudaEventSynchronize(b.get()));
    float ms = 0;
    MS_CUDA_CHECK(cudaEventElapsedTime(&ms, a.get(), b.get()));
    t.push_back(1000.0 * ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<int> lengths;
    for (int i = 1; i < argc; ++i) lengths.push_back(std::atoi(argv[i]));
    if (lengths.empty()) lengths = {16, 32, 64, 128, 256, 512, 1024, 2048, 8192};
    const DeltaNetShape sh{16, 32, 128, 128};
    cudaDeviceProp prop{};
    MS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("Gated DeltaNet prompt recurrence, one layer, Qwen3.6-35B-A3B shape (%d key heads, %d value heads, "
                "heads %d/%d), %s, %d SMs\n\n",
                sh.n_k_heads, sh.n_v_heads, sh.head_k, sh.head_v, prop.name, prop.multiProcessorCount);
    std::printf("| tokens | token by token (us) | chunked 3xTF32 (us) | chunked tf32 (us) | speed-up 3xTF32 | "
                "max rel diff 3xTF32 / tf32 (out, state) |\n|---:|---:|---:|---:|---:|---|\n");
    Stream stream;
    cudaStream_t s = stream.get();
    std::mt19937 rng(1);
    for (int n : lengths) {
      if (n < 1) continue;
      auto qkv = random_floats(static_cast<size_t>(n) * sh.conv_dim(), rng, -1.f, 1.f);
      const auto g = random_floats(static_cast<size_t>(n) * sh.n_v_heads, rng, -0.5f, 0.f);
      const auto beta = random_floats(g.size(), rng, 0.f, 1.f);
      const auto S0 = random_floats(static_cast<size_t>(sh.state_elems()), rng, -0.3f, 0.3f);
      DeviceBuffer dq = upload(qkv), dg = upload(g), db = upload(beta), dS = upload(S0);
      DeviceBuffer S_tok = upload(S0), S_ch = upload(S0), S_tf = upload(S0);
      const size_t outs = static_cast<size_t>(n) * sh.value_dim();
      DeviceBuffer o_tok(outs * sizeof(float), "out"), o_ch(outs * sizeof(float), "out"),
          o_tf(outs * sizeof(float), "out");
      delta_prepare_qk(dq.as<float>(), sh.conv_dim(), n, sh, 1e-6f, s);
      // Agreement from the same state first.
      delta_rule(dq.as<float>(), sh.conv_dim(), dg.as<float>(), db.as<float>(), n, sh, S_tok.as<float>(),
                 o_tok.as<float>(), s);
      delta_rule_chunked(dq.as<float>(), sh.conv_dim(), dg.as<float>(), db.as<float>(), n, sh, S_ch.as<float>(),
                         o_ch.as<float>(), s);
      delta_rule_chunked(dq.as<float>(), sh.conv_dim(), dg.as<float>(), db.as<float>(), n, sh, S_tf.as<float>(),
                         o_tf.as<float>(), s, DeltaPrecision::kTf32);
      MS_CUDA_CHECK(cudaStreamSynchronize(s));
      const auto ot = download(o_tok, outs), oc = download(o_ch, outs), of = download(o_tf, outs);
      const auto st = download(S_tok, S0.size()), sc = download(S_ch, S0.size()), sf = download(S_tf, S0.size());
      const double e_ch = max_rel(oc, ot), es_ch = max_rel(sc, st), e_tf = max_rel(of, ot), es_tf = max_rel(sf, st);
      // Then the times (each call carries the state on: the values stay bounded).
      const int reps = n >= 4096 ? 7 : 21;
      const double t_tok = median_us(s, reps, [&] {
        delta_rule(dq.as<float>(), sh.conv_dim(), dg.as<float>(), db.as<float>(), n, sh, dS.as<float>(),
                   o_tok.as<float>(), s);
      });
      const double t_ch = median_us(s, reps, [&] {
        delta_rule_chunked(dq.as<float>(), sh.conv_dim(), dg.as<float>(), db.as<float>(), n, sh, dS.as<float>(),
                           o_ch.as<float>(), s);
      });
      const double t_tf = median_us(s, reps, [&] {
        delta_rule_chunked(dq.as<float>(), sh.conv_dim(), dg.as<float>(), db.as<float>(), n, sh, dS.as<float>(),
                           o_tf.as<float>(), s, DeltaPrecision::kTf32);
      });
      std::printf("| %d | %.1f | %.1f | %.1f | %.2fx | %.1e, %.1e / %.1e, %.1e |\n", n, t_tok, t_ch, t_tf,
                  t_tok / t_ch, e_ch, es_ch, e_tf, es_tf);
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "delta_net_bench: %s\n", e.what());
    return 1;
  }
}
