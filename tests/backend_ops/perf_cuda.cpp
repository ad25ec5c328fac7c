// `test_backend_ops --perf [substring]`: every CUDA op of the registry timed
// at the benchmark models' shapes (perf_shapes.h), one table row per (model,
// op, shape): microseconds per call and the rate it reaches (GB/s of the
// bytes the op must move at least, TFLOP/s where it multiplies matrices).
// Not a test: it runs only when asked, and asserts nothing.
//
// Timing: 20 calls captured as one CUDA graph (no CPU launch overhead in the
// figure), two untimed replays, then the median of 15 timed replays divided
// by 20. The big read-only operand (weights, KV cache) is rotated over
// copies that together exceed the L2 cache, so rates are of device memory,
// as in a real step. Inputs are constant byte patterns (values do not change
// the kernels' work), routed expert ids random.
#include <cstdio>
#include <string>

#include "backend_ops/perf.h"

#ifndef MOESTREAM_HAVE_CUDA
namespace ms::backend_ops {
int run_perf(const std::string&) {
  std::fprintf(stderr, "test_backend_ops --perf: this build has no CUDA (configure with -DMOESTREAM_CUDA=ON)\n");
  return 2;
}
}  // namespace ms::backend_ops
#else
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend_ops/perf_shapes.h"
#include "cuda/attention.h"
#include "cuda/backend/decode_fused.h"
#include "cuda/backend/prefill_fused.h"
#include "cuda/delta_net.h"
#include "cuda/device.h"
#include "cuda/expert_ffn.h"
#include "cuda/gated_ops.h"
#include "cuda/gemm.h"
#include "cuda/matvec.h"
#include "cuda/ops.h"
#include "cuda/quant_tables.h"
#include "quant/types.h"
#include "util/error.h"

namespace ms::backend_ops {
namespace {

using cuda::DeviceBuffer;

constexpr int kPerGraph = 20;
constexpr int kReps = 15;
constexpr size_t kRotateBytes = size_t{160} << 20;  // over the H100's 50 MB of L2, with room

// Device buffers of one row, kept alive with its launch.
struct Bufs {
  std::vector<DeviceBuffer> held;
  // n bytes filled with `byte` (floats of 0x3c3c3c3c are 0.0115; f16 0x1111
  // and quant blocks of 0x11 are small finite values).
  void* bytes(size_t n, int byte = 0x3c) {
    held.emplace_back(n + 256, "perf buffer");
    MS_CUDA_CHECK(cudaMemset(held.back().get(), byte, n + 256));
    return held.back().get();
  }
  float* f(size_t n, int byte = 0x3c) { return static_cast<float*>(bytes(n * 4, byte)); }
  template <class T>
  T* up(const std::vector<T>& v) {
    held.emplace_back(v.size() * sizeof(T) + 256, "perf buffer");
    MS_CUDA_CHECK(cudaMemcpy(held.back().get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return static_cast<T*>(held.back().get());
  }
  // `copies` copies of n bytes (the rotated operand).
  std::vector<void*> rotated(size_t n, int byte = 0x11) {
    const int copies = static_cast<int>(std::clamp<size_t>((kRotateBytes + n - 1) / std::max<size_t>(n, 1), 1, kPerGraph));
    std::vector<void*> v;
    for (int i = 0; i < copies; ++i) v.push_back(bytes(n, byte));
    return v;
  }
};

struct Row {
  std::string model, op, shape;
  double bytes = 0, flops = 0;  // per call
  // Allocates and returns the launch of call i (i: its place in the graph).
  std::function<std::function<void(int, cudaStream_t)>(Bufs&)> setup;
};

double time_us(cudaStream_t s, const std::function<void(int, cudaStream_t)>& launch) {
  for (int i = 0; i < 2; ++i) launch(i, s);  // first use (IQ tables, lazy module load) outside the capture
  MS_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kPerGraph; ++i) launch(i, s);
  MS_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  MS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cuda::Event a, b;
  for (int w = 0; w < 2; ++w) MS_CUDA_CHECK(cudaGraphLaunch(exec, s));
  std::vector<double> t;
  for (int r = 0; r < kReps; ++r) {
    a.record(s);
    MS_CUDA_CHECK(cudaGraphLaunch(exec, s));
    b.record(s);
    b.synchronize();
    t.push_back(b.ms_since(a) * 1000.0 / kPerGraph);
  }
  MS_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MS_CUDA_CHECK(cudaGraphDestroy(graph));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string x(int64_t a, int64_t b) { return std::to_string(a) + "x" + std::to_string(b); }

std::vector<int32_t> random_ids(int n_tok, int k, int n_expert, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids;
  for (int t = 0; t < n_tok; ++t) {
    std::vector<int32_t> all(static_cast<size_t>(n_expert));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    ids.insert(ids.end(), all.begin(), all.begin() + k);
  }
  return ids;
}

// ---------------------------------------------------------------- rows of one model
void dense_rows(const PerfModel& m, std::vector<Row>& rows) {
  const int64_t d = m.n_embd, qkv = int64_t{m.n_head + 2 * m.n_kv} * m.head_dim, qd = int64_t{m.n_head} * m.head_dim;
  for (int n : {1, 512}) {
    const std::string tok = n == 1 ? " (decode)" : " (prompt " + std::to_string(n) + ")";
    rows.push_back({m.name, "rmsnorm+q8", x(n, d) + tok, 2.0 * n * d * 4 + n * d, 0, [=](Bufs& b) {
      float *in = b.f(n * d), *w = b.f(d), *out = b.f(n * d);
      const cuda::Q8Act q = cuda::q8act_view(b.bytes(cuda::q8act_bytes(d, n)), d, n);
      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) { cuda::rmsnorm(in, w, out, n, d, 1e-6f, s, &q); });
    }});
    if (n == 1)
      rows.push_back({m.name, "rmsnorm_row_q8", x(1, d) + tok, 2.0 * d * 4 + d, 0, [=](Bufs& b) {
        float *in = b.f(d), *w = b.f(d), *out = b.f(d);
        const cuda::Q8Act q = cuda::q8act_view(b.bytes(cuda::q8act_bytes(d, 1)), d, 1);
        return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) { cuda::rmsnorm_row_q8(in, w, out, d, 1e-6f, q, s); });
      }});
    rows.push_back({m.name, "quantize_q8act", x(n, d) + tok, n * d * 5.0, 0, [=](Bufs& b) {
      float* in = b.f(n * d);
      const cuda::Q8Act q = cuda::q8act_view(b.bytes(cuda::q8act_bytes(d, n)), d, n);
      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) { cuda::quantize_q8act(in, d, n, q, s); });
    }});
    const int heads = m.n_head + m.n_kv;
    rows.push_back({m.name, "rope", std::to_string(heads) + "x" + std::to_string(m.head_dim) + " q+k heads" + tok,
                    n * heads * m.head_dim * 8.0, 0, [=](Bufs& b) {
                      float* qk = b.f(n * heads * m.head_dim);
                      std::vector<int32_t> p(static_cast<size_t>(n));
                      std::iota(p.begin(), p.end(), 100);
                      int32_t* pos = b.up(p);
                      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) {
                        cuda::rope(qk, n, heads, m.head_dim, m.n_rot, pos, m.rope_base, RopeScaling(), RopeMode::Neox, s);
                      });
                    }});
    rows.push_back({m.name, "add (residual)", x(n, d) + tok, n * d * 12.0, 0, [=](Bufs& b) {
      float *a = b.f(n * d), *c = b.f(n * d);
      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) { cuda::add(a, c, a, n * d, s); });
    }});
    const int64_t h = int64_t{m.k} * m.n_ff_exp;
    rows.push_back({m.name, "silu_mul", x(n, h) + " (k experts' h)" + tok, n * h * 12.0, 0, [=](Bufs& b) {
      float *g = b.f(n * h), *u = b.f(n * h);
      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) { cuda::silu_mul(g, u, g, n * h, s); });
    }});
    const double emb_row = static_cast<double>(row_bytes(m.embd_type, d));
    rows.push_back({m.name, "embed_rows", std::string(type_name(m.embd_type)) + " " + x(m.n_vocab, d) + tok,
                    n * (emb_row + d * 4.0), 0, [=](Bufs& b) {
                      void* table = b.bytes(static_cast<size_t>(emb_row * m.n_vocab), 0x11);
                      std::vector<int32_t> ids(static_cast<size_t>(n));
                      std::mt19937 rng(5);
                      for (auto& i : ids) i = static_cast<int32_t>(rng() % m.n_vocab);
                      int32_t* dids = b.up(ids);
                      float* out = b.f(n * d);
                      const DType t = m.embd_type;
                      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) {
                        cuda::embed_rows(t, table, m.n_vocab, d, dids, n, out, s);
                      });
                    }});
    // The attention projections: Wq|Wk|Wv stacked, then Wo with the residual.
    for (auto [what, r, c, res] : {std::tuple<const char*, int64_t, int64_t, bool>{"attn qkv", qkv, d, false}, {"attn out", d, qd, true}}) {
      const double wb = static_cast<double>(row_bytes(m.dense_type, c)) * r;
      const std::string shape = x(r, c) + " " + type_name(m.dense_type) + tok;
      rows.push_back({m.name, n == 1 ? std::string("matvec ") + what : std::string("matmul ") + what, shape, wb, 2.0 * r * c * n,
                      [=](Bufs& b) {
                        const std::vector<void*> w = b.rotated(static_cast<size_t>(wb));
                        float *xin = b.f(n * c), *y = b.f(n * r);
                        cuda::MatvecInput in;
                        in.f32 = xin;
                        if (cuda::matvec_takes_q8(m.dense_type)) {
                          in.q8 = cuda::q8act_view(b.bytes(cuda::q8act_bytes(c, n)), c, n);
                          cuda::quantize_q8act(xin, c, n, in.q8, nullptr);
                          MS_CUDA_CHECK(cudaDeviceSynchronize());
                          in.f32 = nullptr;
                        }
                        const DType t = m.dense_type;
                        return std::function<void(int, cudaStream_t)>([=](int i, cudaStream_t s) {
                          const void* wi = w[static_cast<size_t>(i) % w.size()];
                          if (n == 1) {
                            cuda::linear(t, wi, r, c, in, 1, y, res ? y : nullptr, s);
                          } else {
                            cuda::MatrixSet ms;
                            ms.type = t;
                            ms.rows = r;
                            ms.cols = c;
                            ms.base = wi;
                            cuda::MatvecGroups g;
                            g.per_group = n;
                            cuda::matmul(ms, in, g, y, r, res ? y : nullptr, s);
                          }
                        });
                      }});
    }
  }
}

void attention_rows(const PerfModel& m, std::vector<Row>& rows) {
  cuda::AttentionShape s;
  s.n_head = m.n_head;
  s.n_kv = m.n_kv;
  s.head_dim = m.head_dim;
  s.scale = 1.f / std::sqrt(static_cast<float>(m.head_dim));
  const int64_t qd = int64_t{m.n_head} * m.head_dim, kvd = int64_t{m.n_kv} * m.head_dim;
  const std::string heads = std::to_string(m.n_head) + "/" + std::to_string(m.n_kv) + "x" + std::to_string(m.head_dim);
  const RopeMode mode = RopeMode::Neox;
  // The prologue: q/k norm + RoPE + the f16 cache append, one token and a prompt.
  rows.push_back({m.name, "decode_qk_prologue", heads + " f16 cache", (qd + 2 * kvd) * 8.0 + kvd * 4.0, 0, [=](Bufs& b) {
    const int64_t ctx = 4096;
    float* qkv = b.f(qd + 2 * kvd);
    float *qn = b.f(m.head_dim), *kn = b.f(m.head_dim);
    auto* kc = static_cast<uint16_t*>(b.bytes(kvd * ctx * 2, 0x11));
    auto* vc = static_cast<uint16_t*>(b.bytes(kvd * ctx * 2, 0x11));
    int32_t* pos = b.up(std::vector<int32_t>{4000});
    return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t st) {
      cuda::decode_qk_prologue(qkv, m.n_head, m.n_kv, m.head_dim, qn, kn, 1e-6f, m.n_rot, pos, m.rope_base, RopeScaling(),
                               mode, kc, vc, ctx, st);
    });
  }});
  rows.push_back({m.name, "batch_qk_prologue", heads + " f16 cache, 512 tokens", 512 * ((qd + kvd) * 8.0 + kvd * 8.0), 0, [=](Bufs& b) {
    const int n = 512;
    const int64_t ctx = 4096;
    float *q = b.f(n * qd), *k = b.f(n * kvd), *v = b.f(n * kvd), *qn = b.f(m.head_dim), *kn = b.f(m.head_dim);
    auto* kc = static_cast<uint16_t*>(b.bytes(kvd * ctx * 2, 0x11));
    auto* vc = static_cast<uint16_t*>(b.bytes(kvd * ctx * 2, 0x11));
    std::vector<int32_t> p(n);
    std::iota(p.begin(), p.end(), 0);
    int32_t* pos = b.up(p);
    return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t st) {
      cuda::batch_qk_prologue(q, k, v, n, m.n_head, m.n_kv, m.head_dim, qn, kn, 1e-6f, m.n_rot, pos, m.rope_base,
                              RopeScaling(), mode, kc, vc, ctx, st);
    });
  }});
  // Decode attention over an f16 cache at three depths (the long-context
  // kernel past 1024 positions); with gpt-oss's sinks and window where the
  // model has them (its window layers see the last `window` positions only).
  std::vector<int> windows{0};
  if (m.window > 0) windows.push_back(m.window);
  for (int len : {512, 4096, 32768})
    for (int win : windows) {
      const int seen = win > 0 ? std::min(len, win) : len;
      const std::string shape = heads + " kv " + std::to_string(len) + (win > 0 ? " window " + std::to_string(win) : "") +
                                (m.sinks ? " sinks" : "");
      rows.push_back({m.name, "attention_decode f16", shape, 2.0 * kvd * seen * 2, 4.0 * m.n_head * seen * m.head_dim,
                      [=](Bufs& b) {
                        cuda::AttentionShape sh = s;
                        sh.ctx = len;
                        const size_t cache = static_cast<size_t>(kvd * len * 2);
                        const std::vector<void*> kc = b.rotated(cache), vc = b.rotated(cache);
                        float *q = b.f(qd), *out = b.f(qd), *sinks = m.sinks ? b.f(m.n_head) : nullptr;
                        int32_t* dlen = b.up(std::vector<int32_t>{len});
                        const size_t sb = cuda::attention_decode_scratch_bytes(sh, len);
                        void* scratch = b.bytes(sb, 0);
                        cuda::AttentionExtras ex;
                        ex.sinks = sinks;
                        ex.window = win;
                        return std::function<void(int, cudaStream_t)>([=](int i, cudaStream_t st) {
                          const size_t c = static_cast<size_t>(i) % kc.size();
                          cuda::attention_decode(sh, q, static_cast<const uint16_t*>(kc[c]), static_cast<const uint16_t*>(vc[c]),
                                                 len, dlen, out, scratch, st, ex);
                        });
                      }});
    }
  // Prefill of 512 tokens at the start of the cache (causal), f16 cache.
  for (int win : windows) {
    const int n = 512;
    double pairs = 0;
    for (int t = 0; t < n; ++t) pairs += win > 0 ? std::min(t + 1, win) : t + 1;
    rows.push_back({m.name, "attention_prefill f16", heads + " 512 tokens" + (win > 0 ? " window " + std::to_string(win) : ""),
                    n * (qd * 8.0 + kvd * 4.0), 4.0 * m.n_head * m.head_dim * pairs, [=](Bufs& b) {
                      cuda::AttentionShape sh = s;
                      sh.ctx = n;
                      float *q = b.f(n * qd), *out = b.f(n * qd), *sinks = m.sinks ? b.f(m.n_head) : nullptr;
                      auto* kc = static_cast<uint16_t*>(b.bytes(kvd * n * 2, 0x11));
                      auto* vc = static_cast<uint16_t*>(b.bytes(kvd * n * 2, 0x11));
                      cuda::AttentionExtras ex;
                      ex.sinks = sinks;
                      ex.window = win;
                      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t st) {
                        cuda::attention_prefill(sh, q, kc, vc, n, 0, out, st, ex);
                      });
                    }});
  }
  // KV append of one token, f16.
  rows.push_back({m.name, "kv_append f16", heads + " one token", kvd * 2 * (4.0 + 2.0), 0, [=](Bufs& b) {
    const int64_t ctx = 4096;
    float *k = b.f(kvd), *v = b.f(kvd);
    auto* kc = static_cast<uint16_t*>(b.bytes(kvd * ctx * 2, 0x11));
    auto* vc = static_cast<uint16_t*>(b.bytes(kvd * ctx * 2, 0x11));
    int32_t* pos = b.up(std::vector<int32_t>{100});
    return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t st) {
      cuda::kv_append(k, v, 1, m.n_kv, m.head_dim, pos, kc, vc, ctx, st);
    });
  }});
}

void moe_rows(const PerfModel& m, std::vector<Row>& rows) {
  const int64_t d = m.n_embd, ff = m.n_ff_exp;
  const int E = m.n_expert, k = m.k;
  const std::string ex = std::to_string(E) + " experts top-" + std::to_string(k);
  // Router: f32 weights, the fused one-launch router at decode; the top-k
  // alone for a prompt's logits.
  rows.push_back({m.name, "router_decode_f32", x(E, d) + " " + ex, E * d * 4.0, 2.0 * E * d, [=](Bufs& b) {
    float *w = b.f(E * d, 0x3c), *xin = b.f(d), *logits = b.f(E), *wts = b.f(k);
    auto* ids = static_cast<int32_t*>(b.bytes(4 * k, 0));
    auto* counter = static_cast<uint32_t*>(b.bytes(16, 0));
    const RouterMode mode = m.router_mode;
    const bool ok = cuda::router_decode_supported(DType::F32, E, d, k);
    return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) {
      if (!ok) throw Error("router_decode_f32 does not take this shape");
      cuda::router_decode_f32(w, xin, E, d, k, mode, m.renorm, logits, ids, wts, counter, s);
    });
  }});
  rows.push_back({m.name, "router_topk", "512 tokens, " + ex, 512.0 * E * 4, 0, [=](Bufs& b) {
    float *logits = b.f(512 * E), *wts = b.f(512 * k);
    auto* ids = static_cast<int32_t*>(b.bytes(4 * 512 * k, 0));
    const RouterMode mode = m.router_mode;
    return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) {
      cuda::router_topk(logits, 512, E, k, mode, m.renorm, ids, wts, s);
    });
  }});
  // The routed experts of one layer (all of them allocated, ids random): one
  // token (decode: the fused launches), and prompts of 64 and 512 tokens.
  const double gate_b = static_cast<double>(row_bytes(m.expert_type, d)) * ff;
  const double down_b = static_cast<double>(row_bytes(m.down_type, ff)) * d;
  const double per_expert = 2 * gate_b + down_b;
  for (int n : {1, 64, 512}) {
    const int touched = std::min(E, n * k);  // experts whose weights a call reads, at most
    const std::string shape = std::string(type_name(m.expert_type)) + "/" + type_name(m.down_type) + " " + x(ff, d) + ", " +
                              ex + (m.biases ? " biased" : "") + ", " + std::to_string(n) + (n == 1 ? " token" : " tokens");
    rows.push_back({m.name, "expert_ffn", shape, per_expert * touched, 6.0 * ff * d * n * k, [=](Bufs& b) {
      std::vector<int32_t> ids = random_ids(n, k, E, 7 + n);
      void* gate = b.bytes(static_cast<size_t>(gate_b * E), 0x11);
      void* up = b.bytes(static_cast<size_t>(gate_b * E), 0x11);
      void* down = b.bytes(static_cast<size_t>(down_b * E), 0x11);
      cuda::ExpertWeights w;
      w.n_expert = E;
      w.gate.type = w.up.type = m.expert_type;
      w.down.type = m.down_type;
      w.gate.rows = w.up.rows = ff;
      w.gate.cols = w.up.cols = d;
      w.down.rows = d;
      w.down.cols = ff;
      w.gate.base = gate;
      w.up.base = up;
      w.down.base = down;
      w.gate.stride = w.up.stride = static_cast<int64_t>(gate_b);
      w.down.stride = static_cast<int64_t>(down_b);
      if (m.biases) {
        w.gate_bias = b.f(E * ff, 0);
        w.up_bias = b.f(E * ff, 0);
        w.down_bias = b.f(E * d, 0);
        w.clamped_swiglu = true;
      }
      float *xin = b.f(n * d), *out = b.f(n * d), *wts = b.f(n * k);
      int32_t* dids = b.up(ids);
      const cuda::Q8Act xq = cuda::q8act_view(b.bytes(cuda::q8act_bytes(d, n)), d, n);
      cuda::quantize_q8act(xin, d, n, xq, nullptr);
      MS_CUDA_CHECK(cudaDeviceSynchronize());
      const size_t sb = cuda::expert_ffn_scratch_bytes(w, n, k);
      void* scratch = b.bytes(sb, 0);
      const bool q8 = cuda::matvec_takes_q8(m.expert_type);
      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) {
        cuda::expert_ffn(w, xin, q8 ? &xq : nullptr, n, k, dids, wts, out, out, scratch, sb, s);
      });
    }});
  }
  // The decode step's two expert launches on their own: gate+up of the k
  // experts (SwiGLU fused), then down with the weighted sum.
  rows.push_back({m.name, "matvec_glu", std::string(type_name(m.expert_type)) + " " + x(ff, d) + " x " + std::to_string(k) +
                                            " experts, 1 token",
                  2 * gate_b * k, 4.0 * ff * d * k, [=](Bufs& b) {
                    void* gate = b.bytes(static_cast<size_t>(gate_b * E), 0x11);
                    void* up = b.bytes(static_cast<size_t>(gate_b * E), 0x11);
                    int32_t* ids = b.up(random_ids(1, k, E, 11));
                    float *xin = b.f(d), *y = b.f(k * ff);
                    cuda::MatvecInput in;
                    in.f32 = xin;
                    if (cuda::matvec_takes_q8(m.expert_type)) {
                      in.q8 = cuda::q8act_view(b.bytes(cuda::q8act_bytes(d, 1)), d, 1);
                      cuda::quantize_q8act(xin, d, 1, in.q8, nullptr);
                      MS_CUDA_CHECK(cudaDeviceSynchronize());
                    }
                    cuda::MatrixSet g, u;
                    g.type = u.type = m.expert_type;
                    g.rows = u.rows = ff;
                    g.cols = u.cols = d;
                    g.base = gate;
                    u.base = up;
                    g.stride = u.stride = static_cast<int64_t>(gate_b);
                    cuda::MatvecGroups gr;
                    gr.max_groups = k;
                    gr.per_group = 1;
                    gr.x_div = k;
                    gr.n_expert = E;
                    gr.expert = ids;
                    return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) {
                      cuda::matvec_glu(g, u, in, gr, y, ff, s);
                    });
                  }});
  rows.push_back({m.name, "matvec_combine", std::string(type_name(m.down_type)) + " " + x(d, ff) + " x " + std::to_string(k) +
                                                " experts, 1 token",
                  down_b * k, 2.0 * ff * d * k, [=](Bufs& b) {
                    void* down = b.bytes(static_cast<size_t>(down_b * E), 0x11);
                    int32_t* ids = b.up(random_ids(1, k, E, 13));
                    float *h = b.f(k * ff), *wts = b.f(k), *out = b.f(d);
                    cuda::MatvecInput in;
                    in.f32 = h;
                    if (cuda::matvec_takes_q8(m.down_type)) {
                      in.q8 = cuda::q8act_view(b.bytes(cuda::q8act_bytes(ff, k)), ff, k);
                      cuda::quantize_q8act(h, ff, k, in.q8, nullptr);
                      MS_CUDA_CHECK(cudaDeviceSynchronize());
                    }
                    cuda::MatrixSet w;
                    w.type = m.down_type;
                    w.rows = d;
                    w.cols = ff;
                    w.base = down;
                    w.stride = static_cast<int64_t>(down_b);
                    return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) {
                      cuda::matvec_combine(w, in, k, ids, E, wts, out, out, s);
                    });
                  }});
  rows.push_back({m.name, "moe_combine", std::to_string(k) + " x " + std::to_string(d) + ", 512 tokens",
                  512.0 * d * 4 * (k + 2), 0, [=](Bufs& b) {
                    float *y = b.f(512 * k * d), *w = b.f(512 * k), *out = b.f(512 * d);
                    return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) {
                      cuda::moe_combine(y, w, 512, k, d, out, out, s);
                    });
                  }});
  rows.push_back({m.name, "moe_group_by_expert", "512 tokens, " + ex, 512.0 * k * 4 * 3, 0, [=](Bufs& b) {
    int32_t* ids = b.up(random_ids(512, k, E, 3));
    auto* ng = static_cast<int32_t*>(b.bytes(16, 0));
    auto* ge = static_cast<int32_t*>(b.bytes(4 * 512 * k, 0));
    auto* off = static_cast<int32_t*>(b.bytes(4 * (512 * k + 1), 0));
    auto* list = static_cast<int32_t*>(b.bytes(4 * 512 * k, 0));
    return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) {
      cuda::moe_group_by_expert(ids, 512 * k, E, ng, ge, off, list, s);
    });
  }});
  if (m.biases)
    rows.push_back({m.name, "add_row_bias", x(512, d), 512.0 * d * 8, 0, [=](Bufs& b) {
      float *xin = b.f(512 * d), *bias = b.f(d, 0);
      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) { cuda::add_row_bias(xin, bias, 512, d, s); });
    }});
}

// Gated DeltaNet layers and the gated attention's element-wise ops (qwen35moe).
void delta_rows(const PerfModel& m, std::vector<Row>& rows) {
  if (m.delta.n_k_heads == 0) return;
  const DeltaNetShape sh = m.delta;
  const int64_t cd = sh.conv_dim(), vd = sh.value_dim(), nv = sh.n_v_heads;
  const double state = static_cast<double>(sh.state_elems()) * 4;
  const std::string heads = std::to_string(sh.n_k_heads) + "x" + std::to_string(sh.head_k) + " k, " +
                            std::to_string(sh.n_v_heads) + "x" + std::to_string(sh.head_v) + " v";
  for (int n : {1, 512}) {
    const std::string tok = n == 1 ? ", 1 token" : ", 512 tokens";
    rows.push_back({m.name, "conv1d_silu", std::to_string(cd) + " channels, 4 taps" + tok, n * cd * 8.0, 0, [=](Bufs& b) {
      float *xin = b.f(n * cd), *w = b.f(cd * 4), *win = b.f(3 * cd), *out = b.f(n * cd);
      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) { cuda::conv1d_silu(xin, cd, n, cd, w, 4, win, out, s); });
    }});
    rows.push_back({m.name, "delta_prepare_qk", heads + tok, n * (cd - vd) * 8.0, 0, [=](Bufs& b) {
      float* qkv = b.f(n * cd);
      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) { cuda::delta_prepare_qk(qkv, cd, n, sh, 1e-6f, s); });
    }});
    rows.push_back({m.name, "delta_gates", std::to_string(nv) + " heads" + tok, n * nv * 16.0, 0, [=](Bufs& b) {
      float *a = b.f(n * nv), *bb = b.f(n * nv), *A = b.f(nv, 0), *dt = b.f(nv), *g = b.f(n * nv), *beta = b.f(n * nv);
      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) { cuda::delta_gates(a, bb, A, dt, n, nv, g, beta, s); });
    }});
    // The recurrence: the token kernel at decode, the prompt path (chunked) for 512.
    rows.push_back({m.name, n == 1 ? "delta_rule" : "delta_rule_prompt (chunked)", heads + tok, 2 * state + n * (cd + vd) * 4.0,
                    6.0 * n * nv * sh.head_k * sh.head_v, [=](Bufs& b) {
                      float *qkv = b.f(n * cd), *g = b.f(n * nv, 0), *beta = b.f(n * nv), *S = b.f(sh.state_elems(), 0);
                      float* out = b.f(n * vd);
                      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) {
                        if (n == 1) cuda::delta_rule(qkv, cd, g, beta, n, sh, S, out, s);
                        else cuda::delta_rule_prompt(qkv, cd, g, beta, n, sh, S, out, s);
                      });
                    }});
    rows.push_back({m.name, "gated_rmsnorm", std::to_string(nv) + "x" + std::to_string(sh.head_v) + tok, n * vd * 12.0, 0,
                    [=](Bufs& b) {
                      float *xin = b.f(n * vd), *z = b.f(n * vd), *w = b.f(sh.head_v), *out = b.f(n * vd);
                      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) {
                        cuda::gated_rmsnorm(xin, z, w, out, n * nv, sh.head_v, 1e-6f, s);
                      });
                    }});
    const int64_t qd = int64_t{m.n_head} * m.head_dim;
    rows.push_back({m.name, "split_q_gate", std::to_string(m.n_head) + "x" + std::to_string(m.head_dim) + tok, n * qd * 16.0, 0,
                    [=](Bufs& b) {
                      float *src = b.f(n * 2 * qd), *dst = b.f(n * qd), *gate = b.f(n * qd);
                      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) {
                        cuda::split_q_gate(src, n, m.n_head, m.head_dim, 0, dst, gate, s);
                      });
                    }});
    rows.push_back({m.name, "scale_rows_sigmoid", x(n, m.n_ff_exp) + " (shared expert gate)" + tok, n * m.n_ff_exp * 8.0, 0,
                    [=](Bufs& b) {
                      float *xin = b.f(n * m.n_ff_exp), *score = b.f(n);
                      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) {
                        cuda::scale_rows_sigmoid(xin, score, n, m.n_ff_exp, s);
                      });
                    }});
    rows.push_back({m.name, "mul_sigmoid", std::to_string(qd) + tok, n * qd * 12.0, 0, [=](Bufs& b) {
      float *xin = b.f(n * qd), *gate = b.f(n * qd);
      return std::function<void(int, cudaStream_t)>([=](int, cudaStream_t s) { cuda::mul_sigmoid(xin, gate, n * qd, s); });
    }});
  }
}

void print_row(const Row& r, double us) {
  const double gbs = r.bytes > 0 ? r.bytes / (us * 1e-6) / 1e9 : 0;
  const double tfs = r.flops > 0 ? r.flops / (us * 1e-6) / 1e12 : 0;
  char g[32] = "-", t[32] = "-";
  if (gbs > 0) std::snprintf(g, sizeof g, "%.0f", gbs);
  if (tfs > 0) std::snprintf(t, sizeof t, "%.2f", tfs);
  std::printf("| %s | %s | %s | %.1f | %s | %s |\n", r.model.c_str(), r.op.c_str(), r.shape.c_str(), us, g, t);
  std::fflush(stdout);
}

}  // namespace

int run_perf(const std::string& filter) {
  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::fprintf(stderr, "test_backend_ops --perf: no CUDA device (%s)\n", why.c_str());
    return 2;
  }
  cuda::prepare_quant_tables();
  std::vector<Row> rows;
  for (const PerfModel& m : perf_models()) {
    dense_rows(m, rows);
    attention_rows(m, rows);
    moe_rows(m, rows);
    delta_rows(m, rows);
  }
  std::printf("device: %s\n\n", cuda::describe(cuda::device_info(0)).c_str());
  std::printf("| model | op | shape | us/call | GB/s | TFLOP/s |\n|---|---|---|---:|---:|---:|\n");
  cuda::Stream stream;
  int failed = 0;
  for (const Row& r : rows) {
    if (!filter.empty() && (r.model + " " + r.op + " " + r.shape).find(filter) == std::string::npos) continue;
    try {
      Bufs b;
      const auto launch = r.setup(b);
      MS_CUDA_CHECK(cudaDeviceSynchronize());
      print_row(r, time_us(stream.get(), launch));
    } catch (const std::exception& e) {
      // A capture left open by a throwing launch is ended before the next row.
      cudaGraph_t g = nullptr;
      if (cudaStreamEndCapture(stream.get(), &g) == cudaSuccess && g) cudaGraphDestroy(g);
      (void)cudaGetLastError();
      std::printf("| %s | %s | %s | failed: %s | | |\n", r.model.c_str(), r.op.c_str(), r.shape.c_str(), e.what());
      ++failed;
    }
  }
  return failed ? 1 : 0;
}

}  // namespace ms::backend_ops
#endif
