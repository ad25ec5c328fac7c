// CudaBackend's MTP entry points (cuda_backend.h): forward()'s hidden rows
// back to the host for the hook, and the MTP block on the CPU.
#include "cuda/backend/mtp_on_host.h"

#include "cpu/ops.h"
#include "cuda/backend/cuda_backend_impl.h"
#include "util/error.h"

namespace ms {

CudaBackend::MtpOnHost& CudaBackend::mtp_host() const {
  if (!mtp_) mtp_ = std::make_unique<MtpOnHost>();
  return *mtp_;
}

bool CudaBackend::supports_mtp() const { return !impl_->w.mtp.empty(); }

void CudaBackend::set_hidden_hook(HiddenHook hook) { mtp_host().hook = std::move(hook); }

void CudaBackend::MtpOnHost::emit(const KvCache& kv, int64_t pos0, int n, const float* raw, const float* norm,
                                  int64_t D, float eps) {
  rows.resize(static_cast<size_t>(n * D));
  for (int t = 0; t < n; ++t) rmsnorm(raw + t * D, norm, rows.data() + t * D, D, eps);
  hook({&kv, pos0, n, rows.data()});
}

void CudaBackend::emit_hidden(const KvCache& kv, int64_t pos0, int n) {
  if (!mtp_ || !mtp_->hook) return;
  Impl& m = *impl_;
  const int64_t D = m.c.n_embd;
  std::vector<float>& raw = mtp_->pass_rows;
  raw.resize(static_cast<size_t>(n * D));
  // The residual stream after the last layer (the head norms it into x and
  // leaves h as it was), normed on the host as the head does on the device.
  MS_CUDA_CHECK(cudaMemcpyAsync(raw.data(), m.h, raw.size() * sizeof(float), cudaMemcpyDeviceToHost, m.stream));
  MS_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  mtp_->emit(kv, pos0, n, raw.data(), m.w.output_norm.f32(), D, m.c.rms_eps);
}

namespace {
CpuBackend& host_block(CudaBackend::Options& opt, const ModelWeights& w, std::unique_ptr<ThreadPool>& own,
                       std::unique_ptr<CpuBackend>& cpu) {
  if (w.mtp.empty()) throw Error(kNoMtpBlock);
  if (!cpu) {
    ThreadPool* pool = opt.tiered.pool;
    if (!pool) pool = (own = std::make_unique<ThreadPool>()).get();
    cpu = std::make_unique<CpuBackend>(w, *pool);
  }
  return *cpu;
}
}  // namespace

KvCache CudaBackend::make_mtp_cache(int64_t ctx, KvType type) const {
  MtpOnHost& h = mtp_host();
  return host_block(impl_->opt, impl_->w, h.own_pool, h.cpu).make_mtp_cache(ctx, type);
}

// The block's layer on the host; its head norm there too (the state fed
// back), and the output head on the device: the head is most of a draft's
// bytes (n_vocab rows), the layer a few percent of them.
void CudaBackend::forward_mtp(KvCache& kv, std::span<const float> hidden, std::span<const int32_t> tokens,
                              std::vector<float>& logits, std::vector<float>& hidden_out) {
  MtpOnHost& h = mtp_host();
  Impl& m = *impl_;
  CpuBackend& cpu = host_block(m.opt, m.w, h.own_pool, h.cpu);
  const MtpWeights& b = m.w.mtp.front();
  if (b.shared_head_head) {  // its own head: not uploaded, so all of it on the host
    cpu.forward_mtp(kv, hidden, tokens, logits, hidden_out);
    return;
  }
  cpu.forward_mtp_block(kv, hidden, tokens, h.last_row);
  const int64_t D = m.c.n_embd;
  const TensorView& norm = b.shared_head_norm ? b.shared_head_norm : m.w.output_norm;
  hidden_out.resize(static_cast<size_t>(D));
  rmsnorm(h.last_row.data(), norm.f32(), hidden_out.data(), D, m.c.rms_eps);
  MS_CUDA_CHECK(cudaSetDevice(m.opt.device));
  if (!h.head_norm.get()) {
    h.head_norm = cuda::DeviceBuffer(static_cast<size_t>(D) * sizeof(float), "MTP head norm");
    MS_CUDA_CHECK(cudaMemcpy(h.head_norm.get(), norm.f32(), static_cast<size_t>(D) * sizeof(float),
                             cudaMemcpyHostToDevice));
  }
  // Row 0 of the hidden state is free between forwards (each starts by
  // embedding into it): the head's input goes there, as the target's does.
  MS_CUDA_CHECK(cudaMemcpyAsync(m.h, h.last_row.data(), static_cast<size_t>(D) * sizeof(float),
                                cudaMemcpyHostToDevice, m.stream));
  m.norm_rows(m.h, static_cast<const float*>(h.head_norm.get()), 1);
  m.project(m.weights.output, m.x, &m.xq8, 1, m.logits, nullptr);
  logits.resize(static_cast<size_t>(m.c.n_vocab));
  m.copy_logits(logits.data(), 1);
}

}  // namespace ms
