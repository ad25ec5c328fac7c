#include "cli/backend_choice.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "engine/cpu_backend.h"
#include "util/error.h"

#ifdef MOESTREAM_HAVE_CUDA
#include "cuda/backend/cuda_backend.h"
#include "cuda/device.h"
#include "cuda/expert_ffn.h"
#include "cuda/gemm.h"
#endif

namespace ms::cli {
namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string s = line.substr(colon + 1);
        const size_t b = s.find_first_not_of(" \t");
        return b == std::string::npos ? std::string("unknown CPU") : s.substr(b);
      }
    }
  return "unknown CPU";
}

std::unique_ptr<Backend> make_cpu(const BackendSetup& s, const ModelWeights& w, ThreadPool& pool) {
  CpuBackend::Options o;
  if (s.max_batch > 0) o.max_batch = s.max_batch;
  return std::make_unique<CpuBackend>(w, pool, o);
}

}  // namespace

bool cuda_built() {
#ifdef MOESTREAM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

void add_kv_type_option(CLI::App& sub, KvType* type) {
  sub.add_option_function<std::string>(
         "--kv-type", [type](const std::string& name) { *type = name == "f32" ? KvType::F32 : KvType::F16; },
         "KV cache type: f16 (default) or f32 (unrounded K/V, for numerical parity checks; twice the memory)")
      ->check(CLI::IsMember({"f16", "f32"}))
      ->option_text("f16|f32");
}

std::unique_ptr<Backend> make_backend(const BackendSetup& s, const ModelWeights& w, ThreadPool& pool) {
  if (s.requested == "cpu") return make_cpu(s, w, pool);
  if (!s.requested.empty() && s.requested != "cuda")
    throw Error("--backend " + s.requested + ": unknown backend (cpu or cuda)");
#ifdef MOESTREAM_HAVE_CUDA
  std::string why;
  if (cuda::device_count(&why) == 0) {
    if (!s.quiet) std::fprintf(stderr, "moestream: no usable CUDA device (%s); running on the CPU\n", why.c_str());
    return make_cpu(s, w, pool);
  }
  CudaBackend::Options o;
  o.kv_f32 = s.kv_type == KvType::F32;  // the device cache is sized now; make_cache could switch it later
  if (s.ctx > 0) o.ctx = s.ctx;
  if (s.max_batch > 0) o.max_batch = s.max_batch;
  // For A/B measurements: the prefill expert path, decode with or without graphs
  // (see CudaBackend::Options).
  if (const char* g = std::getenv("MOESTREAM_CUDA_GROUPED_EXPERTS")) o.grouped_matmul_experts = std::string(g) == "1";
  if (const char* g = std::getenv("MOESTREAM_CUDA_NO_GRAPH")) o.use_graph = std::string(g) != "1";
  if (const char* g = std::getenv("MOESTREAM_CUDA_NO_FUSE")) o.fused_decode = std::string(g) != "1";
  if (const char* g = std::getenv("MOESTREAM_CUDA_FUSE_MOE")) o.fused_moe_decode = std::string(g) == "1";
  if (const char* g = std::getenv("MOESTREAM_CUDA_NO_FUSE_PREFILL")) o.fused_prefill = std::string(g) != "1";
  if (const char* g = std::getenv("MOESTREAM_CUDA_EXPERT_TILES")) cuda::expert_ffn_set_balanced_tiles(std::string(g) != "0");
  if (const char* g = std::getenv("MOESTREAM_CUDA_GEMM_BN")) cuda::matmul_set_int8_tile(std::atoi(g));
  try {
    return std::make_unique<CudaBackend>(w, o);
  } catch (const Error& e) {
    if (s.requested == "cuda") throw;  // asked for explicitly: say why it cannot run
    if (!s.quiet) std::fprintf(stderr, "moestream: the CUDA backend cannot run this model (%s); running on the CPU\n", e.what());
    return make_cpu(s, w, pool);
  }
#else
  if (s.requested == "cuda" && !s.quiet)
    std::fprintf(stderr, "moestream: this build has no CUDA backend; running on the CPU\n");
  return make_cpu(s, w, pool);
#endif
}

std::string backend_device(const Backend& be, const ThreadPool& pool) {
#ifdef MOESTREAM_HAVE_CUDA
  if (const auto* cb = dynamic_cast<const CudaBackend*>(&be)) return cb->device_description();
#else
  (void)be;
#endif
  return cpu_model_name() + ", " + std::to_string(pool.size()) + " threads";
}

}  // namespace ms::cli
