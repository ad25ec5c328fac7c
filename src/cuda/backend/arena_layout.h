// Sizing device arenas: every buffer of the backend's arenas starts on a
// 256-byte boundary (what DeviceArena::alloc gives by default), and Layout
// lays buffers out back to back so one function can both measure an arena
// and bind pointers into it.
//
// Host-only header (no CUDA types).
#pragma once
#include <cstddef>
#include <cstdint>

namespace ms::cuda {

constexpr size_t kArenaAlign = 256;
inline size_t arena_align_up(size_t v) { return (v + kArenaAlign - 1) & ~(kArenaAlign - 1); }

// Lays buffers out back to back: run once with base 0 to measure, once with
// the arena's base to bind.
struct Layout {
  uintptr_t base = 0;
  size_t used = 0;
  void* take(size_t bytes) {
    void* p = reinterpret_cast<void*>(base + used);
    used += arena_align_up(bytes);
    return p;
  }
  template <class T>
  T* take_n(size_t n) {
    return static_cast<T*>(take(n * sizeof(T)));
  }
};

}  // namespace ms::cuda
