// A JSON-schema validator for the keywords grammar/json_schema.h supports,
// written independently of the compiler (validation semantics of draft
// 2020-12: each keyword checks the values of its own type): the tests check
// that what the grammar accepts is valid under the schema.
#pragma once
#include <cmath>
#include <regex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace ms::grammar::testing {

using ojson = nlohmann::ordered_json;

inline bool is_integer_value(const ojson& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && d == std::floor(d);
}

inline size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Formats, by their RFCs' grammar (not by the compiler's rules).
inline bool valid_format(const std::string& f, const std::string& s) {
  static const std::regex date(R"(^(\d{4})-(\d{2})-(\d{2})$)");
  static const std::regex time(R"(^(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))$)");
  static const std::regex uuid(R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)");
  static const std::regex email(R"(^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+$)");
  static const std::regex ipv4(R"(^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$)");
  auto date_ok = [&](const std::string& d) {
    std::smatch m;
    if (!std::regex_match(d, m, date)) return false;
    const int y = std::stoi(m[1]), mo = std::stoi(m[2]), day = std::stoi(m[3]);
    const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return mo >= 1 && mo <= 12 && day >= 1 && day <= days[mo - 1];
  };
  auto time_ok = [&](const std::string& t) {
    std::smatch m;
    if (!std::regex_match(t, m, time)) return false;
    if (std::stoi(m[1]) > 23 || std::stoi(m[2]) > 59 || std::stoi(m[3]) > 59) return false;
    if (m[6].matched && (std::stoi(m[6]) > 23 || std::stoi(m[7]) > 59)) return false;
    return true;
  };
  if (f == "date") return date_ok(s);
  if (f == "time") return time_ok(s);
  if (f == "date-time") {
    const size_t t = s.find_first_of("Tt");
    return t != std::string::npos && date_ok(s.substr(0, t)) && time_ok(s.substr(t + 1));
  }
  if (f == "uuid") return std::regex_match(s, uuid);
  if (f == "email") return std::regex_match(s, email);
  if (f == "ipv4") return std::regex_match(s, ipv4);
  return true;  // an annotation
}

inline bool valid(const ojson& v, const ojson& s, const ojson& root, int depth = 0) {
  if (depth > 200) return false;
  if (s.is_boolean()) return s.get<bool>();
  auto sub = [&](const ojson& x, const ojson& schema) { return valid(x, schema, root, depth + 1); };
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"].get<std::string>();
    const ojson* t = &root;
    if (ref.size() > 1) {
      std::string pointer;  // the URI fragment's %XX escapes decoded
      for (size_t i = 1; i < ref.size(); ++i) {
        if (ref[i] == '%' && i + 2 < ref.size()) {
          pointer += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          pointer += ref[i];
        }
      }
      t = &root.at(ojson::json_pointer(pointer));
    }
    if (!sub(v, *t)) return false;
  }
  if (s.contains("allOf"))
    for (const ojson& x : s["allOf"])
      if (!sub(v, x)) return false;
  if (s.contains("anyOf")) {
    bool any = false;
    for (const ojson& x : s["anyOf"]) any = any || sub(v, x);
    if (!any) return false;
  }
  if (s.contains("oneOf")) {
    int n = 0;
    for (const ojson& x : s["oneOf"]) n += sub(v, x);
    if (n != 1) return false;
  }
  if (s.contains("not") && sub(v, s["not"])) return false;
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum")) {
    bool in = false;
    for (const ojson& e : s["enum"]) in = in || v == e;
    if (!in) return false;
  }
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_string()) types.push_back(s["type"]);
    else for (const ojson& t : s["type"]) types.push_back(t);
    bool ok = false;
    for (const std::string& t : types) {
      ok = ok || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
           (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
           (t == "integer" && is_integer_value(v)) || (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null());
    }
    if (!ok) return false;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && !(x >= s["minimum"].get<double>())) return false;
    if (s.contains("maximum") && !(x <= s["maximum"].get<double>())) return false;
    if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number() && !(x > s["exclusiveMinimum"].get<double>()))
      return false;
    if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number() && !(x < s["exclusiveMaximum"].get<double>()))
      return false;
    if (s.contains("multipleOf")) {
      const double m = s["multipleOf"].get<double>();
      const double q = x / m;
      if (!std::isfinite(q) || std::fabs(q - std::round(q)) > 1e-9 * std::max(1.0, std::fabs(q))) return false;
    }
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const ojson& r : s["required"])
        if (!v.contains(r.get<std::string>())) return false;
    if (s.contains("minProperties") && v.size() < s["minProperties"].get<size_t>()) return false;
    if (s.contains("maxProperties") && v.size() > s["maxProperties"].get<size_t>()) return false;
    for (const auto& [k, x] : v.items()) {
      if (s.contains("properties") && s["properties"].contains(k)) {
        if (!sub(x, s["properties"][k])) return false;
      } else if (s.contains("additionalProperties")) {
        if (!sub(x, s["additionalProperties"])) return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    size_t from = 0;
    if (s.contains("prefixItems")) {
      const ojson& p = s["prefixItems"];
      for (size_t i = 0; i < v.size() && i < p.size(); ++i)
        if (!sub(v[i], p[i])) return false;
      from = p.size();
    }
    if (s.contains("items"))
      for (size_t i = from; i < v.size(); ++i)
        if (!sub(v[i], s["items"])) return false;
    if (s.contains("uniqueItems") && s["uniqueItems"].get<bool>())
      for (size_t i = 0; i < v.size(); ++i)
        for (size_t j = i + 1; j < v.size(); ++j)
          if (v[i] == v[j]) return false;
  }
  if (v.is_string()) {
    const std::string text = v.get<std::string>();
    const size_t n = code_points(text);
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
    if (s.contains("pattern") && !std::regex_search(text, std::regex(s["pattern"].get<std::string>(), std::regex::ECMAScript)))
      return false;
    if (s.contains("format") && !valid_format(s["format"].get<std::string>(), text)) return false;
  }
  return true;
}

}  // namespace ms::grammar::testing
