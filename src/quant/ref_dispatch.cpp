// The *_ref functions of quant.h: check the row, then switch over the type to
// the per-format reference (ref_formats.h).
#include <string>

#include "quant/quant.h"
#include "quant/ref_formats.h"
#include "util/error.h"

namespace ms {
namespace {

struct RefFns {
  void (*dequantize)(const void*, float*, int64_t);
  void (*quantize)(const float*, void*, int64_t);
  float (*vec_dot)(int64_t, const void*, const void*);
};

#define MS_REF(name) RefFns{ref::dequantize_##name, ref::quantize_##name, ref::vec_dot_##name}

[[noreturn]] void throw_unsupported(DType t) {
  throw Error(std::string("quant type ") + type_name(t) +
              " is not supported (moestream computes with f32, f16, bf16, the q*_0/q*_1 and "
              "q*_K formats, mxfp4, tq1_0, tq2_0 and every iq* format; convert the model to one of "
              "these)");
}

// Throws for unknown or unsupported types and for rows that are not whole
// blocks; n == 0 is a valid empty row.
RefFns ref_fns(DType t, int64_t n) {
  row_bytes(t, n);  // throws ms::Error naming the type and its block size
  switch (t) {
    case DType::F32: return MS_REF(f32);
    case DType::F16: return MS_REF(f16);
    case DType::BF16: return MS_REF(bf16);
    case DType::Q4_0: return MS_REF(q4_0);
    case DType::Q4_1: return MS_REF(q4_1);
    case DType::Q5_0: return MS_REF(q5_0);
    case DType::Q5_1: return MS_REF(q5_1);
    case DType::Q8_0: return MS_REF(q8_0);
    case DType::Q8_1: return MS_REF(q8_1);
    case DType::Q2_K: return MS_REF(q2_K);
    case DType::Q3_K: return MS_REF(q3_K);
    case DType::Q4_K: return MS_REF(q4_K);
    case DType::Q5_K: return MS_REF(q5_K);
    case DType::Q6_K: return MS_REF(q6_K);
    case DType::Q8_K: return MS_REF(q8_K);
    case DType::MXFP4: return MS_REF(mxfp4);
    case DType::TQ1_0: return MS_REF(tq1_0);
    case DType::TQ2_0: return MS_REF(tq2_0);
    case DType::IQ1_S: return MS_REF(iq1_s);
    case DType::IQ1_M: return MS_REF(iq1_m);
    case DType::IQ2_XXS: return MS_REF(iq2_xxs);
    case DType::IQ2_XS: return MS_REF(iq2_xs);
    case DType::IQ2_S: return MS_REF(iq2_s);
    case DType::IQ3_XXS: return MS_REF(iq3_xxs);
    case DType::IQ3_S: return MS_REF(iq3_s);
    case DType::IQ4_NL: return MS_REF(iq4_nl);
    case DType::IQ4_XS: return MS_REF(iq4_xs);
    default: throw_unsupported(t);
  }
}

#undef MS_REF

}  // namespace

// An empty row touches no memory (its pointers may be null).
void dequantize_row_ref(DType t, const void* src, float* dst, int64_t n) {
  const RefFns f = ref_fns(t, n);
  if (n > 0) f.dequantize(src, dst, n);
}

void quantize_row_ref(DType t, const float* src, void* dst, int64_t n) {
  const RefFns f = ref_fns(t, n);
  if (n > 0) f.quantize(src, dst, n);
}

float vec_dot_ref(DType t, int64_t n, const void* w, const void* a) {
  const RefFns f = ref_fns(t, n);
  return n > 0 ? f.vec_dot(n, w, a) : 0.0f;
}

}  // namespace ms
