// The values of the chat-template engine (jinja_value.h): the budget's
// checks, Python's truthiness, str() and repr(), json.dumps as tojson,
// comparisons, indexing and slicing, and the string helpers that follow
// Python's str methods.
#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <bitset>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "util/text_search.h"

namespace ms::jinja::detail {

[[noreturn]] void fail(const std::string& what) { throw Error("jinja: " + what); }

// ============================================================== limits

[[noreturn]] void exceeded(const std::string& what, uint64_t limit, const char* field) {
  throw LimitExceeded("chat template: " + what + " " + std::to_string(limit) + " (jinja::Limits::" + field + ")");
}

// The one definition of the thread-local budget pointer (see jinja_value.h).
constinit thread_local Budget* tl_budget = nullptr;

// Text of `n` bytes is about to be made.
void check_text_size(size_t n) {
  if (tl_budget && n > tl_budget->lim.max_value_bytes) exceeded("a string's bytes exceed", tl_budget->lim.max_value_bytes, "max_value_bytes");
}

// json_size is iterative: values can nest deeper than the stack could follow.
JsonSize json_size(const Json& root, size_t cap, int max_depth) {
  JsonSize r;
  std::vector<std::pair<const Json*, int>> todo{{&root, 1}};
  while (!todo.empty() && r.bytes <= cap) {
    auto [j, d] = todo.back();
    todo.pop_back();
    tick();
    if (d > max_depth) {
      r.too_deep = true;
      return r;
    }
    // A node is 16 bytes; strings, lists and mappings add a heap object of
    // some 32 bytes, and their text or items.
    r.bytes += 16;
    if (j->is_string()) {
      r.bytes += j->get_ref<const std::string&>().size() + 32;
    } else if (j->is_object()) {
      r.bytes += 32;
      for (auto it = j->begin(); it != j->end() && r.bytes <= cap; ++it) {
        r.bytes += it.key().size() + 32;
        todo.emplace_back(&it.value(), d + 1);
      }
    } else if (j->is_array()) {
      r.bytes += 32;
      for (const Json& x : *j) todo.emplace_back(&x, d + 1);
    }
  }
  return r;
}

// A value within max_value_bytes and max_nesting; returns its size.
size_t check_value(const Json& j) {
  if (!tl_budget || j.is_number() || j.is_boolean() || j.is_null()) return 0;
  const Limits& lim = tl_budget->lim;
  if (j.is_string()) {  // the common case, without json_size's work list
    const size_t bytes = j.get_ref<const std::string&>().size() + 48;
    if (bytes > lim.max_value_bytes) exceeded("a value's bytes exceed", lim.max_value_bytes, "max_value_bytes");
    return bytes;
  }
  const JsonSize s = json_size(j, lim.max_value_bytes, lim.max_nesting);
  if (s.too_deep) exceeded("a value's nesting exceeds", static_cast<uint64_t>(lim.max_nesting), "max_nesting");
  if (s.bytes > lim.max_value_bytes) exceeded("a value's bytes exceed", lim.max_value_bytes, "max_value_bytes");
  return s.bytes;
}

// A value the template has just built: checked, and counted into
// max_built_bytes.
void count_built(const Json& j) {
  const size_t bytes = check_value(j);
  if (!tl_budget) return;
  const Limits& lim = tl_budget->lim;
  tl_budget->built += bytes;
  if (tl_budget->built > lim.max_built_bytes) exceeded("bytes of all values built exceed", lim.max_built_bytes, "max_built_bytes");
}

// A list of `n` items is about to be made (about 16 bytes an item and more).
void check_items(size_t n) {
  if (tl_budget && n > tl_budget->lim.max_value_bytes / 16)
    exceeded("a list's bytes exceed", tl_budget->lim.max_value_bytes, "max_value_bytes");
}

// ============================================================== values

bool truthy(const Value& v) {
  switch (v.k) {
    case Value::K::Undef: return false;
    case Value::K::Ns:
    case Value::K::Fn: return true;
    case Value::K::Data: break;
  }
  const Json& j = v.j;
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>() != 0;
  if (j.is_number()) return j.get<double>() != 0;
  if (j.is_string()) return !j.get_ref<const std::string&>().empty();
  return !j.empty();  // array, object
}

// Python's repr() of a float: the shortest digits that read back the same.
std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  const size_t e = s.find('e');
  if (e != std::string::npos) {  // "1e+16" as Python, not "1e+016"
    std::string mant = s.substr(0, e), exp = s.substr(e + 1);
    const char sign = exp[0] == '-' ? '-' : '+';
    if (exp[0] == '-' || exp[0] == '+') exp = exp.substr(1);
    while (exp.size() > 2 && exp[0] == '0') exp = exp.substr(1);
    // Python switches to exponent notation at 1e16 and below 1e-4; %g at
    // precision p does so earlier, so re-render plain where Python would.
    const double a = std::fabs(d);
    if (a >= 1e-4 && a < 1e16) {
      std::snprintf(buf, sizeof buf, "%.17f", d);
      std::string f = buf;
      // trim to the shortest that reads back
      while (f.size() > 1 && f.back() == '0') {
        std::string t = f.substr(0, f.size() - 1);
        if (std::strtod(t.c_str(), nullptr) != d) break;
        f = t;
      }
      if (f.back() == '.') f += '0';
      return f;
    }
    return mant + "e" + sign + (exp.size() < 2 ? "0" + exp : exp);
  }
  if (s.find('.') == std::string::npos && s.find("inf") == std::string::npos) s += ".0";
  return s;
}

std::string py_str_repr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  return out + q;
}

std::string data_str(const Json& j, bool quoted) {
  tick();
  if (j.is_string()) return quoted ? py_str_repr(j.get<std::string>()) : j.get<std::string>();
  if (j.is_null()) return "None";
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_number_integer()) return std::to_string(j.get<int64_t>());
  if (j.is_number_unsigned()) return std::to_string(j.get<uint64_t>());
  if (j.is_number()) return py_float(j.get<double>());
  std::string out;
  if (j.is_array()) {
    out = "[";
    bool first = true;
    for (const Json& x : j) {
      if (!first) out += ", ";
      first = false;
      out += data_str(x, true);
      check_text_size(out.size());
    }
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out += ", ";
    first = false;
    out += py_str_repr(it.key()) + ": " + data_str(it.value(), true);
    check_text_size(out.size());
  }
  return out + "}";
}

std::string to_str(const Value& v) {
  switch (v.k) {
    case Value::K::Undef: return "";
    case Value::K::Ns: return "<Namespace " + data_str(*v.ns, true) + ">";
    case Value::K::Fn: return "<function>";
    case Value::K::Data: break;
  }
  return data_str(v.j, false);
}

// json.dumps(x, ensure_ascii=False, indent=indent) as transformers' tojson.
void dump_json(const Json& j, std::string& out, int indent, int depth) {
  tick();
  check_text_size(out.size());
  auto newline = [&](int d) {
    check_text_size(out.size() + static_cast<size_t>(indent) * static_cast<size_t>(d));
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  if (j.is_string()) {
    out += '"';
    for (unsigned char c : j.get_ref<const std::string&>()) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
          } else {
            out += static_cast<char>(c);
          }
      }
    }
    out += '"';
  } else if (j.is_null()) {
    out += "null";
  } else if (j.is_boolean()) {
    out += j.get<bool>() ? "true" : "false";
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : py_float(d);
  } else if (j.is_number()) {
    out += j.dump();
  } else if (j.is_array() || j.is_object()) {
    const bool arr = j.is_array();
    out += arr ? '[' : '{';
    if (j.empty()) {
      out += arr ? ']' : '}';
      return;
    }
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += indent >= 0 ? "," : ", ";
      first = false;
      if (indent >= 0) newline(depth + 1);
      if (!arr) {
        dump_json(Json(it.key()), out, indent, depth + 1);
        out += ": ";
      }
      dump_json(it.value(), out, indent, depth + 1);
    }
    if (indent >= 0) newline(depth);
    out += arr ? ']' : '}';
  }
}

// Length in characters (Python len) of UTF-8 text.
size_t u8len(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// UTF-8 text as a list of characters (for indexing and slicing strings).
std::vector<std::string> u8chars(const std::string& s) {
  check_items(u8len(s) * 2);  // a std::string a character: some 32 bytes each
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0xF0) n = 4;
    else if (c >= 0xE0) n = 3;
    else if (c >= 0xC0) n = 2;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  // A table, not a search of `chars` per byte: both can be long.
  const bool given = chars && !chars->undef() && !chars->is_null();
  std::bitset<256> set;
  if (given)
    for (char c : chars->str()) set.set(static_cast<unsigned char>(c));
  auto drop = [&](char c) { return given ? set.test(static_cast<unsigned char>(c)) : is_space(c); };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && drop(s[b])) ++b;
  if (right)
    while (e > b && drop(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// A double as an int64 (truncated, as Python's int()); out of range is an
// error rather than undefined behaviour.
int64_t double_to_int(double d, const char* what) {
  if (!(d > -9.2e18 && d < 9.2e18)) fail(std::string(what) + " is out of range: " + py_float(d));
  return static_cast<int64_t>(d);
}

int64_t as_int(const Value& v, const char* what) {
  if (v.is_int()) return v.j.get<int64_t>();
  if (v.is_num()) return double_to_int(v.j.get<double>(), what);
  if (v.data() && v.j.is_boolean()) return v.j.get<bool>() ? 1 : 0;
  fail(std::string(what) + " must be a number");
}

double as_num(const Value& v) {
  if (v.data() && v.j.is_boolean()) return v.j.get<bool>() ? 1 : 0;
  if (!v.is_num()) fail("expected a number, got " + (v.undef() ? std::string("undefined") : data_str(v.j, true)));
  return v.j.get<double>();
}

bool num_like(const Value& v) { return v.is_num() || (v.data() && v.j.is_boolean()); }

bool equal(const Value& a, const Value& b) {
  if (a.undef() || b.undef()) return a.undef() && b.undef();
  if (a.k != b.k) return false;
  if (a.k == Value::K::Ns) return a.ns == b.ns;
  if (a.k == Value::K::Fn) return a.fn == b.fn;
  if (num_like(a) && num_like(b)) return as_num(a) == as_num(b);
  return a.j == b.j;
}

bool less(const Value& a, const Value& b) {
  if (num_like(a) && num_like(b)) return as_num(a) < as_num(b);
  if (a.is_str() && b.is_str()) return a.str() < b.str();
  if (a.is_arr() && b.is_arr()) return a.j < b.j;
  fail("cannot compare " + to_str(a) + " and " + to_str(b));
}

bool contains(const Value& hay, const Value& needle) {
  if (hay.is_str()) {
    if (!needle.is_str()) fail("'in <string>' needs a string on the left");
    return find_text(hay.str(), needle.str()) != std::string::npos;
  }
  if (hay.is_arr()) {
    for (const Json& x : hay.j) {
      tick();
      if (equal(Value(x), needle)) return true;
    }
    return false;
  }
  if (hay.is_obj()) return needle.is_str() && hay.j.contains(needle.str());
  if (hay.k == Value::K::Ns) return needle.is_str() && hay.ns->contains(needle.str());
  if (hay.undef()) return false;
  fail("'in' needs a string, list or mapping on the right");
}

// Python list[i] with negative indices; undefined when out of range.
Value index(const Value& c, const Value& key) {
  if (c.is_obj()) {
    if (key.is_str()) {
      auto it = c.j.find(key.str());
      if (it != c.j.end()) return Value(*it);
    }
    return {};
  }
  if (c.k == Value::K::Ns) {
    if (key.is_str() && c.ns->contains(key.str())) return Value((*c.ns)[key.str()]);
    return {};
  }
  if ((c.is_arr() || c.is_str()) && num_like(key)) {
    int64_t i = as_int(key, "an index");
    if (c.is_arr()) {
      const int64_t n = static_cast<int64_t>(c.j.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return {};
      return Value(c.j[static_cast<size_t>(i)]);
    }
    const std::string& s = c.str();
    const int64_t n = static_cast<int64_t>(u8len(s));
    if (i < 0) i += n;
    if (i < 0 || i >= n) return {};
    size_t b = 0;  // the i-th character's first byte
    for (int64_t k = -1; b < s.size(); ++b)
      if ((static_cast<unsigned char>(s[b]) & 0xC0) != 0x80 && ++k == i) break;
    size_t e = b + 1;
    while (e < s.size() && (static_cast<unsigned char>(s[e]) & 0xC0) == 0x80) ++e;
    return Value(Json(s.substr(b, e - b)));
  }
  return {};
}

Value slice(const Value& c, const Value& lo, const Value& hi, const Value& st) {
  const int64_t step = st.undef() || st.is_null() ? 1 : as_int(st, "a slice step");
  if (step == 0) fail("slice step cannot be zero");
  std::vector<Json> items;
  std::vector<std::string> chars;
  if (c.is_arr()) {
    for (const Json& x : c.j) items.push_back(x);
  } else if (c.is_str()) {
    chars = u8chars(c.str());
  } else {
    fail("only lists and strings can be sliced");
  }
  const int64_t n = static_cast<int64_t>(c.is_arr() ? items.size() : chars.size());
  auto bound = [&](const Value& v, int64_t dflt) {
    if (v.undef() || v.is_null()) return dflt;
    int64_t i = as_int(v, "a slice bound");
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = bound(lo, step > 0 ? 0 : n - 1), e = bound(hi, step > 0 ? n : -1);
  Json arr = Json::array();
  std::string s;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
    tick();
    if (c.is_arr()) arr.push_back(items[static_cast<size_t>(i)]);
    else s += chars[static_cast<size_t>(i)];
    if (std::abs(step) > n) break;  // one item at most; i += step must not overflow
  }
  return c.is_arr() ? Value(arr) : Value(Json(s));
}

Value kwarg(Kwargs& kw, const std::string& name) {
  for (auto& [k, v] : kw)
    if (k == name) return v;
  return {};
}
// Positional argument i, else keyword `name`, else undefined.
Value arg(Args& a, Kwargs& kw, size_t i, const std::string& name) {
  if (i < a.size()) return a[i];
  return kwarg(kw, name);
}

std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep.undef() || sep.is_null()) {
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_space(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        std::string rest = s.substr(i);
        while (!rest.empty() && is_space(rest.back())) rest.pop_back();
        out.push_back(rest);
        return out;
      }
      size_t j = i;
      while (j < s.size() && !is_space(s[j])) ++j;
      out.push_back(s.substr(i, j - i));
      tick();
      check_items(out.size() * 2);
      i = j;
    }
    return out;
  }
  if (!sep.is_str() || sep.str().empty()) fail("split: the separator must be a non-empty string");
  const TextSearch d(sep.str());
  size_t pos = 0;
  for (;;) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    const size_t f = d.find(s, pos);
    if (f == std::string::npos) break;
    out.push_back(s.substr(pos, f - pos));
    tick();
    check_items(out.size() * 2);
    pos = f + d.pattern().size();
  }
  out.push_back(s.substr(pos));
  return out;
}

// Built in one pass into a new string: linear time, and its size checked
// as it grows ('x' * 10**6 with every x replaced by a long text).
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  std::string out;
  const TextSearch search(from);
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t f = search.find(s, pos);
    if (f == std::string::npos) break;
    tick();
    check_text_size(out.size() + (f - pos) + to.size());
    out.append(s, pos, f - pos);
    out += to;
    pos = f + from.size();
  }
  check_text_size(out.size() + (s.size() - pos));
  out.append(s, pos, std::string::npos);
  return out;
}

std::string title_case(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c));
    if (alpha) c = static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
    start = !alpha;
  }
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The list a for loop, join, map, ... iterate over.
Json iterable(const Value& v) {
  if (v.undef()) return Json::array();
  if (v.is_arr()) return v.j;
  if (v.is_obj()) {
    Json keys = Json::array();
    for (auto it = v.j.begin(); it != v.j.end(); ++it) keys.push_back(it.key());
    return keys;
  }
  if (v.is_str()) {
    Json chars = Json::array();
    for (const std::string& c : u8chars(v.str())) {
      tick();
      chars.push_back(c);
    }
    return chars;
  }
  fail("cannot iterate over " + to_str(v));
}

}  // namespace ms::jinja::detail
