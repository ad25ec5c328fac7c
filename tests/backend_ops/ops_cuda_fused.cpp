// The CUDA backend's fused kernels and the launchers ops_cuda.cpp left out,
// each against a scalar reference from src/cpu (or written here where src/cpu
// has none, from the same *_ref pieces), on random inputs, odd sizes and
// NaN-poisoned outputs:
//   rms_norm_q8            rmsnorm with its Q8 output, rmsnorm_row_q8 (decode_fused.h)
//   qk_prologue_<cache>    decode_qk_prologue, batch_qk_prologue (decode_fused.h, prefill_fused.h)
//   router_decode_f32      the one-launch router (decode_fused.h)
//   matvec_combine         k experts' matvec with the weighted sum (matvec.h)
//   matvec_groups          matvec over expert groups: lists, x_div, a device table
//   attention_extras_<c>   attention_decode / _prefill with sinks and a window
//   (impls on registered ops) matmul_stacked on dot_q8_<T> / vec_dot_<T>,
//                          delta_rule_prompt on delta_rule_token / _chunked
#include "backend_ops/registry.h"

#ifndef MOESTREAM_HAVE_CUDA
namespace ms::backend_ops {
void register_cuda_fused_impls(Registry&) {}
}  // namespace ms::backend_ops
#else
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend_ops/case_params.h"
#include "backend_ops/cuda_impl_util.h"
#include "backend_ops/quant_cases.h"
#include "cpu/attention.h"
#include "cpu/delta_net.h"
#include "cpu/ops.h"
#include "cuda/attention.h"
#include "cuda/backend/decode_fused.h"
#include "cuda/backend/prefill_fused.h"
#include "cuda/delta_net.h"
#include "cuda/gemm.h"
#include "cuda/matvec.h"
#include "cuda/ops.h"
#include "quant/half.h"

namespace ms::backend_ops {
namespace {

using namespace gpu;  // NOLINT: the helpers of cuda_impl_util.h

// ---------------------------------------------------------------- rms_norm_q8
// f["x"] [rows][n], f["w"] [n] (empty: none). Output: the normalised rows,
// then every element of the Q8 output dequantised (q * d). Error scales: the
// rows 1e-5 (1 + |want|); the Q8 part one quant step of its block (a value on
// a rounding tie may round either way), so the tolerance is 1.
void add_rms_norm_q8(Registry& reg) {
  Op op;
  op.name = "rms_norm_q8";
  uint32_t seed = 3000;
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 32}, {1, 96}, {1, 2048}, {1, 2880}, {1, 8192}, {3, 96},
                         {17, 2048}, {2, 4096}})
    for (int w : {1, 0})
      op.cases.push_back(make_case("rows=" + std::to_string(rows) + " n=" + std::to_string(n) + (w ? "" : " no w"),
                                   {{"rows", rows}, {"n", n}, {"w", w}}, seed++));
  op.make = [](const Case& c) {
    const int64_t rows = c.at("rows"), n = c.at("n");
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["x"] = uniform(static_cast<size_t>(rows * n), rng, -3.f, 3.f);
    p.f["w"] = c.at("w") ? uniform(static_cast<size_t>(n), rng, 0.5f, 1.5f) : std::vector<float>{};
    std::vector<float> y(static_cast<size_t>(rows * n));
    for (int64_t r = 0; r < rows; ++r)
      rmsnorm_ref(p.f["x"].data() + r * n, c.at("w") ? p.f["w"].data() : nullptr, y.data() + r * n, n, 1e-6f);
    for (float v : y) {
      p.ref.push_back(v);
      p.scale.push_back(1e-5 * (1 + std::fabs(v)));
    }
    std::vector<uint8_t> a(static_cast<size_t>(gpu_q8_row_bytes(n)));
    for (int64_t r = 0; r < rows; ++r) {
      quantize_row_gpu_q8_ref(y.data() + r * n, a.data(), n);
      const GpuQ8RowConst q = gpu_q8_row(static_cast<const void*>(a.data()), n);
      for (int64_t i = 0; i < n; ++i) {
        p.ref.push_back(q.q[i] * static_cast<double>(q.d[i / 32]));
        p.scale.push_back(1.05 * q.d[i / 32] + 1e-30);
      }
    }
    return p;
  };
  op.tol = 1;
  auto run = [](bool row) {
    return [row](const Case& c, const Problem& p) {
      const int64_t rows = c.at("rows"), n = c.at("n");
      DeviceBuffer dx = upload(p.f.at("x")), dw = upload(p.f.at("w"));
      DeviceBuffer out = poisoned_dev(static_cast<size_t>(rows * n)), qb(cuda::q8act_bytes(n, rows));
      cuda::test::poison(qb.get(), cuda::q8act_bytes(n, rows));
      const cuda::Q8Act q8 = cuda::q8act_view(qb.get(), n, rows);
      const float* w = c.at("w") ? dw.as<float>() : nullptr;
      if (row) cuda::rmsnorm_row_q8(dx.as<float>(), w, out.as<float>(), n, 1e-6f, q8, stream());
      else cuda::rmsnorm(dx.as<float>(), w, out.as<float>(), rows, n, 1e-6f, stream(), &q8);
      std::vector<float> got = result(out, static_cast<size_t>(rows * n));
      const auto q = download<int8_t>(q8.q, static_cast<size_t>(rows * n));
      const auto ds = download<float>(q8.ds, static_cast<size_t>(rows * n / 16));
      for (int64_t i = 0; i < rows * n; ++i) got.push_back(q[i] * ds[2 * (i / 32)]);
      return got;
    };
  };
  op.impls.push_back(gpu_impl("cuda", run(false)));
  Impl r = gpu_impl("cuda_row", run(true));
  r.skip_case = [](const Case& c) {
    return c.at("rows") == 1 && cuda::rmsnorm_row_supported(c.at("n")) ? "" : "one row of n % 32 == 0, <= 8192";
  };
  op.impls.push_back(std::move(r));
  reg.add(std::move(op));
}

// ---------------------------------------------------------------- qk_prologue
// f["q"] [n][n_head][hd], f["k"], f["v"] [n][n_kv][hd], f["qn"], f["kn"]
// [hd] (param norm 0: none) at positions pos0 + t. Reference: rmsnorm_ref per
// head, rope_ref, kv_store (src/cpu). Output: q, k after norm + RoPE, then
// both caches (zero where not written) as floats. Error scales: f32 values
// 2e-5 (1 + |want|); f16 cache values 1e-3 (1 + |want|) (one f16 step: the
// f32 inputs of the rounding differ by float reassociation).
std::vector<float> cache_as_floats(int64_t kind, const uint8_t* bytes, int64_t elems) {
  std::vector<float> v(static_cast<size_t>(elems));
  for (int64_t i = 0; i < elems; ++i) {
    if (kind == 0) {
      uint16_t h;
      std::memcpy(&h, bytes + 2 * i, 2);
      v[i] = f16_to_f32(h);
    } else {
      std::memcpy(&v[i], bytes + 4 * i, 4);
    }
  }
  return v;
}

void add_qk_prologue(Registry& reg) {
  uint32_t seed = 3100;
  for (int64_t kind : {0, 1}) {
    Op op;
    op.name = std::string("qk_prologue_") + (kind == 0 ? "f16" : "f32");
    struct S {
      int n_head, n_kv, hd, n_rot, mode, norm, n_tok, pos0, scaling;
    };
    for (const S& s : {S{32, 4, 128, 128, 1, 1, 1, 29, 0}, S{4, 2, 64, 64, 0, 0, 1, 0, 1}, S{6, 3, 80, 32, 1, 1, 1, 517, 2},
                       S{8, 8, 256, 256, 0, 1, 1, 3, 0}, S{16, 2, 256, 64, 1, 1, 1, 4097, 0},
                       S{32, 4, 128, 128, 1, 1, 7, 100, 0}, S{6, 3, 80, 32, 0, 0, 33, 5, 2}, S{64, 8, 64, 64, 1, 0, 3, 12, 2}})
      op.cases.push_back(make_case("heads=" + std::to_string(s.n_head) + "/" + std::to_string(s.n_kv) + " hd=" +
                                       std::to_string(s.hd) + " n_rot=" + std::to_string(s.n_rot) +
                                       (s.mode ? " neox" : " normal") + (s.norm ? " norm" : "") + " n=" +
                                       std::to_string(s.n_tok) + " pos0=" + std::to_string(s.pos0) +
                                       (s.scaling == 1 ? " linear" : s.scaling == 2 ? " yarn" : ""),
                                   {{"n_head", s.n_head}, {"n_kv", s.n_kv}, {"head_dim", s.hd}, {"n_rot", s.n_rot},
                                    {"mode", s.mode}, {"norm", s.norm}, {"n_tok", s.n_tok}, {"pos0", s.pos0},
                                    {"ctx", s.pos0 + s.n_tok + 2}, {"cache", kind}, {"scaling", s.scaling}},
                                   seed++));
    op.make = [](const Case& c) {
      const AttentionShape s = attention_case_shape(c);
      const int n = static_cast<int>(c.at("n_tok")), hd = s.head_dim, n_rot = static_cast<int>(c.at("n_rot"));
      const int64_t kind = c.at("cache"), pos0 = c.at("pos0"), elems = int64_t{s.n_kv} * s.ctx * hd;
      const RopeMode mode = static_cast<RopeMode>(c.at("mode"));
      std::mt19937 rng(c.seed);
      Problem p;
      p.f["q"] = uniform(static_cast<size_t>(n) * s.n_head * hd, rng, -2.f, 2.f);
      p.f["k"] = uniform(static_cast<size_t>(n) * s.n_kv * hd, rng, -2.f, 2.f);
      p.f["v"] = uniform(p.f["k"].size(), rng, -2.f, 2.f);
      p.f["qn"] = uniform(static_cast<size_t>(hd), rng, 0.5f, 1.5f);
      p.f["kn"] = uniform(static_cast<size_t>(hd), rng, 0.5f, 1.5f);
      std::vector<float> q = p.f["q"], k = p.f["k"];
      const RopeScaling sc = rope_case_scaling(c);
      for (int t = 0; t < n; ++t) {
        float* qt = q.data() + static_cast<size_t>(t) * s.n_head * hd;
        float* kt = k.data() + static_cast<size_t>(t) * s.n_kv * hd;
        if (c.at("norm")) {
          for (int h = 0; h < s.n_head; ++h) rmsnorm_ref(qt + h * hd, p.f["qn"].data(), qt + h * hd, hd, 1e-6f);
          for (int h = 0; h < s.n_kv; ++h) rmsnorm_ref(kt + h * hd, p.f["kn"].data(), kt + h * hd, hd, 1e-6f);
        }
        rope_ref(qt, s.n_head, hd, n_rot, pos0 + t, 1e6f, sc, mode);
        rope_ref(kt, s.n_kv, hd, n_rot, pos0 + t, 1e6f, sc, mode);
      }
      for (float v : q) p.ref.push_back(v);
      for (float v : k) p.ref.push_back(v);
      p.scale.resize(p.ref.size());
      for (size_t i = 0; i < p.ref.size(); ++i) p.scale[i] = 2e-5 * (1 + std::fabs(p.ref[i]));
      std::vector<uint8_t> kc(static_cast<size_t>(elems * (kind == 0 ? 2 : 4)), 0), vc(kc.size(), 0);
      if (kind == 0)
        kv_store(s, k.data(), p.f["v"].data(), n, pos0, reinterpret_cast<uint16_t*>(kc.data()),
                 reinterpret_cast<uint16_t*>(vc.data()));
      else
        kv_store(s, k.data(), p.f["v"].data(), n, pos0, reinterpret_cast<float*>(kc.data()),
                 reinterpret_cast<float*>(vc.data()));
      for (const auto* bytes : {&kc, &vc})
        for (float v : cache_as_floats(kind, bytes->data(), elems)) {
          p.ref.push_back(v);
          p.scale.push_back((kind == 0 ? 1e-3 : 2e-5) * (1 + std::fabs(v)));
        }
      return p;
    };
    op.tol = 1;
    // how: 0 decode_qk_prologue on the stacked row; 1 batch_qk_prologue on
    // separate q, k, v arrays; 2 batch_qk_prologue with q, k, v pointing into
    // one stacked row (one token: the decode step's form without the
    // one-token kernel).
    auto run = [](int how) {
      return [how](const Case& c, const Problem& p) {
        const AttentionShape s = attention_case_shape(c);
        const int n = static_cast<int>(c.at("n_tok")), hd = s.head_dim, n_rot = static_cast<int>(c.at("n_rot"));
        const int64_t kind = c.at("cache"), elems = int64_t{s.n_kv} * s.ctx * hd;
        const int64_t qd = int64_t{s.n_head} * hd, kvd = int64_t{s.n_kv} * hd;
        const size_t cb = static_cast<size_t>(elems * (kind == 0 ? 2 : 4));
        std::vector<int32_t> pos(static_cast<size_t>(n));
        std::iota(pos.begin(), pos.end(), static_cast<int32_t>(c.at("pos0")));
        DeviceBuffer dp = upload(pos), dqn = upload(p.f.at("qn")), dkn = upload(p.f.at("kn"));
        DeviceBuffer kc(cb + 16), vc(cb + 16);
        cuda::test::device_fill(kc.get(), 0, cb);
        cuda::test::device_fill(vc.get(), 0, cb);
        const float* qn = c.at("norm") ? dqn.as<float>() : nullptr;
        const float* kn = c.at("norm") ? dkn.as<float>() : nullptr;
        const RopeScaling sc = rope_case_scaling(c);
        const RopeMode mode = static_cast<RopeMode>(c.at("mode"));
        auto batch = [&](float* q, float* k, const float* v) {
          if (kind == 0)
            cuda::batch_qk_prologue(q, k, v, n, s.n_head, s.n_kv, hd, qn, kn, 1e-6f, n_rot, dp.as<int32_t>(), 1e6f, sc,
                                    mode, kc.as<uint16_t>(), vc.as<uint16_t>(), s.ctx, stream());
          else
            cuda::batch_qk_prologue(q, k, v, n, s.n_head, s.n_kv, hd, qn, kn, 1e-6f, n_rot, dp.as<int32_t>(), 1e6f, sc,
                                    mode, kc.as<float>(), vc.as<float>(), s.ctx, stream());
        };
        std::vector<float> got;
        if (how != 1) {  // one stacked row [q | k | v]
          std::vector<float> qkv = p.f.at("q");
          qkv.insert(qkv.end(), p.f.at("k").begin(), p.f.at("k").end());
          qkv.insert(qkv.end(), p.f.at("v").begin(), p.f.at("v").end());
          DeviceBuffer d = upload(qkv);
          float* row = d.as<float>();
          if (how == 2) {
            batch(row, row + qd, row + qd + kvd);
          } else if (kind == 0) {
            cuda::decode_qk_prologue(row, s.n_head, s.n_kv, hd, qn, kn, 1e-6f, n_rot, dp.as<int32_t>(), 1e6f, sc, mode,
                                     kc.as<uint16_t>(), vc.as<uint16_t>(), s.ctx, stream());
          } else {
            cuda::decode_qk_prologue(row, s.n_head, s.n_kv, hd, qn, kn, 1e-6f, n_rot, dp.as<int32_t>(), 1e6f, sc, mode,
                                     kc.as<float>(), vc.as<float>(), s.ctx, stream());
          }
          got = result(d, static_cast<size_t>(qd + kvd));
        } else {
          DeviceBuffer dq = upload(p.f.at("q")), dk = upload(p.f.at("k")), dv = upload(p.f.at("v"));
          batch(dq.as<float>(), dk.as<float>(), dv.as<float>());
          got = result(dq, static_cast<size_t>(n * qd));
          const std::vector<float> k = result(dk, static_cast<size_t>(n * kvd));
          got.insert(got.end(), k.begin(), k.end());
        }
        for (const DeviceBuffer* b : {&kc, &vc}) {
          const auto bytes = download<uint8_t>(b->get(), cb);
          const std::vector<float> v = cache_as_floats(kind, bytes.data(), elems);
          got.insert(got.end(), v.begin(), v.end());
        }
        return got;
      };
    };
    auto one_token = [](const Case& c) { return c.at("n_tok") == 1 ? "" : "one token"; };
    Impl d = gpu_impl("cuda_decode", run(0));
    d.skip_case = one_token;
    op.impls.push_back(std::move(d));
    op.impls.push_back(gpu_impl("cuda_batch", run(1)));
    Impl st = gpu_impl("cuda_batch_stacked_row", run(2));
    st.skip_case = one_token;
    op.impls.push_back(std::move(st));
    reg.add(std::move(op));
  }
}

// ---------------------------------------------------------------- router_decode_f32
// f["w"] [n_expert][n], f["x"] [n]. Reference: the logits as double sums of
// the f32 products, then router_topk_ref. Output: logits, ids (exact),
// weights, and the kernel's counter after two calls (must be back at 0).
void add_router_decode(Registry& reg) {
  Op op;
  op.name = "router_decode_f32";
  uint32_t seed = 3200;
  struct S {
    int n_expert, k;
    int64_t n;
    int mode, renorm;
  };
  for (const S& s : {S{128, 8, 2048, 0, 1}, S{256, 8, 2048, 0, 1}, S{32, 4, 2880, 1, 0}, S{8, 2, 4096, 1, 0},
                     S{60, 4, 100, 0, 1}, S{1024, 32, 256, 1, 0}, S{7, 1, 12, 0, 0}})
    op.cases.push_back(make_case("experts=" + std::to_string(s.n_expert) + " k=" + std::to_string(s.k) + " n=" +
                                     std::to_string(s.n) + (s.mode ? " topk_softmax" : " softmax_topk") +
                                     (s.renorm ? " renorm" : ""),
                                 {{"n_expert", s.n_expert}, {"k", s.k}, {"n", s.n}, {"mode", s.mode}, {"renorm", s.renorm}},
                                 seed++));
  op.make = [](const Case& c) {
    const int n_expert = static_cast<int>(c.at("n_expert")), k = static_cast<int>(c.at("k"));
    const int64_t n = c.at("n");
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["w"] = uniform(static_cast<size_t>(n_expert * n), rng);
    p.f["x"] = uniform(static_cast<size_t>(n), rng);
    std::vector<float> logits(static_cast<size_t>(n_expert));
    for (int e = 0; e < n_expert; ++e) {
      double s = 0, a = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double v = static_cast<double>(p.f["w"][e * n + i]) * p.f["x"][i];
        s += v;
        a += std::fabs(v);
      }
      logits[e] = static_cast<float>(s);
      p.ref.push_back(s);
      p.scale.push_back(a + 1e-30);
    }
    std::vector<int32_t> ids(static_cast<size_t>(k));
    std::vector<float> w(static_cast<size_t>(k));
    router_topk_ref(logits.data(), n_expert, k, static_cast<RouterMode>(c.at("mode")), c.at("renorm") != 0, ids.data(),
                    w.data());
    for (int32_t i : ids) {
      p.ref.push_back(i);
      p.scale.push_back(1e-30);  // exact
    }
    for (float v : w) {
      p.ref.push_back(v);
      p.scale.push_back(1.0);
    }
    p.ref.push_back(0);  // the counter
    p.scale.push_back(1e-30);
    return p;
  };
  op.tol = 1e-4;  // as router_topk: the device's expf against the C library's
  Impl i = gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const int n_expert = static_cast<int>(c.at("n_expert")), k = static_cast<int>(c.at("k"));
    const int64_t n = c.at("n");
    DeviceBuffer dw = upload(p.f.at("w")), dx = upload(p.f.at("x")), counter(16);
    cuda::test::device_fill(counter.get(), 0, 16);
    DeviceBuffer logits = poisoned_dev(static_cast<size_t>(n_expert)), ids = poisoned_dev(static_cast<size_t>(k));
    DeviceBuffer w = poisoned_dev(static_cast<size_t>(k));
    for (int rep = 0; rep < 2; ++rep)  // the second call relies on the first leaving the counter at 0
      cuda::router_decode_f32(dw.as<float>(), dx.as<float>(), n_expert, n, k, static_cast<RouterMode>(c.at("mode")),
                              c.at("renorm") != 0, logits.as<float>(), ids.as<int32_t>(), w.as<float>(),
                              counter.as<uint32_t>(), stream());
    std::vector<float> out = result(logits, static_cast<size_t>(n_expert));
    for (int32_t id : download<int32_t>(ids.get(), static_cast<size_t>(k))) out.push_back(static_cast<float>(id));
    for (float v : result(w, static_cast<size_t>(k))) out.push_back(v);
    out.push_back(static_cast<float>(download<uint32_t>(counter.get(), 1)[0]));
    return out;
  });
  i.skip_case = [](const Case& c) {
    return cuda::router_decode_supported(DType::F32, static_cast<int>(c.at("n_expert")), c.at("n"),
                                         static_cast<int>(c.at("k")))
               ? ""
               : "shape not taken by the fused router";
  };
  op.impls.push_back(std::move(i));
  reg.add(std::move(op));
}

// ---------------------------------------------------------------- matvec_combine
// b["w"] [n_expert][rows][n] of type t, f["x"] [k][n] (slot j's input), i["ids"]
// [k] (one out of range where k > 2: clamped), f["wts"] [k], f["res"] [rows]
// (param res). out[r] = res[r] + sum_j wts[j] * (W_ids[j] x_j)[r].
std::vector<int32_t> case_ids(int k, int n_expert, std::mt19937& rng, bool out_of_range) {
  std::vector<int32_t> ids(static_cast<size_t>(k));
  for (auto& i : ids) i = static_cast<int32_t>(rng() % n_expert);
  if (out_of_range) {
    ids[1] = n_expert + 3;
    ids[2] = -2;
  }
  return ids;
}

void add_matvec_combine(Registry& reg) {
  Op op;
  op.name = "matvec_combine";
  uint32_t seed = 3300;
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::MXFP4, DType::Q4_0, DType::Q5_K, DType::IQ4_XS,
                  DType::F16, DType::BF16, DType::F32})
    for (auto [k, rows, n] : {std::tuple<int, int64_t, int64_t>{1, 7, 256}, {3, 100, 512}, {8, 67, 768}, {4, 33, 2816}})
      op.cases.push_back(make_case(std::string(type_name(t)) + " k=" + std::to_string(k) + " rows=" +
                                       std::to_string(rows) + " n=" + std::to_string(n),
                                   {{"type", static_cast<int64_t>(t)}, {"k", k}, {"rows", rows}, {"n", n},
                                    {"n_expert", 6}, {"res", k != 1}},
                                   seed++));
  op.make = [](const Case& c) {
    const DType t = case_type(c);
    const int k = static_cast<int>(c.at("k")), n_expert = static_cast<int>(c.at("n_expert"));
    const int64_t rows = c.at("rows"), n = c.at("n"), rb = row_bytes(t, n);
    std::mt19937 rng(c.seed);
    Problem p;
    p.b["w"] = weights(t, n_expert * rows, n, rb, rng, false);
    p.f["x"] = normal(static_cast<size_t>(k * n), rng);
    p.i["ids"] = case_ids(k, n_expert, rng, k > 2);
    p.f["wts"] = uniform(static_cast<size_t>(k), rng, 0.05f, 1.f);
    p.f["res"] = c.at("res") ? uniform(static_cast<size_t>(rows), rng) : std::vector<float>{};
    p.ref.assign(static_cast<size_t>(rows), 0.0);
    p.scale.assign(static_cast<size_t>(rows), 1e-30);
    for (int j = 0; j < k; ++j) {
      const int e = std::clamp(p.i["ids"][j], 0, n_expert - 1);
      const RefActs a = ref_acts(t, p.f["x"].data() + j * n, n);
      for (int64_t r = 0; r < rows; ++r) {
        double abs = 0;
        const double d = ref_dot(t, p.b["w"].data() + (e * rows + r) * rb, n, a, &abs);
        p.ref[r] += p.f["wts"][j] * d;
        p.scale[r] += p.f["wts"][j] * abs;
      }
    }
    for (size_t r = 0; r < p.f["res"].size(); ++r) {
      p.ref[r] += p.f["res"][r];
      p.scale[r] += std::fabs(p.f["res"][r]);
    }
    return p;
  };
  op.tol = 2e-5;
  Impl i = gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const DType t = case_type(c);
    const int k = static_cast<int>(c.at("k")), n_expert = static_cast<int>(c.at("n_expert"));
    const int64_t rows = c.at("rows"), n = c.at("n");
    DeviceBuffer dw = upload(p.b.at("w")), di = upload(p.i.at("ids")), dwt = upload(p.f.at("wts"));
    DeviceBuffer dres = upload(p.f.at("res")), out = poisoned_dev(static_cast<size_t>(rows));
    DevActs a;
    make_dev_acts(t, p.f.at("x"), n, k, a);
    cuda::matvec_combine(dense_matrix(t, rows, n, dw.get(), rows * row_bytes(t, n)), a.in, k, di.as<int32_t>(),
                         n_expert, dwt.as<float>(), c.at("res") ? dres.as<float>() : nullptr, out.as<float>(), stream());
    return result(out, static_cast<size_t>(rows));
  });
  i.skip_case = [](const Case& c) {
    return cuda::matvec_supported(case_type(c)) && cuda::matvec_combine_supported(static_cast<int>(c.at("k")))
               ? ""
               : "type or k not taken";
  };
  op.impls.push_back(std::move(i));
  reg.add(std::move(op));
}

// ---------------------------------------------------------------- matvec_groups
// The expert addressing of matvec (matvec.h: MatvecGroups): b["w"]
// [n_expert][rows][n], f["x"] [n_in][n]; groups g = 0..G-1 of expert
// i["expert"][g] (one out of range: clamped), output vectors from a list
// (i["offsets"], i["list"]) reading input vector p / x_div. Output
// [n_out][rows] (every output vector is in exactly one group). Impls: the
// matrices by base + stride or through a device table of pointers; the
// several-vector and the one-vector kernel (typical_per_group 1).
void add_matvec_groups(Registry& reg) {
  Op op;
  op.name = "matvec_groups";
  uint32_t seed = 3400;
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::MXFP4, DType::IQ2_XS, DType::F16})
    for (auto [n_out, x_div, rows, n] : {std::tuple<int, int, int64_t, int64_t>{5, 1, 33, 256}, {24, 2, 70, 512},
                                         {9, 3, 128, 768}})
      op.cases.push_back(make_case(std::string(type_name(t)) + " vectors=" + std::to_string(n_out) + " x_div=" +
                                       std::to_string(x_div) + " rows=" + std::to_string(rows) + " n=" +
                                       std::to_string(n),
                                   {{"type", static_cast<int64_t>(t)}, {"n_out", n_out}, {"x_div", x_div},
                                    {"rows", rows}, {"n", n}, {"n_expert", 5}},
                                   seed++));
  op.make = [](const Case& c) {
    const DType t = case_type(c);
    const int n_out = static_cast<int>(c.at("n_out")), x_div = static_cast<int>(c.at("x_div"));
    const int n_expert = static_cast<int>(c.at("n_expert"));
    const int64_t rows = c.at("rows"), n = c.at("n"), rb = row_bytes(t, n);
    const int n_in = (n_out + x_div - 1) / x_div;
    std::mt19937 rng(c.seed);
    Problem p;
    p.b["w"] = weights(t, n_expert * rows, n, rb, rng, false);
    p.f["x"] = normal(static_cast<size_t>(n_in * n), rng);
    // Output vectors shuffled, then cut into groups of 1..4.
    std::vector<int32_t> list(static_cast<size_t>(n_out));
    std::iota(list.begin(), list.end(), 0);
    std::shuffle(list.begin(), list.end(), rng);
    std::vector<int32_t>& off = p.i["offsets"];
    std::vector<int32_t>& ex = p.i["expert"];
    off.push_back(0);
    while (off.back() < n_out) {
      off.push_back(std::min<int32_t>(n_out, off.back() + 1 + static_cast<int32_t>(rng() % 4)));
      ex.push_back(static_cast<int32_t>(rng() % n_expert));
    }
    ex[0] = n_expert + 1;  // clamped to the last expert
    p.i["list"] = list;
    int per_group = 1;
    for (size_t g = 0; g + 1 < off.size(); ++g) per_group = std::max(per_group, off[g + 1] - off[g]);
    p.i["per_group"] = {per_group};
    p.ref.assign(static_cast<size_t>(n_out * rows), 0.0);
    p.scale.assign(p.ref.size(), 1e-30);
    for (size_t g = 0; g + 1 < off.size(); ++g) {
      const int e = std::clamp(ex[g], 0, n_expert - 1);
      for (int i = off[g]; i < off[g + 1]; ++i) {
        const int v = list[static_cast<size_t>(i)];
        const RefActs a = ref_acts(t, p.f["x"].data() + (v / x_div) * n, n);
        for (int64_t r = 0; r < rows; ++r) {
          double abs = 0;
          p.ref[v * rows + r] = ref_dot(t, p.b["w"].data() + (e * rows + r) * rb, n, a, &abs);
          p.scale[v * rows + r] = abs + 1e-30;
        }
      }
    }
    return p;
  };
  op.tol = 2e-5;
  auto run = [](bool table, bool one_vector) {
    return [table, one_vector](const Case& c, const Problem& p) {
      const DType t = case_type(c);
      const int n_out = static_cast<int>(c.at("n_out")), x_div = static_cast<int>(c.at("x_div"));
      const int n_expert = static_cast<int>(c.at("n_expert"));
      const int64_t rows = c.at("rows"), n = c.at("n"), stride = rows * row_bytes(t, n);
      const int n_in = (n_out + x_div - 1) / x_div;
      DeviceBuffer dw = upload(p.b.at("w")), doff = upload(p.i.at("offsets")), dex = upload(p.i.at("expert"));
      DeviceBuffer dlist = upload(p.i.at("list")), y = poisoned_dev(static_cast<size_t>(n_out * rows));
      const int n_groups = static_cast<int>(p.i.at("expert").size());
      DeviceBuffer dng = upload(std::vector<int32_t>{n_groups});
      std::vector<const void*> ptrs;
      for (int e = 0; e < n_expert; ++e) ptrs.push_back(dw.as<uint8_t>() + e * stride);
      DeviceBuffer dtab = upload(ptrs);
      cuda::MatrixSet m = dense_matrix(t, rows, n, dw.get(), stride);
      if (table) {
        m.base = nullptr;
        m.stride = 0;
        m.table = dtab.as<const void* const>();
      }
      DevActs a;
      make_dev_acts(t, p.f.at("x"), n, n_in, a);
      cuda::MatvecGroups g;
      g.max_groups = n_groups + 2;  // the device count says how many are real
      g.n_groups = dng.as<int32_t>();
      g.per_group = p.i.at("per_group")[0];
      g.typical_per_group = one_vector ? 1 : 0;
      g.x_div = x_div;
      g.n_expert = n_expert;
      g.expert = dex.as<int32_t>();
      g.offsets = doff.as<int32_t>();
      g.list = dlist.as<int32_t>();
      cuda::matvec(m, a.in, g, y.as<float>(), 0, nullptr, stream());
      return result(y, static_cast<size_t>(n_out * rows));
    };
  };
  auto supported = [](const Case& c) { return cuda::matvec_supported(case_type(c)) ? "" : "type not taken"; };
  for (auto [name, table, one] : {std::tuple<const char*, bool, bool>{"cuda", false, false}, {"cuda_table", true, false},
                                  {"cuda_one_vector", false, true}}) {
    Impl i = gpu_impl(name, run(table, one));
    i.skip_case = supported;
    op.impls.push_back(std::move(i));
  }
  reg.add(std::move(op));
}

// ---------------------------------------------------------------- matmul_stacked
// On the dense dot ops (b["w"] rows, f["x"] [nvec][n], output [nvec][rows]):
// the rows cut into three stacked blocks (k, v style: the last two small),
// each block's output in its own buffer, put back in [nvec][rows] order. The
// residual of a case with one is added here (matmul_stacked has none).
void add_matmul_stacked(Registry& reg) {
  for (DType t : dot_types()) {
    if (!cuda::matmul_supported(t)) continue;
    const bool q8 = cuda::matvec_takes_q8(t);
    if (q8 && !cuda::matmul_int8_supported(t)) continue;  // the WMMA fallback rounds to f16, not the Q8 reference
    const std::string op = q8 ? std::string("dot_q8_") + type_name(t) : std::string("vec_dot_") + type_name(t);
    if (!reg.has(op)) continue;
    Impl i = gpu_impl("cuda_matmul_stacked", [t](const Case& c, const Problem& p) {
      const int64_t n = c.at("n"), rows = c.at("rows"), nvec = c.at("nvec");
      const int64_t seg[3] = {rows - 2 * (rows / 4), rows / 4, rows / 4};
      const int segments = rows >= 4 ? 3 : 1;
      const int64_t seg_rows[3] = {segments == 3 ? seg[0] : rows, seg[1], seg[2]};
      DeviceBuffer dw = upload(dense_rows(c, p));
      DevActs a;
      make_dev_acts(t, p.f.at("x"), n, nvec, a);
      std::vector<DeviceBuffer> outs;
      float* ys[3] = {};
      for (int s = 0; s < segments; ++s) {
        outs.push_back(poisoned_dev(static_cast<size_t>(seg_rows[s] * nvec)));
        ys[s] = outs.back().as<float>();
      }
      cuda::matmul_stacked(dense_matrix(t, rows, n, dw.get()), a.in, static_cast<int>(nvec), segments, seg_rows, ys,
                           stream());
      std::vector<float> got(static_cast<size_t>(rows * nvec));
      int64_t first = 0;
      for (int s = 0; s < segments; ++s) {
        const std::vector<float> o = result(outs[static_cast<size_t>(s)], static_cast<size_t>(seg_rows[s] * nvec));
        for (int64_t v = 0; v < nvec; ++v)
          for (int64_t r = 0; r < seg_rows[s]; ++r) got[v * rows + first + r] = o[v * seg_rows[s] + r];
        first += seg_rows[s];
      }
      add_residual(c, p, got);
      return got;
    }, -1, q8 ? no_int8_mma : no_device);
    reg.add_impl(op, std::move(i));
  }
}

// ---------------------------------------------------------------- attention_extras_<cache>
// attention_ref with AttentionExtras (gpt-oss: per-head sinks, a sliding
// window): f["q"], b["k"], b["v"] as the attention ops, f["sinks"] [n_head]
// (param sinks), param window. Decode cases (one token) run attention_decode
// (past 1024 visible positions its long-context kernel), every case the
// prefill. Tolerances: those of the plain attention ops (ops_cuda.cpp).
const char* cache_label(int64_t kind) { return kind == 0 ? "f16" : kind == 1 ? "f32" : "q8_0"; }

size_t cache_bytes_of(int64_t kind, int64_t elems) {
  return static_cast<size_t>(kind == 0 ? elems * 2 : kind == 1 ? elems * 4 : elems / 32 * sizeof(BlockQ8_0));
}

template <class F>
void host_cache(int64_t kind, const uint8_t* k, const uint8_t* v, F&& f) {
  if (kind == 0) f(reinterpret_cast<const uint16_t*>(k), reinterpret_cast<const uint16_t*>(v));
  else if (kind == 1) f(reinterpret_cast<const float*>(k), reinterpret_cast<const float*>(v));
  else f(reinterpret_cast<const BlockQ8_0*>(k), reinterpret_cast<const BlockQ8_0*>(v));
}

template <class F>
void device_cache(int64_t kind, const DeviceBuffer& k, const DeviceBuffer& v, F&& f) {
  if (kind == 0) f(k.as<const uint16_t>(), v.as<const uint16_t>());
  else if (kind == 1) f(k.as<const float>(), v.as<const float>());
  else f(k.as<const BlockQ8_0>(), v.as<const BlockQ8_0>());
}

void add_attention_extras(Registry& reg) {
  struct S {
    int n_head, n_kv, hd, n_tok, pos0, sinks, window;
  };
  const S shapes[] = {{8, 2, 64, 1, 300, 1, 0},    {64, 8, 64, 1, 2000, 1, 128}, {16, 2, 128, 1, 1500, 0, 200},
                      {4, 4, 64, 1, 77, 1, 16},     {32, 4, 128, 1, 4100, 1, 1500}, {8, 2, 64, 37, 0, 1, 128},
                      {64, 8, 64, 70, 150, 1, 128}, {6, 2, 128, 20, 40, 0, 7},     {4, 1, 64, 9, 3, 1, 0}};
  uint32_t seed = 3500;
  for (int64_t kind : {0, 1, 2}) {
    Op op;
    op.name = std::string("attention_extras_") + cache_label(kind);
    for (const S& s : shapes)
      op.cases.push_back(make_case("heads=" + std::to_string(s.n_head) + "/" + std::to_string(s.n_kv) + " hd=" +
                                       std::to_string(s.hd) + " n=" + std::to_string(s.n_tok) + " pos0=" +
                                       std::to_string(s.pos0) + (s.sinks ? " sinks" : "") +
                                       (s.window ? " window=" + std::to_string(s.window) : ""),
                                   {{"n_head", s.n_head}, {"n_kv", s.n_kv}, {"head_dim", s.hd}, {"n_tok", s.n_tok},
                                    {"pos0", s.pos0}, {"ctx", s.pos0 + s.n_tok + 5}, {"cache", kind},
                                    {"sinks", s.sinks}, {"window", s.window}},
                                   seed++));
    op.make = [](const Case& c) {
      const AttentionShape s = attention_case_shape(c);
      const int n_tok = static_cast<int>(c.at("n_tok"));
      const int64_t pos0 = c.at("pos0"), kind = c.at("cache"), len = pos0 + n_tok;
      const int64_t elems = int64_t{s.n_kv} * s.ctx * s.head_dim;
      std::mt19937 rng(c.seed);
      Problem p;
      p.f["q"] = normal(static_cast<size_t>(n_tok) * s.n_head * s.head_dim, rng);
      const std::vector<float> k = normal(static_cast<size_t>(len) * s.n_kv * s.head_dim, rng);
      const std::vector<float> v = normal(k.size(), rng);
      p.f["sinks"] = uniform(static_cast<size_t>(s.n_head), rng, -2.f, 4.f);
      p.b["k"].assign(cache_bytes_of(kind, elems), 0);
      p.b["v"].assign(cache_bytes_of(kind, elems), 0);
      uint8_t *kc = p.b["k"].data(), *vc = p.b["v"].data();
      const int n = static_cast<int>(len);
      if (kind == 0) kv_store(s, k.data(), v.data(), n, 0, reinterpret_cast<uint16_t*>(kc), reinterpret_cast<uint16_t*>(vc));
      if (kind == 1) kv_store(s, k.data(), v.data(), n, 0, reinterpret_cast<float*>(kc), reinterpret_cast<float*>(vc));
      if (kind == 2) kv_store(s, k.data(), v.data(), n, 0, reinterpret_cast<BlockQ8_0*>(kc), reinterpret_cast<BlockQ8_0*>(vc));
      AttentionExtras x;
      x.sinks = c.at("sinks") ? p.f["sinks"].data() : nullptr;
      x.window = static_cast<int>(c.at("window"));
      std::vector<float> out(p.f["q"].size());
      host_cache(kind, kc, vc, [&](auto* K, auto* V) { attention_ref(s, p.f["q"].data(), K, V, n_tok, pos0, out.data(), x); });
      p.ref.assign(out.begin(), out.end());
      return p;
    };
    op.tol = 1e-5;
    auto run = [](bool decode) {
      return [decode](const Case& c, const Problem& p) {
        const AttentionShape hs = attention_case_shape(c);
        cuda::AttentionShape s;
        s.n_head = hs.n_head;
        s.n_kv = hs.n_kv;
        s.head_dim = hs.head_dim;
        s.ctx = hs.ctx;
        s.scale = hs.scale;
        const int n_tok = static_cast<int>(c.at("n_tok")), pos0 = static_cast<int>(c.at("pos0"));
        DeviceBuffer dq = upload(p.f.at("q")), dk = upload(p.b.at("k")), dv = upload(p.b.at("v"));
        DeviceBuffer ds = upload(p.f.at("sinks")), out = poisoned_dev(p.ref.size());
        cuda::AttentionExtras x;
        x.sinks = c.at("sinks") ? ds.as<float>() : nullptr;
        x.window = static_cast<int>(c.at("window"));
        if (decode) {
          const int len = pos0 + 1;
          const size_t sb = cuda::attention_decode_scratch_bytes(s, len);
          DeviceBuffer scratch(sb + 16), dlen = upload(std::vector<int32_t>{len});
          cuda::test::device_fill(scratch.get(), 0, sb + 16);
          device_cache(c.at("cache"), dk, dv, [&](auto* K, auto* V) {
            cuda::attention_decode(s, dq.as<float>(), K, V, len, dlen.as<int32_t>(), out.as<float>(), scratch.get(),
                                   stream(), x);
          });
        } else {
          device_cache(c.at("cache"), dk, dv, [&](auto* K, auto* V) {
            cuda::attention_prefill(s, dq.as<float>(), K, V, n_tok, pos0, out.as<float>(), stream(), x);
          });
        }
        return result(out, p.ref.size());
      };
    };
    const bool f32 = kind == 1;
    Impl d = gpu_impl("cuda_decode", run(true), f32 ? 1e-4 : 1.2e-3);
    d.skip_case = [](const Case& c) { return c.at("n_tok") == 1 ? "" : "one token"; };
    op.impls.push_back(std::move(d));
    op.impls.push_back(gpu_impl("cuda_prefill", run(false), f32 ? 1e-4 : 4e-3));
    reg.add(std::move(op));
  }
}

// ---------------------------------------------------------------- delta_rule_prompt
// What the layer calls (the token kernel below kDeltaChunkedMinTokens tokens
// or for heads the chunked kernel does not take), on the delta_rule ops'
// problems (ops_cpu.cpp: f["qkv"] rows of stride conv_dim + 5, g, beta, S;
// output then final state).
void add_delta_rule_prompt(Registry& reg) {
  auto run = [](const Case& c, const Problem& p) {
    const DeltaNetShape s = delta_case_shape(c);
    const int n = static_cast<int>(c.at("n"));
    DeviceBuffer dq = upload(p.f.at("qkv")), dg = upload(p.f.at("g")), db = upload(p.f.at("beta"));
    DeviceBuffer dS = upload(p.f.at("S")), out = poisoned_dev(static_cast<size_t>(n * s.value_dim()));
    cuda::delta_rule_prompt(dq.as<float>(), s.conv_dim() + 5, dg.as<float>(), db.as<float>(), n, s, dS.as<float>(),
                            out.as<float>(), stream());
    std::vector<float> o = result(out, static_cast<size_t>(n * s.value_dim()));
    const std::vector<float> S = result(dS, p.f.at("S").size());
    o.insert(o.end(), S.begin(), S.end());
    return o;
  };
  reg.add_impl("delta_rule_token", gpu_impl("cuda_prompt", run, 2e-5));
  reg.add_impl("delta_rule_chunked", gpu_impl("cuda_prompt", run, 1e-4));
}

}  // namespace

void register_cuda_fused_impls(Registry& reg) {
  add_rms_norm_q8(reg);
  add_qk_prologue(reg);
  add_router_decode(reg);
  add_matvec_combine(reg);
  add_matvec_groups(reg);
  add_matmul_stacked(reg);
  add_attention_extras(reg);
  add_delta_rule_prompt(reg);
}

}  // namespace ms::backend_ops
#endif
