// ResidentExperts: every routed expert uploaded, base + stride per layer.
#include "cuda/backend/resident_experts.h"

#include "cuda/backend/arena_layout.h"
#include "util/error.h"

namespace ms::cuda {

ResidentExperts::ResidentExperts(const ModelWeights& w) {
  size_t total = 0;
  for (const LayerWeights& L : w.layers) {
    const ms::ExpertWeights& e = L.experts;
    total += arena_align_up(e.gate_bytes() * e.n_expert) + arena_align_up(e.up_bytes() * e.n_expert) +
             arena_align_up(e.down_bytes() * e.n_expert);
  }
  arena_ = DeviceArena("experts", total);

  // Experts e = 0..n-1 of one matrix kind, back to back `bytes` apart (one
  // copy when the file already has them so).
  auto upload = [&](const std::vector<const uint8_t*>& src, uint64_t bytes) -> const void* {
    const size_t n = src.size();
    auto* d = static_cast<uint8_t*>(arena_.alloc(bytes * n, kArenaAlign));
    bool contiguous = true;
    for (size_t e = 1; e < n && contiguous; ++e) contiguous = src[e] == src[0] + e * bytes;
    if (contiguous) {
      MS_CUDA_CHECK(cudaMemcpy(d, src[0], bytes * n, cudaMemcpyHostToDevice));
    } else {
      for (size_t e = 0; e < n; ++e)
        MS_CUDA_CHECK(cudaMemcpy(d + e * bytes, src[e], bytes, cudaMemcpyHostToDevice));
    }
    return d;
  };

  layers_.resize(w.layers.size());
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const ms::ExpertWeights& e = w.layers[il].experts;
    ExpertWeights& x = layers_[il];
    x.n_expert = e.n_expert;
    x.gate.type = e.gate_type;
    x.gate.rows = e.n_ff;
    x.gate.cols = e.n_embd;
    x.gate.base = upload(e.gate_, e.gate_bytes());
    x.gate.stride = static_cast<int64_t>(e.gate_bytes());
    x.up.type = e.up_type;
    x.up.rows = e.n_ff;
    x.up.cols = e.n_embd;
    x.up.base = upload(e.up_, e.up_bytes());
    x.up.stride = static_cast<int64_t>(e.up_bytes());
    x.down.type = e.down_type;
    x.down.rows = e.n_embd;
    x.down.cols = e.n_ff;
    x.down.base = upload(e.down_, e.down_bytes());
    x.down.stride = static_cast<int64_t>(e.down_bytes());
  }
}

}  // namespace ms::cuda
