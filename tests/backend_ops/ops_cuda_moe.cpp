// The CUDA launchers around the routed experts that ops_cuda.cpp left out,
// each with a scalar reference written here from src/cpu pieces
// (swiglu_oai_ref, silu_mul_ref, vec_dot_gpu_q8_ref), on random inputs, odd
// sizes and NaN-poisoned outputs:
//   scatter_rows, gather_rows, add_row_bias           (ops.h, gated_ops.h)
//   expert_rows_act, expert_rows_down_bias            (expert_bias.h)
//   moe_group_by_expert, grouped_rows_ffn             (expert_ffn.h)
//   expert_ffn_biased                                 (expert_ffn with gpt-oss's biases, clamped SwiGLU)
//   moe_combine_host_rows, gate_check, gate_wait,
//   gate_wait_rows                                    (expert_gate.h; the gates already open or shut
//                                                      before the launch, so nothing waits on the host)
#include "backend_ops/registry.h"

#ifndef MOESTREAM_HAVE_CUDA
namespace ms::backend_ops {
void register_cuda_moe_impls(Registry&) {}
}  // namespace ms::backend_ops
#else
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend_ops/cuda_impl_util.h"
#include "backend_ops/quant_cases.h"
#include "cpu/ops.h"
#include "cuda/expert_bias.h"
#include "cuda/expert_ffn.h"
#include "cuda/expert_gate.h"
#include "cuda/gated_ops.h"
#include "cuda/ops.h"

namespace ms::backend_ops {
namespace {

using namespace gpu;  // NOLINT: the helpers of cuda_impl_util.h

std::string dims(const std::string& a, int64_t x, const std::string& b, int64_t y) {
  return a + "=" + std::to_string(x) + " " + b + "=" + std::to_string(y);
}

// ---------------------------------------------------------------- rows
// scatter_rows: f["src"] [n_rows][n] to the distinct rows i["rows"] of a
// destination of dst_rows rows holding f["before"]; untouched rows keep it.
// gather_rows: out[i] = f["src"][i["rows"][i]] (ids may repeat).
void add_rows(Registry& reg) {
  uint32_t seed = 4000;
  Op sc;
  sc.name = "scatter_rows";
  for (auto [n_rows, n] : {std::pair<int64_t, int64_t>{1, 2048}, {5, 37}, {8, 2880}, {19, 1}})
    sc.cases.push_back(make_case(dims("rows", n_rows, "n", n), {{"n_rows", n_rows}, {"n", n}, {"dst_rows", n_rows + 7}}, seed++));
  sc.make = [](const Case& c) {
    const int64_t n_rows = c.at("n_rows"), n = c.at("n"), dst_rows = c.at("dst_rows");
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["src"] = uniform(static_cast<size_t>(n_rows * n), rng);
    p.f["before"] = uniform(static_cast<size_t>(dst_rows * n), rng);
    std::vector<int32_t> all(static_cast<size_t>(dst_rows));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    p.i["rows"].assign(all.begin(), all.begin() + n_rows);
    std::vector<float> out = p.f["before"];
    for (int64_t i = 0; i < n_rows; ++i)
      std::copy_n(p.f["src"].data() + i * n, n, out.data() + p.i["rows"][i] * n);
    p.ref.assign(out.begin(), out.end());
    return p;
  };
  sc.tol = 0;
  sc.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    DeviceBuffer src = upload(p.f.at("src")), rows = upload(p.i.at("rows")), dst = upload(p.f.at("before"));
    cuda::scatter_rows(src.as<float>(), rows.as<int32_t>(), static_cast<int>(c.at("n_rows")), c.at("n"),
                       dst.as<float>(), stream());
    return result(dst, p.ref.size());
  }));
  reg.add(std::move(sc));

  Op ga;
  ga.name = "gather_rows";
  for (auto [n_rows, n] : {std::pair<int64_t, int64_t>{1, 2048}, {5, 37}, {12, 2880}, {19, 1}})
    ga.cases.push_back(make_case(dims("rows", n_rows, "n", n), {{"n_rows", n_rows}, {"n", n}, {"src_rows", 9}}, seed++));
  ga.make = [](const Case& c) {
    const int64_t n_rows = c.at("n_rows"), n = c.at("n"), src_rows = c.at("src_rows");
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["src"] = uniform(static_cast<size_t>(src_rows * n), rng);
    for (int64_t i = 0; i < n_rows; ++i) {
      const int32_t r = static_cast<int32_t>(rng() % src_rows);
      p.i["rows"].push_back(r);
      for (int64_t k = 0; k < n; ++k) p.ref.push_back(p.f["src"][r * n + k]);
    }
    return p;
  };
  ga.tol = 0;
  ga.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    DeviceBuffer src = upload(p.f.at("src")), rows = upload(p.i.at("rows")), dst = poisoned_dev(p.ref.size());
    cuda::gather_rows(src.as<float>(), rows.as<int32_t>(), static_cast<int>(c.at("n_rows")), c.at("n"),
                      dst.as<float>(), stream());
    return result(dst, p.ref.size());
  }));
  reg.add(std::move(ga));

  Op rb;
  rb.name = "add_row_bias";
  for (auto [n, width] : {std::pair<int64_t, int64_t>{1, 2880}, {19, 37}, {7, 1}, {33, 4096}})
    rb.cases.push_back(make_case(dims("rows", n, "width", width), {{"n", n}, {"width", width}}, seed++));
  rb.make = [](const Case& c) {
    const int64_t n = c.at("n"), width = c.at("width");
    std::mt19937 rng(c.seed);
    Problem p;
    p.f["x"] = uniform(static_cast<size_t>(n * width), rng);
    p.f["b"] = uniform(static_cast<size_t>(width), rng);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < width; ++i) p.ref.push_back(p.f["x"][t * width + i] + p.f["b"][i]);
    return p;
  };
  rb.tol = 0;
  rb.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    DeviceBuffer dx = upload(p.f.at("x")), db = upload(p.f.at("b"));
    cuda::add_row_bias(dx.as<float>(), db.as<float>(), static_cast<int>(c.at("n")), c.at("width"), stream());
    return result(dx, p.ref.size());
  }));
  reg.add(std::move(rb));
}

// ---------------------------------------------------------------- expert bias rows
// Rows r = 0..n_rows-1 of pair i["pair"][r] (param pairs; else pair r), its
// expert i["ids"][pair] clamped into [0, n_expert) (two ids out of range).
// expert_rows_act: f["gate"], f["up"] [n_rows][d_ff], biases f["bg"], f["bu"]
// [n_expert][d_ff] (params bg, bu), activation clamped SwiGLU (param clamped;
// swiglu_oai_ref) or silu(g) * u. expert_rows_down_bias: f["y"] [n_rows][d]
// plus f["bd"] [n_expert][d].
struct BiasRows {
  int n_expert = 5;
  std::vector<int32_t> ids, pair;
  int expert_of(int r) const {
    const int p = pair.empty() ? r : pair[static_cast<size_t>(r)];
    return std::clamp(ids[static_cast<size_t>(p)], 0, n_expert - 1);
  }
};

BiasRows bias_rows(int n_rows, bool through_pairs, std::mt19937& rng) {
  BiasRows b;
  const int n_pairs = n_rows + 13;
  for (int p = 0; p < n_pairs; ++p) b.ids.push_back(static_cast<int32_t>(rng() % b.n_expert));
  b.ids[1] = -3;
  b.ids[2] = b.n_expert + 4;
  if (through_pairs) {
    std::vector<int32_t> perm(static_cast<size_t>(n_pairs));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    b.pair.assign(perm.begin(), perm.begin() + n_rows);
    b.pair[0] = 1;
    b.pair[static_cast<size_t>(n_rows) - 1] = 2;
  }
  return b;
}

cuda::ExpertWeights bias_shape(int n_expert, int64_t d_ff, int64_t d_model) {
  cuda::ExpertWeights w;
  w.n_expert = n_expert;
  w.gate = dense_matrix(DType::F32, d_ff, d_model, nullptr);
  w.up = dense_matrix(DType::F32, d_ff, d_model, nullptr);
  w.down = dense_matrix(DType::F32, d_model, d_ff, nullptr);
  return w;
}

void add_expert_bias(Registry& reg) {
  uint32_t seed = 4100;
  Op act;
  act.name = "expert_rows_act";
  struct A {
    int n_rows;
    int64_t d_ff;
    int pairs, bg, bu, clamped;
  };
  for (const A& a : {A{37, 45, 0, 1, 1, 1}, A{37, 45, 1, 1, 1, 1}, A{8, 64, 1, 1, 1, 0}, A{19, 32, 1, 1, 0, 1},
                     A{19, 32, 1, 0, 1, 1}, A{19, 32, 1, 0, 0, 1}, A{4, 2880, 1, 1, 1, 1}})
    act.cases.push_back(make_case(dims("rows", a.n_rows, "d_ff", a.d_ff) + (a.pairs ? " via pairs" : "") +
                                      (a.bg ? " +bg" : "") + (a.bu ? " +bu" : "") + (a.clamped ? " clamped" : " silu"),
                                  {{"n_rows", a.n_rows}, {"d_ff", a.d_ff}, {"pairs", a.pairs}, {"bg", a.bg},
                                   {"bu", a.bu}, {"clamped", a.clamped}},
                                  seed++));
  act.make = [](const Case& c) {
    const int n_rows = static_cast<int>(c.at("n_rows"));
    const int64_t d_ff = c.at("d_ff");
    std::mt19937 rng(c.seed);
    const BiasRows b = bias_rows(n_rows, c.at("pairs") != 0, rng);
    Problem p;
    p.i["ids"] = b.ids;
    p.i["pair"] = b.pair;
    p.f["gate"] = uniform(static_cast<size_t>(n_rows * d_ff), rng, -9.f, 9.f);
    p.f["up"] = uniform(p.f["gate"].size(), rng, -9.f, 9.f);
    p.f["bg"] = uniform(static_cast<size_t>(b.n_expert * d_ff), rng, -8.f, 8.f);  // across the clamp at 7
    p.f["bu"] = uniform(p.f["bg"].size(), rng, -8.f, 8.f);
    std::vector<float> g(static_cast<size_t>(d_ff)), u(g.size()), h(g.size());
    for (int r = 0; r < n_rows; ++r) {
      const int e = b.expert_of(r);
      for (int64_t i = 0; i < d_ff; ++i) {
        g[i] = p.f["gate"][r * d_ff + i] + (c.at("bg") ? p.f["bg"][e * d_ff + i] : 0.f);
        u[i] = p.f["up"][r * d_ff + i] + (c.at("bu") ? p.f["bu"][e * d_ff + i] : 0.f);
      }
      if (c.at("clamped")) swiglu_oai_ref(g.data(), u.data(), h.data(), d_ff, 1.702f, 7.f);
      else silu_mul_ref(g.data(), u.data(), h.data(), d_ff);
      for (float v : h) {
        p.ref.push_back(v);
        p.scale.push_back(1 + std::fabs(v));
      }
    }
    return p;
  };
  act.tol = 1e-5;
  act.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const int n_rows = static_cast<int>(c.at("n_rows"));
    const int64_t d_ff = c.at("d_ff");
    DeviceBuffer ids = upload(p.i.at("ids")), pair = upload(p.i.at("pair")), gate = upload(p.f.at("gate"));
    DeviceBuffer up = upload(p.f.at("up")), bg = upload(p.f.at("bg")), bu = upload(p.f.at("bu"));
    cuda::ExpertWeights w = bias_shape(5, d_ff, 24);
    cuda::ExpertBias b;
    b.gate = c.at("bg") ? bg.as<float>() : nullptr;
    b.up = c.at("bu") ? bu.as<float>() : nullptr;
    b.clamped_swiglu = c.at("clamped") != 0;
    b.apply_to(w);
    const cuda::ExpertRows rows{ids.as<int32_t>(), c.at("pairs") ? pair.as<int32_t>() : nullptr, n_rows};
    cuda::expert_rows_act(w, gate.as<float>(), up.as<float>(), rows, stream());
    return result(gate, static_cast<size_t>(n_rows * d_ff));
  }));
  reg.add(std::move(act));

  Op down;
  down.name = "expert_rows_down_bias";
  for (auto [n_rows, d, pairs] : {std::tuple<int, int64_t, int>{37, 29, 0}, {37, 29, 1}, {5, 256, 1}, {3, 2880, 0}})
    down.cases.push_back(make_case(dims("rows", n_rows, "d_model", d) + (pairs ? " via pairs" : ""),
                                   {{"n_rows", n_rows}, {"d", d}, {"pairs", pairs}}, seed++));
  down.make = [](const Case& c) {
    const int n_rows = static_cast<int>(c.at("n_rows"));
    const int64_t d = c.at("d");
    std::mt19937 rng(c.seed);
    const BiasRows b = bias_rows(n_rows, c.at("pairs") != 0, rng);
    Problem p;
    p.i["ids"] = b.ids;
    p.i["pair"] = b.pair;
    p.f["y"] = uniform(static_cast<size_t>(n_rows * d), rng);
    p.f["bd"] = uniform(static_cast<size_t>(b.n_expert * d), rng);
    for (int r = 0; r < n_rows; ++r)
      for (int64_t i = 0; i < d; ++i) p.ref.push_back(p.f["y"][r * d + i] + p.f["bd"][b.expert_of(r) * d + i]);
    return p;
  };
  down.tol = 0;
  down.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const int n_rows = static_cast<int>(c.at("n_rows"));
    DeviceBuffer ids = upload(p.i.at("ids")), pair = upload(p.i.at("pair")), y = upload(p.f.at("y"));
    DeviceBuffer bd = upload(p.f.at("bd"));
    cuda::ExpertWeights w = bias_shape(5, 32, c.at("d"));
    cuda::ExpertBias b;
    b.down = bd.as<float>();
    b.apply_to(w);
    const cuda::ExpertRows rows{ids.as<int32_t>(), c.at("pairs") ? pair.as<int32_t>() : nullptr, n_rows};
    cuda::expert_rows_down_bias(w, y.as<float>(), rows, stream());
    return result(y, p.ref.size());
  }));
  reg.add(std::move(down));
}

// ---------------------------------------------------------------- grouping
// moe_group_by_expert on i["ids"] [n_pairs] (some experts left empty).
// Output: the group count, each group's expert, the offsets, then each
// group's pairs sorted (the order within a group is the kernel's choice).
void add_group_by_expert(Registry& reg) {
  Op op;
  op.name = "moe_group_by_expert";
  uint32_t seed = 4200;
  for (auto [n_pairs, n_expert] : {std::pair<int, int>{1, 1}, {8, 128}, {4096, 128}, {777, 4096}, {3000, 3}, {160, 256}})
    op.cases.push_back(make_case(dims("pairs", n_pairs, "experts", n_expert), {{"n_pairs", n_pairs}, {"n_expert", n_expert}}, seed++));
  op.make = [](const Case& c) {
    const int n_pairs = static_cast<int>(c.at("n_pairs")), n_expert = static_cast<int>(c.at("n_expert"));
    std::mt19937 rng(c.seed);
    Problem p;
    std::vector<int32_t>& ids = p.i["ids"];
    for (int i = 0; i < n_pairs; ++i) ids.push_back(static_cast<int32_t>(rng() % std::max(1, n_expert / 2) * 2 % n_expert));
    std::vector<std::vector<int32_t>> by(static_cast<size_t>(n_expert));
    for (int i = 0; i < n_pairs; ++i) by[static_cast<size_t>(ids[i])].push_back(i);
    std::vector<double> ex, off{0}, list;
    for (int e = 0; e < n_expert; ++e) {
      if (by[e].empty()) continue;
      ex.push_back(e);
      list.insert(list.end(), by[e].begin(), by[e].end());
      off.push_back(static_cast<double>(list.size()));
    }
    p.ref.push_back(static_cast<double>(ex.size()));
    p.ref.insert(p.ref.end(), ex.begin(), ex.end());
    p.ref.insert(p.ref.end(), off.begin(), off.end());
    p.ref.insert(p.ref.end(), list.begin(), list.end());
    return p;
  };
  op.tol = 0;
  op.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const int n_pairs = static_cast<int>(c.at("n_pairs")), n_expert = static_cast<int>(c.at("n_expert"));
    const size_t np = static_cast<size_t>(n_pairs);
    DeviceBuffer ids = upload(p.i.at("ids")), ng(16), ge(4 * np + 16), off(4 * (np + 1) + 16), list(4 * np + 16);
    for (const DeviceBuffer* b : {&ng, &ge, &off, &list}) cuda::test::poison(b->get(), b->size());
    cuda::moe_group_by_expert(ids.as<int32_t>(), n_pairs, n_expert, ng.as<int32_t>(), ge.as<int32_t>(),
                              off.as<int32_t>(), list.as<int32_t>(), stream());
    const int n_groups = download<int32_t>(ng.get(), 1)[0];
    std::vector<float> out{static_cast<float>(n_groups)};
    if (n_groups < 0 || n_groups > n_pairs) return out;  // wrong size: compare() reports it
    const auto g_e = download<int32_t>(ge.get(), static_cast<size_t>(n_groups));
    auto g_off = download<int32_t>(off.get(), static_cast<size_t>(n_groups) + 1);
    auto g_list = download<int32_t>(list.get(), np);
    for (int32_t e : g_e) out.push_back(static_cast<float>(e));
    for (int32_t o : g_off) out.push_back(static_cast<float>(o));
    for (int g = 0; g < n_groups; ++g)
      if (g_off[g] >= 0 && g_off[g] <= g_off[g + 1] && g_off[g + 1] <= n_pairs)
        std::sort(g_list.begin() + g_off[g], g_list.begin() + g_off[g + 1]);
    for (int32_t i : g_list) out.push_back(static_cast<float>(i));
    return out;
  }));
  reg.add(std::move(op));
}

// ---------------------------------------------------------------- expert FFN references
// Expert e's FFN on one token with the GPU's activation rounding (x and h
// to its Q8 for the types that take Q8), optional biases (b[0..2]: gate, up,
// down, [n_expert][rows] each, empty: none) and the clamped SwiGLU.
struct FfnMats {
  DType gt, dt;
  int64_t d_model, d_ff;
  const std::vector<uint8_t>*gate, *up, *down;
};

std::vector<double> expert_ref(const FfnMats& m, int e, const float* x, const std::vector<float>* bias, bool clamped,
                               std::vector<double>* abs) {
  const int64_t gb = row_bytes(m.gt, m.d_model), db = row_bytes(m.dt, m.d_ff);
  const RefActs a = ref_acts(m.gt, x, m.d_model);
  std::vector<float> g(static_cast<size_t>(m.d_ff)), u(g.size()), h(g.size());
  for (int64_t r = 0; r < m.d_ff; ++r) {
    g[r] = static_cast<float>(ref_dot(m.gt, m.gate->data() + (e * m.d_ff + r) * gb, m.d_model, a, nullptr));
    u[r] = static_cast<float>(ref_dot(m.gt, m.up->data() + (e * m.d_ff + r) * gb, m.d_model, a, nullptr));
    if (bias && !bias[0].empty()) g[r] += bias[0][e * m.d_ff + r];
    if (bias && !bias[1].empty()) u[r] += bias[1][e * m.d_ff + r];
  }
  if (clamped) swiglu_oai_ref(g.data(), u.data(), h.data(), m.d_ff, 1.702f, 7.f);
  else silu_mul_ref(g.data(), u.data(), h.data(), m.d_ff);
  const RefActs ah = ref_acts(m.dt, h.data(), m.d_ff);
  std::vector<double> y(static_cast<size_t>(m.d_model));
  if (abs) abs->assign(y.size(), 0);
  for (int64_t r = 0; r < m.d_model; ++r) {
    double ab = 0;
    y[r] = ref_dot(m.dt, m.down->data() + (e * m.d_model + r) * db, m.d_ff, ah, &ab);
    if (bias && !bias[2].empty()) y[r] += bias[2][e * m.d_model + r];
    if (abs) (*abs)[r] = ab;
  }
  return y;
}

// ---------------------------------------------------------------- grouped_rows_ffn
// The tiered step's rows (expert_ffn.h: GroupedRows): b["gate"], b["up"],
// b["down"] [n_expert] experts, f["x"] [n_tok][d_model], i["ids"] [n_tok][k].
// Positions are the (token, slot) pairs sorted by expert; position i writes
// output vector i["out_of"][i] (= its pair). Output y [n_tok * k][d_model].
// Q8 rounding of h: a flip moves an output by ~1e-4 of the largest, hence
// the tolerance (as expert_ffn_gpu_q8).
void add_grouped_rows(Registry& reg) {
  Op op;
  op.name = "grouped_rows_ffn";
  uint32_t seed = 4300;
  for (auto [gt, dt] : {std::pair<DType, DType>{DType::Q4_K, DType::Q6_K}, {DType::Q8_0, DType::Q8_0},
                        {DType::MXFP4, DType::Q4_0}, {DType::Q5_K, DType::Q8_0}})
    for (auto [n_tok, k] : {std::pair<int, int>{1, 4}, {37, 2}, {70, 3}})
      op.cases.push_back(make_case(std::string(type_name(gt)) + "/" + type_name(dt) + " " + dims("tokens", n_tok, "k", k),
                                   {{"gate_type", static_cast<int64_t>(gt)}, {"down_type", static_cast<int64_t>(dt)},
                                    {"d_model", 256}, {"d_ff", 96 + 160 * (gt == DType::Q4_K || gt == DType::Q5_K)},
                                    {"n_expert", 6}, {"n_tok", n_tok}, {"k", k}},
                                   seed++));
  op.make = [](const Case& c) {
    const DType gt = static_cast<DType>(c.at("gate_type")), dt = static_cast<DType>(c.at("down_type"));
    const int64_t d_model = c.at("d_model"), d_ff = c.at("d_ff");
    const int n_expert = static_cast<int>(c.at("n_expert")), n_tok = static_cast<int>(c.at("n_tok"));
    const int k = static_cast<int>(c.at("k"));
    std::mt19937 rng(c.seed);
    Problem p;
    p.b["gate"] = weights(gt, n_expert * d_ff, d_model, row_bytes(gt, d_model), rng, false);
    p.b["up"] = weights(gt, n_expert * d_ff, d_model, row_bytes(gt, d_model), rng, false);
    p.b["down"] = weights(dt, n_expert * d_model, d_ff, row_bytes(dt, d_ff), rng, false);
    p.f["x"] = normal(static_cast<size_t>(n_tok * d_model), rng);
    for (int t = 0; t < n_tok; ++t) {
      std::vector<int32_t> all(static_cast<size_t>(n_expert));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      p.i["ids"].insert(p.i["ids"].end(), all.begin(), all.begin() + k);
    }
    const FfnMats m{gt, dt, d_model, d_ff, &p.b["gate"], &p.b["up"], &p.b["down"]};
    for (int q = 0; q < n_tok * k; ++q) {
      const std::vector<double> y = expert_ref(m, p.i["ids"][q], p.f["x"].data() + (q / k) * d_model, nullptr, false, nullptr);
      p.ref.insert(p.ref.end(), y.begin(), y.end());
    }
    return p;
  };
  op.tol = 1e-3;
  op.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const DType gt = static_cast<DType>(c.at("gate_type")), dt = static_cast<DType>(c.at("down_type"));
    const int64_t d_model = c.at("d_model"), d_ff = c.at("d_ff");
    const int n_expert = static_cast<int>(c.at("n_expert")), n_tok = static_cast<int>(c.at("n_tok"));
    const int k = static_cast<int>(c.at("k")), P = n_tok * k;
    DeviceBuffer dg = upload(p.b.at("gate")), du = upload(p.b.at("up")), dd = upload(p.b.at("down"));
    cuda::ExpertWeights w;
    w.n_expert = n_expert;
    w.gate = dense_matrix(gt, d_ff, d_model, dg.get(), d_ff * row_bytes(gt, d_model));
    w.up = dense_matrix(gt, d_ff, d_model, du.get(), d_ff * row_bytes(gt, d_model));
    w.down = dense_matrix(dt, d_model, d_ff, dd.get(), d_model * row_bytes(dt, d_ff));
    if (!cuda::grouped_rows_ffn_supported(w)) throw Error("grouped_rows_ffn: these weights are not taken");
    std::vector<int32_t> token_of, out_of, offsets{0}, experts;
    int per_group = 1;
    for (int e = 0; e < n_expert; ++e) {
      for (int q = 0; q < P; ++q)
        if (p.i.at("ids")[q] == e) {
          token_of.push_back(q / k);
          out_of.push_back(q);
        }
      if (static_cast<int>(token_of.size()) == offsets.back()) continue;
      per_group = std::max(per_group, static_cast<int>(token_of.size()) - offsets.back());
      offsets.push_back(static_cast<int32_t>(token_of.size()));
      experts.push_back(e);
    }
    DeviceBuffer dx = upload(p.f.at("x")), dtok = upload(token_of), dout = upload(out_of);
    DeviceBuffer doff = upload(offsets), dex = upload(experts);
    DeviceBuffer xq(cuda::q8act_bytes(d_model, n_tok)), hq(cuda::q8act_bytes(d_ff, P));
    DeviceBuffer h = poisoned_dev(static_cast<size_t>(P * d_ff)), u = poisoned_dev(static_cast<size_t>(P * d_ff));
    DeviceBuffer y = poisoned_dev(static_cast<size_t>(P * d_model));
    cuda::test::poison(hq.get(), hq.size());
    cuda::GroupedRows g;
    g.groups.max_groups = static_cast<int>(experts.size());
    g.groups.per_group = per_group;
    g.groups.n_expert = n_expert;
    g.groups.expert = dex.as<int32_t>();
    g.groups.offsets = doff.as<int32_t>();
    g.first = 0;
    g.rows = P;
    g.x = cuda::q8act_view(xq.get(), d_model, n_tok);
    cuda::quantize_q8act(dx.as<float>(), d_model, n_tok, g.x, stream());
    g.token_of = dtok.as<int32_t>();
    g.out_of = dout.as<int32_t>();
    g.h = h.as<float>();
    g.u = u.as<float>();
    g.h_q8 = cuda::q8act_view(hq.get(), d_ff, P);
    g.y = y.as<float>();
    cuda::grouped_rows_ffn(w, g, stream());
    return result(y, static_cast<size_t>(P * d_model));
  }, -1, no_int8_mma));
  reg.add(std::move(op));
}

// ---------------------------------------------------------------- expert_ffn_biased
// gpt-oss's experts through cuda::expert_ffn: per expert f32 biases
// f["bg"], f["bu"] [n_expert][d_ff], f["bd"] [n_expert][d_model] and the
// clamped SwiGLU (param clamped), for one token (decode) and batches below
// and past the int8 GEMM threshold; out = res + sum_j w_j y_j.
void add_expert_ffn_biased(Registry& reg) {
  Op op;
  op.name = "expert_ffn_biased";
  uint32_t seed = 4400;
  for (auto [gt, dt] : {std::pair<DType, DType>{DType::MXFP4, DType::MXFP4}, {DType::Q8_0, DType::Q8_0},
                        {DType::F16, DType::F16}})
    for (auto [n_tok, k, clamped] : {std::tuple<int, int, int>{1, 4, 1}, {5, 2, 1}, {20, 4, 1}, {3, 3, 0}})
      op.cases.push_back(make_case(std::string(type_name(gt)) + "/" + type_name(dt) + " " + dims("tokens", n_tok, "k", k) +
                                       (clamped ? " clamped" : " silu"),
                                   {{"gate_type", static_cast<int64_t>(gt)}, {"down_type", static_cast<int64_t>(dt)},
                                    {"d_model", 256}, {"d_ff", 160}, {"n_expert", 8}, {"n_tok", n_tok}, {"k", k},
                                    {"clamped", clamped}},
                                   seed++));
  op.make = [](const Case& c) {
    const DType gt = static_cast<DType>(c.at("gate_type")), dt = static_cast<DType>(c.at("down_type"));
    const int64_t d_model = c.at("d_model"), d_ff = c.at("d_ff");
    const int n_expert = static_cast<int>(c.at("n_expert")), n_tok = static_cast<int>(c.at("n_tok"));
    const int k = static_cast<int>(c.at("k"));
    std::mt19937 rng(c.seed);
    Problem p;
    p.b["gate"] = weights(gt, n_expert * d_ff, d_model, row_bytes(gt, d_model), rng, false);
    p.b["up"] = weights(gt, n_expert * d_ff, d_model, row_bytes(gt, d_model), rng, false);
    p.b["down"] = weights(dt, n_expert * d_model, d_ff, row_bytes(dt, d_ff), rng, false);
    p.f["x"] = normal(static_cast<size_t>(n_tok * d_model), rng, 0.1f);
    p.f["bg"] = uniform(static_cast<size_t>(n_expert * d_ff), rng, -4.f, 4.f);
    p.f["bu"] = uniform(p.f["bg"].size(), rng, -4.f, 4.f);
    p.f["bd"] = uniform(static_cast<size_t>(n_expert * d_model), rng);
    for (int t = 0; t < n_tok; ++t) {
      std::vector<int32_t> all(static_cast<size_t>(n_expert));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      p.i["ids"].insert(p.i["ids"].end(), all.begin(), all.begin() + k);
    }
    p.f["w"] = uniform(static_cast<size_t>(n_tok * k), rng, 0.05f, 1.f);
    p.f["res"] = uniform(static_cast<size_t>(n_tok * d_model), rng);
    const FfnMats m{gt, dt, d_model, d_ff, &p.b["gate"], &p.b["up"], &p.b["down"]};
    const std::vector<float> bias[3] = {p.f["bg"], p.f["bu"], p.f["bd"]};
    p.ref.assign(p.f["res"].begin(), p.f["res"].end());
    for (int q = 0; q < n_tok * k; ++q) {
      const int t = q / k;
      const std::vector<double> y =
          expert_ref(m, p.i["ids"][q], p.f["x"].data() + t * d_model, bias, c.at("clamped") != 0, nullptr);
      for (int64_t r = 0; r < d_model; ++r) p.ref[t * d_model + r] += p.f["w"][q] * y[r];
    }
    return p;
  };
  op.tol = 1e-3;
  op.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const DType gt = static_cast<DType>(c.at("gate_type")), dt = static_cast<DType>(c.at("down_type"));
    const int64_t d_model = c.at("d_model"), d_ff = c.at("d_ff");
    const int n_expert = static_cast<int>(c.at("n_expert")), n_tok = static_cast<int>(c.at("n_tok"));
    const int k = static_cast<int>(c.at("k"));
    DeviceBuffer dg = upload(p.b.at("gate")), du = upload(p.b.at("up")), dd = upload(p.b.at("down"));
    DeviceBuffer bg = upload(p.f.at("bg")), bu = upload(p.f.at("bu")), bd = upload(p.f.at("bd"));
    DeviceBuffer dx = upload(p.f.at("x")), di = upload(p.i.at("ids")), dw = upload(p.f.at("w")), dr = upload(p.f.at("res"));
    cuda::ExpertWeights w;
    w.n_expert = n_expert;
    w.gate = dense_matrix(gt, d_ff, d_model, dg.get(), d_ff * row_bytes(gt, d_model));
    w.up = dense_matrix(gt, d_ff, d_model, du.get(), d_ff * row_bytes(gt, d_model));
    w.down = dense_matrix(dt, d_model, d_ff, dd.get(), d_model * row_bytes(dt, d_ff));
    w.gate_bias = bg.as<float>();
    w.up_bias = bu.as<float>();
    w.down_bias = bd.as<float>();
    w.clamped_swiglu = c.at("clamped") != 0;
    const size_t sb = cuda::expert_ffn_scratch_bytes(w, n_tok, k);
    DeviceBuffer scratch(sb + 256), out = poisoned_dev(static_cast<size_t>(n_tok * d_model));
    cuda::expert_ffn(w, dx.as<float>(), nullptr, n_tok, k, di.as<int32_t>(), dw.as<float>(), dr.as<float>(),
                     out.as<float>(), scratch.get(), sb, stream());
    return result(out, static_cast<size_t>(n_tok * d_model));
  }));
  reg.add(std::move(op));
}

// ---------------------------------------------------------------- the gated decode step
// moe_combine_host_rows: f["y"], f["hy"] [k][n], f["w"] [k], f["res"] [n],
// i["mask"] {bits}: row j from hy where bit j is set.
void add_combine_host_rows(Registry& reg) {
  Op op;
  op.name = "moe_combine_host_rows";
  uint32_t seed = 4500;
  for (auto [k, n] : {std::pair<int, int64_t>{1, 1}, {3, 37}, {8, 2048}, {32, 2051}, {4, 2880}})
    op.cases.push_back(make_case(dims("k", k, "n", n), {{"k", k}, {"n", n}}, seed++));
  op.make = [](const Case& c) {
    const int k = static_cast<int>(c.at("k"));
    const int64_t n = c.at("n");
    std::mt19937 rng(c.seed);
    Problem p;
    const uint32_t mask = static_cast<uint32_t>(rng()) & (k == 32 ? 0xffffffffu : ((1u << k) - 1));
    p.i["mask"] = {static_cast<int32_t>(mask)};
    p.f["y"] = uniform(static_cast<size_t>(k * n), rng);
    p.f["hy"] = uniform(p.f["y"].size(), rng);
    p.f["w"] = uniform(static_cast<size_t>(k), rng, 0.f, 1.f);
    p.f["res"] = uniform(static_cast<size_t>(n), rng);
    for (int64_t i = 0; i < n; ++i) {
      double s = p.f["res"][i], a = std::fabs(p.f["res"][i]);
      for (int j = 0; j < k; ++j) {
        const double v = p.f["w"][j] * static_cast<double>(((mask >> j) & 1u ? p.f["hy"] : p.f["y"])[j * n + i]);
        s += v;
        a += std::fabs(v);
      }
      p.ref.push_back(s);
      p.scale.push_back(a + 1e-30);
    }
    return p;
  };
  op.tol = 1e-6;
  op.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    DeviceBuffer y = upload(p.f.at("y")), hy = upload(p.f.at("hy")), w = upload(p.f.at("w")), res = upload(p.f.at("res"));
    DeviceBuffer mask = upload(p.i.at("mask")), out = poisoned_dev(p.ref.size());
    cuda::moe_combine_host_rows(y.as<float>(), hy.as<float>(), mask.as<uint32_t>(), w.as<float>(),
                                static_cast<int>(c.at("k")), c.at("n"), res.as<float>(), out.as<float>(), stream());
    return result(out, p.ref.size());
  }));
  reg.add(std::move(op));
}

// gate_check: a resident bitmap of n_expert bits (every third expert out),
// staging stamps (param staged: some experts stamped with this step's
// sequence number, others with another's), k routed ids i["ids"] (param
// miss: 0 every one resident, 1 one not resident, 2 one out of range, 3 one
// only staged), n_pred predicted ids, the FFN input f["x"] [d]. Output: the
// mailbox's seq, hit, ids, pred, its input copy (zero unless a miss), then
// the two gate words and the host mask word (set to ~0 before).
constexpr uint32_t kSeq = 41;

void add_gate_check(Registry& reg) {
  Op op;
  op.name = "gate_check";
  uint32_t seed = 4600;
  struct S {
    int k, n_expert, n_pred;
    int64_t d;
    int miss, staged;
  };
  for (const S& s : {S{8, 128, 8, 2048, 0, 0}, S{8, 128, 0, 2048, 1, 0}, S{4, 70, 4, 99, 2, 1}, S{4, 70, 2, 99, 3, 1},
                     S{32, 1000, 32, 2880, 0, 1}, S{32, 1000, 5, 2880, 1, 1}, S{1, 3, 0, 1, 0, 0}})
    op.cases.push_back(make_case("k=" + std::to_string(s.k) + " experts=" + std::to_string(s.n_expert) + " pred=" +
                                     std::to_string(s.n_pred) + " d=" + std::to_string(s.d) +
                                     (s.miss == 0 ? " hit" : s.miss == 1 ? " miss" : s.miss == 2 ? " out of range" : " staged") +
                                     (s.staged ? " stamps" : ""),
                                 {{"k", s.k}, {"n_expert", s.n_expert}, {"n_pred", s.n_pred}, {"d", s.d},
                                  {"miss", s.miss}, {"staged", s.staged}},
                                 seed++));
  op.make = [](const Case& c) {
    const int k = static_cast<int>(c.at("k")), n_expert = static_cast<int>(c.at("n_expert"));
    const int n_pred = static_cast<int>(c.at("n_pred")), miss = static_cast<int>(c.at("miss"));
    const int64_t d = c.at("d");
    std::mt19937 rng(c.seed);
    Problem p;
    auto resident = [](int e) { return e % 3 != 1; };
    auto stamp = [](int e) { return e % 3 == 1 && e % 2 == 0 ? kSeq : kSeq - 1; };  // half the absent ones staged now
    std::vector<int32_t>& bits = p.i["resident"];
    bits.assign(static_cast<size_t>((n_expert + 31) / 32), 0);
    for (int e = 0; e < n_expert; ++e)
      if (resident(e)) bits[static_cast<size_t>(e / 32)] |= static_cast<int32_t>(1u << (e % 32));
    for (int e = 0; e < n_expert; ++e) p.i["stamps"].push_back(static_cast<int32_t>(stamp(e)));
    std::vector<int32_t> present;
    for (int e = 0; e < n_expert; ++e)
      if (resident(e)) present.push_back(e);
    std::shuffle(present.begin(), present.end(), rng);
    std::vector<int32_t>& ids = p.i["ids"];
    ids.assign(present.begin(), present.begin() + k);
    int hit = 1;
    if (miss == 1) {  // an absent expert that is not staged this step
      for (int e = 0; e < n_expert; ++e)
        if (!resident(e) && (!c.at("staged") || stamp(e) != kSeq)) ids[static_cast<size_t>(k) / 2] = e;
      hit = 0;
    } else if (miss == 2) {
      ids[0] = n_expert;
      hit = 0;
    } else if (miss == 3) {  // absent but staged this step
      for (int e = 0; e < n_expert; ++e)
        if (!resident(e) && stamp(e) == kSeq) ids[static_cast<size_t>(k) - 1] = e;
      hit = 2;
    }
    for (int i = 0; i < n_pred; ++i) p.i["pred"].push_back(static_cast<int32_t>(rng() % n_expert));
    p.f["x"] = uniform(static_cast<size_t>(d), rng);
    p.ref = {static_cast<double>(kSeq), static_cast<double>(hit)};
    p.ref.insert(p.ref.end(), ids.begin(), ids.end());
    p.ref.insert(p.ref.end(), p.i["pred"].begin(), p.i["pred"].end());
    for (float v : p.f["x"]) p.ref.push_back(hit ? 0.0 : v);
    const double gate = hit ? kSeq : 0;
    p.ref.insert(p.ref.end(), {gate, gate, 0.0});
    return p;
  };
  op.tol = 0;
  op.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const int k = static_cast<int>(c.at("k")), n_pred = static_cast<int>(c.at("n_pred"));
    const int64_t d = c.at("d");
    cuda::PinnedBuffer box(cuda::GateMailbox::bytes(d, k), true);
    std::memset(box.get(), 0, box.size());
    DeviceBuffer res = upload(p.i.at("resident")), stamps = upload(p.i.at("stamps")), ids = upload(p.i.at("ids"));
    DeviceBuffer pred = upload(p.i.at("pred")), x = upload(p.f.at("x"));
    DeviceBuffer words = upload(std::vector<uint32_t>{kSeq, 0, 0, 0xffffffffu});
    cuda::GateCheck g;
    g.resident = res.as<uint32_t>();
    g.staged = c.at("staged") ? stamps.as<uint32_t>() : nullptr;
    g.ids = ids.as<int32_t>();
    g.k = k;
    g.n_expert = static_cast<int>(c.at("n_expert"));
    g.pred = pred.as<int32_t>();
    g.n_pred = n_pred;
    g.x = x.as<float>();
    g.d = d;
    g.seq = words.as<uint32_t>();
    g.gate = words.as<uint32_t>() + 1;
    g.host_mask = words.as<uint32_t>() + 3;
    g.box = static_cast<cuda::GateMailbox*>(box.device_ptr());
    cuda::gate_check(g, stream());
    MS_CUDA_CHECK(cudaStreamSynchronize(stream()));
    const auto* m = box.as<cuda::GateMailbox>();
    std::vector<float> out{static_cast<float>(m->seq), static_cast<float>(m->hit)};
    for (int j = 0; j < k; ++j) out.push_back(static_cast<float>(m->ids[j]));
    for (int j = 0; j < n_pred; ++j) out.push_back(static_cast<float>(m->pred[j]));
    const float* xs = cuda::GateMailbox::x_of(box.as<cuda::GateMailbox>());
    out.insert(out.end(), xs, xs + d);
    const auto w = download<uint32_t>(words.get(), 4);
    for (int i = 1; i < 4; ++i) out.push_back(static_cast<float>(w[static_cast<size_t>(i)]));
    return out;
  }));
  reg.add(std::move(op));
}

// gate_wait: the gate already open (param open 1: the word holds this step's
// sequence number) passes; shut, it gives up after its 1 ms timeout. Output:
// the timed-out word.
// gate_wait_rows: param how 0: the host has published rows (mailbox open =
// this step, mask i["mask"]): those rows of the mailbox are copied over
// f["before"] [k][d] and the mask word set; 1: the check opened the gate:
// nothing copied, the mask word kept; 2: a stale open word (the previous
// step's) and a shut gate: the 1 ms timeout, nothing copied. Output: y, the
// mask word (two 16-bit halves), the timed-out word.
void add_gate_waits(Registry& reg) {
  uint32_t seed = 4700;
  Op wait;
  wait.name = "gate_wait";
  for (int open : {1, 0}) wait.cases.push_back(make_case(open ? "gate open" : "gate shut, 1 ms timeout", {{"open", open}}, seed++));
  wait.make = [](const Case& c) {
    Problem p;
    p.ref = {c.at("open") ? 0.0 : 1.0};
    return p;
  };
  wait.tol = 0;
  wait.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem&) {
    DeviceBuffer words = upload(std::vector<uint32_t>{kSeq, c.at("open") ? kSeq : kSeq - 1, 0});
    cuda::gate_wait(words.as<uint32_t>(), words.as<uint32_t>() + 1, words.as<uint32_t>() + 2, 1, stream());
    return std::vector<float>{static_cast<float>(download<uint32_t>(words.get(), 3)[2])};
  }));
  reg.add(std::move(wait));

  Op rows;
  rows.name = "gate_wait_rows";
  for (auto [k, d] : {std::pair<int, int64_t>{4, 99}, {8, 2048}, {4, 2880}, {32, 37}})
    for (int how : {0, 1, 2})
      rows.cases.push_back(make_case(dims("k", k, "d", d) + (how == 0 ? " host rows" : how == 1 ? " gate open" : " stale, timeout"),
                                     {{"k", k}, {"d", d}, {"how", how}}, seed++));
  rows.make = [](const Case& c) {
    const int k = static_cast<int>(c.at("k"));
    const int64_t d = c.at("d");
    std::mt19937 rng(c.seed);
    Problem p;
    uint32_t mask = static_cast<uint32_t>(rng()) & (k == 32 ? 0xffffffffu : ((1u << k) - 1));
    mask |= 1u;
    p.i["mask"] = {static_cast<int32_t>(mask)};
    p.f["before"] = uniform(static_cast<size_t>(k * d), rng);
    p.f["host"] = uniform(p.f["before"].size(), rng);
    const int64_t how = c.at("how");
    for (int j = 0; j < k; ++j)
      for (int64_t i = 0; i < d; ++i)
        p.ref.push_back((how == 0 && ((mask >> j) & 1u) ? p.f["host"] : p.f["before"])[j * d + i]);
    const uint32_t word = how == 0 ? mask : 12345u;  // in 16-bit halves: floats hold them exactly
    p.ref.push_back(word & 0xffffu);
    p.ref.push_back(word >> 16);
    p.ref.push_back(how == 2 ? 1.0 : 0.0);
    return p;
  };
  rows.tol = 0;
  rows.impls.push_back(gpu_impl("cuda", [](const Case& c, const Problem& p) {
    const int k = static_cast<int>(c.at("k"));
    const int64_t d = c.at("d"), how = c.at("how");
    cuda::PinnedBuffer box(cuda::GateMailbox::bytes(d, k), true);
    std::memset(box.get(), 0, box.size());
    auto* m = box.as<cuda::GateMailbox>();
    std::memcpy(cuda::GateMailbox::y_of(m, d), p.f.at("host").data(), p.f.at("host").size() * sizeof(float));
    m->mask = static_cast<uint32_t>(p.i.at("mask")[0]);
    m->open = how == 0 ? kSeq : kSeq - 1;
    DeviceBuffer y = upload(p.f.at("before"));
    DeviceBuffer words = upload(std::vector<uint32_t>{kSeq, how == 1 ? kSeq : 0u, 12345u, 0u});
    cuda::GateRows g;
    g.seq = words.as<uint32_t>();
    g.gate = words.as<uint32_t>() + 1;
    g.box = static_cast<const cuda::GateMailbox*>(box.device_ptr());
    g.k = k;
    g.d = d;
    g.y = y.as<float>();
    g.mask = words.as<uint32_t>() + 2;
    g.timed_out = words.as<uint32_t>() + 3;
    g.timeout_ms = how == 2 ? 1 : 20000;
    cuda::gate_wait_rows(g, stream());
    std::vector<float> out = result(y, static_cast<size_t>(k * d));
    const auto w = download<uint32_t>(words.get(), 4);
    out.push_back(static_cast<float>(w[2] & 0xffffu));
    out.push_back(static_cast<float>(w[2] >> 16));
    out.push_back(static_cast<float>(w[3]));
    return out;
  }));
  reg.add(std::move(rows));
}

}  // namespace

void register_cuda_moe_impls(Registry& reg) {
  add_rows(reg);
  add_expert_bias(reg);
  add_group_by_expert(reg);
  add_grouped_rows(reg);
  add_expert_ffn_biased(reg);
  add_combine_host_rows(reg);
  add_gate_check(reg);
  add_gate_waits(reg);
}

}  // namespace ms::backend_ops
#endif
