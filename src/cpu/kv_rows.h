// Where the K (or V) rows of one attention layer lie: in pages of
// page_tokens positions (engine/kv_pages.h) found through a block table, or
// in one contiguous [n_kv][ctx] block (a single page of ctx positions: the
// layout src/cpu/attention.h's pointer overloads take). T is the cache's
// unit: uint16_t halves, floats or BlockQ8_0 blocks.
#pragma once
#include <cstdint>

namespace ms {

template <typename T>
struct KvRows {
  T* base = nullptr;               // page 0's row 0 of KV head 0 (of this layer, K or V)
  const int32_t* pages = nullptr;  // the block table: position p is in page pages[p / page_tokens]
  int64_t page_tokens = 0;
  int64_t page_stride = 0;  // units from one page to the next
  int64_t head_stride = 0;  // units from one KV head's rows to the next, in a page
  int64_t row_stride = 0;   // units per row

  T* row(int head, int64_t pos) const {
    return base + pages[pos / page_tokens] * page_stride + head * head_stride + (pos % page_tokens) * row_stride;
  }
  // Calls f(j, row) for the rows of positions j0 .. j1-1 in order, a page's
  // run at a time (its rows are consecutive).
  template <typename F>
  void for_rows(int head, int64_t j0, int64_t j1, F&& f) const {
    for (int64_t j = j0; j < j1;) {
      const int64_t r = j % page_tokens;
      const int64_t n = page_tokens - r < j1 - j ? page_tokens - r : j1 - j;
      T* first = base + pages[j / page_tokens] * page_stride + head * head_stride + r * row_stride;
      for (int64_t i = 0; i < n; ++i) f(j + i, first + i * row_stride);
      j += n;
    }
  }
};

// A contiguous [n_kv][ctx] block of rows of row_units units each, as one page.
template <typename T>
KvRows<T> contiguous_rows(T* cache, int64_t ctx, int64_t row_units) {
  static const int32_t kPageZero = 0;
  return KvRows<T>{cache, &kPageZero, ctx, 0, ctx * row_units, row_units};
}

}  // namespace ms
