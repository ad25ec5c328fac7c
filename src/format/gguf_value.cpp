// GgufValue: typed access, display text and constructors for metadata values.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "format/gguf.h"
#include "util/error.h"

namespace ms {

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::UINT8: return "uint8";
    case GgufType::INT8: return "int8";
    case GgufType::UINT16: return "uint16";
    case GgufType::INT16: return "int16";
    case GgufType::UINT32: return "uint32";
    case GgufType::INT32: return "int32";
    case GgufType::FLOAT32: return "float32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::UINT64: return "uint64";
    case GgufType::INT64: return "int64";
    case GgufType::FLOAT64: return "float64";
  }
  return "unknown";
}

namespace {

bool is_unsigned_type(GgufType t) {
  return t == GgufType::UINT8 || t == GgufType::UINT16 || t == GgufType::UINT32 || t == GgufType::UINT64;
}
bool is_signed_type(GgufType t) {
  return t == GgufType::INT8 || t == GgufType::INT16 || t == GgufType::INT32 || t == GgufType::INT64;
}

Error type_error(const std::string& key, const GgufValue& v, const char* wanted) {
  std::string what = gguf_type_name(v.type);
  if (v.type == GgufType::ARRAY) what = std::string("array of ") + gguf_type_name(v.elem_type);
  return Error("metadata key '" + key + "' is " + what + " (" + v.to_display(4) + "), expected " + wanted);
}

// Printable form of a string: control characters and quotes escaped, long
// strings (chat templates) cut.
std::string quote(const std::string& s, size_t max_chars) {
  std::string out = "\"";
  size_t n = 0;
  for (unsigned char c : s) {
    if (n++ == max_chars) {
      out += "...\" (" + std::to_string(s.size()) + " bytes)";
      return out;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// The shortest text that reads back as the same value (1e-06, not
// 9.99999997e-07, for a float32).
std::string format_number(double d, bool is_f32) {
  char buf[40];
  for (int prec = 6; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, d);
    const double back = std::strtod(buf, nullptr);
    if (is_f32 ? static_cast<float>(back) == static_cast<float>(d) : back == d) break;
  }
  return buf;
}

}  // namespace

bool GgufValue::is_integer() const { return is_unsigned_type(type) || is_signed_type(type); }
bool GgufValue::is_float() const { return type == GgufType::FLOAT32 || type == GgufType::FLOAT64; }

int64_t GgufValue::as_int(const std::string& key) const {
  if (is_signed_type(type)) return i;
  if (is_unsigned_type(type)) {
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error("metadata key '" + key + "' = " + std::to_string(u) + " is too large for a signed 64-bit integer");
    return static_cast<int64_t>(u);
  }
  throw type_error(key, *this, "an integer");
}

uint64_t GgufValue::as_uint(const std::string& key) const {
  if (is_unsigned_type(type)) return u;
  if (is_signed_type(type)) {
    if (i < 0) throw Error("metadata key '" + key + "' = " + std::to_string(i) + " is negative, expected a count");
    return static_cast<uint64_t>(i);
  }
  throw type_error(key, *this, "an unsigned integer");
}

double GgufValue::as_float(const std::string& key) const {
  if (is_float()) return f;
  if (is_signed_type(type)) return static_cast<double>(i);
  if (is_unsigned_type(type)) return static_cast<double>(u);
  throw type_error(key, *this, "a number");
}

const std::string& GgufValue::as_string(const std::string& key) const {
  if (type != GgufType::STRING) throw type_error(key, *this, "a string");
  return s;
}

bool GgufValue::as_bool(const std::string& key) const {
  if (type != GgufType::BOOL) throw type_error(key, *this, "a bool");
  return b;
}

std::string GgufValue::to_display(size_t max_items) const {
  switch (type) {
    case GgufType::UINT8:
    case GgufType::UINT16:
    case GgufType::UINT32:
    case GgufType::UINT64: return std::to_string(u);
    case GgufType::INT8:
    case GgufType::INT16:
    case GgufType::INT32:
    case GgufType::INT64: return std::to_string(i);
    case GgufType::FLOAT32: return format_number(f, true);
    case GgufType::FLOAT64: return format_number(f, false);
    case GgufType::BOOL: return b ? "true" : "false";
    case GgufType::STRING: return quote(s, 120);
    case GgufType::ARRAY: {
      std::string out = "[";
      const size_t shown = arr.size() < max_items ? arr.size() : max_items;
      for (size_t k = 0; k < shown; ++k) {
        if (k) out += ", ";
        // Elements of a long array are cut shorter than a lone string.
        out += arr[k].type == GgufType::STRING ? quote(arr[k].s, 40) : arr[k].to_display(max_items);
      }
      if (arr.size() > shown) out += ", ... (" + std::to_string(arr.size()) + " items)";
      return out + "]";
    }
  }
  return "?";
}

GgufValue GgufValue::of_u32(uint32_t v) {
  GgufValue x;
  x.type = GgufType::UINT32;
  x.u = v;
  return x;
}

GgufValue GgufValue::of_i32(int32_t v) {
  GgufValue x;
  x.type = GgufType::INT32;
  x.i = v;
  return x;
}

GgufValue GgufValue::of_u64(uint64_t v) {
  GgufValue x;
  x.type = GgufType::UINT64;
  x.u = v;
  return x;
}

GgufValue GgufValue::of_i64(int64_t v) {
  GgufValue x;
  x.type = GgufType::INT64;
  x.i = v;
  return x;
}

GgufValue GgufValue::of_f64(double v) {
  GgufValue x;
  x.type = GgufType::FLOAT64;
  x.f = v;
  return x;
}

GgufValue GgufValue::of_f32(float v) {
  GgufValue x;
  x.type = GgufType::FLOAT32;
  x.f = v;
  return x;
}

GgufValue GgufValue::of_bool(bool v) {
  GgufValue x;
  x.type = GgufType::BOOL;
  x.b = v;
  return x;
}

GgufValue GgufValue::of_string(std::string v) {
  GgufValue x;
  x.type = GgufType::STRING;
  x.s = std::move(v);
  return x;
}

GgufValue GgufValue::of_array(GgufType elem_type, std::vector<GgufValue> elems) {
  GgufValue x;
  x.type = GgufType::ARRAY;
  x.elem_type = elem_type;
  x.arr = std::move(elems);
  return x;
}

GgufValue GgufValue::of_strings(const std::vector<std::string>& v) {
  std::vector<GgufValue> e;
  e.reserve(v.size());
  for (const auto& s : v) e.push_back(of_string(s));
  return of_array(GgufType::STRING, std::move(e));
}

GgufValue GgufValue::of_f32s(const std::vector<float>& v) {
  std::vector<GgufValue> e;
  e.reserve(v.size());
  for (float f : v) e.push_back(of_f32(f));
  return of_array(GgufType::FLOAT32, std::move(e));
}

GgufValue GgufValue::of_i32s(const std::vector<int32_t>& v) {
  std::vector<GgufValue> e;
  e.reserve(v.size());
  for (int32_t i : v) e.push_back(of_i32(i));
  return of_array(GgufType::INT32, std::move(e));
}

}  // namespace ms
