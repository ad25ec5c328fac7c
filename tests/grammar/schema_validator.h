// A JSON-schema validator for the keywords grammar/json_schema.h supports,
// written independently of the compiler: the tests check that what the
// grammar accepts is valid under the schema.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace ms::grammar::testing {

using ojson = nlohmann::ordered_json;

inline bool valid(const ojson& v, const ojson& s, const ojson& root, int depth = 0) {
  if (depth > 200) return false;
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"].get<std::string>();
    const ojson* t = &root;
    if (ref.size() > 1) t = &root.at(ojson::json_pointer(ref.substr(1)));
    return valid(v, *t, root, depth + 1);
  }
  if (s.contains("anyOf") || s.contains("oneOf")) {
    const ojson& list = s.contains("anyOf") ? s["anyOf"] : s["oneOf"];
    int n = 0;
    for (const ojson& sub : list) n += valid(v, sub, root, depth + 1);
    return s.contains("anyOf") ? n > 0 : n == 1;
  }
  if (s.contains("const")) return v == s["const"];
  if (s.contains("enum")) {
    for (const ojson& e : s["enum"])
      if (v == e) return true;
    return false;
  }
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_string()) types.push_back(s["type"]);
    else for (const ojson& t : s["type"]) types.push_back(t);
    bool ok = false;
    for (const std::string& t : types) {
      ok = ok || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
           (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
           (t == "integer" && (v.is_number_integer() || (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<long long>(v.get<double>()))))) ||
           (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null());
    }
    if (!ok) return false;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const ojson& r : s["required"])
        if (!v.contains(r.get<std::string>())) return false;
    for (const auto& [k, x] : v.items()) {
      if (s.contains("properties") && s["properties"].contains(k)) {
        if (!valid(x, s["properties"][k], root, depth + 1)) return false;
      } else if (s.contains("additionalProperties")) {
        if (!valid(x, s["additionalProperties"], root, depth + 1)) return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("items"))
      for (const ojson& x : v)
        if (!valid(x, s["items"], root, depth + 1)) return false;
  }
  if (v.is_string()) {
    // Length in code points.
    size_t n = 0;
    for (unsigned char c : v.get<std::string>()) n += (c & 0xC0) != 0x80;
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
  }
  return true;
}

}  // namespace ms::grammar::testing
