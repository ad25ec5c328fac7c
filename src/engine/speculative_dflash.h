// The DFlash drafter (`--spec dflash -md FILE`, docs/speculative.md): a
// block drafter conditioned on the target's hidden states
// (model/dflash_weights.h, engine/dflash_forward.h).
//
//   - every forward of the target hands it the residual stream entering the
//     target layers the drafter reads (Backend::set_hidden_layers and the
//     hidden hook), which it fuses into its context at once (no rows are
//     kept: a long prompt costs the drafter's K/V, not its features);
//   - at a proposal with the target's cache at N positions (the last sampled
//     token, not yet run, goes at N), the context is cut back to N (the
//     positions of a verify's rejected drafts go), then one pass over the
//     block [last sampled, mask x K] at positions N .. N+K drafts K tokens,
//     the argmax at each (greedy point masses; the verify keeps the output
//     the target's, whatever it proposes);
//   - a token tree's forward (--spec-tree) hands it the rows of every node:
//     held until tree_kept() names the path the verify kept, whose rows
//     then join the context at consecutive positions.
// A target forward at a position below the context's end (a rollback and a
// rerun, a replayed recurrent state, a new prompt in the same cache) cuts
// the context back there; positions it never saw (a prompt run before this
// drafter existed, a forward past a gap) leave it without drafts until the
// target goes back below them.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/dflash_forward.h"
#include "engine/speculative.h"

namespace ms {

class DFlashDrafter : public Drafter {
 public:
  // Drafts for the sequence whose cache is `target` (history[0] at position
  // target.n_past() - (history.size() - 1) when propose is called), watching
  // backend's forwards (hook and hidden layers installed here, removed by the
  // destructor: one drafter per backend at a time). w and target_w must
  // outlive it. Throws ms::Error when the drafter does not fit the target or
  // the backend cannot hand out layer inputs. own_hook false: the backend's
  // hook and hidden layers are left alone; the owner sets the layers
  // (w.cfg.target_layers) and hands this drafter the backend's hidden events
  // through observe() (several drafters over one backend, each for its own
  // sequence: the server's slots).
  DFlashDrafter(Backend& backend, const KvCache& target, const DFlashWeights& w, const ModelWeights& target_w,
                ThreadPool& pool, KvType type = KvType::F16, bool own_hook = true);
  ~DFlashDrafter() override;
  DFlashDrafter(const DFlashDrafter&) = delete;
  DFlashDrafter& operator=(const DFlashDrafter&) = delete;

  // Up to min(max_tokens, block_size - 1) drafts.
  void propose(std::span<const int32_t> history, int max_tokens, std::vector<int32_t>& out) override;
  std::string name() const override { return "dflash"; }
  // Its block's softmax at each drafted position (the per-position
  // distributions DDTree grows its trees from).
  bool gives_candidates() const override { return true; }
  // A tree verify's hook event is held until the loop says which path it
  // kept; that path's rows then join the context.
  void tree_kept(std::span<const int32_t> nodes) override;

  // A hidden event of the backend (events of other sequences are ignored).
  void observe(const HiddenEvent& e) { on_hidden(e); }

  int64_t passes() const { return passes_; }  // block passes so far
  int64_t context_len() const { return fwd_.context_len(); }

 private:
  void on_hidden(const HiddenEvent& e);

  Backend& be_;
  bool own_hook_;
  const KvCache* target_;
  DFlashForward fwd_;
  int64_t F_;  // feature values per position: target layers x n_embd
  std::vector<int32_t> block_;
  std::vector<float> logits_;
  // The last tree forward's layer rows ([n][F_]), from position tree_pos0_
  // (-1: none held).
  std::vector<float> tree_rows_;
  int64_t tree_pos0_ = -1;
  int tree_n_ = 0;
  int64_t passes_ = 0;
};

}  // namespace ms
