#include "grammar/json_schema.h"

#include <map>
#include <optional>
#include <set>

namespace ms::grammar {

using json = nlohmann::ordered_json;

namespace {

// Keywords that constrain a value but have no grammar here: refused.
const std::set<std::string> kRefused = {
    "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "uniqueItems",
    "allOf", "not", "if", "then", "else", "prefixItems", "contains", "minContains", "maxContains",
    "additionalItems", "patternProperties", "propertyNames", "minProperties", "maxProperties",
    "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedProperties", "unevaluatedItems",
    "$dynamicRef", "$recursiveRef"};
// Keywords that constrain a value and are handled; any of them beside $ref,
// anyOf or oneOf is an intersection, which is refused.
const std::set<std::string> kConstraints = {"type",     "enum",     "const",    "properties", "required",
                                            "additionalProperties", "items", "minItems", "maxItems",
                                            "minLength", "maxLength", "$ref", "anyOf", "oneOf"};

const char* kSupported =
    "supported: type, enum, const, anyOf, oneOf, $ref, properties, required, additionalProperties, items, "
    "minItems, maxItems, minLength, maxLength";

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
  uint32_t any_object_with(uint32_t v) {
    const Seq member = Seq{rule_sym(string()), byte_sym(':'), rule_sym(ws()), rule_sym(v), rule_sym(ws())};
    const uint32_t more = b_.repeat("members", literal(",") + rule_sym(ws()) + member, 0, -1);
    const uint32_t body = b_.rule("object-body", {Seq{}, member + rule_sym(more)});
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
      std::string token = ref.substr(i + 1, j - i - 1);
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
    for (const auto& [k, v] : s.items()) {
      (void)v;
      if (kRefused.count(k)) fail(path, k, std::string("is not supported (") + kSupported + ")");
    }
    auto has = [&](const char* k) { return s.contains(k); };
    auto others = [&](const char* self) {
      for (const auto& [k, v] : s.items()) {
        (void)v;
        if (k != self && kConstraints.count(k)) fail(path, self, "beside '" + k + "' is not supported");
      }
    };
    if (has("$ref")) {
      others("$ref");
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
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!has(key)) continue;
      others(key);
      const json& list = s[key];
      if (!list.is_array() || list.empty()) fail(path, key, "must be a non-empty array of schemas");
      std::vector<Seq> alts;
      for (size_t i = 0; i < list.size(); ++i)
        alts.push_back({rule_sym(value(list[i], path + "/" + key + "/" + std::to_string(i), depth + 1))});
      return b_.rule(key, alts);
    }
    if (has("const")) return literal_value(s["const"]);
    if (has("enum")) {
      const json& list = s["enum"];
      if (!list.is_array() || list.empty()) fail(path, "enum", "must be a non-empty array");
      std::vector<Seq> alts;
      size_t bytes = 0;
      for (const json& v : list) {
        alts.push_back(literal(v.dump(-1, ' ', false, json::error_handler_t::replace)));
        bytes += alts.back().size() + 1;
        if (bytes > lim_.grammar.max_elements)
          fail(path, "enum", "is too large: its values take more than " + std::to_string(lim_.grammar.max_elements) + " bytes");
      }
      return b_.rule("enum", alts);
    }
    std::vector<std::string> types;
    if (has("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty()) {
        for (const json& x : t) {
          if (!x.is_string()) fail(path, "type", "must be a type name or an array of them");
          types.push_back(x.get<std::string>());
        }
      } else {
        fail(path, "type", "must be a type name or a non-empty array of them");
      }
    } else if (has("properties") || has("required") || has("additionalProperties")) {
      types.push_back("object");
    } else if (has("items") || has("minItems") || has("maxItems")) {
      types.push_back("array");
    } else if (has("minLength") || has("maxLength")) {
      types.push_back("string");
    } else {
      return any_value();
    }
    std::vector<Seq> alts;
    for (const std::string& t : types) {
      if (t == "object") alts.push_back({rule_sym(object(s, path, depth))});
      else if (t == "array") alts.push_back({rule_sym(array(s, path, depth))});
      else if (t == "string") {
        const int64_t min = bound(s, "minLength", path, 0), max = bound(s, "maxLength", path, -1);
        if (max >= 0 && max < min) fail(path, "maxLength", "is below minLength: no string satisfies both");
        alts.push_back({rule_sym(string(min, max))});
      } else if (t == "number") alts.push_back({rule_sym(number())});
      else if (t == "integer") alts.push_back({rule_sym(integer())});
      else if (t == "boolean") alts.push_back({rule_sym(boolean())});
      else if (t == "null") alts.push_back({rule_sym(null())});
      else fail(path, "type", "'" + t + "' is not a JSON schema type (object, array, string, number, integer, boolean, null)");
    }
    return alts.size() == 1 ? alts[0][0].rule : b_.rule("types", alts);
  }

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
    if (s.contains("properties")) {
      const json& p = s["properties"];
      if (!p.is_object()) fail(path, "properties", "must be an object of schemas");
      for (const auto& [name, sub] : p.items())
        props.push_back({name, value(sub, path + "/properties/" + name, depth + 1), required.count(name) > 0});
    }
    for (const std::string& name : required) {
      bool declared = false;
      for (const Prop& p : props) declared = declared || p.name == name;
      if (!declared) props.push_back({name, any_value(), true});
    }
    const json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (extra && !extra->is_boolean() && !extra->is_object())
      fail(path, "additionalProperties", "must be a boolean or a schema");
    if (props.empty()) {
      if (extra && extra->is_boolean() && !extra->get<bool>())
        return b_.rule("object", {literal("{") + rule_sym(ws()) + byte_sym('}')});
      const uint32_t v = extra && extra->is_object() ? value(*extra, path + "/additionalProperties", depth + 1)
                                                     : any_value();
      return any_object_with(v);
    }
    // first[i]: members from property i on, none written yet; after[i]: the
    // same once one is written (each needs a comma first).
    const size_t n = props.size();
    std::vector<uint32_t> first(n + 1), after(n + 1);
    first[n] = b_.rule("props-end", {Seq{}});
    after[n] = first[n];
    for (size_t i = n; i-- > 0;) {
      const Prop& p = props[i];
      const Seq member = literal(json(p.name).dump(-1, ' ', false, json::error_handler_t::replace) + ":") +
                         rule_sym(ws()) + rule_sym(p.rule) + rule_sym(ws());
      std::vector<Seq> a = {literal(",") + rule_sym(ws()) + member + rule_sym(after[i + 1])};
      if (!p.required) a.push_back({rule_sym(after[i + 1])});
      after[i] = b_.rule("props-after-" + p.name, a);
      std::vector<Seq> f = {member + rule_sym(after[i + 1])};
      if (!p.required) f.push_back({rule_sym(first[i + 1])});
      first[i] = b_.rule("props-" + p.name, f);
    }
    return b_.rule("object", {literal("{") + rule_sym(ws()) + rule_sym(first[0]) + byte_sym('}')});
  }

  uint32_t array(const json& s, const std::string& path, int depth) {
    const int64_t min = bound(s, "minItems", path, 0), max = bound(s, "maxItems", path, -1);
    if (max >= 0 && max < min) fail(path, "maxItems", "is below minItems: no array satisfies both");
    uint32_t item;
    if (!s.contains("items")) {
      item = any_value();
    } else if (s["items"].is_boolean() && !s["items"].get<bool>()) {
      if (min > 0) fail(path, "items", "is false but minItems is above 0: no array satisfies both");
      return array_of(any_value(), 0, 0);
    } else {
      item = value(s["items"], path + "/items", depth + 1);
    }
    return array_of(item, min, max);
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
