#include "engine/speculative_dflash.h"

#include <algorithm>

#include "util/error.h"

namespace ms {

DFlashDrafter::DFlashDrafter(Backend& backend, const KvCache& target, const DFlashWeights& w,
                             const ModelWeights& target_w, ThreadPool& pool, KvType type, bool own_hook)
    : be_(backend),
      own_hook_(own_hook),
      target_(&target),
      fwd_(w, target_w, pool, target.ctx(), type),
      F_(static_cast<int64_t>(w.cfg.target_layers.size()) * w.cfg.n_embd) {
  if (!own_hook_) return;
  be_.set_hidden_layers(w.cfg.target_layers);
  be_.set_hidden_hook([this](const HiddenEvent& e) { on_hidden(e); });
}

DFlashDrafter::~DFlashDrafter() {
  if (!own_hook_) return;
  be_.set_hidden_hook(nullptr);
  be_.set_hidden_layers({});
}

void DFlashDrafter::on_hidden(const HiddenEvent& e) {
  if (e.kv != target_ || e.n <= 0 || !e.layer_rows || int64_t{e.n_layer_rows} * fwd_.config().n_embd != F_) return;
  // The target went back below what the context holds: so does the context.
  if (e.pos0 < fwd_.context_len()) fwd_.truncate(e.pos0);
  // A gap (positions the hook never saw) leaves the context where it is.
  if (e.pos0 != fwd_.context_len() || e.pos0 + e.n > target_->ctx()) return;
  fwd_.add_context(std::span<const float>(e.layer_rows, static_cast<size_t>(int64_t{e.n} * F_)), e.n);
}

void DFlashDrafter::propose(std::span<const int32_t> h, int max_tokens, std::vector<int32_t>& out) {
  out.clear();
  const int64_t N = target_->n_past();  // the position of h.back(), the last sampled token
  if (max_tokens <= 0 || h.empty()) return;
  // Positions past N are a verify's rejected drafts (or a stop's leftovers).
  if (fwd_.context_len() > N) fwd_.truncate(N);
  if (fwd_.context_len() < N) return;  // positions the hook never saw
  const int k = std::min(max_tokens, fwd_.config().block_size - 1);
  block_.assign(static_cast<size_t>(k) + 1, fwd_.config().mask_token);
  block_[0] = h.back();
  fwd_.draft_block(block_, logits_);
  ++passes_;
  const int64_t V = fwd_.n_vocab();
  for (int j = 0; j < k; ++j) {
    const float* row = logits_.data() + j * V;
    out.push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));
  }
}

}  // namespace ms
