#include "engine/kv_pages.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "util/bytes.h"
#include "util/error.h"

namespace ms {

KvPagePool::KvPagePool(int32_t n_pages, int32_t page_tokens) : page_tokens_(page_tokens) {
  if (n_pages < 1 || page_tokens < 1)
    throw Error("KV pages: a pool needs at least one page of at least one token (got " + std::to_string(n_pages) +
                " pages of " + std::to_string(page_tokens) + ")");
  refs_.assign(static_cast<size_t>(n_pages), 0);
  free_.reserve(static_cast<size_t>(n_pages));
  for (int32_t p = n_pages - 1; p >= 0; --p) free_.push_back(p);
}

int32_t KvPagePool::take() {
  const int32_t p = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(p)] = 1;
  return p;
}

void KvPagePool::drop(int32_t page) {
  int32_t& r = refs_.at(static_cast<size_t>(page));
  if (r <= 0) throw Error("KV pages: page " + std::to_string(page) + " given back more often than it was held");
  if (--r == 0) free_.push_back(page);
}

int64_t KvPagePool::pages_needed(const PageTable& t, int64_t n, int64_t m) const {
  if (m <= 0) return 0;
  int64_t need = 0;
  for (int64_t i = n / page_tokens_; i < pages_for(n + m); ++i)
    need += (i >= static_cast<int64_t>(t.size()) || refs_[static_cast<size_t>(t[static_cast<size_t>(i)])] > 1) ? 1 : 0;
  return need;
}

PageStatus KvPagePool::reserve(PageTable& t, int64_t n, int64_t m, std::vector<PageCopy>& copies) {
  if (n < 0 || m < 0 || n > static_cast<int64_t>(t.size()) * page_tokens_)
    throw Error("KV pages: cannot reserve positions " + std::to_string(n) + " .. " + std::to_string(n + m - 1) +
                " of a table of " + std::to_string(t.size()) + " pages");
  if (pages_needed(t, n, m) > free_pages()) return PageStatus::Exhausted;
  for (int64_t i = n / page_tokens_; i < pages_for(n + m); ++i) {
    if (i >= static_cast<int64_t>(t.size())) {
      t.push_back(take());
      continue;
    }
    int32_t& page = t[static_cast<size_t>(i)];
    if (refs_[static_cast<size_t>(page)] == 1) continue;
    // Shared: this table takes a copy of its own; the sharers keep the page.
    const int32_t fresh = take();
    if (i * page_tokens_ < n) copies.push_back({page, fresh});  // rows before n are the sequence's
    drop(page);
    page = fresh;
  }
  return PageStatus::Ok;
}

void KvPagePool::truncate(PageTable& t, int64_t n_keep) {
  const size_t keep = static_cast<size_t>(std::max<int64_t>(0, pages_for(n_keep)));
  while (t.size() > keep) {
    drop(t.back());
    t.pop_back();
  }
}

void KvPagePool::share(const PageTable& src, int64_t n, PageTable& dst) {
  const size_t k = static_cast<size_t>(pages_for(n));
  if (k > src.size())
    throw Error("KV pages: cannot share " + std::to_string(n) + " positions of a table of " +
                std::to_string(src.size()) + " pages");
  // Counted up before dst lets go: src and dst may hold the same pages.
  for (size_t i = 0; i < k; ++i) ++refs_.at(static_cast<size_t>(src[i]));
  PageTable fresh(src.begin(), src.begin() + static_cast<std::ptrdiff_t>(k));
  release(dst);
  dst = std::move(fresh);
}

// ------------------------------------------------------------------ KvPages

KvPages::KvPages(const KvPageLayout& layout, int32_t n_pages, bool is_private)
    : layout_(layout), private_(is_private), pool_(n_pages, layout.page_tokens) {
  if (layout.n_layers < 0 || layout.n_kv <= 0 || layout.row_bytes <= 0)
    throw Error("KV pages: heads and row size must be positive");
  const uint64_t total = static_cast<uint64_t>(n_pages) * static_cast<uint64_t>(layout.page_bytes());
  try {
    bytes_.resize(static_cast<size_t>(total));  // zero pages, not touched here
  } catch (const std::bad_alloc&) {
    throw Error("KV cache: cannot allocate " + format_bytes(total) + " for " +
                std::to_string(static_cast<int64_t>(n_pages) * layout.page_tokens) +
                " tokens of keys and values; use a smaller --ctx");
  }
}

int32_t KvPages::n_pages() const { return pool_.n_pages(); }
int32_t KvPages::free_pages() const {
  std::lock_guard lk(mu_);
  return pool_.free_pages();
}
int32_t KvPages::used_pages() const {
  std::lock_guard lk(mu_);
  return pool_.used_pages();
}
int32_t KvPages::refs(int32_t page) const {
  std::lock_guard lk(mu_);
  return pool_.refs(page);
}
int64_t KvPages::pages_for(int64_t n_tokens) const { return pool_.pages_for(n_tokens); }

int64_t KvPages::pages_needed(const PageTable& t, int64_t n, int64_t m) const {
  std::lock_guard lk(mu_);
  return pool_.pages_needed(t, n, m);
}

PageStatus KvPages::reserve(PageTable& t, int64_t n, int64_t m) {
  std::vector<PageCopy> copies;
  std::lock_guard lk(mu_);
  const PageStatus s = pool_.reserve(t, n, m, copies);
  for (const PageCopy& c : copies) std::memcpy(page(c.dst), page(c.src), static_cast<size_t>(layout_.page_bytes()));
  return s;
}

void KvPages::truncate(PageTable& t, int64_t n_keep) {
  std::lock_guard lk(mu_);
  pool_.truncate(t, n_keep);
}

void KvPages::share(const PageTable& src, int64_t n, PageTable& dst) {
  std::lock_guard lk(mu_);
  pool_.share(src, n, dst);
}

std::shared_ptr<KvPages> KvPages::clone() const {
  std::lock_guard lk(mu_);
  auto c = std::make_shared<KvPages>(layout_, pool_.n_pages(), private_);
  c->pool_ = pool_;
  std::copy(bytes_.begin(), bytes_.end(), c->bytes_.begin());
  return c;
}

}  // namespace ms
