#include "grammar/json_schema.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "grammar/matcher.h"
#include "grammar/number_range.h"
#include "grammar/pattern.h"
#include "grammar/string_format.h"

namespace ms::grammar {

using json = nlohmann::ordered_json;

namespace {

// Keywords that constrain a value but have no grammar here: refused.
const std::set<std::string> kRefused = {
    "if", "then", "else", "contains", "minContains", "maxContains", "patternProperties", "propertyNames",
    "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedProperties", "unevaluatedItems",
    "$dynamicRef", "$recursiveRef"};
// Keywords that constrain a value and are handled (anything else is an
// annotation, or a keyword of a vocabulary validators skip too).
const std::set<std::string> kConstraints = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
    "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minProperties",
    "maxProperties", "$ref", "anyOf", "oneOf", "allOf", "not"};
const std::set<std::string> kObjectKeys = {"properties", "required", "additionalProperties", "minProperties",
                                           "maxProperties"};
const std::set<std::string> kArrayKeys = {"items", "prefixItems", "additionalItems", "minItems", "maxItems"};
const std::set<std::string> kStringKeys = {"minLength", "maxLength", "pattern"};
const std::set<std::string> kNumberKeys = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                           "multipleOf"};
const char* kTypes[] = {"object", "array", "string", "number", "integer", "boolean", "null"};

const char* kSupported =
    "supported: type, enum, const, anyOf, oneOf, allOf, not (of types), $ref, properties, required, "
    "additionalProperties, minProperties, maxProperties, items, prefixItems, minItems, maxItems, minLength, "
    "maxLength, pattern, format, minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf";

// Most values a multipleOf with bounds is listed as.
constexpr size_t kMaxMultiples = 1000;

std::string dump(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

// The JSON kinds a value of schema `s` can have under a validator
// ("integer" counts as "number"): for deciding whether oneOf's alternatives
// overlap. Conservative: any kind where it cannot tell.
using Kinds = std::set<std::string>;
const Kinds kAllKinds = {"object", "array", "string", "number", "boolean", "null"};

std::string kind_of(const json& v) {
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  if (v.is_string()) return "string";
  if (v.is_number()) return "number";
  if (v.is_boolean()) return "boolean";
  return "null";
}

class Compiler {
 public:
  Compiler(const json& root, const SchemaLimits& lim) : root_(root), lim_(lim), b_(lim.grammar) {}

  Grammar run() {
    const uint32_t top = value(root_, "", 0);
    return b_.finish(top);
  }
  Grammar run_any_object() { return b_.finish(any_object()); }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& keyword, const std::string& what) const {
    const std::string where = path.empty() ? "the schema" : "the schema at " + path;
    throw SchemaError(where + (keyword.empty() ? "" : ": '" + keyword + "'") + " " + what, keyword);
  }

  // ---- shared pieces, made once
  uint32_t ws() {
    if (!ws_) {
      // Nothing, one space, or a newline with up to 20 spaces/tabs of indent.
      const uint32_t indent = b_.repeat("indent", Seq{set_sym(tab_space())}, 0, 20);
      ws_ = b_.rule("ws", {Seq{}, literal(" "), literal("\n") + rule_sym(indent)});
    }
    return *ws_;
  }
  static ByteSet tab_space() {
    ByteSet s;
    s.set(' ');
    s.set('\t');
    return s;
  }
  uint32_t chr() {
    if (!char_) {
      ByteSet plain;  // printable ASCII and DEL, less '"' and '\'
      for (unsigned c = 0x20; c < 0x80; ++c)
        if (c != '"' && c != '\\') plain.set(c);
      ByteSet esc;
      for (char c : std::string("\"\\/bfnrt")) esc.set(static_cast<uint8_t>(c));
      const Sym cont = range_sym(0x80, 0xBF);
      // Well-formed UTF-8 only (no overlongs, no surrogates, nothing past U+10FFFF).
      char_ = b_.rule("char", {Seq{set_sym(plain)},
                               Seq{byte_sym('\\'), set_sym(esc)},
                               Seq{range_sym(0xC2, 0xDF), cont},
                               Seq{byte_sym(0xE0), range_sym(0xA0, 0xBF), cont},
                               Seq{range_sym(0xE1, 0xEC), cont, cont},
                               Seq{byte_sym(0xED), range_sym(0x80, 0x9F), cont},
                               Seq{range_sym(0xEE, 0xEF), cont, cont},
                               Seq{byte_sym(0xF0), range_sym(0x90, 0xBF), cont, cont},
                               Seq{range_sym(0xF1, 0xF3), cont, cont, cont},
                               Seq{byte_sym(0xF4), range_sym(0x80, 0x8F), cont, cont}});
    }
    return *char_;
  }
  uint32_t string(int64_t min = 0, int64_t max = -1) {
    if (min == 0 && max < 0 && string_) return *string_;
    const uint32_t chars = b_.repeat("chars", {rule_sym(chr())}, min, max);
    const uint32_t r = b_.rule("string", {literal("\"") + rule_sym(chars) + byte_sym('"')});
    if (min == 0 && max < 0) string_ = r;
    return r;
  }
  uint32_t integer() {
    if (!integer_) {
      const uint32_t digits = b_.repeat("int-digits", {range_sym('0', '9')}, 0, 15);
      const uint32_t mag = b_.rule("int-magnitude", {literal("0"), Seq{range_sym('1', '9'), rule_sym(digits)}});
      integer_ = b_.rule("integer", {Seq{rule_sym(mag)}, literal("-") + rule_sym(mag)});
    }
    return *integer_;
  }
  uint32_t number() {
    if (!number_) {
      const uint32_t frac_digits = b_.repeat("frac-digits", {range_sym('0', '9')}, 1, 16);
      const uint32_t frac = b_.rule("frac", {Seq{}, literal(".") + rule_sym(frac_digits)});
      const uint32_t exp_digits = b_.repeat("exp-digits", {range_sym('0', '9')}, 1, 2);
      ByteSet e, sign;
      e.set('e'), e.set('E'), sign.set('+'), sign.set('-');
      const uint32_t exp_sign = b_.rule("exp-sign", {Seq{}, Seq{set_sym(sign)}});
      const uint32_t exp = b_.rule("exp", {Seq{}, Seq{set_sym(e), rule_sym(exp_sign), rule_sym(exp_digits)}});
      number_ = b_.rule("number", {Seq{rule_sym(integer()), rule_sym(frac), rule_sym(exp)}});
    }
    return *number_;
  }
  uint32_t boolean() {
    if (!boolean_) boolean_ = b_.rule("boolean", {literal("true"), literal("false")});
    return *boolean_;
  }
  uint32_t null() {
    if (!null_) null_ = b_.rule("null", {literal("null")});
    return *null_;
  }
  // Any JSON value (objects and arrays nest without a grammar bound; the
  // matcher caps the depth).
  uint32_t any_value() {
    if (!any_) {
      any_ = b_.declare("value");
      const uint32_t obj = any_object_with(*any_);
      const uint32_t arr = array_of(*any_, 0, -1);
      for (uint32_t r : {obj, arr, string(), number(), boolean(), null()}) b_.add_alt(*any_, {rule_sym(r)});
    }
    return *any_;
  }
  uint32_t any_object() {
    any_value();
    return any_object_with(*any_);
  }
  // "{" members "}" with any keys, each member's value under `v`.
  uint32_t any_object_with(uint32_t v, int64_t min = 0, int64_t max = -1) {
    if (max == 0) return b_.rule("object", {literal("{") + rule_sym(ws()) + byte_sym('}')});
    const Seq member = Seq{rule_sym(string()), byte_sym(':'), rule_sym(ws()), rule_sym(v), rule_sym(ws())};
    const uint32_t more = b_.repeat("members", literal(",") + rule_sym(ws()) + member, std::max<int64_t>(min - 1, 0),
                                    max < 0 ? -1 : max - 1);
    std::vector<Seq> body_alts = {member + rule_sym(more)};
    if (min == 0) body_alts.push_back(Seq{});
    const uint32_t body = b_.rule("object-body", body_alts);
    return b_.rule("object", {literal("{") + rule_sym(ws()) + rule_sym(body) + byte_sym('}')});
  }
  uint32_t array_of(uint32_t v, int64_t min, int64_t max) {
    if (max == 0) return b_.rule("array", {literal("[") + rule_sym(ws()) + byte_sym(']')});
    const Seq item = Seq{rule_sym(v), rule_sym(ws())};
    const uint32_t more = b_.repeat("items", literal(",") + rule_sym(ws()) + item, std::max<int64_t>(min - 1, 0),
                                    max < 0 ? -1 : max - 1);
    std::vector<Seq> body_alts = {item + rule_sym(more)};
    if (min == 0) body_alts.push_back(Seq{});
    const uint32_t body = b_.rule("array-body", body_alts);
    return b_.rule("array", {literal("[") + rule_sym(ws()) + rule_sym(body) + byte_sym(']')});
  }

  // ---- the schema
  int64_t bound(const json& s, const char* key, const std::string& path, int64_t dflt) const {
    auto it = s.find(key);
    if (it == s.end()) return dflt;
    if (!it->is_number_integer() && !(it->is_number_float() && it->get<double>() == static_cast<double>(static_cast<int64_t>(it->get<double>()))))
      fail(path, key, "must be a non-negative integer");
    const double d = it->get<double>();
    if (d < 0) fail(path, key, "must be a non-negative integer");
    if (d > static_cast<double>(lim_.max_bound))
      fail(path, key, "above " + std::to_string(lim_.max_bound) + " is not supported");
    return static_cast<int64_t>(d);
  }

  uint32_t literal_value(const json& v) {
    return b_.rule("literal", {literal(v.dump(-1, ' ', false, json::error_handler_t::replace))});
  }

  const json& resolve(const std::string& ref, const std::string& path) const {
    if (ref.empty() || ref[0] != '#') fail(path, "$ref", "'" + ref + "' is not supported: only local references (#/...)");
    const json* cur = &root_;
    size_t i = 1;
    if (i < ref.size() && ref[i] != '/') fail(path, "$ref", "'" + ref + "' is not a JSON pointer (#/...)");
    while (i < ref.size()) {
      size_t j = ref.find('/', i + 1);
      if (j == std::string::npos) j = ref.size();
      std::string token;
      // A URI fragment: %XX escapes first, then the pointer's ~0 / ~1.
      for (size_t k = i + 1; k < j; ++k) {
        auto hexval = [](char c) {
          return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        };
        if (ref[k] == '%' && k + 2 < j && hexval(ref[k + 1]) >= 0 && hexval(ref[k + 2]) >= 0) {
          token += static_cast<char>(hexval(ref[k + 1]) * 16 + hexval(ref[k + 2]));
          k += 2;
        } else {
          token += ref[k];
        }
      }
      std::string key;
      for (size_t k = 0; k < token.size(); ++k) {
        if (token[k] == '~' && k + 1 < token.size() && (token[k + 1] == '0' || token[k + 1] == '1')) {
          key += token[k + 1] == '0' ? '~' : '/';
          ++k;
        } else {
          key += token[k];
        }
      }
      if (cur->is_object() && cur->contains(key)) cur = &(*cur)[key];
      else if (cur->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
               key.size() < 9 && std::stoul(key) < cur->size())
        cur = &(*cur)[std::stoul(key)];
      else fail(path, "$ref", "'" + ref + "' points to nothing in the schema");
      i = j;
    }
    return *cur;
  }

  uint32_t value(const json& s, const std::string& path, int depth) {
    if (depth > lim_.max_depth) fail(path, "", "nests deeper than " + std::to_string(lim_.max_depth) + " levels");
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "", "is false: no value satisfies it");
      return any_value();
    }
    if (!s.is_object()) fail(path, "", "must be an object or a boolean");
    check_refused(s, path);
    auto has = [&](const char* k) { return s.contains(k); };
    // An intersection with the sibling keywords: merged into one schema.
    if (has("allOf")) return value(merge_all(s, path, depth), path + "/allOf", depth + 1);
    if (has("$ref") && constraints_besides(s, "$ref")) return value(merge_all(s, path, depth), path, depth + 1);
    if (has("$ref")) {
      const json& r = s["$ref"];
      if (!r.is_string()) fail(path, "$ref", "must be a string");
      const std::string ref = r.get<std::string>();
      auto it = refs_.find(ref);
      if (it != refs_.end()) return it->second;
      // Declared before its body is compiled: recursion refers to it.
      const uint32_t rule = b_.declare("ref:" + ref);
      refs_[ref] = rule;
      const json& target = resolve(ref, path);
      b_.add_alt(rule, {rule_sym(value(target, ref.substr(1), depth + 1))});
      return rule;
    }
    if (has("not")) return value(without_not(s, path), path, depth + 1);
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!has(key)) continue;
      const json& list = s[key];
      if (!list.is_array() || list.empty()) fail(path, key, "must be a non-empty array of schemas");
      if (has(key == std::string("anyOf") ? "oneOf" : "anyOf"))
        fail(path, key, "beside both anyOf and oneOf is not supported");
      // Siblings apply to every alternative: anyOf [A, B] beside S is
      // anyOf [allOf [A, S], allOf [B, S]].
      json siblings = json::object();
      for (const auto& [k, v] : s.items())
        if (k != key) siblings[k] = v;
      const bool merge = constraints_besides(s, key);
      std::vector<json> alts_schemas;
      for (size_t i = 0; i < list.size(); ++i) {
        if (list[i].is_boolean() && !list[i].get<bool>()) continue;  // matches nothing: not an alternative
        if (merge) alts_schemas.push_back(json{{"allOf", json::array({list[i], siblings})}});
        else alts_schemas.push_back(list[i]);
      }
      if (alts_schemas.empty()) fail(path, key, "holds only false schemas: no value satisfies it");
      if (std::string(key) == "oneOf") check_disjoint(alts_schemas, path, depth);
      std::vector<Seq> alts;
      for (size_t i = 0; i < alts_schemas.size(); ++i)
        alts.push_back({rule_sym(value(alts_schemas[i], path + "/" + key + "/" + std::to_string(i), depth + 1))});
      return b_.rule(key, alts);
    }
    if (has("const") || has("enum")) return enumerated(s, path, depth);
    std::vector<std::string> types;
    if (has("type")) {
      types = type_list(s["type"], path);
    } else {
      // No type: the kinds the keywords speak of (a validator would let the
      // other kinds through; generating only these is a subset).
      auto any_of = [&](const std::set<std::string>& keys) {
        for (const std::string& k : keys)
          if (s.contains(k)) return true;
        return false;
      };
      if (any_of(kObjectKeys)) types.push_back("object");
      if (any_of(kArrayKeys)) types.push_back("array");
      if (any_of(kStringKeys) || (s.contains("format") && s["format"].is_string() && constrained_format(s["format"])))
        types.push_back("string");
      if (any_of(kNumberKeys)) types.push_back("number");
      if (types.empty()) return any_value();
    }
    std::vector<Seq> alts;
    for (const std::string& t : types) {
      if (t == "object") alts.push_back({rule_sym(object(s, path, depth))});
      else if (t == "array") alts.push_back({rule_sym(array(s, path, depth))});
      else if (t == "string") alts.push_back({rule_sym(string_schema(s, path))});
      else if (t == "number") alts.push_back({rule_sym(numeric(s, path, false))});
      else if (t == "integer") alts.push_back({rule_sym(numeric(s, path, true))});
      else if (t == "boolean") alts.push_back({rule_sym(boolean())});
      else if (t == "null") alts.push_back({rule_sym(null())});
    }
    return alts.size() == 1 ? alts[0][0].rule : b_.rule("types", alts);
  }

  void check_refused(const json& s, const std::string& path) const {
    for (const auto& [k, v] : s.items()) {
      if (kRefused.count(k)) fail(path, k, std::string("is not supported (") + kSupported + ")");
      if (k == "uniqueItems" && !(v.is_boolean() && !v.get<bool>()))
        fail(path, k, "is not supported: a grammar cannot keep array items apart (false is fine)");
    }
  }

  std::vector<std::string> type_list(const json& t, const std::string& path) const {
    std::vector<std::string> types;
    if (t.is_string()) types.push_back(t.get<std::string>());
    else if (t.is_array() && !t.empty()) {
      for (const json& x : t) {
        if (!x.is_string()) fail(path, "type", "must be a type name or an array of them");
        types.push_back(x.get<std::string>());
      }
    } else {
      fail(path, "type", "must be a type name or a non-empty array of them");
    }
    for (const std::string& name : types) {
      bool known = false;
      for (const char* k : kTypes) known = known || name == k;
      if (!known)
        fail(path, "type", "'" + name + "' is not a JSON schema type (object, array, string, number, integer, boolean, null)");
    }
    return types;
  }

  static bool constrained_format(const json& f) {
    Builder scratch;
    return f.is_string() && string_format_rule(scratch, f.get<std::string>()).has_value();
  }

  // Whether `s` has a constraining keyword other than `self`.
  static bool constraints_besides(const json& s, const std::string& self) {
    for (const auto& [k, v] : s.items()) {
      (void)v;
      if (k != self && kConstraints.count(k)) return true;
    }
    return false;
  }

  // ---- const / enum: the values, less those the sibling keywords refuse
  // (checked by the siblings' own grammar: sound, if it drops a value whose
  // text it writes otherwise, e.g. an object's keys in another order).
  uint32_t enumerated(const json& s, const std::string& path, int depth) {
    std::vector<json> values;
    if (s.contains("enum")) {
      const json& list = s["enum"];
      if (!list.is_array() || list.empty()) fail(path, "enum", "must be a non-empty array");
      for (const json& v : list) values.push_back(v);
      if (s.contains("const")) {
        std::vector<json> both;
        for (const json& v : values)
          if (v == s["const"]) both.push_back(v);
        values = both;
      }
    } else {
      values.push_back(s["const"]);
    }
    json rest = json::object();
    for (const auto& [k, v] : s.items())
      if (k != "enum" && k != "const") rest[k] = v;
    if (constraints_besides(rest, "")) {
      Compiler sub(root_, lim_);
      const uint32_t r = sub.value(rest, path, depth + 1);
      const Grammar g = sub.b_.finish(r);
      std::vector<json> kept;
      for (const json& v : values) {
        Matcher m(g);
        if (m.advance(dump(v)) && m.can_end()) kept.push_back(v);
      }
      values = kept;
    }
    if (values.empty())
      fail(path, s.contains("enum") ? "enum" : "const", "leaves no value that the schema's other keywords allow");
    std::vector<Seq> alts;
    size_t bytes = 0;
    for (const json& v : values) {
      alts.push_back(literal(dump(v)));
      bytes += alts.back().size() + 1;
      if (bytes > lim_.grammar.max_elements)
        fail(path, "enum", "is too large: its values take more than " + std::to_string(lim_.grammar.max_elements) + " bytes");
    }
    return b_.rule("enum", alts);
  }

  // ---- not: decided over types (not {"type": ...}), else refused.
  json without_not(const json& s, const std::string& path) const {
    const json& n = s["not"];
    json out = json::object();
    for (const auto& [k, v] : s.items())
      if (k != "not") out[k] = v;
    if (n.is_boolean()) {
      if (n.get<bool>()) fail(path, "not", "is true: no value satisfies the schema");
      return out;
    }
    if (!n.is_object()) fail(path, "not", "must be a schema");
    if (!constraints_besides(n, "")) fail(path, "not", "of a schema every value satisfies: no value satisfies it");
    if (constraints_besides(n, "type"))
      fail(path, "not", "is supported over 'type' only (e.g. {\"not\": {\"type\": \"null\"}})");
    const std::vector<std::string> excluded = type_list(n["type"], path + "/not");
    std::vector<std::string> types;
    if (s.contains("type")) {
      types = type_list(s["type"], path);
    } else {
      for (const char* t : kTypes)
        if (std::string(t) != "integer") types.push_back(t);
    }
    std::vector<std::string> kept;
    for (const std::string& t : types) {
      bool gone = false;
      for (const std::string& x : excluded) gone = gone || x == t || (x == "number" && t == "integer");
      if (gone) continue;
      if (t == "number")
        for (const std::string& x : excluded)
          if (x == "integer")
            fail(path, "not", "of 'integer' beside 'number' is not supported (numbers that are not integers)");
      kept.push_back(t);
    }
    if (kept.empty()) fail(path, "not", "excludes every type the schema allows: no value satisfies it");
    out["type"] = kept;
    return out;
  }

  // ---- oneOf: generated as anyOf, which is right only when no value can
  // match two alternatives; shown here by their kinds (object, string, ...)
  // or by a property whose const/enum values differ. Else refused.
  Kinds kinds(const json& s, int hops) const {
    if (s.is_boolean()) return s.get<bool>() ? kAllKinds : Kinds{};
    if (!s.is_object() || hops > 16) return kAllKinds;
    Kinds out = kAllKinds;
    auto meet = [&](const Kinds& k) {
      Kinds both;
      for (const std::string& x : out)
        if (k.count(x)) both.insert(x);
      out = both;
    };
    if (s.contains("$ref") && s["$ref"].is_string()) {
      try {
        meet(kinds(resolve(s["$ref"].get<std::string>(), ""), hops + 1));
      } catch (const SchemaError&) {
      }
    }
    if (s.contains("type") && (s["type"].is_string() || s["type"].is_array())) {
      Kinds k;
      const json list = s["type"].is_string() ? json::array({s["type"]}) : s["type"];
      for (const json& t : list)
        if (t.is_string()) k.insert(t.get<std::string>() == "integer" ? "number" : t.get<std::string>());
      meet(k);
    }
    if (s.contains("const")) meet({kind_of(s["const"])});
    if (s.contains("enum") && s["enum"].is_array()) {
      Kinds k;
      for (const json& v : s["enum"]) k.insert(kind_of(v));
      meet(k);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key) || !s[key].is_array()) continue;
      Kinds k;
      for (const json& a : s[key])
        for (const std::string& x : kinds(a, hops + 1)) k.insert(x);
      meet(k);
    }
    if (s.contains("allOf") && s["allOf"].is_array())
      for (const json& a : s["allOf"]) meet(kinds(a, hops + 1));
    return out;
  }
  // The values a schema is limited to by const / enum, if it is.
  std::optional<std::vector<json>> values_of(const json& s, int hops) const {
    if (!s.is_object() || hops > 16) return std::nullopt;
    if (s.contains("$ref") && s["$ref"].is_string() && s.size() == 1) {
      try {
        return values_of(resolve(s["$ref"].get<std::string>(), ""), hops + 1);
      } catch (const SchemaError&) {
        return std::nullopt;
      }
    }
    if (s.contains("const")) return std::vector<json>{s["const"]};
    if (s.contains("enum") && s["enum"].is_array()) return std::vector<json>(s["enum"].begin(), s["enum"].end());
    return std::nullopt;
  }
  const json* target(const json& s, int hops = 0) const {
    if (s.is_object() && s.contains("$ref") && s["$ref"].is_string() && s.size() == 1 && hops < 16) {
      try {
        return target(resolve(s["$ref"].get<std::string>(), ""), hops + 1);
      } catch (const SchemaError&) {
        return nullptr;
      }
    }
    return &s;
  }
  bool disjoint(const json& a_in, const json& b_in) const {
    const Kinds ka = kinds(a_in, 0), kb = kinds(b_in, 0);
    bool shared = false;
    for (const std::string& x : ka) shared = shared || kb.count(x);
    if (!shared) return true;
    auto no_common = [](const std::vector<json>& x, const std::vector<json>& y) {
      for (const json& v : x)
        for (const json& w : y)
          if (v == w) return false;
      return true;
    };
    const auto va = values_of(a_in, 0), vb = values_of(b_in, 0);
    if (va && vb && no_common(*va, *vb)) return true;
    // Objects told apart by a required property with different const/enum values.
    const json* a = target(a_in);
    const json* b = target(b_in);
    if (!a || !b || !a->is_object() || !b->is_object()) return false;
    if (ka != Kinds{"object"} || kb != Kinds{"object"}) return false;
    auto required = [](const json& s, const std::string& p) {
      if (!s.contains("required") || !s["required"].is_array()) return false;
      for (const json& r : s["required"])
        if (r == p) return true;
      return false;
    };
    if (!a->contains("properties") || !(*a)["properties"].is_object() || !b->contains("properties") ||
        !(*b)["properties"].is_object())
      return false;
    for (const auto& [p, sa] : (*a)["properties"].items()) {
      if (!(*b)["properties"].contains(p) || !required(*a, p) || !required(*b, p)) continue;
      const auto x = values_of(sa, 0), y = values_of((*b)["properties"][p], 0);
      if (x && y && no_common(*x, *y)) return true;
    }
    return false;
  }
  void check_disjoint(const std::vector<json>& alts, const std::string& path, int depth) const {
    (void)depth;
    for (size_t i = 0; i < alts.size(); ++i)
      for (size_t j = i + 1; j < alts.size(); ++j)
        if (!disjoint(alts[i], alts[j]))
          fail(path, "oneOf",
               "alternatives " + std::to_string(i) + " and " + std::to_string(j) +
                   " may both match a value, which oneOf forbids; supported are alternatives of different types or "
                   "objects told apart by a required property's const/enum (use anyOf where overlap is fine)");
  }

  // ---- allOf (and $ref beside other keywords): one merged schema.
  // Parts: the schema's own keywords, each allOf entry, each $ref target.
  void flatten(const json& s, const std::string& path, int depth, std::vector<json>& parts) const {
    if (depth > lim_.max_depth) fail(path, "allOf", "nests deeper than " + std::to_string(lim_.max_depth) + " levels");
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "allOf", "holds false: no value satisfies it");
      return;
    }
    if (!s.is_object()) fail(path, "allOf", "must hold schemas (objects or booleans)");
    check_refused(s, path);  // before merging drops what it does not know
    json own = json::object();
    for (const auto& [k, v] : s.items())
      if (k != "allOf" && k != "$ref") own[k] = v;
    parts.push_back(own);
    if (s.contains("allOf")) {
      const json& list = s["allOf"];
      if (!list.is_array() || list.empty()) fail(path, "allOf", "must be a non-empty array of schemas");
      for (size_t i = 0; i < list.size(); ++i) flatten(list[i], path + "/allOf/" + std::to_string(i), depth + 1, parts);
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) fail(path, "$ref", "must be a string");
      const std::string ref = s["$ref"].get<std::string>();
      flatten(resolve(ref, path), ref.substr(1), depth + 1, parts);
    }
  }
  json merge_all(const json& s, const std::string& path, int depth) const {
    std::vector<json> parts;
    flatten(s, path, depth, parts);
    json acc = json::object();
    for (const json& p : parts) acc = merge(acc, p, path, depth);
    return acc;
  }
  json merge_list(const std::vector<json>& list, const std::string& path, int depth) const {
    if (list.size() == 1) return list[0];
    json all = json::array();
    for (const json& x : list) all.push_back(x);
    return merge_all(json{{"allOf", all}}, path, depth + 1);
  }
  json merge(const json& a, const json& b, const std::string& path, int depth) const {
    // items applies after its own schema's prefixItems only: parts with
    // prefixes of different lengths do not merge item by item.
    auto prefix_len = [](const json& x) {
      return x.contains("prefixItems") && x["prefixItems"].is_array() ? x["prefixItems"].size() : size_t{0};
    };
    if ((a.contains("items") || b.contains("items")) && (a.contains("prefixItems") || b.contains("prefixItems")) &&
        prefix_len(a) != prefix_len(b))
      fail(path, "prefixItems", "and items in different allOf schemas are not supported");
    json out = a;
    std::optional<Decimal> none;
    for (const auto& [k, v] : b.items()) {
      if (!kConstraints.count(k)) continue;  // annotations: not needed to generate
      if (!out.contains(k)) {
        out[k] = v;
        continue;
      }
      json& cur = out[k];
      if (k == "type") {
        std::vector<std::string> x = type_list(cur, path), y = type_list(v, path), both;
        for (const std::string& t : x)
          for (const std::string& u : y) {
            if (t == u) both.push_back(t);
            else if ((t == "integer" && u == "number") || (t == "number" && u == "integer")) both.push_back("integer");
          }
        if (both.empty()) fail(path, "allOf", "asks for types that no value has at once");
        cur = both;
      } else if (k == "required") {
        for (const json& r : v)
          if (std::find(cur.begin(), cur.end(), r) == cur.end()) cur.push_back(r);
      } else if (k == "properties" || k == "additionalProperties") {
        // Both done below, together.
      } else if (k == "items" || k == "additionalItems") {
        cur = merge_list({cur, v}, path + "/" + k, depth);
      } else if (k == "minLength" || k == "minItems" || k == "minProperties" || k == "minimum" ||
                 k == "exclusiveMinimum") {
        if (v.is_number() && cur.is_number() && v.get<double>() > cur.get<double>()) cur = v;
        else if (v != cur && !(v.is_number() && cur.is_number())) fail(path, k, "differs between allOf's schemas");
      } else if (k == "maxLength" || k == "maxItems" || k == "maxProperties" || k == "maximum" ||
                 k == "exclusiveMaximum") {
        if (v.is_number() && cur.is_number() && v.get<double>() < cur.get<double>()) cur = v;
        else if (v != cur && !(v.is_number() && cur.is_number())) fail(path, k, "differs between allOf's schemas");
      } else if (k == "enum") {
        json both = json::array();
        if (cur.is_array() && v.is_array())
          for (const json& x : cur)
            if (std::find(v.begin(), v.end(), x) != v.end()) both.push_back(x);
        if (both.empty()) fail(path, "enum", "lists of allOf's schemas share no value");
        cur = both;
      } else if (v != cur) {
        fail(path, k, "differs between allOf's schemas, which is not supported (only equal values merge)");
      }
    }
    // Properties: a name's schema is all of what each side says of it: its
    // own entry, else that side's additionalProperties (false: not allowed).
    if (a.contains("properties") || b.contains("properties") || a.contains("additionalProperties") ||
        b.contains("additionalProperties")) {
      std::vector<std::string> names;
      for (const json* side : {&a, &b})
        if (side->contains("properties") && (*side)["properties"].is_object())
          for (const auto& [name, sub] : (*side)["properties"].items()) {
            (void)sub;
            if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
          }
      json props = json::object();
      for (const std::string& name : names) {
        std::vector<json> parts;
        bool forbidden = false;
        for (const json* side : {&a, &b}) {
          if (side->contains("properties") && (*side)["properties"].is_object() && (*side)["properties"].contains(name))
            parts.push_back((*side)["properties"][name]);
          else if (side->contains("additionalProperties")) {
            const json& extra = (*side)["additionalProperties"];
            if (extra.is_boolean() && !extra.get<bool>()) forbidden = true;
            else if (extra.is_object()) parts.push_back(extra);
          }
        }
        if (forbidden) {
          if (out.contains("required"))
            for (const json& r : out["required"])
              if (r == name)
                fail(path, "allOf", "requires '" + name + "', which another of its schemas forbids (additionalProperties false)");
          continue;
        }
        props[name] = merge_list(parts, path + "/properties/" + name, depth);
      }
      if (!names.empty()) out["properties"] = props;
      std::vector<json> extras;
      for (const json* side : {&a, &b})
        if (side->contains("additionalProperties")) extras.push_back((*side)["additionalProperties"]);
      bool closed = false;
      for (const json& e : extras) closed = closed || (e.is_boolean() && !e.get<bool>());
      if (closed) out["additionalProperties"] = false;
      else if (!extras.empty()) {
        std::vector<json> schemas;
        for (const json& e : extras)
          if (e.is_object()) schemas.push_back(e);
        if (!schemas.empty()) out["additionalProperties"] = merge_list(schemas, path + "/additionalProperties", depth);
      }
    }
    (void)none;
    return out;
  }

  // ---- strings
  uint32_t string_schema(const json& s, const std::string& path) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) fail(path, "pattern", "must be a string");
      if (has_len)
        fail(path, "pattern", "beside minLength/maxLength is not supported (put the length in the pattern: ^.{2,5}$)");
      if (s.contains("format") && constrained_format(s["format"])) fail(path, "pattern", "beside 'format' is not supported");
      try {
        const uint32_t body = pattern_rule(b_, s["pattern"].get<std::string>(), chr(), lim_.max_bound);
        return b_.rule("string-pattern", {literal("\"") + rule_sym(body) + byte_sym('"')});
      } catch (const PatternError& e) {
        fail(path, "pattern", std::string(e.what()));
      }
    }
    if (s.contains("format") && s["format"].is_string()) {
      if (auto body = string_format_rule(b_, s["format"].get<std::string>())) {
        if (has_len) fail(path, "format", "'" + s["format"].get<std::string>() + "' beside minLength/maxLength is not supported");
        return b_.rule("string-format", {literal("\"") + rule_sym(*body) + byte_sym('"')});
      }
    }
    const int64_t min = bound(s, "minLength", path, 0), max = bound(s, "maxLength", path, -1);
    if (max >= 0 && max < min) fail(path, "maxLength", "is below minLength: no string satisfies both");
    return string(min, max);
  }

  // ---- numbers
  std::optional<Decimal> number_keyword(const json& s, const char* key, const std::string& path) const {
    auto it = s.find(key);
    if (it == s.end()) return std::nullopt;
    if (!it->is_number()) fail(path, key, "must be a number");
    auto d = parse_decimal(dump(*it));
    if (!d) fail(path, key, "is not a finite number");
    return d;
  }
  uint32_t numeric(const json& s, const std::string& path, bool integer) {
    NumberBounds nb;
    // Draft 4's boolean exclusiveMinimum/Maximum make minimum/maximum strict.
    auto strict = [&](const char* key) { return s.contains(key) && s[key].is_boolean() && s[key].get<bool>(); };
    auto numeric_key = [&](const char* key) -> std::optional<Decimal> {
      if (s.contains(key) && s[key].is_boolean()) return std::nullopt;
      return number_keyword(s, key, path);
    };
    nb.lo = number_keyword(s, "minimum", path);
    nb.lo_exclusive = nb.lo && strict("exclusiveMinimum");
    if (auto x = numeric_key("exclusiveMinimum")) {
      if (!nb.lo || s["exclusiveMinimum"].get<double>() >= s["minimum"].get<double>()) nb.lo = x, nb.lo_exclusive = true;
    }
    nb.hi = number_keyword(s, "maximum", path);
    nb.hi_exclusive = nb.hi && strict("exclusiveMaximum");
    if (auto x = numeric_key("exclusiveMaximum")) {
      if (!nb.hi || s["exclusiveMaximum"].get<double>() <= s["maximum"].get<double>()) nb.hi = x, nb.hi_exclusive = true;
    }
    const std::optional<Decimal> step = number_keyword(s, "multipleOf", path);
    if (step && (step->neg || step->mantissa == "0")) fail(path, "multipleOf", "must be above 0");
    if (!nb.lo && !nb.hi && !step) return integer ? this->integer() : number();
    const char* what = integer ? "integer" : "number";
    auto none = [&]() -> uint32_t {
      fail(path, nb.lo ? (nb.lo_exclusive ? "exclusiveMinimum" : "minimum") : "multipleOf",
           std::string("leaves no ") + what + " within the bounds (at most 15 digits, or 16 for integers)");
    };
    NumberRanges ranges(b_);
    if (!step) {
      if (integer) {
        auto r = ranges.range(nb, 0, 0, 16);
        return r ? *r : none();
      }
      auto r = ranges.decimal(nb, int_digits(nb), frac_digits(nb));
      return r ? *r : none();
    }
    // multipleOf m = M * 10^E: a value N / 10^k (k fraction digits) is a
    // multiple when N is a multiple of g (below).
    if (step->mantissa.size() > 17) fail(path, "multipleOf", "with more than 17 significant digits is not supported");
    const int64_t m = std::stoll(step->mantissa);
    int k = 0;
    int64_t g = m;
    if (step->exp >= 0) {
      for (int i = 0; i < step->exp && g < (int64_t{1} << 60) / 10; ++i) g *= 10;
    } else if (integer) {
      // An integer n is a multiple of M / 10^t when M / gcd(M, 10^t) divides it.
      for (int i = 0; i < -step->exp && g % 2 == 0; ++i) g /= 2;
      for (int i = 0; i < -step->exp && g % 5 == 0; ++i) g /= 5;
    } else {
      k = -step->exp;
      if (k > 14) fail(path, "multipleOf", "with more than 14 fraction digits is not supported");
    }
    if (g == 1) {
      if (integer) {
        auto r = ranges.range(nb, 0, 0, 16);
        return r ? *r : none();
      }
      auto r = ranges.decimal(nb, std::min(int_digits(nb), 15 - k), k);
      return r ? *r : none();
    }
    const int cap_digits = integer ? 16 : 15;
    int64_t cap = 1;
    for (int i = 0; i < cap_digits; ++i) cap *= 10;
    --cap;
    const int64_t n_lo = !nb.lo ? -cap : std::max(-cap, nb.lo_exclusive ? scaled_floor(*nb.lo, k) + 1 : scaled_ceil(*nb.lo, k));
    const int64_t n_hi = !nb.hi ? cap : std::min(cap, nb.hi_exclusive ? scaled_ceil(*nb.hi, k) - 1 : scaled_floor(*nb.hi, k));
    size_t count = 0;
    std::vector<std::string> texts;
    if (n_lo <= n_hi) {
      const int64_t first = n_lo % g == 0 ? n_lo : n_lo + ((n_lo > 0 ? g : 0) - n_lo % g);
      for (int64_t v = first; v <= n_hi && count <= kMaxMultiples; v += g, ++count) {
        texts.push_back(NumberRanges::text(v, k));
        if (n_hi - v < g) {
          ++count;
          break;
        }
      }
    }
    if (texts.empty()) none();
    if (count > kMaxMultiples)
      fail(path, "multipleOf",
           "leaves more than " + std::to_string(kMaxMultiples) + " values within the bounds, which is not supported: "
           "supported are a power of ten (1, 0.01: any value with that many fraction digits) or bounds "
           "(minimum/maximum) leaving at most " + std::to_string(kMaxMultiples) + " multiples");
    return trie(texts);
  }
  // Digits before the point for a bounded number: those of its largest
  // finite bound (at least 1; 9 where a side is open), leaving the rest of
  // the 15 to the fraction.
  static int int_digits(const NumberBounds& nb) {
    if (!nb.lo || !nb.hi) return 9;
    int d = 1;
    for (const Decimal* x : {&*nb.lo, &*nb.hi}) {
      if (x->mantissa == "0") continue;
      d = std::max(d, static_cast<int>(x->mantissa.size()) + x->exp);
    }
    return std::clamp(d, 1, 15);
  }
  static int frac_digits(const NumberBounds& nb) { return std::min(15 - int_digits(nb), 12); }

  // Literal texts as a trie: a parse follows one branch per prefix.
  uint32_t trie(std::vector<std::string> texts) {
    std::sort(texts.begin(), texts.end());
    texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
    return trie_node(texts, 0, texts.size(), 0);
  }
  uint32_t trie_node(const std::vector<std::string>& t, size_t from, size_t to, size_t pos) {
    std::vector<Seq> alts;
    size_t i = from;
    if (i < to && t[i].size() == pos) {
      alts.push_back(Seq{});
      ++i;
    }
    while (i < to) {
      size_t j = i;
      while (j < to && t[j][pos] == t[i][pos]) ++j;
      alts.push_back(Seq{byte_sym(static_cast<uint8_t>(t[i][pos])), rule_sym(trie_node(t, i, j, pos + 1))});
      i = j;
    }
    return b_.rule("literal-trie", alts);
  }

  // ---- objects
  uint32_t object(const json& s, const std::string& path, int depth) {
    struct Prop { std::string name; uint32_t rule; bool required; };
    std::vector<Prop> props;
    std::set<std::string> required;
    if (s.contains("required")) {
      const json& r = s["required"];
      if (!r.is_array()) fail(path, "required", "must be an array of property names");
      for (const json& x : r) {
        if (!x.is_string()) fail(path, "required", "must be an array of property names");
        required.insert(x.get<std::string>());
      }
    }
    const int64_t min_p = bound(s, "minProperties", path, 0), max_p = bound(s, "maxProperties", path, -1);
    if (max_p >= 0 && max_p < min_p) fail(path, "maxProperties", "is below minProperties: no object satisfies both");
    if (max_p >= 0 && static_cast<int64_t>(required.size()) > max_p)
      fail(path, "maxProperties", "is below the number of required properties: no object satisfies both");
    const json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (extra && !extra->is_boolean() && !extra->is_object())
      fail(path, "additionalProperties", "must be a boolean or a schema");
    if (s.contains("properties")) {
      const json& p = s["properties"];
      if (!p.is_object()) fail(path, "properties", "must be an object of schemas");
      for (const auto& [name, sub] : p.items()) {
        // A property whose schema is false may not appear (and must not be required).
        if (sub.is_boolean() && !sub.get<bool>()) {
          if (required.count(name)) fail(path + "/properties/" + name, "required", "names a property whose schema is false");
          continue;
        }
        props.push_back({name, value(sub, path + "/properties/" + name, depth + 1), required.count(name) > 0});
      }
    }
    for (const std::string& name : required) {
      bool declared = false;
      for (const Prop& p : props) declared = declared || p.name == name;
      if (declared) continue;
      // Required but not declared: additionalProperties says what it holds.
      if (extra && extra->is_boolean() && !extra->get<bool>())
        fail(path, "required", "names '" + name + "', which additionalProperties false forbids");
      const uint32_t v = extra && extra->is_object() ? value(*extra, path + "/additionalProperties", depth + 1) : any_value();
      props.push_back({name, v, true});
    }
    if (props.empty() && !(s.contains("properties") && s["properties"].is_object() && !s["properties"].empty())) {
      if (extra && extra->is_boolean() && !extra->get<bool>()) {
        if (min_p > 0) fail(path, "minProperties", "is above 0 but additionalProperties is false: no object satisfies both");
        return b_.rule("object", {literal("{") + rule_sym(ws()) + byte_sym('}')});
      }
      // Free-form keys may repeat, and repeated keys count once.
      if (min_p > 1)
        fail(path, "minProperties", "above 1 is supported on objects with declared properties only (free-form keys may repeat)");
      const uint32_t v = extra && extra->is_object() ? value(*extra, path + "/additionalProperties", depth + 1)
                                                     : any_value();
      return any_object_with(v, min_p, max_p);
    }
    if (static_cast<int64_t>(props.size()) < min_p)
      fail(path, "minProperties", "is above the " + std::to_string(props.size()) +
                                      " declared properties (objects with declared properties get only those)");
    // A member's state: property i next, c members written (c saturates
    // where counting no longer matters). c == 0: no comma before the next.
    const size_t n = props.size();
    const int64_t top = max_p >= 0 ? std::min<int64_t>(max_p, static_cast<int64_t>(n)) : std::max<int64_t>(min_p, 1);
    if (static_cast<int64_t>(n + 1) * (top + 1) > 20000)
      fail(path, "maxProperties", "with this many properties makes the grammar too large");
    std::map<std::pair<size_t, int64_t>, uint32_t> states;
    std::function<uint32_t(size_t, int64_t)> state = [&](size_t i, int64_t c) -> uint32_t {
      auto it = states.find({i, c});
      if (it != states.end()) return it->second;
      std::vector<Seq> a;
      if (i == n) {
        if (c >= min_p) a.push_back(Seq{});
      } else {
        const Prop& p = props[i];
        if (max_p < 0 || c < max_p) {
          const int64_t next = max_p >= 0 ? c + 1 : std::min(c + 1, top);
          const Seq member = literal(dump(json(p.name)) + ":") + rule_sym(ws()) + rule_sym(p.rule) + rule_sym(ws());
          a.push_back((c > 0 ? literal(",") + rule_sym(ws()) : Seq{}) + member + rule_sym(state(i + 1, next)));
        }
        if (!p.required) a.push_back({rule_sym(state(i + 1, c))});
      }
      const uint32_t r = b_.rule(i < n ? "props-" + props[i].name : "props-end", a);
      states[{i, c}] = r;
      return r;
    };
    return b_.rule("object", {literal("{") + rule_sym(ws()) + rule_sym(state(0, 0)) + byte_sym('}')});
  }

  // ---- arrays
  uint32_t array(const json& s, const std::string& path, int depth) {
    const int64_t min = bound(s, "minItems", path, 0);
    int64_t max = bound(s, "maxItems", path, -1);
    if (max >= 0 && max < min) fail(path, "maxItems", "is below minItems: no array satisfies both");
    // The first items each under their own schema: prefixItems, or items
    // as an array (before 2020-12); the rest under items / additionalItems.
    const json* prefix = nullptr;
    const json* rest = nullptr;
    const char* rest_key = "items";
    if (s.contains("prefixItems")) {
      prefix = &s["prefixItems"];
      if (s.contains("items")) rest = &s["items"];
    } else if (s.contains("items") && s["items"].is_array()) {
      prefix = &s["items"];
      rest_key = "additionalItems";
      if (s.contains("additionalItems")) rest = &s["additionalItems"];
    } else if (s.contains("items")) {
      rest = &s["items"];
    }
    if (s.contains("additionalItems") && rest_key != std::string("additionalItems"))
      fail(path, "additionalItems", "applies beside an array 'items' only (2020-12: use prefixItems and items)");
    if (prefix && !prefix->is_array()) fail(path, prefix == &s["items"] ? "items" : "prefixItems", "must be an array of schemas");
    const bool rest_none = rest && rest->is_boolean() && !rest->get<bool>();
    const uint32_t item = !rest || rest_none ? any_value() : value(*rest, path + "/" + rest_key, depth + 1);
    if (!prefix || prefix->empty()) {
      if (rest_none) {
        if (min > 0) fail(path, rest_key, "is false but minItems is above 0: no array satisfies both");
        return array_of(any_value(), 0, 0);
      }
      return array_of(item, min, max);
    }
    int64_t p = static_cast<int64_t>(prefix->size());
    // A false prefix schema: no array reaches that index.
    for (int64_t i = 0; i < p; ++i) {
      const json& x = (*prefix)[static_cast<size_t>(i)];
      if (x.is_boolean() && !x.get<bool>()) {
        if (min > i) fail(path, "minItems", "reaches a prefix item whose schema is false: no array satisfies both");
        max = max < 0 ? i : std::min(max, i);
        break;
      }
    }
    std::vector<uint32_t> heads;
    const std::string prefix_key = s.contains("prefixItems") ? "prefixItems" : "items";
    for (int64_t i = 0; i < p && (max < 0 || i < max); ++i)
      heads.push_back(value((*prefix)[static_cast<size_t>(i)], path + "/" + prefix_key + "/" + std::to_string(i), depth + 1));
    if (rest_none && min > p) fail(path, rest_key, "is false but minItems is above the prefix's length: no array satisfies both");
    // After the prefix: the rest, each after a comma.
    std::optional<uint32_t> tail;
    if (!rest_none && (max < 0 || max > p)) {
      const Seq more = literal(",") + rule_sym(ws()) + rule_sym(item) + rule_sym(ws());
      tail = b_.repeat("items", more, std::max<int64_t>(min - p, 0), max < 0 ? -1 : max - p);
    }
    // S[i]: i prefix items written.
    uint32_t next = 0;
    for (int64_t i = static_cast<int64_t>(heads.size()); i >= 0; --i) {
      std::vector<Seq> a;
      if (i == static_cast<int64_t>(heads.size())) {
        if (i == p && tail) a.push_back({rule_sym(*tail)});
        else if (i >= min) a.push_back(Seq{});
      } else {
        if (i >= min) a.push_back(Seq{});
        a.push_back((i > 0 ? literal(",") + rule_sym(ws()) : Seq{}) + rule_sym(heads[static_cast<size_t>(i)]) +
                    rule_sym(ws()) + rule_sym(next));
      }
      next = b_.rule("prefix-items", a);
    }
    return b_.rule("array", {literal("[") + rule_sym(ws()) + rule_sym(next) + byte_sym(']')});
  }

  const json& root_;
  SchemaLimits lim_;
  Builder b_;
  std::map<std::string, uint32_t> refs_;
  std::optional<uint32_t> ws_, char_, string_, integer_, number_, boolean_, null_, any_;
};

}  // namespace

Grammar compile_json_schema(const json& schema, const SchemaLimits& limits) {
  Compiler c(schema, limits);
  try {
    return c.run();
  } catch (const GrammarError& e) {
    throw SchemaError(std::string("the schema: ") + e.what(), "");
  }
}

Grammar any_json_object() {
  static const json empty = json::object();
  Compiler c(empty, SchemaLimits{});
  return c.run_any_object();
}

}  // namespace ms::grammar
