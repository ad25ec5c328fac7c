// KV memory in pages shared by all sequences (docs/sequence_state.md, "Pages").
//
// A page holds the keys and values of page_tokens consecutive positions for
// EVERY attention layer of one sequence. All layers advance together (each
// token writes a row into each of them), so one block table per sequence and
// one reference count per page serve them all: per-layer tables would repeat
// the same bookkeeping n_layer times. Inside a page the bytes are
// [attention layer][K | V][KV head][page_tokens][row], so what attention reads
// for one (layer, KV head) is a run of page_tokens consecutive rows, and a
// page is one block of bytes to copy (copy on write).
//
// KvPagePool is the bookkeeping only (no bytes): which pages are free, how
// many tables hold each page, and the operations a sequence needs. A table is
// a std::vector<int32_t> of page ids: position p is row p % page_tokens of
// page table[p / page_tokens].
//  - reserve: pages for positions n .. n+m-1, all or nothing; a page in that
//    range that another table also holds is replaced by a fresh one (copy on
//    write: a PageCopy says which rows to keep), so writes never reach a
//    sharer.
//  - share (a fork): dst holds src's pages covering its first n positions,
//    each page's count + 1; nothing is copied until one side writes.
//  - truncate: pages past the new end go back (a page's last holder frees it).
// Running out of pages is a status (PageStatus::Exhausted, nothing changed),
// never an exception in the middle of a step. Not thread-safe: KvPages
// (below) locks around it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace ms {

using PageTable = std::vector<int32_t>;

enum class PageStatus { Ok, Exhausted };

// Copy page src's bytes to page dst (dst replaces src in one table).
struct PageCopy {
  int32_t src = -1, dst = -1;
};

class KvPagePool {
 public:
  // Throws ms::Error unless n_pages >= 1 and page_tokens >= 1.
  KvPagePool(int32_t n_pages, int32_t page_tokens);

  int32_t n_pages() const { return static_cast<int32_t>(refs_.size()); }
  int32_t page_tokens() const { return page_tokens_; }
  int32_t free_pages() const { return static_cast<int32_t>(free_.size()); }
  int32_t used_pages() const { return n_pages() - free_pages(); }
  int32_t refs(int32_t page) const { return refs_.at(static_cast<size_t>(page)); }
  // Pages that hold n tokens (the ceiling of n / page_tokens).
  int64_t pages_for(int64_t n_tokens) const { return (n_tokens + page_tokens_ - 1) / page_tokens_; }

  // New pages reserve(t, n, m) would take: missing pages and shared ones to
  // copy in the range of positions n .. n+m-1.
  int64_t pages_needed(const PageTable& t, int64_t n, int64_t m) const;
  // Makes positions n .. n+m-1 of t writable by t alone (see above). Appends
  // to `copies` the pages whose rows must be copied (in order). Exhausted:
  // not enough free pages, t and the pool unchanged.
  PageStatus reserve(PageTable& t, int64_t n, int64_t m, std::vector<PageCopy>& copies);
  // Keeps the pages that hold positions 0 .. n_keep-1; the rest go back.
  void truncate(PageTable& t, int64_t n_keep);
  // dst (its own pages given back first) holds the pages of src's first n positions.
  void share(const PageTable& src, int64_t n, PageTable& dst);
  // Gives back all of t's pages.
  void release(PageTable& t) { truncate(t, 0); }

 private:
  int32_t take();
  void drop(int32_t page);

  int32_t page_tokens_;
  std::vector<int32_t> refs_;  // [page]: tables holding it (0: free)
  std::vector<int32_t> free_;  // a stack; the lowest ids on top at the start
};

// Where bytes lie in a page of keys and values (see the top of this file).
struct KvPageLayout {
  int n_layers = 0;        // attention layers (recurrent ones have no K/V)
  int n_kv = 0;            // KV heads
  int64_t row_bytes = 0;   // one position of one KV head (kv_row_bytes)
  int32_t page_tokens = 0;

  int64_t head_bytes() const { return page_tokens * row_bytes; }
  int64_t page_bytes() const { return 2 * static_cast<int64_t>(n_layers) * n_kv * head_bytes(); }
  // Of (attention layer, keys or values, KV head, row r < page_tokens) in its page.
  int64_t offset(int layer, bool values, int head, int64_t r) const {
    return ((static_cast<int64_t>(layer) * 2 + (values ? 1 : 0)) * n_kv + head) * head_bytes() + r * row_bytes;
  }
  bool operator==(const KvPageLayout&) const = default;
};

// Memory that the kernel hands out as zero pages on first touch (calloc of a
// large block maps fresh pages): a pool sized for many tokens costs resident
// memory only for the pages written so far.
template <class T>
struct ZeroPagesAllocator {
  using value_type = T;
  ZeroPagesAllocator() = default;
  template <class U>
  ZeroPagesAllocator(const ZeroPagesAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    void* p = std::calloc(n, sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { std::free(p); }
  template <class U>
  void construct(U*) noexcept {}
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
  template <class U>
  bool operator==(const ZeroPagesAllocator<U>&) const noexcept { return true; }
};

// The pages of one or more caches (KvCache): the pool's bookkeeping and the
// pages' bytes in host memory. Shared (by shared_ptr) by the caches that take
// pages from it; thread-safe. A "private" one (a cache's own, of one page of
// its whole context: the contiguous layout) is copied with its cache instead
// of shared.
class KvPages {
 public:
  // Throws ms::Error (naming the bytes) when the memory cannot be had.
  KvPages(const KvPageLayout& layout, int32_t n_pages, bool is_private = false);

  const KvPageLayout& layout() const { return layout_; }
  bool is_private() const { return private_; }
  int32_t n_pages() const;
  int32_t free_pages() const;
  int32_t used_pages() const;
  int32_t refs(int32_t page) const;
  int64_t pages_for(int64_t n_tokens) const;
  uint64_t bytes() const { return bytes_.size(); }  // all pages
  uint64_t page_bytes() const { return static_cast<uint64_t>(layout_.page_bytes()); }

  std::byte* page(int32_t p) { return bytes_.data() + static_cast<int64_t>(p) * layout_.page_bytes(); }
  const std::byte* page(int32_t p) const { return bytes_.data() + static_cast<int64_t>(p) * layout_.page_bytes(); }

  int64_t pages_needed(const PageTable& t, int64_t n, int64_t m) const;
  // KvPagePool::reserve, the copies done here.
  PageStatus reserve(PageTable& t, int64_t n, int64_t m);
  void truncate(PageTable& t, int64_t n_keep);
  void share(const PageTable& src, int64_t n, PageTable& dst);
  // A private pool's copy: the same pages, bytes and counts.
  std::shared_ptr<KvPages> clone() const;

 private:
  KvPageLayout layout_;
  bool private_;
  mutable std::mutex mu_;
  KvPagePool pool_;
  std::vector<std::byte, ZeroPagesAllocator<std::byte>> bytes_;
};

}  // namespace ms
