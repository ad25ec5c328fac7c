// CUDA implementations of the registry's ops, reading the Problem fields
// that ops_quant.cpp / ops_cpu.cpp document, plus the ops only the GPU has
// (router top-k, KV append, the gated-hybrid element-wise ops, the expert
// combine, the SwiGLU matvec pair), each with its one scalar reference here.
// Every output buffer is NaN-poisoned on the device before the launch.
#include "backend_ops/registry.h"

#ifndef MOESTREAM_HAVE_CUDA
namespace ms::backend_ops {
void register_cuda_impls(Registry&) {}
}  // namespace ms::backend_ops
#else
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend_ops/case_params.h"
#include "backend_ops/inputs.h"
#include "backend_ops/quant_cases.h"
#include "cpu/ops.h"
#include "cuda/attention.h"
#include "cuda/delta_net.h"
#include "cuda/device.h"
#include "cuda/expert_ffn.h"
#include "cuda/gated_ops.h"
#include "cuda/gemm.h"
#include "cuda/matvec.h"
#include "cuda/ops.h"
#include "cuda/cuda_test_util.h"
#include "quant/gpu_q8.h"

namespace ms::backend_ops {
namespace {

using cuda::DeviceBuffer;
using cuda::test::download;
using cuda::test::upload;

// One stream for every launch, made on first use (never destroyed: static
// destruction may run after the CUDA runtime has shut down).
cudaStream_t stream() {
  static cuda::Stream* s = new cuda::Stream();
  return s->get();
}

std::string no_device() {
  static const std::string why = [] {
    std::string w;
    return cuda::device_count(&w) == 0 ? "no CUDA device (" + w + ")" : std::string();
  }();
  return why;
}

std::string no_int8_mma() {
  const std::string d = no_device();
  if (!d.empty()) return d;
  return cuda::device_info(0).cc_major >= 8 ? "" : "the int8 tensor-core path needs sm_80+";
}

DeviceBuffer poisoned_dev(size_t n) { return cuda::test::poisoned(n); }

std::vector<float> result(const DeviceBuffer& b, size_t n) { return download<float>(b.get(), n); }

Impl gpu_impl(std::string name, std::function<std::vector<float>(const Case&, const Problem&)> run,
              double tol = -1, std::function<std::string()> unavailable = no_device) {
  Impl i;
  i.name = std::move(name);
  i.gpu = true;
  i.unavailable = std::move(unavailable);
  i.run = std::move(run);
  i.tol = tol;
  return i;
}

Case make_case(std::string label, std::map<std::string, int64_t> p, uint32_t seed) {
  Case c;
  c.label = std::move(label);
  c.p = std::move(p);
  c.seed = seed;
  return c;
}

// ---------------------------------------------------------------- matvec / matmul
cuda::MatrixSet dense_matrix(DType t, int64_t rows, int64_t cols, const void* base) {
  cuda::MatrixSet m;
  m.type = t;
  m.rows = rows;
  m.cols = cols;
  m.base = base;
  return m;
}

// Float weights: f32 activations (vec_dot_<F32|F16|BF16>). Quantized weights:
// the activations quantized on the device (quantize_q8act, bit-identical to
// quantize_row_gpu_q8_ref: dot_q8_<T>). Output [nvec][rows], the residual
// (where the case has one) added by the kernel.
std::vector<float> run_matvec(const Case& c, const Problem& p, bool gemm) {
  const DType t = case_type(c);
  const int64_t n = c.at("n"), rows = c.at("rows"), nvec = c.at("nvec");
  const std::vector<uint8_t> w = dense_rows(c, p);
  DeviceBuffer dw = upload(w), dx = upload(p.f.at("x")), y = poisoned_dev(static_cast<size_t>(rows * nvec));
  DeviceBuffer q8buf, dres = upload(c.at("res") ? p.f.at("res") : std::vector<float>{});
  const float* res = c.at("res") ? dres.as<float>() : nullptr;
  cuda::MatvecInput in;
  in.f32 = dx.as<float>();
  if (cuda::matvec_takes_q8(t)) {
    q8buf = DeviceBuffer(cuda::q8act_bytes(n, nvec));
    in.q8 = cuda::q8act_view(q8buf.get(), n, nvec);
    cuda::quantize_q8act(dx.as<float>(), n, nvec, in.q8, stream());
    in.f32 = nullptr;
  }
  if (gemm) {
    cuda::MatvecGroups g;
    g.per_group = static_cast<int>(nvec);
    cuda::matmul(dense_matrix(t, rows, n, dw.get()), in, g, y.as<float>(), rows, res, stream());
  } else {
    cuda::linear(t, dw.get(), rows, n, in, static_cast<int>(nvec), y.as<float>(), res, stream());
  }
  return result(y, static_cast<size_t>(rows * nvec));
}

void add_matvec_impls(Registry& reg) {
  for (DType t : dot_types()) {
    if (!cuda::matvec_supported(t)) continue;
    const std::string op = cuda::matvec_takes_q8(t) ? std::string("dot_q8_") + type_name(t)
                                                    : std::string("vec_dot_") + type_name(t);
    if (!reg.has(op)) continue;
    reg.add_impl(op, gpu_impl("cuda_matvec", [](const Case& c, const Problem& p) { return run_matvec(c, p, false); }));
    if (!cuda::matmul_supported(t)) continue;
    if (!cuda::matvec_takes_q8(t)) {
      reg.add_impl(op, gpu_impl("cuda_matmul_f32", [](const Case& c, const Problem& p) { return run_matvec(c, p, true); }));
    } else if (cuda::matmul_int8_supported(t)) {
      reg.add_impl(op, gpu_impl("cuda_matmul_int8", [](const Case& c, const Problem& p) { return run_matvec(c, p, true); },
                                -1, no_int8_mma));
    }
  }
}

// SwiGLU pair with GPU Q8 activations: y = silu(Wg x) * (Wu x); reference
// from vec_dot_gpu_q8_ref. b["gate"], b["up"] dense [rows][n]; f["x"] [nvec][n].
void add_matvec_glu(Registry& reg) {
  Op op;
  op.name = "matvec_glu_q8";
  uint32_t seed = 900;
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::Q4_0, DType::MXFP4, DType::IQ2_XS, DType::Q3_K})
    for (auto [n, rows, nvec] : {std::tuple<int64_t, int64_t, int64_t>{256, 7, 1}, {768, 33, 3}})
      if (n % type_info(t).block_size == 0)
        op.cases.push_back(make_case(std::string(type_name(t)) + " n=" + std::to_string(n) + " rows=" +
                                         std::to_string(rows) + " nvec=" + std::to_string(nvec),
                                     {{"type", static_cast<int64_t>(t)}, {"n", n}, {"rows", rows}, {"nvec", nvec}},
                                     seed++));
  op.make = [](const Case& c) {
    const DType t = case_type(c);
    const int64_t n = c.at("n"), rows = c.at("rows"), nvec = c.at("nvec");
    std::mt19937 rng(c.seed);
    Problem p;
    p.b["gate"] = weights(t, rows, n, row_bytes(t, n), rng, false);
    p.b["up"] = weights(t, rows, n, row_bytes(t, n), rng, false);
    p.f["x"] = normal(static_cast<size_t>(n * nvec), rng);
    std::vector<uint8_t> a(static_cast<size_t>(gpu_q8_row_bytes(n)));
    for (int64_t v = 0; v < nvec; ++v) {
      quantize_row_gpu_q8_ref(p.f["x"].data() + v * n, a.data(), n);
      const GpuQ8RowConst q = gpu_q8_row(static_cast<const void*>(a.data()), n);
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* wg = p.b["gate"].data() + r * row_bytes(t, n);
        const uint8_t* wu = p.b["up"].data() + r * row_bytes(t, n);
        const double g = vec_dot_gpu_q8_ref(t, n, wg, a.data()), u = vec_dot_gpu_q8_ref(t, n, wu, a.data());
        const double sg = g / (1 + std::exp(-g));
        const std::vector<float> fg = dequant(t, wg, n), fu = dequant(t, wu, n);
        double ag = 0, au = 0;
        for (int64_t i = 0; i < n; ++i) {
          ag += std::fabs(fg[i] * q.q[i] * static_cast<double>(q.d[i / 32]));
          au += std::fabs(fu[i] * q.q[i] * static_cast<double>(q.d[i / 32]));
        }
        p.ref.push_back(sg * u);
        p.scale.push_back(1.1 * ag * std::fabs(u) + std::fabs(sg) * au + 1e-30);  // silu' <= 1.1
      }
    }
    return p;
  };
  op.tol = 2e-5;
  op.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const DType t = case_type(c);
    const int64_t n = c.at("n"), rows = c.at("rows"), nvec = c.at("nvec");
    DeviceBuffer dg = upload(p.b.at("gate")), du = upload(p.b.at("up")), dx = upload(p.f.at("x"));
    DeviceBuffer q8buf(cuda::q8act_bytes(n, nvec)), y = poisoned_dev(static_cast<size_t>(rows * nvec));
    cuda::MatvecInput in;
    in.q8 = cuda::q8act_view(q8buf.get(), n, nvec);
    cuda::quantize_q8act(dx.as<float>(), n, nvec, in.q8, stream());
    cuda::MatvecGroups g;
    g.per_group = static_cast<int>(nvec);
    cuda::matvec_glu(dense_matrix(t, rows, n, dg.get()), dense_matrix(t, rows, n, du.get()), in, g, y.as<float>(),
                     rows, stream());
    return result(y, static_cast<size_t>(rows * nvec));
  }));
  reg.add(std::move(op));
}

// ---------------------------------------------------------------- dequantize, quantize
void add_quant_impls(Registry& reg) {
  for (DType t : dot_types()) {
    if (!cuda::embed_supported(t)) continue;
    reg.add_impl(std::string("dequantize_") + type_name(t),
                 gpu_impl("cuda_embed", [t](const Case& c, const Problem& p) {
                   const int64_t n = c.at("n"), rows = c.at("rows");
                   std::vector<int32_t> ids(static_cast<size_t>(rows));
                   std::iota(ids.begin(), ids.end(), 0);
                   DeviceBuffer dt = upload(p.b.at("w")), di = upload(ids), out = poisoned_dev(static_cast<size_t>(rows * n));
                   cuda::embed_rows(t, dt.get(), rows, n, di.as<int32_t>(), static_cast<int>(rows), out.as<float>(), stream());
                   return result(out, static_cast<size_t>(rows * n));
                 }));
  }
  // The device quantizer, laid out as a CPU GPU-Q8 row (q, then every d, then every s).
  reg.add_impl("quantize_gpu_q8", gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const int64_t n = c.at("n");
    DeviceBuffer dx = upload(p.f.at("x")), buf(cuda::q8act_bytes(n, 1));
    cuda::test::poison(buf.get(), cuda::q8act_bytes(n, 1));
    const cuda::Q8Act a = cuda::q8act_view(buf.get(), n, 1);
    cuda::quantize_q8act(dx.as<float>(), n, 1, a, stream());
    const auto q = download<int8_t>(a.q, static_cast<size_t>(n));
    const auto ds = download<float>(a.ds, static_cast<size_t>(n / 32 * 2));
    std::vector<uint8_t> row(static_cast<size_t>(gpu_q8_row_bytes(n)));
    const GpuQ8Row r = gpu_q8_row(static_cast<void*>(row.data()), n);
    std::memcpy(r.q, q.data(), static_cast<size_t>(n));
    for (int64_t b = 0; b < n / 32; ++b) {
      r.d[b] = ds[2 * b];
      r.s[b] = ds[2 * b + 1];
    }
    return std::vector<float>(row.begin(), row.end());
  }));
}

// ---------------------------------------------------------------- float ops
void add_float_impls(Registry& reg) {
  reg.add_impl("rms_norm", gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const int64_t rows = c.at("rows"), n = c.at("n");
    DeviceBuffer dx = upload(p.f.at("x")), dw = upload(p.f.at("w")), out = poisoned_dev(p.ref.size());
    cuda::rmsnorm(dx.as<float>(), p.f.at("w").empty() ? nullptr : dw.as<float>(), out.as<float>(), rows, n, 1e-6f,
                  stream());
    return result(out, p.ref.size());
  }));
  reg.add_impl("rope", gpu_impl("cuda", [](const Case& c, const Problem& p) {
    DeviceBuffer dx = upload(p.f.at("x")), dp = upload(p.i.at("pos"));
    cuda::rope(dx.as<float>(), static_cast<int>(c.at("n_tok")), static_cast<int>(c.at("heads")),
               static_cast<int>(c.at("head_dim")), static_cast<int>(c.at("n_rot")), dp.as<int32_t>(), 1e6f,
               rope_case_scaling(c), static_cast<RopeMode>(c.at("mode")), stream());
    return result(dx, p.ref.size());
  }));
  reg.add_impl("silu_mul", gpu_impl("cuda", [](const Case& c, const Problem& p) {
    DeviceBuffer dg = upload(p.f.at("gate")), du = upload(p.f.at("up")), out = poisoned_dev(p.ref.size());
    cuda::silu_mul(dg.as<float>(), du.as<float>(), out.as<float>(), c.at("n"), stream());
    return result(out, p.ref.size());
  }));
}

// ---------------------------------------------------------------- attention
template <class F>
void with_dev_cache(int64_t kind, const DeviceBuffer& k, const DeviceBuffer& v, F&& f) {
  if (kind == 0) f(k.as<const uint16_t>(), v.as<const uint16_t>());
  else if (kind == 1) f(k.as<const float>(), v.as<const float>());
  else f(k.as<const BlockQ8_0>(), v.as<const BlockQ8_0>());
}

cuda::AttentionShape dev_shape(const Case& c) {
  const AttentionShape s = attention_case_shape(c);
  cuda::AttentionShape d;
  d.n_head = s.n_head;
  d.n_kv = s.n_kv;
  d.head_dim = s.head_dim;
  d.ctx = s.ctx;
  d.scale = s.scale;
  return d;
}

std::vector<float> run_attention(const Case& c, const Problem& p, int how) {  // 0 decode, 1 prefill, 2 tiled
  const cuda::AttentionShape s = dev_shape(c);
  const int n_tok = static_cast<int>(c.at("n_tok"));
  const int pos0 = static_cast<int>(c.at("pos0"));
  DeviceBuffer dq = upload(p.f.at("q")), dk = upload(p.b.at("k")), dv = upload(p.b.at("v"));
  DeviceBuffer out = poisoned_dev(p.ref.size());
  if (how == 0) {
    const int len = pos0 + 1;
    const size_t sb = cuda::attention_decode_scratch_bytes(s, len);
    DeviceBuffer scratch(sb + 16), dlen = upload(std::vector<int32_t>{len});
    cuda::test::device_fill(scratch.get(), 0, sb + 16);
    with_dev_cache(c.at("cache"), dk, dv, [&](auto* K, auto* V) {
      cuda::attention_decode(s, dq.as<float>(), K, V, len, dlen.as<int32_t>(), out.as<float>(), scratch.get(), stream());
    });
  } else if (how == 1) {
    with_dev_cache(c.at("cache"), dk, dv, [&](auto* K, auto* V) {
      cuda::attention_prefill(s, dq.as<float>(), K, V, n_tok, pos0, out.as<float>(), stream());
    });
  } else {
    cuda::attention_prefill_tiled(s, dq.as<float>(), dk.as<uint16_t>(), dv.as<uint16_t>(), n_tok, pos0,
                                  out.as<float>(), stream());
  }
  return result(out, p.ref.size());
}

void add_attention_impls(Registry& reg) {
  // Tolerances of tests/cuda/attention_test.cpp turned into this measure:
  // f16 q, k, v and probabilities on the tensor cores (prefill) are within
  // ~1e-3 + 3e-3 |want|, decode's f32 arithmetic over f16/q8_0 values within
  // ~2e-4 + 1e-3 |want|; a missed or extra key tile moves outputs by 1e-2+.
  for (const char* cache : {"f16", "f32", "q8_0"}) {
    const bool f32 = std::string(cache) == "f32";
    const double dec_tol = f32 ? 1e-4 : 1.2e-3, pre_tol = f32 ? 1e-4 : 4e-3;
    reg.add_impl(std::string("attention_decode_") + cache,
                 gpu_impl("cuda", [](const Case& c, const Problem& p) { return run_attention(c, p, 0); }, dec_tol));
    reg.add_impl(std::string("attention_decode_") + cache,
                 gpu_impl("cuda_prefill", [](const Case& c, const Problem& p) { return run_attention(c, p, 1); }, pre_tol));
    reg.add_impl(std::string("attention_prefill_") + cache,
                 gpu_impl("cuda", [](const Case& c, const Problem& p) { return run_attention(c, p, 1); }, pre_tol));
  }
  reg.add_impl("attention_prefill_f16",
               gpu_impl("cuda_tiled", [](const Case& c, const Problem& p) { return run_attention(c, p, 2); }, 4e-3));
}

// ---------------------------------------------------------------- kv_append
// f["k"], f["v"] [n_tok][n_kv][head_dim] written at positions pos0..; the
// reference is the CPU's kv_store. Output: both caches as floats (f16: the
// halves' values; q8_0: per block its f16 scale, then the 32 quants), which
// must match bit for bit.
std::vector<float> cache_floats(int64_t kind, const uint8_t* bytes, int64_t elems) {
  std::vector<float> v;
  if (kind == 0) {
    for (int64_t i = 0; i < elems; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes + 2 * i, 2);
      v.push_back(f16_to_f32(h));
    }
  } else if (kind == 1) {
    v.resize(static_cast<size_t>(elems));
    std::memcpy(v.data(), bytes, static_cast<size_t>(elems) * 4);
  } else {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(bytes);
    for (int64_t k = 0; k < elems / 32; ++k) {
      v.push_back(f16_to_f32(b[k].d));
      for (int i = 0; i < 32; ++i) v.push_back(b[k].qs[i]);
    }
  }
  return v;
}

size_t kv_bytes(int64_t kind, int64_t elems) {
  return static_cast<size_t>(kind == 0 ? elems * 2 : kind == 1 ? elems * 4 : elems / 32 * sizeof(BlockQ8_0));
}

void add_kv_append(Registry& reg) {
  uint32_t seed = 950;
  for (int64_t kind : {0, 1, 2}) {
    Op op;
    op.name = std::string("kv_append_") + (kind == 0 ? "f16" : kind == 1 ? "f32" : "q8_0");
    for (auto [n_kv, hd, n_tok, pos0] : {std::tuple<int, int, int, int>{2, 64, 1, 0}, {1, 128, 3, 39}, {4, 256, 17, 5},
                                         {2, 96, 2, 10}})
      op.cases.push_back(make_case("n_kv=" + std::to_string(n_kv) + " hd=" + std::to_string(hd) + " n=" +
                                       std::to_string(n_tok) + " pos0=" + std::to_string(pos0),
                                   {{"n_head", n_kv}, {"n_kv", n_kv}, {"head_dim", hd}, {"n_tok", n_tok},
                                    {"pos0", pos0}, {"ctx", pos0 + n_tok + 3}, {"cache", kind}},
                                   seed++));
    op.make = [](const Case& c) {
      const AttentionShape s = attention_case_shape(c);
      const int n_tok = static_cast<int>(c.at("n_tok"));
      const int64_t kind = c.at("cache"), elems = static_cast<int64_t>(s.n_kv) * s.ctx * s.head_dim;
      std::mt19937 rng(c.seed);
      Problem p;
      p.f["k"] = uniform(static_cast<size_t>(n_tok) * s.n_kv * s.head_dim, rng, -8.f, 8.f);
      p.f["v"] = uniform(p.f["k"].size(), rng, -1.f, 1.f);
      std::vector<uint8_t> kc(kv_bytes(kind, elems), 0), vc(kc.size(), 0);
      const float *k = p.f["k"].data(), *v = p.f["v"].data();
      if (kind == 0) kv_store(s, k, v, n_tok, c.at("pos0"), reinterpret_cast<uint16_t*>(kc.data()), reinterpret_cast<uint16_t*>(vc.data()));
      if (kind == 1) kv_store(s, k, v, n_tok, c.at("pos0"), reinterpret_cast<float*>(kc.data()), reinterpret_cast<float*>(vc.data()));
      if (kind == 2) kv_store(s, k, v, n_tok, c.at("pos0"), reinterpret_cast<BlockQ8_0*>(kc.data()), reinterpret_cast<BlockQ8_0*>(vc.data()));
      std::vector<float> out = cache_floats(kind, kc.data(), elems), vo = cache_floats(kind, vc.data(), elems);
      out.insert(out.end(), vo.begin(), vo.end());
      p.ref.assign(out.begin(), out.end());
      return p;
    };
    op.tol = 0;
    op.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
      const AttentionShape s = attention_case_shape(c);
      const int n_tok = static_cast<int>(c.at("n_tok"));
      const int64_t kind = c.at("cache"), elems = static_cast<int64_t>(s.n_kv) * s.ctx * s.head_dim;
      std::vector<int32_t> pos(static_cast<size_t>(n_tok));
      std::iota(pos.begin(), pos.end(), static_cast<int32_t>(c.at("pos0")));
      DeviceBuffer dk = upload(p.f.at("k")), dv = upload(p.f.at("v")), dp = upload(pos);
      DeviceBuffer kc(kv_bytes(kind, elems)), vc(kv_bytes(kind, elems));
      cuda::test::device_fill(kc.get(), 0, kv_bytes(kind, elems));
      cuda::test::device_fill(vc.get(), 0, kv_bytes(kind, elems));
      if (kind == 0)
        cuda::kv_append(dk.as<float>(), dv.as<float>(), n_tok, s.n_kv, s.head_dim, dp.as<int32_t>(), kc.as<uint16_t>(),
                        vc.as<uint16_t>(), s.ctx, stream());
      if (kind == 1)
        cuda::kv_append(dk.as<float>(), dv.as<float>(), n_tok, s.n_kv, s.head_dim, dp.as<int32_t>(), kc.as<float>(),
                        vc.as<float>(), s.ctx, stream());
      if (kind == 2)
        cuda::kv_append(dk.as<float>(), dv.as<float>(), n_tok, s.n_kv, s.head_dim, dp.as<int32_t>(),
                        kc.as<BlockQ8_0>(), vc.as<BlockQ8_0>(), s.ctx, stream());
      const auto hk = download<uint8_t>(kc.get(), kv_bytes(kind, elems));
      const auto hv = download<uint8_t>(vc.get(), kv_bytes(kind, elems));
      std::vector<float> out = cache_floats(kind, hk.data(), elems), vo = cache_floats(kind, hv.data(), elems);
      out.insert(out.end(), vo.begin(), vo.end());
      return out;
    }));
    reg.add(std::move(op));
  }
}

// ---------------------------------------------------------------- router, combine, gated ops
// router_topk: f["logits"] [n_tok][n_expert]; output ids (exact) then weights.
void add_router(Registry& reg) {
  Op op;
  op.name = "router_topk";
  uint32_t seed = 1000;
  for (int n_expert : {8, 60, 128, 1000})
    for (int k : {1, 4, 8})
      for (int mode : {0, 1}) {
        if (k > n_expert) continue;
        const int renorm = (k + mode) % 2;
        op.cases.push_back(make_case("experts=" + std::to_string(n_expert) + " k=" + std::to_string(k) +
                                         (mode ? " topk_softmax" : " softmax_topk") + (renorm ? " renorm" : ""),
                                     {{"n_expert", n_expert}, {"k", k}, {"mode", mode}, {"renorm", renorm}, {"n_tok", 9}},
                                     seed++));
      }
  op.make = [](const Case& c) {
    const int n_expert = static_cast<int>(c.at("n_expert")), k = static_cast<int>(c.at("k"));
    const int n_tok = static_cast<int>(c.at("n_tok"));
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["logits"] = uniform(static_cast<size_t>(n_tok * n_expert), rng, -5.f, 5.f);
    std::vector<int32_t> ids(static_cast<size_t>(n_tok * k));
    std::vector<float> w(ids.size());
    for (int t = 0; t < n_tok; ++t)
      router_topk_ref(p.f["logits"].data() + t * n_expert, n_expert, k, static_cast<RouterMode>(c.at("mode")),
                      c.at("renorm") != 0, ids.data() + t * k, w.data() + t * k);
    p.ref.assign(ids.begin(), ids.end());
    p.ref.insert(p.ref.end(), w.begin(), w.end());
    p.scale.assign(ids.size(), 1e-30);  // ids: exact
    p.scale.resize(p.ref.size(), 1.0);
    return p;
  };
  op.tol = 1e-4;  // the device's expf against the C library's, over up to 1000 terms
  op.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const int n_expert = static_cast<int>(c.at("n_expert")), k = static_cast<int>(c.at("k"));
    const int n_tok = static_cast<int>(c.at("n_tok"));
    DeviceBuffer dl = upload(p.f.at("logits")), ids(sizeof(int32_t) * n_tok * k + 16), w = poisoned_dev(n_tok * k);
    cuda::test::poison(ids.get(), sizeof(int32_t) * n_tok * k);
    cuda::router_topk(dl.as<float>(), n_tok, n_expert, k, static_cast<RouterMode>(c.at("mode")), c.at("renorm") != 0,
                      ids.as<int32_t>(), w.as<float>(), stream());
    const auto gi = download<int32_t>(ids.get(), n_tok * k);
    std::vector<float> out(gi.begin(), gi.end());
    const auto gw = result(w, n_tok * k);
    out.insert(out.end(), gw.begin(), gw.end());
    return out;
  }));
  reg.add(std::move(op));
}

// moe_combine: f["y"] [n_tok*k][n], f["w"] [n_tok][k], f["res"] [n_tok][n]
// (param res: used or not); out[t] = res[t] + sum_j w[t][j] y[t*k+j].
void add_combine(Registry& reg) {
  Op op;
  op.name = "moe_combine";
  uint32_t seed = 1100;
  for (auto [n_tok, k, n, res] : {std::tuple<int, int, int, int>{1, 8, 2048, 1}, {5, 2, 100, 0}, {17, 4, 768, 1}})
    op.cases.push_back(make_case("tokens=" + std::to_string(n_tok) + " k=" + std::to_string(k) + " n=" +
                                     std::to_string(n) + (res ? " residual" : ""),
                                 {{"n_tok", n_tok}, {"k", k}, {"n", n}, {"res", res}}, seed++));
  op.make = [](const Case& c) {
    const int64_t n_tok = c.at("n_tok"), k = c.at("k"), n = c.at("n");
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["y"] = uniform(static_cast<size_t>(n_tok * k * n), rng);
    p.f["w"] = uniform(static_cast<size_t>(n_tok * k), rng, 0.f, 1.f);
    p.f["res"] = uniform(static_cast<size_t>(n_tok * n), rng);
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t i = 0; i < n; ++i) {
        double s = c.at("res") ? p.f["res"][t * n + i] : 0.0;
        for (int64_t j = 0; j < k; ++j) s += static_cast<double>(p.f["w"][t * k + j]) * p.f["y"][(t * k + j) * n + i];
        p.ref.push_back(s);
      }
    return p;
  };
  op.tol = 1e-5;
  op.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    DeviceBuffer dy = upload(p.f.at("y")), dw = upload(p.f.at("w")), dr = upload(p.f.at("res"));
    DeviceBuffer out = poisoned_dev(p.ref.size());
    cuda::moe_combine(dy.as<float>(), dw.as<float>(), static_cast<int>(c.at("n_tok")), static_cast<int>(c.at("k")),
                      c.at("n"), c.at("res") ? dr.as<float>() : nullptr, out.as<float>(), stream());
    return result(out, p.ref.size());
  }));
  reg.add(std::move(op));
}

// add: f["a"], f["b"] [count]; out = a + b.
void add_add(Registry& reg) {
  Op op;
  op.name = "add";
  uint32_t seed = 1150;
  for (int64_t count : {1, 33, 4096, 100003}) op.cases.push_back(make_case("count=" + std::to_string(count), {{"count", count}}, seed++));
  op.make = [](const Case& c) {
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["a"] = uniform(static_cast<size_t>(c.at("count")), rng);
    p.f["b"] = uniform(static_cast<size_t>(c.at("count")), rng);
    for (size_t i = 0; i < p.f["a"].size(); ++i) p.ref.push_back(static_cast<double>(p.f["a"][i] + p.f["b"][i]));
    return p;
  };
  op.tol = 0;
  op.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    DeviceBuffer da = upload(p.f.at("a")), db = upload(p.f.at("b")), out = poisoned_dev(p.ref.size());
    cuda::add(da.as<float>(), db.as<float>(), out.as<float>(), c.at("count"), stream());
    return result(out, p.ref.size());
  }));
  reg.add(std::move(op));
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The qwen35moe attention gate ops (src/engine/cpu_backend.cpp does the same
// on the CPU): split_q_gate's layout, mul_sigmoid, scale_rows_sigmoid.
void add_gated(Registry& reg) {
  uint32_t seed = 1200;
  Op split;
  split.name = "split_q_gate";
  for (auto [n, heads, hd, rest] : {std::tuple<int, int, int, int>{1, 4, 64, 256}, {7, 3, 128, 0}, {2, 16, 256, 1024}})
    split.cases.push_back(make_case("n=" + std::to_string(n) + " heads=" + std::to_string(heads) + " hd=" +
                                        std::to_string(hd) + " rest=" + std::to_string(rest),
                                    {{"n", n}, {"heads", heads}, {"head_dim", hd}, {"rest", rest}}, seed++));
  split.make = [](const Case& c) {
    const int64_t n = c.at("n"), heads = c.at("heads"), hd = c.at("head_dim"), rest = c.at("rest");
    const int64_t in_row = 2 * heads * hd + rest, q_dim = heads * hd;
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["src"] = uniform(static_cast<size_t>(n * in_row), rng);
    std::vector<double> dst, gate;
    for (int64_t t = 0; t < n; ++t) {
      const float* row = p.f["src"].data() + t * in_row;
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < hd; ++d) {
          dst.push_back(row[h * 2 * hd + d]);
          gate.push_back(row[h * 2 * hd + hd + d]);
        }
      for (int64_t r = 0; r < rest; ++r) dst.push_back(row[2 * q_dim + r]);
    }
    p.ref = dst;
    p.ref.insert(p.ref.end(), gate.begin(), gate.end());
    return p;
  };
  split.tol = 0;
  split.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const int64_t n = c.at("n"), heads = c.at("heads"), hd = c.at("head_dim"), rest = c.at("rest");
    DeviceBuffer src = upload(p.f.at("src")), dst = poisoned_dev(n * (heads * hd + rest)), gate = poisoned_dev(n * heads * hd);
    cuda::split_q_gate(src.as<float>(), static_cast<int>(n), static_cast<int>(heads), static_cast<int>(hd), rest,
                       dst.as<float>(), gate.as<float>(), stream());
    std::vector<float> out = result(dst, n * (heads * hd + rest)), g = result(gate, n * heads * hd);
    out.insert(out.end(), g.begin(), g.end());
    return out;
  }));
  reg.add(std::move(split));

  Op msig;
  msig.name = "mul_sigmoid";
  for (int64_t count : {1, 33, 4096, 100003}) msig.cases.push_back(make_case("count=" + std::to_string(count), {{"count", count}}, seed++));
  msig.make = [](const Case& c) {
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["x"] = uniform(static_cast<size_t>(c.at("count")), rng, -3.f, 3.f);
    p.f["gate"] = uniform(p.f["x"].size(), rng, -10.f, 10.f);
    for (size_t i = 0; i < p.f["x"].size(); ++i) p.ref.push_back(p.f["x"][i] * sigmoid(p.f["gate"][i]));
    return p;
  };
  msig.tol = 1e-6;
  msig.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    DeviceBuffer dx = upload(p.f.at("x")), dg = upload(p.f.at("gate"));
    cuda::mul_sigmoid(dx.as<float>(), dg.as<float>(), c.at("count"), stream());
    return result(dx, p.ref.size());
  }));
  reg.add(std::move(msig));

  Op rs;
  rs.name = "scale_rows_sigmoid";
  for (auto [n, width] : {std::pair<int64_t, int64_t>{1, 512}, {7, 100}, {33, 1536}})
    rs.cases.push_back(make_case("rows=" + std::to_string(n) + " width=" + std::to_string(width), {{"n", n}, {"width", width}}, seed++));
  rs.make = [](const Case& c) {
    const int64_t n = c.at("n"), width = c.at("width");
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["x"] = uniform(static_cast<size_t>(n * width), rng, -3.f, 3.f);
    p.f["score"] = uniform(static_cast<size_t>(n), rng, -6.f, 6.f);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < width; ++i) p.ref.push_back(p.f["x"][t * width + i] * sigmoid(p.f["score"][t]));
    return p;
  };
  rs.tol = 1e-6;
  rs.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    DeviceBuffer dx = upload(p.f.at("x")), ds = upload(p.f.at("score"));
    cuda::scale_rows_sigmoid(dx.as<float>(), ds.as<float>(), static_cast<int>(c.at("n")), c.at("width"), stream());
    return result(dx, p.ref.size());
  }));
  reg.add(std::move(rs));
}

// ---------------------------------------------------------------- delta net
void add_delta_impls(Registry& reg) {
  reg.add_impl("delta_conv1d_silu", gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const int n = static_cast<int>(c.at("n")), taps = static_cast<int>(c.at("taps"));
    const int64_t ch = c.at("channels");
    DeviceBuffer dx = upload(p.f.at("x")), dw = upload(p.f.at("w")), dwin = upload(p.f.at("window"));
    DeviceBuffer out = poisoned_dev(static_cast<size_t>(n * ch));
    cuda::conv1d_silu(dx.as<float>(), ch + 3, n, ch, dw.as<float>(), taps, dwin.as<float>(), out.as<float>(), stream());
    std::vector<float> o = result(out, static_cast<size_t>(n * ch)), w = result(dwin, p.f.at("window").size());
    o.insert(o.end(), w.begin(), w.end());
    return o;
  }));
  reg.add_impl("delta_prepare_qk", gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const DeltaNetShape s = delta_case_shape(c);
    DeviceBuffer d = upload(p.f.at("qkv"));
    cuda::delta_prepare_qk(d.as<float>(), s.conv_dim(), static_cast<int>(c.at("n")), s, 1e-6f, stream());
    return result(d, p.ref.size());
  }, 1e-5));
  reg.add_impl("delta_gates", gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const int n_v = static_cast<int>(c.at("n_v")), n = static_cast<int>(c.at("n"));
    DeviceBuffer da = upload(p.f.at("alpha")), db = upload(p.f.at("b")), dA = upload(p.f.at("a")), ddt = upload(p.f.at("dt"));
    DeviceBuffer g = poisoned_dev(static_cast<size_t>(n * n_v)), beta = poisoned_dev(static_cast<size_t>(n * n_v));
    cuda::delta_gates(da.as<float>(), db.as<float>(), dA.as<float>(), ddt.as<float>(), n, n_v, g.as<float>(),
                      beta.as<float>(), stream());
    std::vector<float> out = result(g, static_cast<size_t>(n * n_v)), b = result(beta, static_cast<size_t>(n * n_v));
    out.insert(out.end(), b.begin(), b.end());
    return out;
  }));
  reg.add_impl("gated_rmsnorm", gpu_impl("cuda", [](const Case& c, const Problem& p) {
    DeviceBuffer dx = upload(p.f.at("x")), dz = upload(p.f.at("z")), dw = upload(p.f.at("w"));
    DeviceBuffer out = poisoned_dev(p.ref.size());
    cuda::gated_rmsnorm(dx.as<float>(), dz.as<float>(), dw.as<float>(), out.as<float>(), c.at("n"),
                        static_cast<int>(c.at("head_v")), 1e-6f, stream());
    return result(out, p.ref.size());
  }));
  // The rule: out then the final state.
  auto run_rule = [](int how) {  // 0 token kernel, 1 chunked split-tf32, 2 chunked tf32
    return [how](const Case& c, const Problem& p) {
      const DeltaNetShape s = delta_case_shape(c);
      const int n = static_cast<int>(c.at("n"));
      DeviceBuffer dq = upload(p.f.at("qkv")), dg = upload(p.f.at("g")), db = upload(p.f.at("beta")), dS = upload(p.f.at("S"));
      DeviceBuffer out = poisoned_dev(static_cast<size_t>(n * s.value_dim()));
      const int64_t ld = s.conv_dim() + 5;
      if (how == 0)
        cuda::delta_rule(dq.as<float>(), ld, dg.as<float>(), db.as<float>(), n, s, dS.as<float>(), out.as<float>(), stream());
      else
        cuda::delta_rule_chunked(dq.as<float>(), ld, dg.as<float>(), db.as<float>(), n, s, dS.as<float>(), out.as<float>(),
                                 stream(), how == 1 ? cuda::DeltaPrecision::kSplitTf32 : cuda::DeltaPrecision::kTf32);
      std::vector<float> o = result(out, static_cast<size_t>(n * s.value_dim())), S = result(dS, p.f.at("S").size());
      o.insert(o.end(), S.begin(), S.end());
      return o;
    };
  };
  reg.add_impl("delta_rule_token", gpu_impl("cuda", run_rule(0), 2e-5));
  reg.add_impl("delta_rule_chunked", gpu_impl("cuda_token", run_rule(0), 2e-5));
  for (int how : {1, 2}) {
    Impl i = gpu_impl(how == 1 ? "cuda" : "cuda_tf32", run_rule(how), how == 1 ? 1e-4 : 1e-2);
    i.skip_case = [](const Case& c) {
      return cuda::delta_rule_chunked_supported(delta_case_shape(c)) ? "" : "head not taken by the chunked kernel";
    };
    reg.add_impl("delta_rule_chunked", std::move(i));
  }
}

// ---------------------------------------------------------------- expert_ffn
// Variants: the experts addressed by a device table of pointers (as expert
// slots are) or by base + stride; x handed over already quantized (x_q8, as
// rmsnorm makes it) or not; the int8 GEMM path from 2 tokens instead of
// cuda::kGemmMinTokens (ExpertWeights::gemm_min_tokens); one token's separate
// launches instead of the fused decode ones (ExpertWeights::fused_decode).
struct FfnVariant {
  bool table = false, x_q8 = false, gemm_from_2 = false, unfused = false;
};

std::vector<float> run_expert_ffn(const Case& c, const Problem& p, FfnVariant v) {
  const int64_t d_model = c.at("d_model"), d_ff = c.at("d_ff");
  const int n_tok = static_cast<int>(c.at("n_tok")), k = static_cast<int>(c.at("k"));
  const int n_expert = static_cast<int>(c.at("n_expert"));
  const DType gt = static_cast<DType>(c.at("gate_type")), dt = static_cast<DType>(c.at("down_type"));
  DeviceBuffer dg = upload(p.b.at("gate")), du = upload(p.b.at("up")), dd = upload(p.b.at("down"));
  DeviceBuffer dx = upload(p.f.at("x")), di = upload(p.i.at("ids")), dw = upload(p.f.at("weights"));
  cuda::ExpertWeights w;
  w.n_expert = n_expert;
  w.fused_decode = !v.unfused;
  if (v.gemm_from_2) w.gemm_min_tokens = 2;
  w.gate = dense_matrix(gt, d_ff, d_model, dg.get());
  w.up = dense_matrix(gt, d_ff, d_model, du.get());
  w.down = dense_matrix(dt, d_model, d_ff, dd.get());
  const int64_t gs = d_ff * row_bytes(gt, d_model), ds = d_model * row_bytes(dt, d_ff);
  w.gate.stride = w.up.stride = gs;
  w.down.stride = ds;
  std::vector<const void*> tg, tu, td;
  for (int e = n_expert - 1; e >= 0; --e) {  // tables in reverse: an id must go through the table
    tg.insert(tg.begin(), dg.as<uint8_t>() + e * gs);
    tu.insert(tu.begin(), du.as<uint8_t>() + e * gs);
    td.insert(td.begin(), dd.as<uint8_t>() + e * ds);
  }
  DeviceBuffer dtg = upload(tg), dtu = upload(tu), dtd = upload(td);
  if (v.table) {
    for (cuda::MatrixSet* m : {&w.gate, &w.up, &w.down}) {
      m->base = nullptr;
      m->stride = 0;
    }
    w.gate.table = dtg.as<const void* const>();
    w.up.table = dtu.as<const void* const>();
    w.down.table = dtd.as<const void* const>();
  }
  DeviceBuffer q8buf;
  cuda::Q8Act xq;
  if (v.x_q8) {
    q8buf = DeviceBuffer(cuda::q8act_bytes(d_model, n_tok));
    xq = cuda::q8act_view(q8buf.get(), d_model, n_tok);
    cuda::quantize_q8act(dx.as<float>(), d_model, n_tok, xq, stream());
  }
  DeviceBuffer dres = upload(p.f.at("res"));
  const float* res = p.f.at("res").empty() ? nullptr : dres.as<float>();
  const size_t sb = cuda::expert_ffn_scratch_bytes(w, n_tok, k);
  DeviceBuffer scratch(sb + 256), out = poisoned_dev(static_cast<size_t>(n_tok * d_model));
  cuda::expert_ffn(w, dx.as<float>(), v.x_q8 ? &xq : nullptr, n_tok, k, di.as<int32_t>(), dw.as<float>(), res,
                   out.as<float>(), scratch.get(), sb, stream());
  return result(out, static_cast<size_t>(n_tok * d_model));
}

void add_expert_ffn_impl(Registry& reg) {
  reg.add_impl("expert_ffn_gpu_q8", gpu_impl("cuda", [](const Case& c, const Problem& p) {
    return run_expert_ffn(c, p, {});
  }));
  reg.add_impl("expert_ffn_gpu_q8", gpu_impl("cuda_table_x_q8", [](const Case& c, const Problem& p) {
    return run_expert_ffn(c, p, {true, cuda::matvec_takes_q8(static_cast<DType>(c.at("gate_type"))), false});
  }));
  reg.add_impl("expert_ffn_gpu_q8", gpu_impl("cuda_unfused", [](const Case& c, const Problem& p) {
    return run_expert_ffn(c, p, {false, false, false, true});
  }));
  Impl g = gpu_impl("cuda_gemm_from_2", [](const Case& c, const Problem& p) {
    return run_expert_ffn(c, p, {false, false, true});
  }, -1, no_int8_mma);
  reg.add_impl("expert_ffn_gpu_q8", std::move(g));
}

}  // namespace

void register_cuda_impls(Registry& reg) {
  add_matvec_impls(reg);
  add_matvec_glu(reg);
  add_quant_impls(reg);
  add_float_impls(reg);
  add_attention_impls(reg);
  add_kv_append(reg);
  add_router(reg);
  add_combine(reg);
  add_add(reg);
  add_gated(reg);
  add_delta_impls(reg);
  add_expert_ffn_impl(reg);
}

}  // namespace ms::backend_ops
#endif
