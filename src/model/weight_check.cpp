#include "model/weight_check.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "format/gguf.h"
#include "util/error.h"

namespace ms {
namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Exponent all ones: Inf (mantissa 0) or NaN. Half, bfloat16, float, double.
bool f16_bad(uint16_t h, bool* nan) {
  if ((h & 0x7C00) != 0x7C00) return false;
  *nan = (h & 0x03FF) != 0;
  return true;
}
bool bf16_bad(uint16_t h, bool* nan) {
  if ((h & 0x7F80) != 0x7F80) return false;
  *nan = (h & 0x007F) != 0;
  return true;
}
bool f32_bad(uint32_t u, bool* nan) {
  if ((u & 0x7F800000u) != 0x7F800000u) return false;
  *nan = (u & 0x007FFFFFu) != 0;
  return true;
}
bool f64_bad(uint64_t u, bool* nan) {
  constexpr uint64_t kExp = 0x7FF0000000000000ull;
  if ((u & kExp) != kExp) return false;
  *nan = (u & 0x000FFFFFFFFFFFFFull) != 0;
  return true;
}

// IQ1_M keeps its f16 block scale in the top nibbles of four u16 scale words.
uint16_t iq1m_scale(const uint8_t* scales) {
  const uint16_t s0 = load_u16(scales), s1 = load_u16(scales + 2), s2 = load_u16(scales + 4), s3 = load_u16(scales + 6);
  return static_cast<uint16_t>((s0 >> 12) | ((s1 >> 8) & 0x00F0) | ((s2 >> 4) & 0x0F00) | (s3 & 0xF000));
}

bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }
bool is_int_type(DType t) { return t == DType::I8 || t == DType::I16 || t == DType::I32 || t == DType::I64; }

// Element by element; false when every value is finite.
bool scan_floats(const GgufTensorInfo& t, uint64_t* index, bool* nan) {
  const int64_t size = type_info(t.type).type_size;
  const uint64_t n = t.nbytes / static_cast<uint64_t>(size);
  const uint8_t* p = t.data;
  for (uint64_t i = 0; i < n; ++i, p += size) {
    bool bad = false;
    switch (t.type) {
      case DType::F32: bad = f32_bad(load_u32(p), nan); break;
      case DType::F16: bad = f16_bad(load_u16(p), nan); break;
      case DType::BF16: bad = bf16_bad(load_u16(p), nan); break;
      default: bad = f64_bad(load_u64(p), nan); break;
    }
    if (bad) {
      *index = i;
      return true;
    }
  }
  return false;
}

bool field_bad(const uint8_t* block, const ScaleField& f, bool* nan) {
  switch (f.kind) {
    case ScaleKind::F16: return f16_bad(load_u16(block + f.offset), nan);
    case ScaleKind::F32: return f32_bad(load_u32(block + f.offset), nan);
    case ScaleKind::IQ1M_PACKED: return f16_bad(iq1m_scale(block + f.offset), nan);
    case ScaleKind::E8M0:  // 0xFF is the format's NaN; every other exponent is a finite power of two
      *nan = true;
      return block[f.offset] == 0xFF;
  }
  return false;
}

}  // namespace

std::vector<ScaleField> scale_fields(DType type) {
  using K = ScaleKind;
  switch (type) {
    // Block layouts as ggml defines them (ggml-common.h): where the scales sit.
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: case DType::IQ4_NL: case DType::IQ4_XS:
    case DType::IQ2_XXS: case DType::IQ2_XS: case DType::IQ2_S: case DType::IQ3_XXS: case DType::IQ3_S:
    case DType::IQ1_S:
      return {{0, "d", K::F16}};
    case DType::Q4_1: case DType::Q5_1: return {{0, "d", K::F16}, {2, "m", K::F16}};
    case DType::Q8_1: return {{0, "d", K::F16}, {2, "s", K::F16}};
    case DType::Q4_K: case DType::Q5_K: return {{0, "d", K::F16}, {2, "dmin", K::F16}};
    case DType::Q2_K: return {{80, "d", K::F16}, {82, "dmin", K::F16}};   // after scales[16], qs[64]
    case DType::Q3_K: return {{108, "d", K::F16}};                        // after hmask[32], qs[64], scales[12]
    case DType::Q6_K: return {{208, "d", K::F16}};                        // after ql[128], qh[64], scales[16]
    case DType::Q8_K: return {{0, "d", K::F32}};
    case DType::TQ1_0: return {{52, "d", K::F16}};                        // after qs[48], qh[4]
    case DType::TQ2_0: return {{64, "d", K::F16}};                        // after qs[64]
    case DType::IQ1_M: return {{48, "scale", K::IQ1M_PACKED}};            // scales[8] after qs[32], qh[16]
    case DType::MXFP4: return {{0, "e", K::E8M0}};
    default: return {};
  }
}

std::string BadValue::describe() const {
  const std::string what = field == "value" ? "element " + std::to_string(block) : "block " + std::to_string(block) + "'s " + field;
  return "tensor '" + tensor + "' (" + type_name(type) + "): " + what + " is " + (nan ? "NaN" : "Inf");
}

std::vector<TypeBytes> bytes_by_type(const GgufFile& f) {
  std::map<uint32_t, TypeBytes> by;
  for (const GgufTensorInfo& t : f.tensors()) {
    TypeBytes& b = by[static_cast<uint32_t>(t.type)];
    b.type = t.type;
    b.computable = type_info(t.type).computable;
    ++b.n_tensors;
    b.bytes += t.nbytes;
  }
  std::vector<TypeBytes> out;
  for (const auto& [id, b] : by) out.push_back(b);
  return out;
}

WeightCheck check_weights(const GgufFile& f, const std::function<void(uint64_t, uint64_t)>& progress, size_t max_bad) {
  WeightCheck r;
  r.max_bad = max_bad;
  uint64_t total = 0;
  for (const GgufTensorInfo& t : f.tensors()) total += t.nbytes;
  constexpr uint64_t kProgressEvery = 256ull << 20;
  uint64_t next_report = kProgressEvery;
  // File order, so the disk reads sequentially.
  std::vector<const GgufTensorInfo*> order;
  for (const GgufTensorInfo& t : f.tensors()) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (const GgufTensorInfo* tp : order) {
    const GgufTensorInfo& t = *tp;
    BadValue bad;
    bool found = false;
    if (is_int_type(t.type)) {
      r.skipped.push_back(t.name);
    } else if (is_float_type(t.type)) {
      found = scan_floats(t, &bad.block, &bad.nan);
      bad.field = "value";
    } else {
      const std::vector<ScaleField> fields = scale_fields(t.type);
      const TypeInfo& ti = type_info(t.type);
      const uint64_t n_blocks = t.nbytes / static_cast<uint64_t>(ti.type_size);
      if (fields.empty()) r.skipped.push_back(t.name);
      for (uint64_t b = 0; b < n_blocks && !found && !fields.empty(); ++b) {
        const uint8_t* block = t.data + b * static_cast<uint64_t>(ti.type_size);
        for (const ScaleField& sf : fields) {
          if (field_bad(block, sf, &bad.nan)) {
            found = true;
            bad.block = b;
            bad.field = sf.name;
            break;
          }
        }
      }
    }
    ++r.tensors_scanned;
    r.bytes_scanned += t.nbytes;
    if (found) {
      bad.tensor = t.name;
      bad.type = t.type;
      r.bad.push_back(std::move(bad));
      if (max_bad > 0 && r.bad.size() >= max_bad) {
        r.stopped_early = true;
        break;
      }
    }
    if (progress && r.bytes_scanned >= next_report) {
      progress(r.bytes_scanned, total);
      next_report = r.bytes_scanned + kProgressEvery;
    }
  }
  if (progress) progress(r.bytes_scanned, total);
  return r;
}

}  // namespace ms
