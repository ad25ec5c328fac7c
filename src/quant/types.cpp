#include "quant/types.h"

#include <algorithm>
#include <cctype>

#include "util/error.h"

namespace ms {
namespace {

constexpr TypeInfo kTypes[] = {
    // type            name       block bytes computable vec_dot_type
    {DType::F32,     "f32",     1,   4,   true,  DType::F32},
    {DType::F16,     "f16",     1,   2,   true,  DType::F32},
    {DType::Q4_0,    "q4_0",    32,  18,  true,  DType::Q8_0},
    {DType::Q4_1,    "q4_1",    32,  20,  true,  DType::Q8_1},
    {DType::Q5_0,    "q5_0",    32,  22,  true,  DType::Q8_0},
    {DType::Q5_1,    "q5_1",    32,  24,  true,  DType::Q8_1},
    {DType::Q8_0,    "q8_0",    32,  34,  true,  DType::Q8_0},
    {DType::Q8_1,    "q8_1",    32,  36,  true,  DType::Q8_1},
    {DType::Q2_K,    "q2_K",    256, 84,  true,  DType::Q8_K},
    {DType::Q3_K,    "q3_K",    256, 110, true,  DType::Q8_K},
    {DType::Q4_K,    "q4_K",    256, 144, true,  DType::Q8_K},
    {DType::Q5_K,    "q5_K",    256, 176, true,  DType::Q8_K},
    {DType::Q6_K,    "q6_K",    256, 210, true,  DType::Q8_K},
    {DType::Q8_K,    "q8_K",    256, 292, true,  DType::Q8_K},
    {DType::IQ2_XXS, "iq2_xxs", 256, 66,  true,  DType::Q8_K},
    {DType::IQ2_XS,  "iq2_xs",  256, 74,  true,  DType::Q8_K},
    {DType::IQ3_XXS, "iq3_xxs", 256, 98,  true,  DType::Q8_K},
    {DType::IQ1_S,   "iq1_s",   256, 50,  true,  DType::Q8_K},
    {DType::IQ4_NL,  "iq4_nl",  32,  18,  true,  DType::Q8_0},
    {DType::IQ3_S,   "iq3_s",   256, 110, true,  DType::Q8_K},
    {DType::IQ2_S,   "iq2_s",   256, 82,  true,  DType::Q8_K},
    {DType::IQ4_XS,  "iq4_xs",  256, 136, true,  DType::Q8_K},
    {DType::I8,      "i8",      1,   1,   false, DType::I8},
    {DType::I16,     "i16",     1,   2,   false, DType::I16},
    {DType::I32,     "i32",     1,   4,   false, DType::I32},
    {DType::I64,     "i64",     1,   8,   false, DType::I64},
    {DType::F64,     "f64",     1,   8,   false, DType::F64},
    {DType::IQ1_M,   "iq1_m",   256, 56,  true,  DType::Q8_K},
    {DType::BF16,    "bf16",    1,   2,   true,  DType::F32},
    {DType::TQ1_0,   "tq1_0",   256, 54,  true,  DType::Q8_K},
    {DType::TQ2_0,   "tq2_0",   256, 66,  true,  DType::Q8_K},
    {DType::MXFP4,   "mxfp4",   32,  17,  true,  DType::Q8_0},
};

}  // namespace

const TypeInfo* type_info(uint32_t id) {
  for (const auto& t : kTypes)
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}

const TypeInfo& type_info(DType t) {
  const TypeInfo* info = type_info(static_cast<uint32_t>(t));
  if (!info) throw Error("unknown tensor type id " + std::to_string(static_cast<uint32_t>(t)));
  return *info;
}

DType parse_type(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string known;
  for (const auto& t : kTypes) {
    std::string n = t.name;
    std::transform(n.begin(), n.end(), n.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (n == lower) return t.type;
    known += (known.empty() ? "" : ", ") + std::string(t.name);
  }
  throw Error("unknown tensor type '" + name + "' (known: " + known + ")");
}

int64_t row_bytes(DType t, int64_t n) {
  const TypeInfo& info = type_info(t);
  if (n < 0 || n % info.block_size != 0)
    throw Error("row of " + std::to_string(n) + " elements is not a multiple of " +
                info.name + "'s block size " + std::to_string(info.block_size));
  return n / info.block_size * info.type_size;
}

}  // namespace ms
