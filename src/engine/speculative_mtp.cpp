#include "engine/speculative_mtp.h"

#include <algorithm>

#include "util/error.h"

namespace ms {

MtpDrafter::MtpDrafter(Backend& backend, const KvCache& target, KvType type, bool own_hook)
    : be_(backend), own_hook_(own_hook), target_(&target), kv_(backend.make_mtp_cache(target.ctx(), type)),
      D_(backend.config().n_embd) {
  if (!be_.supports_mtp()) throw Error(kNoMtpBlock);
  if (own_hook_) be_.set_hidden_hook([this](const HiddenEvent& e) { on_hidden(e); });
}

MtpDrafter::~MtpDrafter() {
  if (own_hook_) be_.set_hidden_hook(nullptr);
}

void MtpDrafter::on_hidden(const HiddenEvent& e) {
  if (e.kv != target_ || e.n <= 0) return;
  // The target went back below what the block has read: so does the block.
  if (e.pos0 < kv_.n_past()) {
    kv_.truncate(e.pos0);
    consumed_.resize(static_cast<size_t>(e.pos0));
  }
  // Rows from e.pos0 on replace what was there (a rolled-back verify's).
  if (e.pos0 < rows_pos0_ || e.pos0 > rows_end()) {
    rows_.clear();
    rows_pos0_ = e.pos0;
  } else {
    rows_.resize(static_cast<size_t>((e.pos0 - rows_pos0_) * D_));
  }
  rows_.insert(rows_.end(), e.rows, e.rows + static_cast<int64_t>(e.n) * D_);
}

void MtpDrafter::propose(std::span<const int32_t> h, int max_tokens, std::vector<int32_t>& out) {
  out.clear();
  const int64_t N = target_->n_past();  // the position of h.back(), the last sampled token
  const int64_t base = N - (static_cast<int64_t>(h.size()) - 1);
  if (max_tokens <= 0 || h.empty() || N < 1 || base < 0) return;
  // The block reads pairs (hidden_p, x_(p+1)) for p = m .. N-1; at least the
  // last one again, whose output is draft 0. An entry whose token is no
  // longer the sequence's (the caller went back and on differently) goes too.
  int64_t keep = std::min(kv_.n_past(), N - 1);
  for (int64_t p = std::max<int64_t>(base - 1, 0); p < keep; ++p)
    if (consumed_[static_cast<size_t>(p)] != h[static_cast<size_t>(p + 1 - base)]) keep = p;
  if (keep < kv_.n_past()) kv_.truncate(keep);
  consumed_.resize(static_cast<size_t>(kv_.n_past()));
  const int64_t m = kv_.n_past();
  if (rows_end() < N || m + 1 < base) return;
  tokens_.clear();
  for (int64_t p = m; p < N; ++p) tokens_.push_back(h[static_cast<size_t>(p + 1 - base)]);
  const auto cnt = static_cast<size_t>(N - m);
  // Hidden states of positions before rows_pos0_ (the caller went back past
  // what is kept) are gone: zeros stand in for them (the block then reads
  // the token alone there). Drafts only; the verify keeps the output exact.
  std::span<const float> in;
  if (m >= rows_pos0_) {
    in = std::span<const float>(rows_.data() + (m - rows_pos0_) * D_, cnt * static_cast<size_t>(D_));
  } else {
    const int64_t r0 = std::min(rows_pos0_, N);
    gap_rows_.assign(static_cast<size_t>((r0 - m) * D_), 0.0f);
    gap_rows_.insert(gap_rows_.end(), rows_.begin(), rows_.begin() + (N - r0) * D_);
    in = gap_rows_;
  }
  be_.forward_mtp(kv_, in, tokens_, logits_, state_);
  consumed_.insert(consumed_.end(), tokens_.begin(), tokens_.end());
  ++passes_;
  for (int j = 0;; ++j) {
    const auto best = std::max_element(logits_.begin(), logits_.end()) - logits_.begin();
    out.push_back(static_cast<int32_t>(best));
    if (j + 1 >= max_tokens || kv_.n_past() >= kv_.ctx()) break;
    std::swap(prev_state_, state_);
    const int32_t d = out.back();
    be_.forward_mtp(kv_, prev_state_, std::span<const int32_t>(&d, 1), logits_, state_);
    ++passes_;
  }
  // The chained entries came from drafted states: the next round recomputes
  // those positions from the target's, which the verify is about to give.
  kv_.truncate(N);
  consumed_.resize(static_cast<size_t>(N));
  // Row N-1 stays: entry N-1 is read again if token N turns out different.
  const int64_t drop = std::max<int64_t>(0, N - 1 - rows_pos0_);
  rows_.erase(rows_.begin(), rows_.begin() + drop * D_);
  rows_pos0_ += drop;
}

}  // namespace ms
