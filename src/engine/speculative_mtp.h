// The MTP drafter (`--spec mtp`, docs/speculative.md): drafts with the
// multi-token-prediction block that Qwen3.5/3.6 files carry
// (blk.N.nextn.*, MtpWeights), run by the backend (Backend::forward_mtp).
//
// The block at position p takes the target's final hidden state of token p
// (after the output norm: what the output head reads, as vLLM feeds it) and
// the embedding of token p + 1, and predicts token p + 2. So:
//   - every forward of the target hands this drafter its tokens' hidden
//     states (Backend::set_hidden_hook), kept until the block has read them;
//   - at a draft, the block first catches up over the positions the target
//     kept since the last draft (one batched pass: pairs (hidden_p, x_(p+1))
//     up to the last sampled token), whose last row gives draft 0;
//   - draft j > 0 feeds the block its own output state and draft j - 1
//     (one pass each), then the block's cache goes back to the sequence's
//     length: the chained entries were made from drafted states, and the
//     next round recomputes those positions from the target's.
// Its own cache (make_mtp_cache) follows the sequence back when the target
// is rolled back below what the block has read (a hook event at a lower
// position), and drops entries whose token the sequence no longer has. Drafts are the block's argmax (greedy); the verify decides what
// is kept, so the output is plain decoding's whatever the block proposes.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "engine/speculative.h"

namespace ms {

class MtpDrafter : public Drafter {
 public:
  // Drafts for the sequence whose cache is `target` (history[0] at position
  // target.n_past() - (history.size() - 1) when propose is called), watching
  // its forwards through backend's hidden hook (installed here, removed by the
  // destructor: one MtpDrafter per backend at a time). Throws ms::Error when
  // the model has no MTP block or the backend cannot run it.
  // own_hook false: the backend's hook is left alone and the owner hands
  // this drafter the backend's hidden events through observe() (several
  // drafters over one backend, each for its own sequence: the server's slots).
  MtpDrafter(Backend& backend, const KvCache& target, KvType type = KvType::F16, bool own_hook = true);
  ~MtpDrafter() override;
  MtpDrafter(const MtpDrafter&) = delete;
  MtpDrafter& operator=(const MtpDrafter&) = delete;

  // Up to max_tokens drafts; none when the target's hidden states of the
  // positions the block has not read are missing (a sequence whose prompt
  // ran before this drafter existed).
  void propose(std::span<const int32_t> history, int max_tokens, std::vector<int32_t>& out) override;
  std::string name() const override { return "mtp"; }
  // A hidden event of the backend (events of other sequences are ignored).
  void observe(const HiddenEvent& e) { on_hidden(e); }

  // The block's cache: positions read from the target's states (tests).
  const KvCache& cache() const { return kv_; }
  // Forwards of the block so far (catch-ups and chained drafts).
  int64_t passes() const { return passes_; }

 private:
  void on_hidden(const HiddenEvent& e);
  int64_t rows_end() const { return rows_pos0_ + static_cast<int64_t>(rows_.size()) / D_; }

  Backend& be_;
  bool own_hook_;
  const KvCache* target_;
  KvCache kv_;
  int64_t D_;
  int64_t passes_ = 0;
  // The target's hidden states of positions [rows_pos0_, rows_end()).
  std::vector<float> rows_;
  int64_t rows_pos0_ = 0;
  std::vector<float> logits_, state_, prev_state_, gap_rows_;
  std::vector<int32_t> tokens_;
  std::vector<int32_t> consumed_;  // [kv_.n_past()]: the token entry p read (x_(p+1))
};

}  // namespace ms
