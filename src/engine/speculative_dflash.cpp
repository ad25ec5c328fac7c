#include "engine/speculative_dflash.h"

#include <algorithm>

#include "engine/draft_tree.h"

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
  tree_pos0_ = -1;  // any newer forward supersedes a tree's rows
  // The target went back below what the context holds: so does the context.
  if (e.pos0 < fwd_.context_len()) fwd_.truncate(e.pos0);
  if (e.parents) {  // a tree: its nodes are not positions yet (tree_kept)
    if (e.pos0 != fwd_.context_len()) return;
    tree_rows_.assign(e.layer_rows, e.layer_rows + static_cast<int64_t>(e.n) * F_);
    tree_pos0_ = e.pos0;
    tree_n_ = e.n;
    return;
  }
  // A gap (positions the hook never saw) leaves the context where it is.
  if (e.pos0 != fwd_.context_len() || e.pos0 + e.n > target_->ctx()) return;
  fwd_.add_context(std::span<const float>(e.layer_rows, static_cast<size_t>(int64_t{e.n} * F_)), e.n);
}

void DFlashDrafter::tree_kept(std::span<const int32_t> nodes) {
  const int64_t pos0 = tree_pos0_;
  tree_pos0_ = -1;
  if (pos0 < 0 || pos0 != fwd_.context_len() || nodes.empty() || pos0 + static_cast<int64_t>(nodes.size()) > target_->ctx())
    return;
  std::vector<float> rows;
  rows.reserve(nodes.size() * static_cast<size_t>(F_));
  for (int32_t node : nodes) {
    if (node < 0 || node >= tree_n_) return;  // not this tree's
    rows.insert(rows.end(), tree_rows_.begin() + node * F_, tree_rows_.begin() + (node + 1) * F_);
  }
  fwd_.add_context(rows, static_cast<int>(nodes.size()));
}

void DFlashDrafter::propose(std::span<const int32_t> h, int max_tokens, std::vector<int32_t>& out) {
  out.clear();
  cands_.clear();
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
    if (top_k_ > 0) {
      cands_.emplace_back();
      top_candidates(row, V, top_k_, cands_.back());
    }
  }
}

}  // namespace ms
