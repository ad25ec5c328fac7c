// How the matvec and matmul kernels find their work (MatvecGroups, matvec.h):
// grid.y is a group, with one expert's matrix and a range of vectors. P is
// any of those kernels' parameter structs (they share these field names).
#pragma once
#include <cstdint>

#include "cuda/matvec.h"

namespace ms::cuda::dev {

// Host side: matrix z's addressing and the group layout into a kernel's params.
template <class P>
inline void set_matrix(P& p, int z, const MatrixSet& w) {
  p.table[z] = w.table;
  p.offset[z] = w.offset;
  p.base[z] = static_cast<const uint8_t*>(w.base);
  p.stride[z] = w.stride;
}

template <class P>
inline void set_groups(P& p, const MatvecGroups& g) {
  p.per_group = g.per_group;
  p.x_div = g.x_div;
  p.n_expert = g.n_expert;
  p.n_groups = g.n_groups;
  p.expert = g.expert;
  p.offsets = g.offsets;
  p.list = g.list;
}

// The group's expert id, clamped into [0, n_expert): a bad id reads some
// expert's weights, never memory outside them.
template <class P>
__device__ __forceinline__ int group_expert(const P& p, int g) {
  int e = p.expert != nullptr ? __ldg(p.expert + g) : 0;
  if (p.n_expert > 0) e = min(max(e, 0), p.n_expert - 1);
  return e;
}

// Matrix z (gate or up of a pair; 0 otherwise) of expert e: through the
// pointer table when there is one (expert slots), else base + e * stride.
template <class P>
__device__ __forceinline__ const uint8_t* expert_matrix(const P& p, int z, int e) {
  return p.table[z] != nullptr ? static_cast<const uint8_t*>(p.table[z][e]) + p.offset[z]
                               : p.base[z] + static_cast<int64_t>(e) * p.stride[z];
}

// The group's vectors [x, y): from the offsets array, or per_group each.
template <class P>
__device__ __forceinline__ int2 group_vectors(const P& p, int g) {
  if (p.offsets != nullptr) return make_int2(__ldg(p.offsets + g), __ldg(p.offsets + g + 1));
  return make_int2(g * p.per_group, (g + 1) * p.per_group);
}

}  // namespace ms::cuda::dev
