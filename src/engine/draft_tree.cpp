#include "engine/draft_tree.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <string>

#include "util/error.h"

namespace ms {

int DraftTree::max_depth() const {
  int d = 0;
  for (int32_t x : depth) d = std::max(d, x);
  return d;
}

int32_t DraftTree::child(int32_t node, int32_t token) const {
  for (size_t i = static_cast<size_t>(node) + 1; i < tokens.size(); ++i)
    if (parents[i] == node && tokens[i] == token) return static_cast<int32_t>(i);
  return -1;
}

bool DraftTree::has_children(int32_t node) const {
  for (size_t i = static_cast<size_t>(node) + 1; i < parents.size(); ++i)
    if (parents[i] == node) return true;
  return false;
}

bool DraftTree::is_chain() const {
  for (size_t i = 1; i < parents.size(); ++i)
    if (parents[i] != static_cast<int32_t>(i) - 1) return false;
  return true;
}

DraftTree build_draft_tree(int32_t root, std::span<const std::vector<TokenProb>> candidates, int budget,
                           int max_depth, int64_t n_vocab, bool spine) {
  if (budget < 0) throw Error("draft tree: the node budget must be >= 0 (got " + std::to_string(budget) + ")");
  if (max_depth < 0) throw Error("draft tree: the depth must be >= 0 (got " + std::to_string(max_depth) + ")");
  // The usable choices per position: valid ids with p > 0, up to a repeat.
  std::vector<std::vector<TokenProb>> cands;
  const size_t depth_limit = std::min(candidates.size(), static_cast<size_t>(max_depth));
  for (size_t d = 0; d < depth_limit; ++d) {
    std::vector<TokenProb> c;
    for (const TokenProb& t : candidates[d]) {
      if (!(t.p > 0) || t.id < 0 || t.id >= n_vocab) continue;
      if (std::any_of(c.begin(), c.end(), [&](const TokenProb& u) { return u.id == t.id; })) break;
      c.push_back(t);
    }
    if (c.empty()) break;  // no guess here: nothing deeper either
    cands.push_back(std::move(c));
  }
  DraftTree tree;
  tree.tokens.push_back(root);
  tree.parents.push_back(-1);
  tree.depth.push_back(0);
  tree.log_score.push_back(0.0);
  // A frontier entry: the rank-th candidate of position `depth - 1` as a
  // child of `parent`. Expanding it adds that node and offers its first child
  // and its next sibling (each at most as likely as it), so the frontier
  // holds the best node not yet in the tree.
  struct Entry {
    double score;
    uint64_t seq;  // discovery order: ties go to the earlier
    int32_t parent, depth, rank;
    bool operator<(const Entry& o) const { return score != o.score ? score < o.score : seq > o.seq; }
  };
  std::priority_queue<Entry> frontier;
  uint64_t seq = 0;
  auto offer = [&](int32_t parent, int32_t depth, int32_t rank) {
    const size_t d = static_cast<size_t>(depth - 1);
    if (d >= cands.size() || static_cast<size_t>(rank) >= cands[d].size()) return;
    const double s = tree.log_score[static_cast<size_t>(parent)] + std::log(cands[d][static_cast<size_t>(rank)].p);
    frontier.push({s, seq++, parent, depth, rank});
  };
  auto add = [&](const Entry& e) {
    const int32_t node = static_cast<int32_t>(tree.size());
    tree.tokens.push_back(cands[static_cast<size_t>(e.depth - 1)][static_cast<size_t>(e.rank)].id);
    tree.parents.push_back(e.parent);
    tree.depth.push_back(e.depth);
    tree.log_score.push_back(e.score);
    return node;
  };
  if (spine) {
    // The first choices down to the budget or the depth; each spine node's
    // second choice (and the last one's first child) joins the frontier.
    int32_t parent = 0;
    for (size_t d = 0; d < cands.size() && static_cast<int>(tree.size()) < budget + 1; ++d) {
      const int32_t depth = static_cast<int32_t>(d + 1);
      const Entry e{tree.log_score[static_cast<size_t>(parent)] + std::log(cands[d][0].p), seq++, parent, depth, 0};
      const int32_t node = add(e);
      offer(parent, depth, 1);
      parent = node;
    }
    offer(parent, tree.depth[static_cast<size_t>(parent)] + 1, 0);
  } else {
    offer(0, 1, 0);
  }
  while (static_cast<int>(tree.size()) < budget + 1 && !frontier.empty()) {
    const Entry e = frontier.top();
    frontier.pop();
    const int32_t node = add(e);
    offer(node, e.depth + 1, 0);
    offer(e.parent, e.depth, e.rank + 1);
  }
  return tree;
}

void top_candidates(const float* logits, int64_t n, int k, std::vector<TokenProb>& out) {
  out.clear();
  if (n <= 0 || k <= 0) return;
  float mx = logits[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  // A partial selection of the k largest (ties: the lower id).
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  const size_t kk = static_cast<size_t>(std::min<int64_t>(k, n));
  auto better = [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(kk), ids.end(), better);
  for (size_t i = 0; i < kk; ++i)
    out.push_back({ids[i], std::exp(static_cast<double>(logits[ids[i]]) - mx) / sum});
}

}  // namespace ms
