// The CUDA launchers that take any batch of tokens (issue #41): each token
// on its sequence's slot (src/cuda/slot_map.h, attention.h DecodeRows) at its
// position. Ops of their own here, each with its scalar reference from
// src/cpu run per sequence: decode attention (attention_ref per row on its
// slot), the KV append (kv_store), the Gated DeltaNet conv step
// (conv1d_silu_ref) and recurrence (delta_rule_ref, a sequence's tokens in
// order). Every op runs four batch layouts: one token of one sequence, one
// token each of several, several tokens of one sequence (a verify batch:
// each attends causally to the positions up to its own) and a mix; the
// sequences sit in shuffled slots among spare ones, and every cache position
// no row may read holds NaN.
#include "backend_ops/registry.h"

#ifndef MOESTREAM_HAVE_CUDA
namespace ms::backend_ops {
void register_cuda_batch_ops(Registry&) {}
}  // namespace ms::backend_ops
#else
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>

#include "backend_ops/case_params.h"
#include "backend_ops/inputs.h"
#include "cpu/attention.h"
#include "cpu/delta_net.h"
#include "cuda/attention.h"
#include "cuda/cuda_test_util.h"
#include "cuda/delta_net.h"
#include "cuda/device.h"
#include "cuda/ops.h"
#include "cuda/slot_map.h"
#include "quant/blocks.h"
#include "quant/half.h"

namespace ms::backend_ops {
namespace {

using cuda::DeviceBuffer;
using cuda::test::download;
using cuda::test::upload;

cudaStream_t stream() {
  static cuda::Stream* s = new cuda::Stream();  // never destroyed (see ops_cuda.cpp)
  return s->get();
}

std::string no_device() {
  static const std::string why = [] {
    std::string w;
    return cuda::device_count(&w) == 0 ? "no CUDA device (" + w + ")" : std::string();
  }();
  return why;
}

Impl gpu(std::function<std::vector<float>(const Case&, const Problem&)> run, double tol = -1) {
  Impl i;
  i.name = "cuda";
  i.gpu = true;
  i.unavailable = no_device;
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

// ---------------------------------------------------------------- batches
// "layout": 0 one token of one sequence, 1 one token each of five, 2 six
// tokens of one sequence (verify), 3 a mix of runs. Tokens of one sequence
// are contiguous and in order.
const char* layout_name(int64_t l) {
  return l == 0 ? "one" : l == 1 ? "one_each" : l == 2 ? "verify" : "mix";
}
std::vector<int> run_lengths(int64_t layout) {
  switch (layout) {
    case 0: return {1};
    case 1: return {1, 1, 1, 1, 1};
    case 2: return {6};
    default: return {3, 1, 5, 1, 2};
  }
}

// The batch of a case: per sequence its slot (shuffled among n_slots, two
// spare) and first position; per token its slot and position.
struct Batch {
  std::vector<int> runs, first, slot_of_seq;
  std::vector<int32_t> slots, pos;
  int n_slots = 0;
};
Batch make_batch(int64_t layout, int64_t ctx, std::mt19937& rng) {
  Batch b;
  b.runs = run_lengths(layout);
  b.n_slots = static_cast<int>(b.runs.size()) + 2;
  std::vector<int> perm(b.n_slots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (size_t s = 0; s < b.runs.size(); ++s) {
    const int n = b.runs[s];
    const int p0 = static_cast<int>(rng() % static_cast<uint32_t>(ctx - n + 1));
    b.first.push_back(p0);
    b.slot_of_seq.push_back(perm[s]);
    for (int t = 0; t < n; ++t) {
      b.slots.push_back(perm[s]);
      b.pos.push_back(p0 + t);
    }
  }
  return b;
}

int64_t unit_count(int64_t kind, int64_t elems) { return kind == 2 ? elems / QK : elems; }
size_t unit_bytes(int64_t kind) { return kind == 0 ? 2 : kind == 1 ? 4 : sizeof(BlockQ8_0); }

// A cache of n_slots slots whose every element is NaN (f16 0x7e00; q8_0:
// scale NaN).
std::vector<uint8_t> nan_cache(int64_t kind, int64_t units) {
  std::vector<uint8_t> b(static_cast<size_t>(units) * unit_bytes(kind));
  for (int64_t u = 0; u < units; ++u) {
    uint8_t* e = b.data() + u * unit_bytes(kind);
    if (kind == 0) {
      const uint16_t h = 0x7e00;
      std::memcpy(e, &h, 2);
    } else if (kind == 1) {
      const float f = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(e, &f, 4);
    } else {
      BlockQ8_0 q{};
      q.d = 0x7e00;
      std::memcpy(e, &q, sizeof q);
    }
  }
  return b;
}

template <class F>
void with_host_cache(int64_t kind, uint8_t* k, uint8_t* v, F&& f) {
  if (kind == 0) f(reinterpret_cast<uint16_t*>(k), reinterpret_cast<uint16_t*>(v));
  else if (kind == 1) f(reinterpret_cast<float*>(k), reinterpret_cast<float*>(v));
  else f(reinterpret_cast<BlockQ8_0*>(k), reinterpret_cast<BlockQ8_0*>(v));
}

template <class F>
void with_dev_cache(int64_t kind, const DeviceBuffer& k, const DeviceBuffer& v, F&& f) {
  if (kind == 0) f(k.as<uint16_t>(), v.as<uint16_t>());
  else if (kind == 1) f(k.as<float>(), v.as<float>());
  else f(k.as<BlockQ8_0>(), v.as<BlockQ8_0>());
}

cuda::AttentionShape dev_shape(const AttentionShape& s) {
  cuda::AttentionShape d;
  d.n_head = s.n_head;
  d.n_kv = s.n_kv;
  d.head_dim = s.head_dim;
  d.ctx = s.ctx;
  d.scale = s.scale;
  return d;
}

// ---------------------------------------------------------------- attention
// Each sequence's slot holds keys and values at positions [0, first + run);
// row t sees [0, pos[t] + 1). i["slots"], i["lens"]; f["q"], f["sinks"].
Problem make_attention_rows(const Case& c) {
  const AttentionShape s = attention_case_shape(c);
  const int64_t kind = c.at("cache");
  std::mt19937 rng(c.seed);
  Problem p;
  const Batch b = make_batch(c.at("layout"), s.ctx, rng);
  const int n = static_cast<int>(b.slots.size());
  const int64_t per_slot = unit_count(kind, static_cast<int64_t>(s.n_kv) * s.ctx * s.head_dim);
  p.b["k"] = nan_cache(kind, per_slot * b.n_slots);
  p.b["v"] = nan_cache(kind, per_slot * b.n_slots);
  for (size_t q = 0; q < b.runs.size(); ++q) {
    const int len = b.first[q] + b.runs[q];
    const std::vector<float> k = normal(static_cast<size_t>(len) * s.n_kv * s.head_dim, rng);
    const std::vector<float> v = normal(k.size(), rng);
    const size_t off = static_cast<size_t>(b.slot_of_seq[q] * per_slot) * unit_bytes(kind);
    with_host_cache(kind, p.b["k"].data() + off, p.b["v"].data() + off,
                    [&](auto* K, auto* V) { kv_store(s, k.data(), v.data(), len, 0, K, V); });
  }
  p.i["slots"] = b.slots;
  for (int32_t x : b.pos) p.i["lens"].push_back(x + 1);
  p.f["q"] = normal(static_cast<size_t>(n) * s.n_head * s.head_dim, rng);
  p.f["sinks"] = uniform(static_cast<size_t>(s.n_head), rng, -2.f, 3.f);
  AttentionExtras x;
  x.window = static_cast<int>(c.at("window"));
  x.sinks = c.at("sinks") ? p.f["sinks"].data() : nullptr;
  const size_t row = static_cast<size_t>(s.n_head) * s.head_dim;
  std::vector<float> out(row * n);
  for (int t = 0; t < n; ++t) {
    const size_t off = static_cast<size_t>(b.slots[t] * per_slot) * unit_bytes(kind);
    with_host_cache(kind, p.b["k"].data() + off, p.b["v"].data() + off, [&](auto* K, auto* V) {
      attention_ref(s, p.f["q"].data() + t * row, K, V, 1, b.pos[t], out.data() + t * row, x);
    });
  }
  p.ref.assign(out.begin(), out.end());
  return p;
}

std::vector<float> run_attention_rows(const Case& c, const Problem& p) {
  const AttentionShape hs = attention_case_shape(c);
  const cuda::AttentionShape s = dev_shape(hs);
  const int64_t kind = c.at("cache");
  const auto& slots = p.i.at("slots");
  const auto& lens = p.i.at("lens");
  const int n = static_cast<int>(slots.size());
  const int max_len = *std::max_element(lens.begin(), lens.end());
  const int span = static_cast<int>(std::min<int64_t>(s.ctx, max_len + 7));  // a launch sized past every row
  DeviceBuffer dq = upload(p.f.at("q")), dk = upload(p.b.at("k")), dv = upload(p.b.at("v"));
  DeviceBuffer ds = upload(slots), dl = upload(lens), dsinks = upload(p.f.at("sinks"));
  DeviceBuffer out = cuda::test::poisoned(p.ref.size());
  const size_t sb = cuda::attention_decode_scratch_bytes(s, span, n);
  DeviceBuffer scratch(sb);
  cuda::test::device_fill(scratch.get(), 0, sb);
  cuda::DecodeRows rows;
  rows.n = n;
  rows.slots = ds.as<int32_t>();
  rows.kv_len = dl.as<int32_t>();
  rows.slot_stride = unit_count(kind, static_cast<int64_t>(s.n_kv) * s.ctx * s.head_dim);
  rows.n_slots = static_cast<int>(run_lengths(c.at("layout")).size()) + 2;
  cuda::AttentionExtras x;
  x.window = static_cast<int>(c.at("window"));
  x.sinks = c.at("sinks") ? dsinks.as<float>() : nullptr;
  with_dev_cache(kind, dk, dv, [&](auto* K, auto* V) {
    cuda::attention_decode(s, dq.as<float>(), K, V, rows, span, out.as<float>(), scratch.get(), stream(), x);
  });
  return download<float>(out.get(), p.ref.size());
}

void add_attention_rows(Registry& reg) {
  struct S {
    int n_head, n_kv, head_dim, ctx, window, sinks;
  };
  // The fast path (G 1..16, head_dim 64/128/256), the generic one (head_dim
  // 80, 96; G 3), the long kernel (contexts past 1024), gpt-oss's window and
  // sinks.
  const S shapes[] = {{8, 8, 64, 70, 0, 0},     {32, 4, 128, 300, 0, 0}, {16, 1, 256, 150, 0, 0},
                      {6, 2, 80, 90, 0, 0},     {12, 4, 96, 1500, 0, 0}, {32, 4, 128, 2100, 0, 0},
                      {16, 2, 256, 1300, 0, 1}, {64, 8, 64, 700, 128, 1}};
  uint32_t seed = 4100;
  for (int64_t kind : {0, 1, 2}) {
    Op op;
    op.name = std::string("attention_decode_rows_") + (kind == 0 ? "f16" : kind == 1 ? "f32" : "q8_0");
    for (const S& sh : shapes) {
      if (kind == 2 && sh.head_dim % QK != 0) continue;
      for (int64_t layout : {0, 1, 2, 3})
        op.cases.push_back(make_case(
            std::string(layout_name(layout)) + " heads=" + std::to_string(sh.n_head) + "/" + std::to_string(sh.n_kv) +
                " hd=" + std::to_string(sh.head_dim) + " ctx=" + std::to_string(sh.ctx) +
                (sh.window ? " window=" + std::to_string(sh.window) : "") + (sh.sinks ? " sinks" : ""),
            {{"n_head", sh.n_head}, {"n_kv", sh.n_kv}, {"head_dim", sh.head_dim}, {"ctx", sh.ctx},
             {"window", sh.window}, {"sinks", sh.sinks}, {"cache", kind}, {"layout", layout}},
            seed++));
    }
    op.make = make_attention_rows;
    // decode's tolerances (ops_cuda.cpp: f32 arithmetic over f16/q8_0 values)
    op.tol = kind == 1 ? 1e-4 : 1.2e-3;
    op.impls.push_back(gpu(run_attention_rows));
    reg.add(std::move(op));
  }
}

// ---------------------------------------------------------------- kv_append
// f["k"], f["v"] [n][n_kv][head_dim] to each token's slot and position; the
// reference is kv_store on the slot. Output: every slot's caches as floats
// (f16: the halves' values; q8_0: per block its scale, then the quants), bit
// for bit; the untouched positions stay 0.
std::vector<float> cache_floats(int64_t kind, const uint8_t* bytes, int64_t units) {
  std::vector<float> v;
  for (int64_t u = 0; u < units; ++u) {
    const uint8_t* e = bytes + u * unit_bytes(kind);
    if (kind == 0) {
      uint16_t h;
      std::memcpy(&h, e, 2);
      v.push_back(f16_to_f32(h));
    } else if (kind == 1) {
      float f;
      std::memcpy(&f, e, 4);
      v.push_back(f);
    } else {
      BlockQ8_0 q;
      std::memcpy(&q, e, sizeof q);
      v.push_back(f16_to_f32(q.d));
      for (int i = 0; i < QK; ++i) v.push_back(q.qs[i]);
    }
  }
  return v;
}

void add_kv_append_rows(Registry& reg) {
  uint32_t seed = 4300;
  for (int64_t kind : {0, 1, 2}) {
    Op op;
    op.name = std::string("kv_append_rows_") + (kind == 0 ? "f16" : kind == 1 ? "f32" : "q8_0");
    for (auto [n_kv, hd, ctx] : {std::tuple<int, int, int>{2, 64, 9}, {1, 128, 40}, {4, 96, 13}})
      for (int64_t layout : {0, 1, 2, 3})
        op.cases.push_back(make_case(std::string(layout_name(layout)) + " n_kv=" + std::to_string(n_kv) +
                                         " hd=" + std::to_string(hd) + " ctx=" + std::to_string(ctx),
                                     {{"n_head", n_kv}, {"n_kv", n_kv}, {"head_dim", hd}, {"ctx", ctx},
                                      {"cache", kind}, {"layout", layout}},
                                     seed++));
    op.make = [](const Case& c) {
      const AttentionShape s = attention_case_shape(c);
      const int64_t kind = c.at("cache");
      std::mt19937 rng(c.seed);
      const Batch b = make_batch(c.at("layout"), s.ctx, rng);
      const int n = static_cast<int>(b.slots.size());
      Problem p;
      p.i["slots"] = b.slots;
      p.i["pos"] = b.pos;
      p.f["k"] = uniform(static_cast<size_t>(n) * s.n_kv * s.head_dim, rng, -8.f, 8.f);
      p.f["v"] = uniform(p.f["k"].size(), rng, -1.f, 1.f);
      const int64_t per_slot = unit_count(kind, static_cast<int64_t>(s.n_kv) * s.ctx * s.head_dim);
      std::vector<uint8_t> kc(static_cast<size_t>(per_slot * b.n_slots) * unit_bytes(kind), 0), vc(kc.size(), 0);
      int row = 0;
      for (size_t q = 0; q < b.runs.size(); ++q) {
        const size_t off = static_cast<size_t>(b.slot_of_seq[q] * per_slot) * unit_bytes(kind);
        const size_t src = static_cast<size_t>(row) * s.n_kv * s.head_dim;
        with_host_cache(kind, kc.data() + off, vc.data() + off, [&](auto* K, auto* V) {
          kv_store(s, p.f["k"].data() + src, p.f["v"].data() + src, b.runs[q], b.first[q], K, V);
        });
        row += b.runs[q];
      }
      std::vector<float> out = cache_floats(kind, kc.data(), per_slot * b.n_slots);
      const std::vector<float> vo = cache_floats(kind, vc.data(), per_slot * b.n_slots);
      out.insert(out.end(), vo.begin(), vo.end());
      p.ref.assign(out.begin(), out.end());
      return p;
    };
    op.tol = 0;
    op.impls.push_back(gpu([](const Case& c, const Problem& p) {
      const AttentionShape s = attention_case_shape(c);
      const int64_t kind = c.at("cache");
      const int n = static_cast<int>(p.i.at("slots").size());
      const int n_slots = static_cast<int>(run_lengths(c.at("layout")).size()) + 2;
      const int64_t per_slot = unit_count(kind, static_cast<int64_t>(s.n_kv) * s.ctx * s.head_dim);
      const size_t bytes = static_cast<size_t>(per_slot * n_slots) * unit_bytes(kind);
      DeviceBuffer dk = upload(p.f.at("k")), dv = upload(p.f.at("v"));
      DeviceBuffer ds = upload(p.i.at("slots")), dp = upload(p.i.at("pos"));
      DeviceBuffer kc(bytes), vc(bytes);
      cuda::test::device_fill(kc.get(), 0, bytes);
      cuda::test::device_fill(vc.get(), 0, bytes);
      const cuda::SlotMap m{ds.as<int32_t>(), per_slot, n_slots};
      with_dev_cache(kind, kc, vc, [&](auto* K, auto* V) {
        cuda::kv_append(dk.as<float>(), dv.as<float>(), n, s.n_kv, s.head_dim, dp.as<int32_t>(), K, V, s.ctx, stream(),
                        m);
      });
      const auto hk = download<uint8_t>(kc.get(), bytes), hv = download<uint8_t>(vc.get(), bytes);
      std::vector<float> out = cache_floats(kind, hk.data(), per_slot * n_slots);
      const std::vector<float> vo = cache_floats(kind, hv.data(), per_slot * n_slots);
      out.insert(out.end(), vo.begin(), vo.end());
      return out;
    }));
    reg.add(std::move(op));
  }
}

// ---------------------------------------------------------------- delta net
// The conv step: x rows (stride channels + 3) of each token, the windows of
// n_slots slots (stride (taps - 1) * channels + 5). Output: out, then every
// window (the spare ones unchanged).
void add_conv_rows(Registry& reg) {
  Op op;
  op.name = "delta_conv1d_silu_rows";
  uint32_t seed = 4500;
  for (auto [ch, taps] : {std::pair<int, int>{37, 4}, {300, 2}, {129, 16}})
    for (int64_t layout : {0, 1, 2, 3})
      op.cases.push_back(make_case(std::string(layout_name(layout)) + " channels=" + std::to_string(ch) +
                                       " taps=" + std::to_string(taps),
                                   {{"channels", ch}, {"taps", taps}, {"layout", layout}}, seed++));
  op.make = [](const Case& c) {
    const int64_t ch = c.at("channels"), taps = c.at("taps"), ld = ch + 3, ws = (taps - 1) * ch + 5;
    std::mt19937 rng(c.seed);
    const Batch b = make_batch(c.at("layout"), 100, rng);
    const int n = static_cast<int>(b.slots.size());
    Problem p;
    p.i["slots"] = b.slots;
    p.f["x"] = uniform(static_cast<size_t>(n * ld), rng, -2.f, 2.f);
    p.f["w"] = uniform(static_cast<size_t>(ch * taps), rng);
    p.f["window"] = uniform(static_cast<size_t>(b.n_slots * ws), rng);
    std::vector<float> win = p.f["window"], out(static_cast<size_t>(n * ch));
    int row = 0;
    for (size_t q = 0; q < b.runs.size(); ++q) {
      conv1d_silu_ref(p.f["x"].data() + row * ld, ld, b.runs[q], ch, p.f["w"].data(), static_cast<int>(taps),
                      win.data() + b.slot_of_seq[q] * ws, out.data() + row * ch);
      row += b.runs[q];
    }
    out.insert(out.end(), win.begin(), win.end());
    p.ref.assign(out.begin(), out.end());
    return p;
  };
  op.tol = 1e-5;
  op.impls.push_back(gpu([](const Case& c, const Problem& p) {
    const int64_t ch = c.at("channels"), taps = c.at("taps"), ld = ch + 3, ws = (taps - 1) * ch + 5;
    const int n = static_cast<int>(p.i.at("slots").size());
    const int n_slots = static_cast<int>(run_lengths(c.at("layout")).size()) + 2;
    DeviceBuffer dx = upload(p.f.at("x")), dw = upload(p.f.at("w")), dwin = upload(p.f.at("window"));
    DeviceBuffer ds = upload(p.i.at("slots")), out = cuda::test::poisoned(static_cast<size_t>(n * ch));
    cuda::conv1d_silu(dx.as<float>(), ld, n, ch, dw.as<float>(), static_cast<int>(taps), dwin.as<float>(),
                      out.as<float>(), stream(), cuda::SlotMap{ds.as<int32_t>(), ws, n_slots});
    std::vector<float> o = download<float>(out.get(), static_cast<size_t>(n * ch));
    const std::vector<float> w = download<float>(dwin.get(), p.f.at("window").size());
    o.insert(o.end(), w.begin(), w.end());
    return o;
  }));
  reg.add(std::move(op));
}

// The recurrence: prepared qkv rows (stride conv_dim + 5), g, beta; the
// states of n_slots slots (stride state_elems + 3). Output: out, then every
// state.
void add_rule_rows(Registry& reg) {
  Op op;
  op.name = "delta_rule_rows";
  uint32_t seed = 4700;
  for (const DeltaNetShape& sh : {DeltaNetShape{2, 4, 32, 32}, DeltaNetShape{1, 3, 40, 8}, DeltaNetShape{2, 2, 256, 16}})
    for (int64_t layout : {0, 1, 2, 3})
      op.cases.push_back(make_case(std::string(layout_name(layout)) + " k=" + std::to_string(sh.n_k_heads) + "x" +
                                       std::to_string(sh.head_k) + " v=" + std::to_string(sh.n_v_heads) + "x" +
                                       std::to_string(sh.head_v),
                                   {{"n_k", sh.n_k_heads}, {"n_v", sh.n_v_heads}, {"head_k", sh.head_k},
                                    {"head_v", sh.head_v}, {"layout", layout}},
                                   seed++));
  op.make = [](const Case& c) {
    const DeltaNetShape sh = delta_case_shape(c);
    const int64_t ld = sh.conv_dim() + 5, vd = sh.value_dim(), ss = sh.state_elems() + 3;
    std::mt19937 rng(c.seed);
    const Batch b = make_batch(c.at("layout"), 100, rng);
    const int n = static_cast<int>(b.slots.size());
    Problem p;
    p.i["slots"] = b.slots;
    p.f["qkv"] = uniform(static_cast<size_t>(n * ld), rng);
    for (int t = 0; t < n; ++t) delta_prepare_qk(sh, p.f["qkv"].data() + t * ld, 1e-6f);
    p.f["g"] = uniform(static_cast<size_t>(n * sh.n_v_heads), rng, -3.f, 0.f);
    p.f["beta"] = uniform(p.f["g"].size(), rng, 0.f, 1.f);
    p.f["S"] = uniform(static_cast<size_t>(b.n_slots * ss), rng, -0.3f, 0.3f);
    std::vector<float> S = p.f["S"], out(static_cast<size_t>(n * vd));
    int row = 0;
    for (size_t q = 0; q < b.runs.size(); ++q) {
      const int64_t gv = static_cast<int64_t>(row) * sh.n_v_heads;
      delta_rule_ref(sh, p.f["qkv"].data() + row * ld, ld, p.f["g"].data() + gv, p.f["beta"].data() + gv, b.runs[q],
                     S.data() + b.slot_of_seq[q] * ss, out.data() + row * vd);
      row += b.runs[q];
    }
    out.insert(out.end(), S.begin(), S.end());
    p.ref.assign(out.begin(), out.end());
    return p;
  };
  op.tol = 2e-5;
  op.impls.push_back(gpu([](const Case& c, const Problem& p) {
    const DeltaNetShape sh = delta_case_shape(c);
    const int64_t ld = sh.conv_dim() + 5, vd = sh.value_dim(), ss = sh.state_elems() + 3;
    const int n = static_cast<int>(p.i.at("slots").size());
    const int n_slots = static_cast<int>(run_lengths(c.at("layout")).size()) + 2;
    DeviceBuffer dq = upload(p.f.at("qkv")), dg = upload(p.f.at("g")), db = upload(p.f.at("beta"));
    DeviceBuffer dS = upload(p.f.at("S")), ds = upload(p.i.at("slots"));
    DeviceBuffer out = cuda::test::poisoned(static_cast<size_t>(n * vd));
    cuda::delta_rule(dq.as<float>(), ld, dg.as<float>(), db.as<float>(), n, sh, dS.as<float>(), out.as<float>(),
                     stream(), cuda::SlotMap{ds.as<int32_t>(), ss, n_slots});
    std::vector<float> o = download<float>(out.get(), static_cast<size_t>(n * vd));
    const std::vector<float> S = download<float>(dS.get(), p.f.at("S").size());
    o.insert(o.end(), S.begin(), S.end());
    return o;
  }));
  reg.add(std::move(op));
}

// Without a device too: every case's reference is finite (no NaN position
// of a cache was read by the reference), and each batch covers its layout's
// tokens with every sequence's tokens contiguous and in position order.
TEST(BackendOpsBatchLayouts, ReferencesAreFiniteAndSequencesContiguous) {
  int checked = 0;
  for (const Op& op : registry().ops()) {
    if (op.name.find("_rows") == std::string::npos) continue;
    for (const Case& c : op.cases) {
      if (c.p.count("layout") == 0) break;  // another op's rows
      const Problem p = op.make(c);
      for (double r : p.ref) ASSERT_TRUE(std::isfinite(r)) << op.name << " " << c.label;
      const auto& slots = p.i.at("slots");
      const std::vector<int> runs = run_lengths(c.at("layout"));
      ASSERT_EQ(slots.size(), static_cast<size_t>(std::accumulate(runs.begin(), runs.end(), 0))) << c.label;
      size_t t = 0;
      for (int n : runs) {
        for (int i = 1; i < n; ++i) ASSERT_EQ(slots[t + i], slots[t]) << op.name << " " << c.label;
        t += n;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

}  // namespace

void register_cuda_batch_ops(Registry& reg) {
  add_attention_rows(reg);
  add_kv_append_rows(reg);
  add_conv_rows(reg);
  add_rule_rows(reg);
}

}  // namespace ms::backend_ops
#endif
