#include "engine/kv_cache.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "util/bytes.h"
#include "util/error.h"

namespace ms {

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::F16: return "f16";
    case KvType::F32: return "f32";
    case KvType::Q8_0: return "q8_0";
  }
  return "?";
}

KvType parse_kv_type(std::string_view name) {
  for (KvType t : {KvType::F16, KvType::F32, KvType::Q8_0})
    if (name == kv_type_name(t)) return t;
  throw Error("--kv-type: unknown KV cache type '" + std::string(name) + "' (expected f16, f32 or q8_0)");
}

int kv_bytes_per_32(KvType t) {
  switch (t) {
    case KvType::F16: return 64;
    case KvType::F32: return 128;
    case KvType::Q8_0: return static_cast<int>(sizeof(BlockQ8_0));
  }
  return 64;
}

void check_kv_head_dim(KvType t, int64_t head_dim) {
  if (t == KvType::Q8_0 && head_dim % QK != 0)
    throw Error("--kv-type q8_0 needs a head size that is a multiple of " + std::to_string(QK) +
                " (blocks of 32); this model's head size is " + std::to_string(head_dim) + ": use --kv-type f16");
}

SeqSlotPool::SeqSlotPool(int n) {
  if (n <= 0) throw Error("sequence states: the pool needs at least one (got " + std::to_string(n) + ")");
  used_.assign(static_cast<size_t>(n), false);
}

int SeqSlotPool::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(std::count(used_.begin(), used_.end(), true));
}

SeqSlot SeqSlotPool::acquire(const std::string& full_message) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < used_.size(); ++i)
    if (!used_[i]) {
      used_[i] = true;
      std::weak_ptr<SeqSlotPool> self = weak_from_this();
      return SeqSlot(static_cast<int>(i), [self](int index) {
        if (auto pool = self.lock()) pool->release(index);
      });
    }
  throw Error(full_message);
}

void SeqSlotPool::release(int index) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (index >= 0 && static_cast<size_t>(index) < used_.size()) used_[static_cast<size_t>(index)] = false;
}

KvCache::KvCache(int n_layer, int n_kv, int head_dim, int64_t ctx, KvType type)
    : KvCache(n_layer, n_kv, head_dim, ctx, type,
              RecurrentLayout{std::vector<bool>(static_cast<size_t>(std::max(n_layer, 0)), false)}) {}

KvCache::KvCache(int n_layer, int n_kv, int head_dim, int64_t ctx, KvType type, const RecurrentLayout& rec)
    : KvCache(n_layer, n_kv, head_dim, ctx, type, rec, nullptr) {}

KvCache::KvCache(int n_layer, int n_kv, int head_dim, int64_t ctx, KvType type, const RecurrentLayout& rec,
                 std::shared_ptr<KvPages> pages)
    : n_layer_(n_layer), n_kv_(n_kv), head_dim_(head_dim), ctx_(ctx), type_(type) {
  if (n_layer <= 0 || n_kv <= 0 || head_dim <= 0 || ctx <= 0)
    throw Error("KV cache: layers, heads, head size and context must be positive");
  if (static_cast<int>(rec.recurrent.size()) != n_layer)
    throw Error("KV cache: the recurrent layout has " + std::to_string(rec.recurrent.size()) + " layers, not " +
                std::to_string(n_layer));
  if (rec.conv_elems < 0 || rec.state_elems < 0) throw Error("KV cache: negative recurrent state size");
  check_kv_head_dim(type, head_dim);
  conv_elems_ = rec.conv_elems;
  state_elems_ = rec.state_elems;
  int n_kv_layers = 0, n_rec = 0;
  for (bool r : rec.recurrent) {
    kv_slot_.push_back(r ? -1 : n_kv_layers);
    rec_slot_.push_back(r ? n_rec : -1);
    (r ? n_rec : n_kv_layers) += 1;
  }
  if (n_rec == 0) {  // attention only: layer i is K/V layer i
    kv_slot_.clear();
    rec_slot_.clear();
  }
  has_recurrent_ = n_rec > 0;
  n_rec_ = n_rec;
  if (!pages) {
    // Alone: one page of the whole context (the contiguous layout), held for life.
    if (ctx > INT32_MAX) throw Error("KV cache: a context of " + std::to_string(ctx) + " tokens is too large");
    kv_.pages = std::make_shared<KvPages>(page_layout(n_layer, n_kv, head_dim, type, rec, static_cast<int32_t>(ctx)),
                                          1, true);
    kv_.pages->reserve(kv_.table, 0, 1);
  } else {
    if (pages->is_private()) throw Error("KV cache: a cache's own pages cannot be shared");
    const KvPageLayout want = page_layout(n_layer, n_kv, head_dim, type, rec, pages->layout().page_tokens);
    if (!(pages->layout() == want))
      throw Error("KV cache: the page pool was made for another model or KV type (" +
                  std::to_string(pages->layout().n_layers) + " attention layers, " +
                  std::to_string(pages->layout().n_kv) + " KV heads, rows of " +
                  std::to_string(pages->layout().row_bytes) + " bytes; this cache needs " +
                  std::to_string(want.n_layers) + ", " + std::to_string(want.n_kv) + ", " +
                  std::to_string(want.row_bytes) + ")");
    kv_.pages = std::move(pages);
  }
  const uint64_t rec_total = static_cast<uint64_t>(n_rec) * static_cast<uint64_t>(conv_elems_ + state_elems_);
  try {
    rec_.assign(static_cast<size_t>(rec_total), 0.0f);
  } catch (const std::bad_alloc&) {
    throw Error("KV cache: cannot allocate " + format_bytes(rec_total * 4) + " of recurrent state");
  }
}

KvPageLayout KvCache::page_layout(int n_layer, int n_kv, int head_dim, KvType type, const RecurrentLayout& rec,
                                  int32_t page_tokens) {
  int n_attn = n_layer;
  if (!rec.recurrent.empty()) n_attn = static_cast<int>(std::count(rec.recurrent.begin(), rec.recurrent.end(), false));
  return KvPageLayout{n_attn, n_kv, kv_row_bytes(type, head_dim), page_tokens};
}

KvCache::PageRef& KvCache::PageRef::operator=(const PageRef& o) {
  if (this == &o) return *this;
  reset();
  if (!o.pages) return *this;
  if (o.pages->is_private()) {
    pages = o.pages->clone();
    table = o.table;
  } else {
    pages = o.pages;
    pages->share(o.table, static_cast<int64_t>(o.table.size()) * pages->layout().page_tokens, table);
  }
  return *this;
}

KvCache::PageRef& KvCache::PageRef::operator=(PageRef&& o) noexcept {
  if (this != &o) {
    reset();
    pages = std::move(o.pages);
    table = std::move(o.table);
    o.table.clear();
  }
  return *this;
}

void KvCache::PageRef::reset() noexcept {
  if (pages && !table.empty()) {
    try {
      pages->truncate(table, 0);
    } catch (...) {  // only a bookkeeping bug throws here, and a destructor must not
    }
  }
  table.clear();
  pages.reset();
}

uint64_t KvCache::kv_bytes() const {
  if (!kv_.pages) return 0;
  return paged() ? kv_.table.size() * kv_.pages->page_bytes() : kv_.pages->bytes();
}

const std::byte* KvCache::row(int layer, bool values, int head, int64_t pos) const {
  const int slot = attn_slot(layer);
  const KvPageLayout& l = kv_.pages->layout();
  if (head < 0 || head >= n_kv_ || pos < 0 || pos >= static_cast<int64_t>(kv_.table.size()) * l.page_tokens)
    throw Error("KV cache: no row for head " + std::to_string(head) + " at position " + std::to_string(pos));
  return kv_.pages->page(kv_.table[static_cast<size_t>(pos / l.page_tokens)]) +
         l.offset(slot, values, head, pos % l.page_tokens);
}

PageStatus KvCache::reserve(int64_t n) {
  if (!paged()) return PageStatus::Ok;  // its own page holds the whole context
  return kv_.pages->reserve(kv_.table, n_past_, n);
}

void KvCache::reserve_or_throw(int64_t n) {
  if (reserve(n) == PageStatus::Ok) return;
  check_room(n);  // says how many pages are short
  throw Error("KV pages exhausted: " + std::to_string(n) + " more tokens do not fit the pool");
}

void KvCache::release_unwritten() {
  if (paged()) kv_.pages->truncate(kv_.table, n_past_);
}

void KvCache::not_contiguous() const {
  throw Error("KV cache: its keys and values lie in pages of " + std::to_string(kv_.pages->layout().page_tokens) +
              " tokens (a shared pool), not in one block; read them by rows");
}

void KvCache::wrong_type(KvType want) const {
  throw Error(std::string("KV cache: asked for ") + kv_type_name(want) + " keys/values but the cache holds " +
              kv_type_name(type_));
}

void KvCache::not_attention(int layer) const {
  throw Error("KV cache: layer " + std::to_string(layer) + " is recurrent (linear attention); it has no keys/values");
}

float* KvCache::rec_elems(int layer, int64_t offset) {
  const int slot = rec_slot_.empty() ? -1 : rec_slot_[static_cast<size_t>(layer)];
  if (slot < 0) throw Error("KV cache: layer " + std::to_string(layer) + " has no recurrent state");
  if (rec_.empty()) throw Error("KV cache: the recurrent state is kept by the backend, not here");
  return rec_.data() + static_cast<int64_t>(slot) * (conv_elems_ + state_elems_) + offset;
}

float* KvCache::snap_elems(int layer, int entry, int64_t offset) {
  const int slot = rec_slot_.empty() ? -1 : rec_slot_[static_cast<size_t>(layer)];
  if (slot < 0) throw Error("KV cache: layer " + std::to_string(layer) + " has no recurrent state");
  if (entry < 0 || entry >= ckpt_.capacity() || snap_.empty())
    throw Error("KV cache: checkpoint " + std::to_string(entry) + " is not kept here");
  const int64_t per = conv_elems_ + state_elems_;
  return snap_.data() + (static_cast<int64_t>(entry) * n_rec_ + slot) * per + offset;
}

void KvCache::clear() {
  n_past_ = 0;
  tree_nodes_ = -1;
  release_unwritten();
  std::fill(rec_.begin(), rec_.end(), 0.0f);
  ckpt_.clear();
}

bool KvCache::can_truncate_to(int64_t n) const {
  if (n < 0 || n > n_past_) return false;
  return !has_recurrent_ || n == n_past_ || n == 0 || ckpt_.find(n) >= 0;
}

int64_t KvCache::restorable_at_or_below(int64_t n) const {
  n = std::min(n, n_past_);
  if (n <= 0) return 0;
  if (!has_recurrent_ || n == n_past_) return n;
  return std::max<int64_t>(0, ckpt_.at_or_below(n));
}

void KvCache::check_room(int64_t n) const {
  if (n_past_ + n > ctx_)
    throw Error("context full (" + std::to_string(ctx_) + " tokens): " + std::to_string(n_past_) +
                " used, " + std::to_string(n) + " more requested; start a new sequence or use a larger --ctx");
  if (paged()) {
    const int64_t need = pages_needed(n), free = kv_.pages->free_pages();
    if (need > free)
      throw Error("KV pages exhausted: " + std::to_string(n) + " more tokens need " + std::to_string(need) +
                  " pages of " + std::to_string(kv_.pages->layout().page_tokens) + " tokens, " +
                  std::to_string(free) + " of " + std::to_string(kv_.pages->n_pages()) +
                  " are free (--ctx is the tokens all sequences share)");
  }
}

void KvCache::advance(int64_t n) {
  check_room(n);
  reserve_or_throw(n);  // a no-op when the backend reserved them before writing
  n_past_ += n;
}

void KvCache::truncate(int64_t n) {
  if (n < 0 || n > n_past_) throw Error("KV cache: cannot keep " + std::to_string(n) + " of " +
                                        std::to_string(n_past_) + " positions");
  if (!can_truncate_to(n))
    throw Error("KV cache: cannot keep " + std::to_string(n) + " of " + std::to_string(n_past_) +
                " positions: a recurrent (linear-attention) state returns only to 0, to all of its positions, or to a "
                "checkpoint (held: " + std::to_string(ckpt_.positions().size()) + ")");
  if (n == 0) {
    clear();
    return;
  }
  if (has_recurrent_ && n != n_past_) restore_checkpoint(ckpt_.find(n));
  ckpt_.drop_after(n);
  n_past_ = n;
  release_unwritten();
}

void KvCache::keep_path(int64_t base, std::span<const int32_t> nodes) {
  const std::string what = "KV cache: keeping a tree path from position " + std::to_string(base);
  if (nodes.empty() || nodes[0] != 0) throw Error(what + ": the path must start at the tree's root (node 0)");
  for (size_t k = 1; k < nodes.size(); ++k)
    if (nodes[k] <= nodes[k - 1])
      throw Error(what + ": node " + std::to_string(nodes[k]) + " follows node " + std::to_string(nodes[k - 1]) +
                  " (a path's nodes come in increasing order)");
  if (base < 0 || base + nodes.back() >= n_past_)
    throw Error(what + ": node " + std::to_string(nodes.back()) + " is past the " + std::to_string(n_past_) +
                " positions held");
  if (has_recurrent_ && (tree_nodes_ <= nodes.back() || base + tree_nodes_ != n_past_ || rec_.empty()))
    throw Error(what + ": the cache's last forward was not that token tree, so its recurrent (Gated DeltaNet) "
                "states are not held");
  // nodes[k] >= k, and a later source is above every earlier destination:
  // copying in order never overwrites a row still to be read.
  const KvPageLayout& l = kv_.pages->layout();
  for (size_t k = 1; k < nodes.size(); ++k) {
    const int64_t from = base + nodes[k], to = base + static_cast<int64_t>(k);
    if (from == to) continue;
    const std::byte* ps = kv_.pages->page(kv_.table[static_cast<size_t>(from / l.page_tokens)]);
    std::byte* pd = kv_.pages->page(kv_.table[static_cast<size_t>(to / l.page_tokens)]);
    for (int layer = 0; layer < l.n_layers; ++layer)
      for (bool values : {false, true})
        for (int h = 0; h < n_kv_; ++h)
          std::memcpy(pd + l.offset(layer, values, h, to % l.page_tokens),
                      ps + l.offset(layer, values, h, from % l.page_tokens), static_cast<size_t>(l.row_bytes));
  }
  const int64_t keep = base + static_cast<int64_t>(nodes.size());
  if (!has_recurrent_) {
    truncate(keep);
    return;
  }
  // The live state becomes the path's last node's; checkpoints past the kept
  // positions go (none was taken inside the tree: begin_tree).
  const int64_t per = conv_elems_ + state_elems_;
  const auto first = tree_states_.begin() + static_cast<int64_t>(nodes.back()) * n_rec_ * per;
  std::copy(first, first + static_cast<int64_t>(rec_.size()), rec_.begin());
  tree_nodes_ = -1;
  ckpt_.drop_after(keep);
  n_past_ = keep;
  release_unwritten();
}

void KvCache::begin_tree(int n_nodes) {
  tree_forward_ = true;
  tree_nodes_ = -1;
  if (!has_recurrent_) return;
  const uint64_t total = static_cast<uint64_t>(std::max(n_nodes, 0)) * static_cast<uint64_t>(n_rec_) *
                         static_cast<uint64_t>(conv_elems_ + state_elems_);
  try {
    tree_states_.resize(static_cast<size_t>(total));
  } catch (const std::bad_alloc&) {
    throw Error("KV cache: cannot allocate " + format_bytes(total * 4) + " for the recurrent states of a tree of " +
                std::to_string(n_nodes) + " tokens");
  }
  tree_nodes_ = n_nodes;
}

float* KvCache::tree_elems(int layer, int node, int64_t offset) {
  const int slot = rec_slot_.empty() ? -1 : rec_slot_[static_cast<size_t>(layer)];
  if (slot < 0) throw Error("KV cache: layer " + std::to_string(layer) + " has no recurrent state");
  if (node < 0 || node >= tree_nodes_)
    throw Error("KV cache: no tree state for node " + std::to_string(node) + " (" + std::to_string(tree_nodes_) +
                " held)");
  const int64_t per = conv_elems_ + state_elems_;
  return tree_states_.data() + (static_cast<int64_t>(node) * n_rec_ + slot) * per + offset;
}

void KvCache::set_checkpoints(CheckpointOptions o) {
  StateCheckpoints fresh(o);  // checks o
  if (!has_recurrent_) return;
  const uint64_t total = rec_.empty() ? 0
                                      : static_cast<uint64_t>(o.capacity) * static_cast<uint64_t>(n_rec_) *
                                            static_cast<uint64_t>(conv_elems_ + state_elems_);
  try {
    snap_.assign(static_cast<size_t>(total), 0.0f);
  } catch (const std::bad_alloc&) {
    throw Error("KV cache: cannot allocate " + format_bytes(total * 4) + " for " + std::to_string(o.capacity) +
                " recurrent-state checkpoints");
  }
  ckpt_ = fresh;
}

void KvCache::begin_forward() { ckpt_.begin_forward(); }

void KvCache::end_forward(int64_t n_tokens) {
  const bool had_token_states = token_states_wanted();
  token_states_ = false;
  // A tree's forward leaves the live state at the prefix's: no checkpoint
  // at n_past (keep_path sets the state of the path it keeps).
  if (tree_forward_) {
    tree_forward_ = false;
    return;
  }
  tree_nodes_ = -1;  // any other forward: the last tree's states are stale
  if (!has_recurrent_ || ckpt_.capacity() == 0 || had_token_states) return;
  if (!ckpt_.due(n_past_, n_tokens)) return;
  const int e = ckpt_.reserve(n_past_);
  if (e >= 0) save_checkpoint(e);
}

void KvCache::save_checkpoint(int entry) {
  if (store_.get()) return store_.get()->save(entry);
  const int64_t per = conv_elems_ + state_elems_;
  std::copy(rec_.begin(), rec_.end(), snap_.begin() + static_cast<int64_t>(entry) * n_rec_ * per);
}

void KvCache::restore_checkpoint(int entry) {
  if (entry < 0) throw Error("KV cache: no checkpoint to restore");
  if (store_.get()) return store_.get()->restore(entry);
  if (snap_.empty()) throw Error("KV cache: the recurrent state is kept by the backend, which keeps no checkpoints here");
  const int64_t per = conv_elems_ + state_elems_;
  const auto first = snap_.begin() + static_cast<int64_t>(entry) * n_rec_ * per;
  std::copy(first, first + static_cast<int64_t>(rec_.size()), rec_.begin());
}

void KvCache::set_state_store(std::shared_ptr<StateStore> store) { store_.p = std::move(store); }

// The written rows of src into this cache's pages (two pools), a run of
// rows that are consecutive in both at a time.
void KvCache::copy_rows_from(const KvCache& src) {
  const int64_t n = src.n_past_;
  n_past_ = 0;  // fresh pages: rows this cache shares with another must not be written
  release_unwritten();
  reserve_or_throw(n);
  const KvPageLayout &ls = src.kv_.pages->layout(), &ld = kv_.pages->layout();
  const int64_t row = ls.row_bytes;
  for (int64_t j = 0; j < n;) {
    const int64_t run = std::min({ls.page_tokens - j % ls.page_tokens, ld.page_tokens - j % ld.page_tokens, n - j});
    const std::byte* ps = src.kv_.pages->page(src.kv_.table[static_cast<size_t>(j / ls.page_tokens)]);
    std::byte* pd = kv_.pages->page(kv_.table[static_cast<size_t>(j / ld.page_tokens)]);
    for (int l = 0; l < ls.n_layers; ++l)
      for (bool values : {false, true})
        for (int h = 0; h < n_kv_; ++h)
          std::memcpy(pd + ld.offset(l, values, h, j % ld.page_tokens), ps + ls.offset(l, values, h, j % ls.page_tokens),
                      static_cast<size_t>(run * row));
    j += run;
  }
}

void KvCache::copy_from(const KvCache& src) {
  if (src.n_layer_ != n_layer_ || src.n_kv_ != n_kv_ || src.head_dim_ != head_dim_ || src.ctx_ != ctx_ ||
      src.type_ != type_ || src.rec_slot_ != rec_slot_ || src.conv_elems_ != conv_elems_ ||
      src.state_elems_ != state_elems_)
    throw Error("KV cache: a fork needs two caches of the same model, context and type");
  if (paged() && src.kv_.pages == kv_.pages) {
    // One pool: share the prefix's pages, copy nothing (copy on write later).
    kv_.pages->share(src.kv_.table, src.n_past_, kv_.table);
  } else {
    copy_rows_from(src);
  }
  rec_ = src.rec_;
  if (snap_.size() != src.snap_.size() || ckpt_.capacity() != src.ckpt_.capacity()) snap_.resize(src.snap_.size());
  std::copy(src.snap_.begin(), src.snap_.end(), snap_.begin());
  ckpt_ = src.ckpt_;
  n_past_ = src.n_past_;
  token_states_ = false;
}

}  // namespace ms
