// Draft trees (DDTree-style speculative verification; docs/speculative.md,
// "Draft trees"): instead of one chain of K guesses, a tree of alternatives
// verified in one forward (SeqTokens::parents), so that a wrong guess at
// one position can still be followed by a right alternative.
//
// The tree is built best-first from a drafter's candidates per drafted
// position (its top tokens with their probabilities): a node's score is the
// product of its path's candidate probabilities (the drafter's estimate that
// the target goes that way), and the nodes kept are the `budget` best paths'
// prefixes, found by expanding the best frontier node first. A drafter's
// probabilities may be poorly calibrated (a flat softmax whose argmax is
// still often right): the verify loop therefore puts the chain of first
// choices in first (the spine) and spends the rest of the budget best-first. Every position
// uses the same candidate list whatever the branch (a DFlash drafter's
// per-position distributions are so; a draft model's are those along its own
// chain, an approximation that costs acceptance, never correctness: the
// verify decides what is kept).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampler.h"

namespace ms {

struct DraftTree {
  // Node 0 is the root: the last sampled token, fed with the drafts. Nodes
  // come best-first, so a parent always precedes its children (what
  // SeqTokens::parents asks for).
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;  // -1 for the root
  std::vector<int32_t> depth;    // 0 for the root; a draft at depth d guesses drafted position d-1
  std::vector<double> log_score; // the log of the path's probability product (0 for the root)
  size_t size() const { return tokens.size(); }
  int max_depth() const;
  // The child of `node` whose token is `token`, -1 when none.
  int32_t child(int32_t node, int32_t token) const;
  bool has_children(int32_t node) const;
  // Whether it is one chain (every node the child of the one before).
  bool is_chain() const;
};

// The root and at most `budget` drafts: candidates[d] are the choices for
// drafted position d (depth d + 1), most likely first; entries with p <= 0
// or an id outside 0 .. n_vocab-1 are skipped, and each position's list is
// read up to its first repeated id. Depth is bounded by max_depth and by the
// positions given. With `spine`, the chain of first choices comes first (as
// deep as the budget allows: the drafter's own chain, so the tree keeps at
// least what that chain would), then the rest of the budget best-first;
// without, every node best-first. Ties are broken by the order of discovery
// (deterministic). Throws ms::Error for budget < 0 or max_depth < 0.
DraftTree build_draft_tree(int32_t root, std::span<const std::vector<TokenProb>> candidates, int budget,
                           int max_depth, int64_t n_vocab, bool spine = false);

// The top k of a distribution over n logits at temperature 1 (softmax), most
// likely first (ties: the lower id), into out. What the drafters hand the
// tree builder.
void top_candidates(const float* logits, int64_t n, int k, std::vector<TokenProb>& out);

}  // namespace ms
