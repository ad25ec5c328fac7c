// What a GGUF's tensors are made of (bytes per type), and a scan for
// corrupt weights: every float value of float tensors and every scale field
// of quantized blocks (the f16 d / dmin of Q4_K, Q8_0, ...: one NaN or Inf
// there makes a whole block, and then every activation it touches, NaN).
// A damaged download is the usual cause; `moestream inspect --check` runs it.
//
// The scan reads only the scale fields of quantized blocks (a few bytes per
// block), in file order, so its cost is reading the file once: the page
// cache's rate, about a minute for a 20 GB file from a fast disk.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "quant/types.h"

namespace ms {

class GgufFile;

// One row of the type table: every tensor of one type.
struct TypeBytes {
  DType type = DType::F32;
  int n_tensors = 0;
  uint64_t bytes = 0;
  bool computable = false;  // moestream has kernels for it (quant/types.h)
};
// Types in the order of their id, each with its tensor count and bytes.
std::vector<TypeBytes> bytes_by_type(const GgufFile& file);

// The first non-finite value found in one tensor.
struct BadValue {
  std::string tensor;
  DType type = DType::F32;
  uint64_t block = 0;    // the block index (float tensors: the element index)
  std::string field;     // "value", "d", "dmin", "m", "s", "scale" (IQ1_M's packed f16), "e" (MXFP4's exponent)
  bool nan = true;       // NaN, else +-Inf
  std::string describe() const;  // "tensor 'blk.3.ffn_down_exps.weight' (q4_K): block 1234's d is NaN"
};

struct WeightCheck {
  uint64_t bytes_scanned = 0;       // bytes of the tensors scanned
  int tensors_scanned = 0;
  std::vector<std::string> skipped;  // tensors with no float fields (integer types)
  std::vector<BadValue> bad;         // the first bad value of each bad tensor, in file order
  size_t max_bad = 0;                // stop after this many bad tensors (0: scan everything)
  bool stopped_early = false;
};

// Scans every tensor's float values / scale fields. `progress(done, total)`
// (bytes) is called every 256 MiB or so and at the end; max_bad > 0 stops
// after that many bad tensors.
WeightCheck check_weights(const GgufFile& file, const std::function<void(uint64_t, uint64_t)>& progress = {},
                          size_t max_bad = 0);

// The scale fields of one block of `type`: (byte offset in the block, name,
// kind). Exposed for the tests; empty for float and integer types.
enum class ScaleKind { F16, F32, E8M0, IQ1M_PACKED };
struct ScaleField {
  int offset;
  const char* name;
  ScaleKind kind;
};
std::vector<ScaleField> scale_fields(DType type);

}  // namespace ms
