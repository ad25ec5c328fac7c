// Tensor element types as numbered by the GGUF format (ggml type ids), with the
// facts every part of moestream needs: block size, bytes per block, and whether
// moestream can compute with the type. Knowing the size of a type we cannot
// compute with still lets `inspect` and the reader validate such files.
#pragma once
#include <cstdint>
#include <string>

namespace ms {

enum class DType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21,
  IQ2_S = 22, IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28,
  IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct TypeInfo {
  DType type;
  const char* name;     // as GGUF tools print it: "q4_K", "bf16", ...
  int64_t block_size;   // elements per block
  int64_t type_size;    // bytes per block
  bool computable;      // moestream has dequant + dot for it
  DType vec_dot_type;   // activation format the weight's dot product takes
};

// nullptr when `id` names no type known to the GGUF format.
const TypeInfo* type_info(uint32_t id);
const TypeInfo& type_info(DType t);  // throws ms::Error for an unknown value
inline const char* type_name(DType t) { return type_info(t).name; }
// Parses a name like "q4_k", "Q4_K", "bf16" (case-insensitive). Throws on unknown.
DType parse_type(const std::string& name);

// Bytes of a row of n elements; throws ms::Error if n is not a multiple of the
// block size.
int64_t row_bytes(DType t, int64_t n);

}  // namespace ms
