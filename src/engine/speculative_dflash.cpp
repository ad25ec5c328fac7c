#include "engine/speculative_dflash.h"

#include <algorithm>

#include "util/error.h"

namespace ms {

DFlashDrafter::DFlashDrafter(Backend& backend, const KvCache& target, const DFlashWeights& w,
                             const ModelWeights& target_w, ThreadPool& pool, KvType type)
    : be_(backend),
      target_(&target),
      fwd_(w, target_w, pool, target.ctx(), type),
      F_(static_cast<int64_t>(w.cfg.target_layers.size()) * w.cfg.n_embd) {
  be_.set_hidden_layers(w.cfg.target_layers);
  be_.set_hidden_hook([this](const HiddenEvent& e) { on_hidden(e); });
}

DFlashDrafter::~DFlashDrafter() {
  be_.set_hidden_hook(nullptr);
  be_.set_hidden_layers({});
}

void DFlashDrafter::on_hidden(const HiddenEvent& e) {
  if (e.kv != target_ || e.n <= 0 || !e.layer_rows || int64_t{e.n_layer_rows} * fwd_.config().n_embd != F_) return;
  // The target went back below what the context holds: so does the context.
  if (e.pos0 < fwd_.context_len()) fwd_.truncate(e.pos0);
  // Rows from e.pos0 on replace what was there (a rolled-back verify's).
  if (e.pos0 < rows_pos0_ || e.pos0 > rows_end()) {
    rows_.clear();
    rows_pos0_ = e.pos0;
  } else {
    rows_.resize(static_cast<size_t>((e.pos0 - rows_pos0_) * F_));
  }
  rows_.insert(rows_.end(), e.layer_rows, e.layer_rows + int64_t{e.n} * F_);
}

void DFlashDrafter::propose(std::span<const int32_t> h, int max_tokens, std::vector<int32_t>& out) {
  out.clear();
  const int64_t N = target_->n_past();  // the position of h.back(), the last sampled token
  if (max_tokens <= 0 || h.empty()) return;
  if (fwd_.context_len() > N) fwd_.truncate(N);
  const int64_t L = fwd_.context_len();
  if (L < N) {
    if (L < rows_pos0_ || rows_end() < N) return;  // rows the hook never saw
    const auto first = static_cast<size_t>((L - rows_pos0_) * F_);
    fwd_.add_context(std::span<const float>(rows_.data() + first, static_cast<size_t>((N - L) * F_)),
                     static_cast<int>(N - L));
  }
  // Fused rows are not needed again (a rerun below N sends new ones).
  const int64_t drop = std::min(N, rows_end()) - rows_pos0_;
  if (drop > 0) {
    rows_.erase(rows_.begin(), rows_.begin() + drop * F_);
    rows_pos0_ += drop;
  }
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
