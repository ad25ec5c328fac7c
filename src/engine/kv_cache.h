// The state of one sequence, per layer kind (DESIGN.md: sequence state):
//  - attention layers: keys and values as [n_kv][ctx] rows of head_dim
//    elements (the layout of src/cpu/attention.h and the CUDA backend). IEEE
//    halves by default; F32 keeps them unrounded, for numerical parity checks
//    against F32 references (at twice the memory); Q8_0 stores each row as
//    head_dim/32 blocks of ggml's block_q8_0 (an f16 scale d, then 32 int8;
//    d = amax/127, q = round(x/d), as llama.cpp's `-ctk/-ctv q8_0`): 34 bytes
//    per 32 elements, 53% of f16, for long contexts. Q8_0 needs head_dim a
//    multiple of 32. Running past the context is an error, never a silent
//    wrap. The rows lie in pages (engine/kv_pages.h): a cache made alone
//    holds one page of its whole context (the contiguous layout above, which
//    k_f16() etc. hand out); caches made on a shared KvPages take pages of a
//    few tokens as they grow, and a fork shares the prefix's pages (copy on
//    write). Attention reads rows through the block table (rows_f16() etc.).
//  - recurrent (linear-attention) layers of hybrids: a fixed-size f32 state,
//    whatever the sequence length: the conv window (the last conv_kernel - 1
//    inputs of the causal conv) and the delta-rule state matrix. All zeros
//    at position 0; clear() zeroes them.
// Rollback and fork (DESIGN.md): truncate(n) returns the sequence to position
// n exactly. Attention K/V need nothing for it; a recurrent state goes back
// to a checkpoint taken at n (engine/state_checkpoints.h: set_checkpoints()
// says how many are kept; a forward with keep_token_states() keeps one after
// each of its tokens), so a recurrent cache can return to 0, to n_past, and
// to its checkpoints (can_truncate_to() says which). copy_from() (a backend's
// fork()) gives a cache another's positions and state.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cpu/kv_rows.h"
#include "engine/kv_pages.h"
#include "engine/state_checkpoints.h"
#include "quant/blocks.h"

namespace ms {

enum class KvType { F16, F32, Q8_0 };

// "f16", "f32", "q8_0" (the --kv-type spelling).
const char* kv_type_name(KvType t);
// The inverse; throws ms::Error naming --kv-type and the accepted names.
KvType parse_kv_type(std::string_view name);

// Bytes per 32 elements of a K or V row: 64 (f16), 128 (f32), 34 (q8_0).
// The budget planner (ModelHParams::kv_cache_bytes) takes this number.
int kv_bytes_per_32(KvType t);
// Bytes of one K (or V) row of head_dim elements (one position of one KV
// head). For Q8_0 head_dim must be a multiple of 32 (check_kv_head_dim).
inline int64_t kv_row_bytes(KvType t, int64_t head_dim) { return head_dim * kv_bytes_per_32(t) / 32; }
// Throws ms::Error naming --kv-type and the head size when the type cannot
// hold rows of head_dim elements (q8_0: not a multiple of 32).
void check_kv_head_dim(KvType t, int64_t head_dim);

// Which layers are recurrent and how big their state is (f32 elements).
// conv_elems = state_elems = 0 with recurrent layers: a backend that keeps
// the state elsewhere (the CUDA backend, on the device) still marks the cache
// as not rewindable.
struct RecurrentLayout {
  std::vector<bool> recurrent;  // [n_layer]: no K/V for these layers
  int64_t conv_elems = 0;       // per recurrent layer: (conv_kernel - 1) * conv_dim
  int64_t state_elems = 0;      // per recurrent layer: n_v_heads * head_k * head_v
};

// A backend's claim on one of its device sequence states (CudaBackend with
// Options::n_seq > 1): the state's index and the way back to the pool that
// handed it out, which gets it back when the claim goes. Move-only in effect:
// a copy holds NO state (index -1), so two caches can never share one by
// accident (the backend refuses a cache without a state).
class SeqSlot {
 public:
  SeqSlot() = default;
  SeqSlot(int index, std::function<void(int)> release) : index_(index), release_(std::move(release)) {}
  ~SeqSlot() { reset(); }
  SeqSlot(SeqSlot&& o) noexcept : index_(o.index_), release_(std::move(o.release_)) { o.forget(); }
  SeqSlot& operator=(SeqSlot&& o) noexcept {
    if (this != &o) {
      reset();
      index_ = o.index_;
      release_ = std::move(o.release_);
      o.forget();
    }
    return *this;
  }
  SeqSlot(const SeqSlot&) {}  // a copy holds no state (see above)
  SeqSlot& operator=(const SeqSlot& o) {
    if (this != &o) reset();
    return *this;
  }
  int index() const { return index_; }  // -1: none
  // Gives the state back (to its pool, if it has one) and holds none.
  void reset() noexcept {
    if (release_) release_(index_);
    forget();
  }

 private:
  void forget() noexcept {
    index_ = -1;
    release_ = nullptr;
  }
  int index_ = -1;
  std::function<void(int)> release_;
};

// The n sequence states of a backend, handed out one per cache. Shared (by
// shared_ptr) between the backend and the claims it made, so a cache that
// outlives its backend still gives its claim back safely. Thread-safe.
class SeqSlotPool : public std::enable_shared_from_this<SeqSlotPool> {
 public:
  explicit SeqSlotPool(int n);
  int size() const { return static_cast<int>(used_.size()); }
  int in_use() const;
  // A free state, the lowest index first; throws ms::Error `full_message`
  // when every state is taken.
  SeqSlot acquire(const std::string& full_message);

 private:
  void release(int index) noexcept;
  mutable std::mutex mu_;
  std::vector<bool> used_;
};

// A device backend's storage for one cache's recurrent-state checkpoints
// (its live state is on the device too). KvCache keeps the bookkeeping and
// calls these; entries are those of StateCheckpoints.
class StateStore {
 public:
  virtual ~StateStore() = default;
  virtual void save(int entry) = 0;     // the live state -> entry
  virtual void restore(int entry) = 0;  // entry -> the live state
  // This store's entries := other's (a fork; same backend, same geometry).
  virtual void copy_entries_from(const StateStore& other) = 0;
};

class KvCache {
 public:
  KvCache(int n_layer, int n_kv, int head_dim, int64_t ctx, KvType type = KvType::F16);
  // A hybrid's cache: K/V for the layers that are not recurrent only.
  KvCache(int n_layer, int n_kv, int head_dim, int64_t ctx, KvType type, const RecurrentLayout& rec);
  // A cache whose K/V rows take pages of `pages` (shared with other caches)
  // as it grows: up to ctx positions, if the pool has the pages. Throws
  // ms::Error when the pool's layout is not this model's (layers, heads, row).
  KvCache(int n_layer, int n_kv, int head_dim, int64_t ctx, KvType type, const RecurrentLayout& rec,
          std::shared_ptr<KvPages> pages);
  // The page layout of a cache of this geometry (what a shared pool needs).
  static KvPageLayout page_layout(int n_layer, int n_kv, int head_dim, KvType type, const RecurrentLayout& rec,
                                  int32_t page_tokens);

  int n_layer() const { return n_layer_; }
  int64_t ctx() const { return ctx_; }
  KvType type() const { return type_; }
  // Positions filled so far (the next token goes to position n_past()).
  int64_t n_past() const { return n_past_; }

  // One layer's keys and values, typed: each throws ms::Error when the cache
  // holds another type (a mix-up would read garbage, not fail).
  uint16_t* k_f16(int layer) { return elems<uint16_t>(KvType::F16, layer, false); }
  uint16_t* v_f16(int layer) { return elems<uint16_t>(KvType::F16, layer, true); }
  const uint16_t* k_f16(int layer) const { return const_cast<KvCache*>(this)->k_f16(layer); }
  const uint16_t* v_f16(int layer) const { return const_cast<KvCache*>(this)->v_f16(layer); }
  float* k_f32(int layer) { return elems<float>(KvType::F32, layer, false); }
  float* v_f32(int layer) { return elems<float>(KvType::F32, layer, true); }
  const float* k_f32(int layer) const { return const_cast<KvCache*>(this)->k_f32(layer); }
  const float* v_f32(int layer) const { return const_cast<KvCache*>(this)->v_f32(layer); }
  // (These hand out one contiguous block: caches made alone. A cache on a
  // shared pool throws ms::Error; its rows are read through rows_f16() etc.)
  // Q8_0: [n_kv][ctx][head_dim / 32] blocks per layer for K, the same for V.
  BlockQ8_0* k_q8(int layer) { return elems<BlockQ8_0>(KvType::Q8_0, layer, false); }
  BlockQ8_0* v_q8(int layer) { return elems<BlockQ8_0>(KvType::Q8_0, layer, true); }
  const BlockQ8_0* k_q8(int layer) const { return const_cast<KvCache*>(this)->k_q8(layer); }
  const BlockQ8_0* v_q8(int layer) const { return const_cast<KvCache*>(this)->v_q8(layer); }

  // One layer's K or V rows through the block table, typed as above (what
  // attention reads; valid until the table changes: reserve, truncate, fork).
  KvRows<uint16_t> rows_f16(int layer, bool values) { return rows<uint16_t>(KvType::F16, layer, values); }
  KvRows<float> rows_f32(int layer, bool values) { return rows<float>(KvType::F32, layer, values); }
  KvRows<BlockQ8_0> rows_q8(int layer, bool values) { return rows<BlockQ8_0>(KvType::Q8_0, layer, values); }
  // The bytes of one row (kv_row_bytes of them); throws ms::Error for a
  // position past the pages held.
  const std::byte* row(int layer, bool values, int head, int64_t pos) const;

  // Pages (engine/kv_pages.h). paged(): on a shared pool (else the cache's
  // own single page). Pages held, the table, and the pool.
  bool paged() const { return kv_.pages && !kv_.pages->is_private(); }
  const PageTable& page_table() const { return kv_.table; }
  const KvPages& pages() const { return *kv_.pages; }
  // New pages n more tokens would take (copies of shared ones included).
  int64_t pages_needed(int64_t n) const { return kv_.pages->pages_needed(kv_.table, n_past_, n); }
  // Takes them (all or none): Exhausted when the pool is short, nothing changed.
  PageStatus reserve(int64_t n);
  // The same, throwing check_room's ms::Error when the pool is short.
  void reserve_or_throw(int64_t n);
  // Gives back the pages past n_past (reserved for a pass that did not run).
  void release_unwritten();

  // Recurrent layers (hybrids): their f32 conv window and delta-rule state.
  // Throws ms::Error for a layer that is not recurrent.
  bool is_recurrent(int layer) const { return rec_slot_.empty() ? false : rec_slot_[static_cast<size_t>(layer)] >= 0; }
  bool has_recurrent() const { return has_recurrent_; }
  float* conv_state(int layer) { return rec_elems(layer, 0); }
  float* delta_state(int layer) { return rec_elems(layer, conv_elems_); }
  int64_t conv_elems() const { return conv_elems_; }
  int64_t state_elems() const { return state_elems_; }

  // Throws ms::Error "context full (N tokens)" when n more tokens do not fit,
  // and "KV pages exhausted" when the pool lacks the pages for them.
  void check_room(int64_t n) const;
  // Records that positions n_past .. n_past+n-1 were written (checks room;
  // reserves their pages if that was not done before the writes).
  void advance(int64_t n);
  // Whether truncate(n) is possible: any n <= n_past for attention-only
  // caches; with recurrent layers n_past (keep all), 0 (start over) and the
  // positions of its checkpoints.
  bool can_truncate_to(int64_t n) const;
  // The largest m <= n (and <= n_past) that truncate() can return to.
  int64_t restorable_at_or_below(int64_t n) const;
  // Returns the sequence to position n exactly (keeps the first n, e.g. a
  // shared prompt prefix, or the accepted tokens of a verify): the recurrent
  // state comes back from the checkpoint at n, and checkpoints past n go.
  // Throws ms::Error when !can_truncate_to(n).
  void truncate(int64_t n);
  // Forgets every position and checkpoint; zeroes the recurrent state.
  void clear();
  // After a token tree's forward (SeqTokens::parents) from position base:
  // moves the K/V rows of slots base + nodes[k] to positions base + k (for
  // every attention layer and KV head; bytes copied as they are, so rows
  // keep their exact values) and keeps base + nodes.size() positions; with
  // recurrent layers the live state becomes the last node's (tree_conv /
  // tree_delta). nodes: strictly increasing from 0, the last one below
  // n_past (a root-to-node path of the tree, whose k-th node was computed at
  // position base + k). Throws ms::Error for nodes that break this, and for
  // a recurrent cache whose last forward was not that tree.
  void keep_path(int64_t base, std::span<const int32_t> nodes);
  // Hybrids' token trees: the recurrent state after each node of a tree
  // forward, host memory ([node][recurrent layer][conv | delta]; each node's
  // recurrence runs from its parent's state, the live state stays the
  // prefix's). begin_tree(n) (a backend, before the tree's layers) sizes
  // them and marks the forward so that its end leaves no checkpoint (the
  // live state is not the state at n_past then). Throws ms::Error when the
  // memory cannot be had.
  void begin_tree(int n_nodes);
  float* tree_conv(int layer, int node) { return tree_elems(layer, node, 0); }
  float* tree_delta(int layer, int node) { return tree_elems(layer, node, conv_elems_); }

  // Recurrent-state checkpoints (no effect on attention-only caches). Sizes
  // their storage (host memory here, unless a device backend's StateStore
  // keeps them) and forgets any held.
  void set_checkpoints(CheckpointOptions o);
  const StateCheckpoints& checkpoints() const { return ckpt_; }
  // The next forward keeps the state after each of its tokens (as many as
  // the capacity holds), so that any of them can be returned to: a verify
  // batch's tokens, a test's every position. Cleared by end_forward().
  void keep_token_states(bool on = true) { token_states_ = on; }
  bool token_states_wanted() const { return token_states_ && has_recurrent_ && ckpt_.capacity() > 0; }
  // Backends, around a forward of this cache: begin_forward() opens it (its
  // checkpoints are protected from eviction until the next); end_forward(n)
  // after its n tokens were appended leaves a checkpoint at n_past when due
  // (a whole-state copy; with token states the last token's is already
  // there) and clears keep_token_states.
  void begin_forward();
  void end_forward(int64_t n_tokens);
  // An entry for the state at `pos` (StateCheckpoints::reserve), -1: none.
  int reserve_checkpoint(int64_t pos) { return has_recurrent_ ? ckpt_.reserve(pos) : -1; }
  // Host-kept checkpoints (the CPU backend writes token states here).
  float* checkpoint_conv(int layer, int entry) { return snap_elems(layer, entry, 0); }
  float* checkpoint_delta(int layer, int entry) { return snap_elems(layer, entry, conv_elems_); }
  // Device backends keep the live state and its checkpoints themselves.
  void set_state_store(std::shared_ptr<StateStore> store);
  StateStore* state_store() const { return store_.get(); }

  // A fork: this cache takes src's positions, K/V rows, recurrent state and
  // checkpoints (host-kept ones; a device backend copies its own first). On
  // one shared pool the rows are not copied: this cache holds src's pages
  // (copy on write of a partly filled last page when either side appends).
  // Throws ms::Error when the two differ in layers, heads, context or type.
  void copy_from(const KvCache& src);

  // Host bytes: K/V, the recurrent state and host-kept checkpoints. K/V: all
  // of a cache's own pool; on a shared pool the pages held (a page shared by
  // a fork counts in each holder).
  uint64_t bytes() const { return kv_bytes() + (rec_.size() + snap_.size()) * sizeof(float); }
  uint64_t kv_bytes() const;

  // Which of the backend's device sequence states this cache runs on (set by
  // a backend's make_cache; a copied cache holds none: SeqSlot).
  int device_slot() const { return slot_.index(); }
  void set_device_slot(SeqSlot slot) { slot_ = std::move(slot); }

 private:
  int attn_slot(int layer) const {
    const int slot = kv_slot_.empty() ? layer : kv_slot_[static_cast<size_t>(layer)];
    if (slot < 0) not_attention(layer);
    return slot;
  }
  // Every offset is a multiple of the row size, so of T's (halves, floats,
  // 34-byte blocks of one byte alignment).
  template <typename T>
  T* elems(KvType want, int layer, bool values) {
    if (type_ != want) wrong_type(want);
    const int slot = attn_slot(layer);
    if (paged()) not_contiguous();
    return reinterpret_cast<T*>(kv_.pages->page(kv_.table[0]) + kv_.pages->layout().offset(slot, values, 0, 0));
  }
  template <typename T>
  KvRows<T> rows(KvType want, int layer, bool values) {
    if (type_ != want) wrong_type(want);
    const KvPageLayout& l = kv_.pages->layout();
    const int64_t u = static_cast<int64_t>(sizeof(T));
    return KvRows<T>{reinterpret_cast<T*>(kv_.pages->page(0) + l.offset(attn_slot(layer), values, 0, 0)),
                     kv_.table.data(), l.page_tokens, l.page_bytes() / u, l.head_bytes() / u, l.row_bytes / u};
  }
  void copy_rows_from(const KvCache& src);
  [[noreturn]] void not_contiguous() const;
  float* rec_elems(int layer, int64_t offset);
  float* snap_elems(int layer, int entry, int64_t offset);
  float* tree_elems(int layer, int node, int64_t offset);
  void save_checkpoint(int entry);
  void restore_checkpoint(int entry);
  [[noreturn]] void wrong_type(KvType want) const;
  [[noreturn]] void not_attention(int layer) const;

  int n_layer_;
  int n_kv_ = 0, head_dim_ = 0;
  int64_t ctx_;
  KvType type_;
  int64_t n_past_ = 0;
  // The pool of K/V pages this cache takes rows from, and its block table. A
  // copy of the cache clones a private pool and shares a shared one's pages
  // (a fork, copy on write); the table's pages go back when the cache goes.
  struct PageRef {
    std::shared_ptr<KvPages> pages;
    PageTable table;
    PageRef() = default;
    PageRef(const PageRef& o) { *this = o; }
    PageRef& operator=(const PageRef& o);
    PageRef(PageRef&& o) noexcept : pages(std::move(o.pages)), table(std::move(o.table)) { o.table.clear(); }
    PageRef& operator=(PageRef&& o) noexcept;
    ~PageRef() { reset(); }
    void reset() noexcept;
  } kv_;
  // Hybrids: per layer, its index among the K/V layers or among the
  // recurrent ones (-1: the other kind). Empty for attention-only caches.
  std::vector<int> kv_slot_, rec_slot_;
  bool has_recurrent_ = false;
  int64_t conv_elems_ = 0, state_elems_ = 0;
  std::vector<float> rec_;
  int n_rec_ = 0;
  // Checkpoints: bookkeeping, and their bytes [entry][recurrent layer][conv |
  // delta] when the state is here (rec_ not empty) rather than in store_.
  StateCheckpoints ckpt_;
  std::vector<float> snap_;
  bool token_states_ = false;
  // Hybrids' token trees (begin_tree): node states, how many nodes the last
  // tree had (-1: the last forward was no tree), and whether the forward in
  // progress is one.
  std::vector<float> tree_states_;
  int tree_nodes_ = -1;
  bool tree_forward_ = false;
  // A device backend's store: a copy of a cache holds none (like SeqSlot).
  struct StoreRef {
    std::shared_ptr<StateStore> p;
    StoreRef() = default;
    StoreRef(const StoreRef&) {}
    StoreRef& operator=(const StoreRef&) { p.reset(); return *this; }
    StoreRef(StoreRef&&) noexcept = default;
    StoreRef& operator=(StoreRef&&) noexcept = default;
    StateStore* get() const { return p.get(); }
  } store_;
  SeqSlot slot_;
};

}  // namespace ms
