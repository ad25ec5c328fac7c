// The dispatched row operations of quant.h: each picks, once per process, the
// best kernel this CPU runs (AVX-512 VNNI, AVX2, or the scalar reference),
// capped by the MOESTREAM_ISA debug switch through cpu_features().
#include <algorithm>
#include <cstring>
#include <string>

#include "quant/quant.h"
#include "quant/simd_kernels.h"
#include "util/cpu_features.h"
#include "util/error.h"

namespace ms {
namespace simd {

bool cpu_supports_avx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool cpu_supports_avx512() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return cpu_supports_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("bmi2");
#else
  return false;
#endif
}

VecDotRowsFn vec_dot_rows_kernel_avx2(DType t) {
  switch (t) {
    case DType::Q4_K: return vec_dot_rows_q4_K_avx2;
    case DType::Q5_K: return vec_dot_rows_q5_K_avx2;
    case DType::Q6_K: return vec_dot_rows_q6_K_avx2;
    case DType::Q8_0: return vec_dot_rows_q8_0_avx2;
    case DType::Q4_0: return vec_dot_rows_q4_0_avx2;
    case DType::MXFP4: return vec_dot_rows_mxfp4_avx2;
    case DType::BF16: return vec_dot_rows_bf16_avx2;
    case DType::F16: return vec_dot_rows_f16_avx2;
    case DType::F32: return vec_dot_rows_f32_avx2;
    case DType::Q4_1: return vec_dot_rows_q4_1_avx2;
    case DType::Q5_0: return vec_dot_rows_q5_0_avx2;
    case DType::Q5_1: return vec_dot_rows_q5_1_avx2;
    case DType::Q2_K: return vec_dot_rows_q2_K_avx2;
    case DType::Q3_K: return vec_dot_rows_q3_K_avx2;
    case DType::TQ1_0: return vec_dot_rows_tq1_0_avx2;
    case DType::TQ2_0: return vec_dot_rows_tq2_0_avx2;
    case DType::IQ1_S: return vec_dot_rows_iq1_s_avx2;
    case DType::IQ1_M: return vec_dot_rows_iq1_m_avx2;
    case DType::IQ2_XXS: return vec_dot_rows_iq2_xxs_avx2;
    case DType::IQ2_XS: return vec_dot_rows_iq2_xs_avx2;
    case DType::IQ2_S: return vec_dot_rows_iq2_s_avx2;
    case DType::IQ3_XXS: return vec_dot_rows_iq3_xxs_avx2;
    case DType::IQ3_S: return vec_dot_rows_iq3_s_avx2;
    case DType::IQ4_NL: return vec_dot_rows_iq4_nl_avx2;
    case DType::IQ4_XS: return vec_dot_rows_iq4_xs_avx2;
    default: return nullptr;
  }
}

VecDotRowsFn vec_dot_rows_kernel_avx512(DType t) {
  switch (t) {
    case DType::Q4_K: return vec_dot_rows_q4_K_avx512;
    case DType::Q5_K: return vec_dot_rows_q5_K_avx512;
    case DType::Q6_K: return vec_dot_rows_q6_K_avx512;
    case DType::Q8_0: return vec_dot_rows_q8_0_avx512;
    case DType::Q4_0: return vec_dot_rows_q4_0_avx512;
    case DType::MXFP4: return vec_dot_rows_mxfp4_avx512;
    case DType::BF16: return vec_dot_rows_bf16_avx512;
    case DType::F16: return vec_dot_rows_f16_avx512;
    case DType::F32: return vec_dot_rows_f32_avx512;
    case DType::Q4_1: return vec_dot_rows_q4_1_avx512;
    case DType::Q5_0: return vec_dot_rows_q5_0_avx512;
    case DType::Q5_1: return vec_dot_rows_q5_1_avx512;
    case DType::Q2_K: return vec_dot_rows_q2_K_avx512;
    case DType::Q3_K: return vec_dot_rows_q3_K_avx512;
    case DType::TQ1_0: return vec_dot_rows_tq1_0_avx512;
    case DType::TQ2_0: return vec_dot_rows_tq2_0_avx512;
    case DType::IQ1_S: return vec_dot_rows_iq1_s_avx512;
    case DType::IQ1_M: return vec_dot_rows_iq1_m_avx512;
    case DType::IQ2_XXS: return vec_dot_rows_iq2_xxs_avx512;
    case DType::IQ2_XS: return vec_dot_rows_iq2_xs_avx512;
    case DType::IQ2_S: return vec_dot_rows_iq2_s_avx512;
    case DType::IQ3_XXS: return vec_dot_rows_iq3_xxs_avx512;
    case DType::IQ3_S: return vec_dot_rows_iq3_s_avx512;
    case DType::IQ4_NL: return vec_dot_rows_iq4_nl_avx512;
    case DType::IQ4_XS: return vec_dot_rows_iq4_xs_avx512;
    default: return nullptr;
  }
}

VecDotTokensFn vec_dot_tokens_kernel_avx512(DType t) {
  switch (t) {
    case DType::Q4_K: return vec_dot_tokens_q4_K_avx512;
    case DType::Q5_K: return vec_dot_tokens_q5_K_avx512;
    default: return nullptr;
  }
}

QuantizeActFn quantize_act_kernel_avx2(DType t) {
  switch (t) {
    case DType::Q8_0: return quantize_act_q8_0_avx2;
    case DType::Q8_K: return quantize_act_q8_K_avx2;
    default: return nullptr;
  }
}

// The AVX2 quantizers are already far from the bottleneck; no AVX-512 ones.
QuantizeActFn quantize_act_kernel_avx512(DType) { return nullptr; }

}  // namespace simd

namespace {

constexpr int kTypeSlots = 64;  // ggml type ids in use are below this

struct Table {
  simd::VecDotRowsFn rows[kTypeSlots] = {};
  simd::VecDotTokensFn tokens[kTypeSlots] = {};
  const char* path[kTypeSlots] = {};
  simd::QuantizeActFn quant[kTypeSlots] = {};
};

bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

Table build_table() {
  Table tab;
  const CpuFeatures& f = cpu_features();
  // The AVX-512 kernels of the integer formats need VNNI; the float ones only F.
  const bool avx512_int = f.avx512 && f.avx512_vnni && simd::cpu_supports_avx512();
  const bool avx512_float = f.avx512 && simd::cpu_supports_avx512();
  for (int id = 0; id < kTypeSlots; ++id) {
    tab.path[id] = "scalar";
    const TypeInfo* info = type_info(static_cast<uint32_t>(id));
    if (!info) continue;
    const DType t = info->type;
    const bool flt = is_float_type(t);
    if ((flt ? avx512_float : avx512_int) && simd::vec_dot_rows_kernel_avx512(t)) {
      tab.rows[id] = simd::vec_dot_rows_kernel_avx512(t);
      tab.path[id] = flt ? "avx512" : "avx512-vnni";
      tab.tokens[id] = simd::vec_dot_tokens_kernel_avx512(t);
    } else if (f.avx2 && simd::vec_dot_rows_kernel_avx2(t)) {
      tab.rows[id] = simd::vec_dot_rows_kernel_avx2(t);
      tab.path[id] = "avx2";
    }
    if (avx512_int && simd::quantize_act_kernel_avx512(t))
      tab.quant[id] = simd::quantize_act_kernel_avx512(t);
    else if (f.avx2)
      tab.quant[id] = simd::quantize_act_kernel_avx2(t);
  }
  return tab;
}

const Table& table() {
  static const Table tab = build_table();
  return tab;
}

int slot(DType t) {
  const auto id = static_cast<uint32_t>(t);
  if (id >= kTypeSlots) throw Error("tensor type id " + std::to_string(id) + " is not supported");
  return static_cast<int>(id);
}

void check_row(DType t, int64_t n, const char* what) {
  const TypeInfo& info = type_info(t);
  if (n < 0 || n % info.block_size != 0)
    throw Error(std::string(what) + ": row of " + std::to_string(n) + " elements is not a multiple of " +
                info.name + "'s block size " + std::to_string(info.block_size));
}

}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) { dequantize_row_ref(t, src, dst, n); }

void quantize_row_act(DType act_type, const float* src, void* dst, int64_t n) {
  switch (act_type) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::Q8_0:
    case DType::Q8_1:
    case DType::Q8_K:
      break;
    default:
      throw Error(std::string("quantize_row_act: ") + type_name(act_type) +
                  " is not an activation format (use q8_0, q8_1, q8_K or f32)");
  }
  check_row(act_type, n, "quantize_row_act");
  if (simd::QuantizeActFn fn = table().quant[slot(act_type)]) return fn(src, dst, n);
  quantize_row_ref(act_type, src, dst, n);
}

float vec_dot(DType t, int64_t n, const void* w, const void* a) {
  float out;
  vec_dot_rows(t, n, w, 0, 1, a, &out);
  return out;
}

void vec_dot_rows(DType t, int64_t n, const void* w, int64_t row_stride, int64_t rows, const void* a,
                  float* out) {
  check_row(t, n, "vec_dot_rows");
  if (rows <= 0) return;
  if (simd::VecDotRowsFn fn = table().rows[slot(t)]) return fn(n, w, row_stride, rows, a, out);
  const auto* wp = static_cast<const uint8_t*>(w);
  for (int64_t r = 0; r < rows; ++r) out[r] = vec_dot_ref(t, n, wp + r * row_stride, a);
}

const char* vec_dot_path(DType t) { return table().path[slot(t)]; }

void vec_dot_rows_tokens(DType t, int64_t n, const void* w, int64_t row_stride, int64_t rows, const void* acts,
                         int64_t act_stride, const int32_t* act_index, int64_t n_tok, float* out,
                         int64_t out_stride) {
  check_row(t, n, "vec_dot_rows_tokens");
  if (rows <= 0 || n_tok <= 0) return;
  const auto* ap = static_cast<const uint8_t*>(acts);
  const simd::VecDotTokensFn fn = n_tok > 1 ? table().tokens[slot(t)] : nullptr;
  if (!fn) {
    for (int64_t i = 0; i < n_tok; ++i)
      vec_dot_rows(t, n, w, row_stride, rows, ap + (act_index ? act_index[i] : i) * act_stride, out + i * out_stride);
    return;
  }
  // The kernel takes pointer lists; build them a bounded batch at a time.
  constexpr int64_t kBatch = 64;
  const void* a_rows[kBatch];
  float* o_rows[kBatch];
  for (int64_t i0 = 0; i0 < n_tok; i0 += kBatch) {
    const int64_t m = std::min(kBatch, n_tok - i0);
    for (int64_t i = 0; i < m; ++i) {
      a_rows[i] = ap + (act_index ? act_index[i0 + i] : i0 + i) * act_stride;
      o_rows[i] = out + (i0 + i) * out_stride;
    }
    fn(n, w, row_stride, rows, a_rows, m, o_rows);
  }
}

}  // namespace ms
