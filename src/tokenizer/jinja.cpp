// The renderer of jinja.h: a lexer that cuts the source into text and tags
// (applying "-", trim_blocks and lstrip_blocks), a recursive-descent parser
// into a tree of statements and expressions, and a tree-walking evaluator
// whose semantics follow Python Jinja2 (truthiness, str(), slicing, ...).
#include "tokenizer/jinja.h"

#include <algorithm>
#include <bitset>
#include <cerrno>
#include <climits>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <set>

#include "util/text_search.h"

namespace ms::jinja {

namespace {

// ============================================================== values

struct Value;
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Fn = std::function<Value(Args&, Kwargs&)>;

struct Value {
  enum class K { Undef, Data, Ns, Fn } k = K::Undef;
  Json j;
  std::shared_ptr<Json> ns;  // a namespace(): shared, so "set ns.x" is seen by every holder
  std::shared_ptr<Fn> fn;

  Value() = default;
  Value(Json data) : k(K::Data), j(std::move(data)) {}  // NOLINT: implicit on purpose
  static Value function(Fn f) {
    Value v;
    v.k = K::Fn;
    v.fn = std::make_shared<Fn>(std::move(f));
    return v;
  }
  bool undef() const { return k == K::Undef; }
  bool data() const { return k == K::Data; }
  bool is_str() const { return data() && j.is_string(); }
  bool is_num() const { return data() && j.is_number(); }
  bool is_int() const { return data() && j.is_number_integer(); }
  bool is_arr() const { return data() && j.is_array(); }
  bool is_obj() const { return data() && j.is_object(); }
  bool is_null() const { return data() && j.is_null(); }
  const std::string& str() const { return j.get_ref<const std::string&>(); }
};

[[noreturn]] void fail(const std::string& what) { throw Error("jinja: " + what); }

// ============================================================== limits

[[noreturn]] void exceeded(const std::string& what, uint64_t limit, const char* field) {
  throw LimitExceeded("chat template: " + what + " " + std::to_string(limit) + " (jinja::Limits::" + field + ")");
}

// What the render running on this thread has used of its Limits. The
// built-ins (filters, methods, globals) are free functions without a
// context, so they reach it through a thread-local pointer that render() sets.
struct Budget {
  const Limits& lim;
  const std::atomic<bool>* cancel;
  bool timed;
  std::chrono::steady_clock::time_point deadline;
  int depth = 0, calls = 0;
  int64_t iterations = 0;
  size_t built = 0;
  uint32_t countdown = kCheckEvery;
  // The clock and the cancel flag are read every kCheckEvery steps: often
  // enough to stop within milliseconds, rarely enough to cost nothing.
  static constexpr uint32_t kCheckEvery = 64;

  void check_time_and_cancel() {
    countdown = kCheckEvery;
    if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled("chat template: the render was cancelled");
    if (timed && std::chrono::steady_clock::now() > deadline)
      exceeded("render time exceeds, in ms,", static_cast<uint64_t>(lim.max_render_time.count()), "max_render_time");
  }
};

thread_local Budget* tl_budget = nullptr;

// One step of work (an evaluation, an item of a built-in's loop).
inline void tick() {
  if (tl_budget && --tl_budget->countdown == 0) tl_budget->check_time_and_cancel();
}

// Text of `n` bytes is about to be made.
void check_text_size(size_t n) {
  if (tl_budget && n > tl_budget->lim.max_value_bytes) exceeded("a string's bytes exceed", tl_budget->lim.max_value_bytes, "max_value_bytes");
}

// The estimated memory of a JSON value (heap nodes and text), counting no
// further than `cap`, and whether it nests deeper than `max_depth`. Iterative:
// values can nest deeper than the stack could follow.
struct JsonSize {
  size_t bytes = 0;
  bool too_deep = false;
};
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

std::string to_str(const Value& v);

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
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count = -1) {
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

// A method of a string, mapping or list, bound to its value ("x.strip").
Value method(const Value& self, const std::string& name) {
  if (self.is_str()) {
    const std::string s = self.str();
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return Value::function([s, name](Args& a, Kwargs& kw) {
        Value chars = arg(a, kw, 0, "chars");
        return Value(Json(strip(s, &chars, name != "rstrip", name != "lstrip")));
      });
    if (name == "split" || name == "rsplit")
      return Value::function([s](Args& a, Kwargs& kw) {
        Value mx = arg(a, kw, 1, "maxsplit");
        Json out = Json::array();
        for (auto& p : py_split(s, arg(a, kw, 0, "sep"), mx.undef() ? -1 : as_int(mx, "maxsplit"))) out.push_back(p);
        return Value(out);
      });
    if (name == "startswith" || name == "endswith")
      return Value::function([s, name](Args& a, Kwargs& kw) {
        Value p = arg(a, kw, 0, "prefix");
        std::vector<std::string> opts;
        if (p.is_str()) opts.push_back(p.str());
        else if (p.is_arr())
          for (const Json& x : p.j) {
            if (!x.is_string()) fail(name + " needs strings");
            opts.push_back(x.get<std::string>());
          }
        else fail(name + " needs a string");
        for (const std::string& o : opts) {
          if (o.size() > s.size()) continue;
          if (name == "startswith" ? s.compare(0, o.size(), o) == 0 : s.compare(s.size() - o.size(), o.size(), o) == 0)
            return Value(Json(true));
        }
        return Value(Json(false));
      });
    if (name == "replace")
      return Value::function([s](Args& a, Kwargs& kw) {
        Value from = arg(a, kw, 0, "old"), to = arg(a, kw, 1, "new"), n = arg(a, kw, 2, "count");
        if (!from.is_str() || !to.is_str()) fail("replace needs strings");
        return Value(Json(replace_all(s, from.str(), to.str(), n.undef() ? -1 : as_int(n, "count"))));
      });
    if (name == "upper") return Value::function([s](Args&, Kwargs&) { return Value(Json(upper(s))); });
    if (name == "lower") return Value::function([s](Args&, Kwargs&) { return Value(Json(lower(s))); });
    if (name == "title") return Value::function([s](Args&, Kwargs&) { return Value(Json(title_case(s))); });
    if (name == "capitalize")
      return Value::function([s](Args&, Kwargs&) {
        std::string t = lower(s);
        if (!t.empty()) t[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(t[0])));
        return Value(Json(t));
      });
    if (name == "find")
      return Value::function([s](Args& a, Kwargs& kw) {
        Value sub = arg(a, kw, 0, "sub");
        if (!sub.is_str()) fail("find needs a string");
        const size_t f = find_text(s, sub.str());
        return Value(Json(f == std::string::npos ? int64_t{-1} : static_cast<int64_t>(u8len(s.substr(0, f)))));
      });
    if (name == "join")
      return Value::function([s](Args& a, Kwargs& kw) {
        std::string out;
        bool first = true;
        for (const Json& x : iterable(arg(a, kw, 0, "iterable"))) {
          if (!first) out += s;
          first = false;
          out += to_str(Value(x));
          tick();
          check_text_size(out.size());
        }
        return Value(Json(out));
      });
    if (name == "isdigit" || name == "isspace" || name == "isalpha")
      return Value::function([s, name](Args&, Kwargs&) {
        bool ok = !s.empty();
        for (unsigned char c : s)
          ok = ok && (name == "isdigit" ? std::isdigit(c) : name == "isspace" ? is_space(static_cast<char>(c)) : std::isalpha(c));
        return Value(Json(ok));
      });
  }
  if (self.is_obj()) {
    const Json obj = self.j;
    if (name == "items")
      return Value::function([obj](Args&, Kwargs&) {
        Json out = Json::array();
        for (auto it = obj.begin(); it != obj.end(); ++it) out.push_back(Json::array({it.key(), it.value()}));
        return Value(out);
      });
    if (name == "keys")
      return Value::function([obj](Args&, Kwargs&) {
        Json out = Json::array();
        for (auto it = obj.begin(); it != obj.end(); ++it) out.push_back(it.key());
        return Value(out);
      });
    if (name == "values")
      return Value::function([obj](Args&, Kwargs&) {
        Json out = Json::array();
        for (auto it = obj.begin(); it != obj.end(); ++it) out.push_back(it.value());
        return Value(out);
      });
    if (name == "get")
      return Value::function([obj](Args& a, Kwargs& kw) {
        Value k = arg(a, kw, 0, "key"), d = arg(a, kw, 1, "default");
        if (k.is_str()) {
          auto it = obj.find(k.str());
          if (it != obj.end()) return Value(*it);
        }
        return d.undef() ? Value(Json(nullptr)) : d;
      });
  }
  return {};
}

Value attribute(const Value& v, const std::string& name) {
  if (v.is_obj()) {
    auto it = v.j.find(name);
    if (it != v.j.end()) return Value(*it);
  }
  if (v.k == Value::K::Ns) {
    if (v.ns->contains(name)) return Value((*v.ns)[name]);
    return {};
  }
  return method(v, name);
}

// ============================================================== tests and filters

bool run_test(const std::string& name, const Value& v, Args& a) {
  auto arg0 = [&]() -> const Value& {
    if (a.empty()) fail("test '" + name + "' needs an argument");
    return a[0];
  };
  if (name == "defined") return !v.undef();
  if (name == "undefined") return v.undef();
  if (name == "none") return v.is_null();
  if (name == "string") return v.is_str();
  if (name == "number") return v.is_num() || (v.data() && v.j.is_boolean());
  if (name == "integer") return v.is_int() || (v.data() && v.j.is_number_unsigned());
  if (name == "float") return v.data() && v.j.is_number_float();
  if (name == "boolean") return v.data() && v.j.is_boolean();
  if (name == "true") return v.data() && v.j.is_boolean() && v.j.get<bool>();
  if (name == "false") return v.data() && v.j.is_boolean() && !v.j.get<bool>();
  if (name == "mapping") return v.is_obj() || v.k == Value::K::Ns;
  if (name == "iterable") return v.undef() || v.is_arr() || v.is_obj() || v.is_str();
  if (name == "sequence") return v.is_arr() || v.is_obj() || v.is_str();
  if (name == "callable") return v.k == Value::K::Fn;
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return equal(v, arg0());
  if (name == "ne" || name == "!=") return !equal(v, arg0());
  if (name == "lt" || name == "<") return less(v, arg0());
  if (name == "gt" || name == ">") return less(arg0(), v);
  if (name == "le" || name == "<=") return !less(arg0(), v);
  if (name == "ge" || name == ">=") return !less(v, arg0());
  if (name == "in") return contains(arg0(), v);
  if (name == "odd") return as_int(v, "odd") % 2 != 0;
  if (name == "even") return as_int(v, "even") % 2 == 0;
  if (name == "divisibleby") return as_int(v, "divisibleby") % as_int(arg0(), "divisibleby") == 0;
  if (name == "lower") return v.is_str() && lower(v.str()) == v.str();
  if (name == "upper") return v.is_str() && upper(v.str()) == v.str();
  fail("unknown test '" + name + "'");
}

Value run_filter(const std::string& name, const Value& v, Args& a, Kwargs& kw);

// selectattr / rejectattr / select / reject
Value select(const Value& v, Args& a, bool by_attr, bool keep) {
  Json out = Json::array();
  size_t i = 0;
  std::string attr;
  if (by_attr) {
    if (a.empty() || !a[0].is_str()) fail("selectattr needs an attribute name");
    attr = a[0].str();
    i = 1;
  }
  std::string test = i < a.size() ? to_str(a[i]) : "";
  Args targs(a.begin() + static_cast<std::ptrdiff_t>(std::min(i + 1, a.size())), a.end());
  for (const Json& x : iterable(v)) {
    tick();
    Value item(x);
    Value subject = by_attr ? attribute(item, attr) : item;
    const bool ok = test.empty() ? truthy(subject) : run_test(test, subject, targs);
    if (ok == keep) out.push_back(x);
  }
  return Value(out);
}

Value run_filter(const std::string& name, const Value& v, Args& a, Kwargs& kw) {
  if (name == "trim") {
    Value chars = arg(a, kw, 0, "chars");
    return Value(Json(strip(to_str(v), &chars, true, true)));
  }
  if (name == "length" || name == "count") {
    if (v.is_str()) return Value(Json(static_cast<int64_t>(u8len(v.str()))));
    if (v.is_arr() || v.is_obj()) return Value(Json(static_cast<int64_t>(v.j.size())));
    if (v.undef()) return Value(Json(0));
    if (v.k == Value::K::Ns) return Value(Json(static_cast<int64_t>(v.ns->size())));
    fail("length of a value that has none: " + to_str(v));
  }
  if (name == "tojson") {
    Value ind = arg(a, kw, 0, "indent");
    std::string out;
    const int64_t indent = ind.undef() || ind.is_null() ? -1 : std::max<int64_t>(as_int(ind, "indent"), 0);
    if (tl_budget && indent > static_cast<int64_t>(tl_budget->lim.max_value_bytes))
      exceeded("a string's bytes exceed", tl_budget->lim.max_value_bytes, "max_value_bytes");
    dump_json(v.k == Value::K::Ns ? *v.ns : v.undef() ? Json(nullptr) : v.j, out, static_cast<int>(indent), 0);
    return Value(Json(out));
  }
  if (name == "string") return Value(Json(to_str(v)));
  if (name == "safe" || name == "e" || name == "escape" || name == "forceescape") {
    if (name == "safe") return v;
    fail("the escape filter is not supported (chat templates render without HTML escaping)");
  }
  if (name == "items") {
    if (v.undef()) return Value(Json::array());
    if (!v.is_obj()) fail("items needs a mapping");
    Json out = Json::array();
    for (auto it = v.j.begin(); it != v.j.end(); ++it) out.push_back(Json::array({it.key(), it.value()}));
    return Value(out);
  }
  if (name == "list") return Value(iterable(v));
  if (name == "join") {
    Value sep = arg(a, kw, 0, "d"), attr = arg(a, kw, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Json& x : iterable(v)) {
      if (!first) out += sep.undef() ? "" : to_str(sep);
      first = false;
      out += to_str(attr.undef() ? Value(x) : attribute(Value(x), to_str(attr)));
      tick();
      check_text_size(out.size());
    }
    return Value(Json(out));
  }
  if (name == "default" || name == "d") {
    Value dflt = arg(a, kw, 0, "default_value"), boolean = arg(a, kw, 1, "boolean");
    const bool use = truthy(boolean) ? !truthy(v) : v.undef();
    return use ? (dflt.undef() ? Value(Json("")) : dflt) : v;
  }
  if (name == "first" || name == "last") {
    Json items = iterable(v);
    if (items.empty()) return {};
    return Value(name == "first" ? items.front() : items.back());
  }
  if (name == "lower") return Value(Json(lower(to_str(v))));
  if (name == "upper") return Value(Json(upper(to_str(v))));
  if (name == "title") return Value(Json(title_case(to_str(v))));
  if (name == "capitalize") {
    std::string t = lower(to_str(v));
    if (!t.empty()) t[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(t[0])));
    return Value(Json(t));
  }
  if (name == "replace") {
    Value from = arg(a, kw, 0, "old"), to = arg(a, kw, 1, "new"), n = arg(a, kw, 2, "count");
    return Value(Json(replace_all(to_str(v), to_str(from), to_str(to), n.undef() || n.is_null() ? -1 : as_int(n, "count"))));
  }
  if (name == "selectattr") return select(v, a, true, true);
  if (name == "rejectattr") return select(v, a, true, false);
  if (name == "select") return select(v, a, false, true);
  if (name == "reject") return select(v, a, false, false);
  if (name == "map") {
    Json out = Json::array();
    Value attr = kwarg(kw, "attribute");
    if (!attr.undef()) {
      Value dflt = kwarg(kw, "default");
      for (const Json& x : iterable(v)) {
        tick();
        Value r = attribute(Value(x), to_str(attr));
        if (r.undef()) r = dflt;
        out.push_back(r.undef() ? Json(nullptr) : r.j);
      }
      return Value(out);
    }
    if (a.empty()) fail("map needs a filter name or attribute=");
    const std::string f = to_str(a[0]);
    Args rest(a.begin() + 1, a.end());
    Kwargs none;
    for (const Json& x : iterable(v)) {
      tick();
      Value r = run_filter(f, Value(x), rest, none);
      out.push_back(r.undef() ? Json(nullptr) : r.j);
    }
    return Value(out);
  }
  if (name == "unique") {
    Json out = Json::array();
    for (const Json& x : iterable(v)) {
      bool seen = false;
      for (const Json& y : out) {
        tick();
        seen = seen || equal(Value(x), Value(y));
      }
      if (!seen) out.push_back(x);
    }
    return Value(out);
  }
  if (name == "reverse") {
    if (v.is_str()) {
      std::vector<std::string> ch = u8chars(v.str());
      std::string out;
      for (auto it = ch.rbegin(); it != ch.rend(); ++it) out += *it;
      return Value(Json(out));
    }
    Json items = iterable(v);
    std::reverse(items.begin(), items.end());
    return Value(items);
  }
  if (name == "sort" || name == "dictsort") {
    Json items = name == "dictsort" ? run_filter("items", v, a, kw).j : iterable(v);
    Value attr = kwarg(kw, "attribute"), rev = kwarg(kw, "reverse");
    std::vector<Json> xs(items.begin(), items.end());
    std::stable_sort(xs.begin(), xs.end(), [&](const Json& x, const Json& y) {
      tick();
      Value l(x), r(y);
      if (name == "dictsort") l = Value(x[0]), r = Value(y[0]);
      else if (!attr.undef()) l = attribute(l, to_str(attr)), r = attribute(r, to_str(attr));
      return less(l, r);
    });
    if (truthy(rev)) std::reverse(xs.begin(), xs.end());
    return Value(Json(xs));
  }
  if (name == "int") {
    if (v.is_str()) {
      try {
        return Value(Json(static_cast<int64_t>(std::stoll(strip(v.str(), nullptr, true, true)))));
      } catch (...) {
        return Value(Json(0));
      }
    }
    if (num_like(v)) return Value(Json(double_to_int(as_num(v), "int")));
    return Value(Json(0));
  }
  if (name == "float") {
    if (v.is_str()) {
      try {
        return Value(Json(std::stod(v.str())));  // out of range: caught below, 0.0 as Jinja2
      } catch (...) {
        return Value(Json(0.0));
      }
    }
    return Value(Json(num_like(v) ? as_num(v) : 0.0));
  }
  if (name == "abs") {
    if (v.is_int() && v.j.get<int64_t>() != INT64_MIN) return Value(Json(std::llabs(v.j.get<int64_t>())));
    return Value(Json(std::fabs(as_num(v))));
  }
  if (name == "round") {
    Value prec = arg(a, kw, 0, "precision");
    const double p = std::pow(10.0, prec.undef() ? 0 : as_int(prec, "precision"));
    return Value(Json(std::nearbyint(as_num(v) * p) / p));
  }
  if (name == "sum") {
    double s = 0;
    bool all_int = true;
    for (const Json& x : iterable(v)) {
      tick();
      all_int = all_int && x.is_number_integer();
      s += as_num(Value(x));
    }
    return all_int ? Value(Json(double_to_int(s, "sum"))) : Value(Json(s));
  }
  if (name == "min" || name == "max") {
    Json items = iterable(v);
    if (items.empty()) return {};
    Json best = items[0];
    for (const Json& x : items)
      if (tick(), name == "min" ? less(Value(x), Value(best)) : less(Value(best), Value(x))) best = x;
    return Value(best);
  }
  if (name == "wordcount") return Value(Json(static_cast<int64_t>(py_split(to_str(v), Value(), -1).size())));
  if (name == "indent") {
    Value w = arg(a, kw, 0, "width"), first = arg(a, kw, 1, "first"), blank = arg(a, kw, 2, "blank");
    const int64_t width = w.is_str() || w.undef() ? 4 : std::max<int64_t>(as_int(w, "width"), 0);
    check_text_size(static_cast<size_t>(width));
    const std::string pad = w.is_str() ? w.str() : std::string(static_cast<size_t>(width), ' ');
    const std::string s = to_str(v);
    std::string out;
    size_t start = 0;
    bool first_line = true;
    for (;;) {
      const size_t nl = s.find('\n', start);
      const std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      const bool pad_it = (!first_line || truthy(first)) && (truthy(blank) || !strip(line, nullptr, true, true).empty());
      out += (pad_it ? pad : "") + line;
      tick();
      check_text_size(out.size());
      if (nl == std::string::npos) break;
      out += '\n';
      start = nl + 1;
      first_line = false;
    }
    return Value(Json(out));
  }
  fail("unknown filter '" + name + "'");
}

// ============================================================== lexer

enum class Tok { Name, Str, Int, Float, Op, End };

struct Token {
  Tok type;
  std::string text;
  int line;
};

// One piece of the template: text, {{ expression }}, or {% statement %}.
struct Piece {
  enum Kind { Text, Output, Stmt } kind;
  std::string text;            // Text
  std::vector<Token> tokens;   // Output / Stmt (ending with an End token)
  int line;
};

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : s_(src) {}

  std::vector<Piece> run() {
    std::vector<Piece> out;
    bool strip_next = false;  // a "-" closed the previous tag
    bool trim_nl = false;     // trim_blocks: drop one newline after a block tag
    while (pos_ < s_.size()) {
      // The next tag opening.
      size_t open = pos_;
      for (;;) {
        open = s_.find('{', open);
        if (open == std::string_view::npos || open + 1 >= s_.size()) {
          open = std::string_view::npos;
          break;
        }
        const char c = s_[open + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++open;
      }
      std::string text(s_.substr(pos_, open == std::string_view::npos ? std::string_view::npos : open - pos_));
      if (trim_nl) {
        if (text.rfind("\r\n", 0) == 0) text.erase(0, 2);
        else if (!text.empty() && text[0] == '\n') text.erase(0, 1);
      }
      if (strip_next) {
        size_t b = 0;
        while (b < text.size() && is_space(text[b])) ++b;
        text.erase(0, b);
      }
      strip_next = trim_nl = false;
      if (open == std::string_view::npos) {
        add_text(out, text);
        break;
      }
      const char kind = s_[open + 1];
      size_t p = open + 2;
      const bool minus = p < s_.size() && s_[p] == '-';
      const bool plus = p < s_.size() && s_[p] == '+';
      if (minus || plus) ++p;
      if (minus) {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (kind != '{' && !plus) {
        // lstrip_blocks: spaces and tabs before a block tag on its line.
        size_t e = text.size();
        while (e > 0 && (text[e - 1] == ' ' || text[e - 1] == '\t')) --e;
        const bool line_start = e == 0 ? at_line_start(open - text.size()) : text[e - 1] == '\n';
        if (line_start) text.erase(e);
      }
      add_text(out, text);
      line_ = line_at(open);
      if (kind == '#') {
        const size_t close = s_.find("#}", p);
        if (close == std::string_view::npos) fail_at("unclosed comment");
        strip_next = close > 0 && s_[close - 1] == '-';
        trim_nl = !strip_next;
        pos_ = close + 2;
        continue;
      }
      pos_ = p;
      Piece piece{kind == '{' ? Piece::Output : Piece::Stmt, "", {}, line_};
      const std::string close = kind == '{' ? "}}" : "%}";
      for (;;) {
        skip_ws();
        if (pos_ >= s_.size()) fail_at("unclosed tag");
        if (s_[pos_] == '-' && s_.compare(pos_ + 1, 2, close) == 0) {
          strip_next = true;
          pos_ += 3;
          break;
        }
        if (s_[pos_] == '+' && s_.compare(pos_ + 1, 2, close) == 0) {
          pos_ += 3;
          break;
        }
        if (s_.compare(pos_, 2, close) == 0) {
          pos_ += 2;
          trim_nl = kind == '%';
          break;
        }
        piece.tokens.push_back(next_token());
      }
      if (strip_next) trim_nl = false;
      piece.tokens.push_back({Tok::End, "", line_});
      // {% raw %} ... {% endraw %}: the text in between as it is.
      if (piece.kind == Piece::Stmt && piece.tokens.size() == 2 && piece.tokens[0].text == "raw") {
        const size_t end = s_.find("endraw", pos_);
        if (end == std::string_view::npos) fail_at("raw without endraw");
        const size_t tag = s_.rfind("{%", end);
        const size_t close_at = s_.find("%}", end);
        if (tag == std::string_view::npos || tag < pos_ || close_at == std::string_view::npos)
          fail_at("raw without {% endraw %}");
        std::string raw(s_.substr(pos_, tag - pos_));
        if (tag + 2 < s_.size() && s_[tag + 2] == '-')
          while (!raw.empty() && is_space(raw.back())) raw.pop_back();
        add_text(out, raw);
        strip_next = close_at > 0 && s_[close_at - 1] == '-';
        trim_nl = !strip_next;
        pos_ = close_at + 2;
        continue;
      }
      out.push_back(std::move(piece));
    }
    return out;
  }

 private:
  bool at_line_start(size_t at) const { return at == 0 || s_[at - 1] == '\n'; }
  int line_at(size_t at) {
    while (counted_ < at && counted_ < s_.size()) {
      if (s_[counted_] == '\n') ++cur_line_;
      ++counted_;
    }
    return cur_line_;
  }
  [[noreturn]] void fail_at(const std::string& what) const { fail("line " + std::to_string(line_) + ": " + what); }

  void add_text(std::vector<Piece>& out, const std::string& text) {
    if (!text.empty()) out.push_back({Piece::Text, text, {}, line_});
  }

  void skip_ws() {
    while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
  }

  Token next_token() {
    const char c = s_[pos_];
    if (ident_start(c)) {
      const size_t b = pos_;
      while (pos_ < s_.size() && ident_char(s_[pos_])) ++pos_;
      return {Tok::Name, std::string(s_.substr(b, pos_ - b)), line_};
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      const size_t b = pos_;
      bool is_float = false;
      while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
      if (pos_ + 1 < s_.size() && s_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
        is_float = true;
        ++pos_;
        while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      }
      if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
        is_float = true;
        ++pos_;
        if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
        while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      }
      std::string t(s_.substr(b, pos_ - b));
      t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
      return {is_float ? Tok::Float : Tok::Int, t, line_};
    }
    if (c == '\'' || c == '"') {
      ++pos_;
      std::string out;
      while (pos_ < s_.size() && s_[pos_] != c) {
        char ch = s_[pos_++];
        if (ch == '\\' && pos_ < s_.size()) {
          const char e = s_[pos_++];
          switch (e) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case '0': out += '\0'; break;
            case '\\': out += '\\'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case '\n': break;
            case 'x':
            case 'u':
            case 'U': {
              const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
              if (pos_ + n > s_.size()) fail_at("bad escape in a string");
              uint32_t cp = 0;
              for (size_t k = 0; k < n; ++k) {
                const char h = s_[pos_ + k];
                if (!std::isxdigit(static_cast<unsigned char>(h))) fail_at("bad escape in a string");
                cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
              }
              if (cp > 0x10FFFF) fail_at("bad escape in a string");
              pos_ += n;
              append_utf8(out, cp);
              break;
            }
            default: out += '\\', out += e;
          }
        } else {
          if (ch == '\n') ++cur_line_, ++counted_;  // keep line numbers right inside strings
          out += ch;
        }
      }
      if (pos_ >= s_.size()) fail_at("unterminated string");
      ++pos_;
      return {Tok::Str, out, line_};
    }
    static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ".", ",", ":",
                                "|",  "~",  "+",  "-",  "*",  "/",  "%", "<", ">", "="};
    for (const char* op : ops)
      if (s_.compare(pos_, std::strlen(op), op) == 0) {
        pos_ += std::strlen(op);
        return {Tok::Op, op, line_};
      }
    fail_at(std::string("unexpected character '") + c + "'");
  }

  std::string_view s_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t counted_ = 0;
  int cur_line_ = 1;
};

// ============================================================== expressions

struct Context;

// Every evaluation and every statement's render goes through a Nest: it
// bounds how deep they recurse (macro calls included) and ticks the budget.
struct Nest {
  Nest() {
    if (!tl_budget) return;
    tick();
    if (++tl_budget->depth > tl_budget->lim.max_render_depth) {
      --tl_budget->depth;
      exceeded("nested evaluation steps exceed", static_cast<uint64_t>(tl_budget->lim.max_render_depth),
               "max_render_depth");
    }
  }
  ~Nest() {
    if (tl_budget) --tl_budget->depth;
  }
  Nest(const Nest&) = delete;
  Nest& operator=(const Nest&) = delete;
};

struct Expr {
  int line = 0;
  int depth = 1;  // of this expression's tree (the parser bounds it by Limits::max_nesting)
  virtual ~Expr() = default;
  Value eval(Context& c) const {
    Nest n;
    return do_eval(c);
  }

 private:
  virtual Value do_eval(Context& c) const = 0;
};
using ExprP = std::unique_ptr<Expr>;

struct Node;
using NodeP = std::unique_ptr<Node>;
using Body = std::vector<NodeP>;

enum class Flow { Normal, Break, Continue };

struct Node {
  int line = 0;
  virtual ~Node() = default;
  Flow render(Context& c, std::string& out) const {
    Nest n;
    return do_render(c, out);
  }

 private:
  virtual Flow do_render(Context& c, std::string& out) const = 0;
};

// frames[0]: the globals and the caller's context; frames[1]: the template's
// top-level names; above: loop bodies and macro calls. A macro's body sees
// frames 0 and 1 and its own frames (from `floor` up), not its caller's.
struct Context {
  std::vector<std::map<std::string, Value>> frames;
  size_t floor = 1;
  Value lookup(const std::string& name) const {
    for (size_t i = frames.size(); i-- > 0;) {
      if (i < floor && i > 1) i = 1;  // skip the frames of the macro's callers
      auto f = frames[i].find(name);
      if (f != frames[i].end()) return f->second;
    }
    return {};
  }
  void set(const std::string& name, Value v) { frames.back()[name] = std::move(v); }
};

// Appends rendered text to `out` (the result, or the text of a block or a
// macro), within Limits::max_output_bytes.
void emit(std::string& out, const std::string& text) {
  if (tl_budget && out.size() + text.size() > tl_budget->lim.max_output_bytes)
    exceeded("rendered bytes exceed", tl_budget->lim.max_output_bytes, "max_output_bytes");
  out += text;
}

Flow render_body(const Body& body, Context& c, std::string& out) {
  for (const NodeP& n : body) {
    const Flow f = n->render(c, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

struct Literal : Expr {
  Value v;
  Value do_eval(Context&) const override { return v; }
};

struct Name : Expr {
  std::string name;
  Value do_eval(Context& c) const override { return c.lookup(name); }
};

struct ListLit : Expr {
  std::vector<ExprP> items;
  Value do_eval(Context& c) const override {
    Json a = Json::array();
    for (const ExprP& e : items) {
      Value v = e->eval(c);
      a.push_back(v.k == Value::K::Ns ? *v.ns : v.undef() ? Json(nullptr) : std::move(v.j));
    }
    count_built(a);
    return Value(a);
  }
};

struct DictLit : Expr {
  std::vector<std::pair<ExprP, ExprP>> items;
  Value do_eval(Context& c) const override {
    Json o = Json::object();
    for (const auto& [k, v] : items) {
      Value kv = k->eval(c), vv = v->eval(c);
      o[to_str(kv)] = vv.undef() ? Json(nullptr) : vv.j;
    }
    count_built(o);
    return Value(o);
  }
};

struct Attr : Expr {
  ExprP obj;
  std::string name;
  Value do_eval(Context& c) const override { return attribute(obj->eval(c), name); }
};

struct Subscript : Expr {
  ExprP obj, key, lo, hi, step;
  bool is_slice = false;
  Value do_eval(Context& c) const override {
    Value o = obj->eval(c);
    if (!is_slice) {
      Value k = key->eval(c);
      Value r = index(o, k);
      if (r.undef() && k.is_str()) r = method(o, k.str());
      return r;
    }
    Value none;
    Value r = slice(o, lo ? lo->eval(c) : none, hi ? hi->eval(c) : none, step ? step->eval(c) : none);
    count_built(r.j);
    return r;
  }
};

struct Call : Expr {
  ExprP fn;
  std::vector<ExprP> args;
  std::vector<std::pair<std::string, ExprP>> kwargs;
  Value do_eval(Context& c) const override {
    Value f = fn->eval(c);
    if (f.k != Value::K::Fn) {
      const Name* n = dynamic_cast<const Name*>(fn.get());
      const Attr* at = dynamic_cast<const Attr*>(fn.get());
      fail("line " + std::to_string(line) + ": " +
           (n ? "'" + n->name + "' is not a function" : at ? "no method '" + at->name + "'" : "not a function"));
    }
    Args a;
    Kwargs kw;
    for (const ExprP& e : args) a.push_back(e->eval(c));
    for (const auto& [k, e] : kwargs) kw.emplace_back(k, e->eval(c));
    Value r = (*f.fn)(a, kw);
    count_built(r.k == Value::K::Ns ? *r.ns : r.j);
    return r;
  }
};

struct FilterExpr : Expr {
  ExprP value;  // null in a {% filter %} block (the body is the value)
  std::string name;
  std::vector<ExprP> args;
  std::vector<std::pair<std::string, ExprP>> kwargs;
  Value apply(Context& c, const Value& v) const {
    Args a;
    Kwargs kw;
    for (const ExprP& e : args) a.push_back(e->eval(c));
    for (const auto& [k, e] : kwargs) kw.emplace_back(k, e->eval(c));
    try {
      Value r = run_filter(name, v, a, kw);
      count_built(r.k == Value::K::Ns ? *r.ns : r.j);
      return r;
    } catch (const TemplateRaised&) {
      throw;
    } catch (const LimitExceeded&) {
      throw;
    } catch (const Cancelled&) {
      throw;
    } catch (const Error& e) {
      const std::string m = e.what();
      if (m.rfind("jinja: line", 0) == 0) throw;
      fail("line " + std::to_string(line) + ": " + m.substr(7));
    }
  }
  Value do_eval(Context& c) const override { return apply(c, value->eval(c)); }
};

struct TestExpr : Expr {
  ExprP value;
  std::string name;
  std::vector<ExprP> args;
  bool negate = false;
  Value do_eval(Context& c) const override {
    Value v = value->eval(c);
    Args a;
    for (const ExprP& e : args) a.push_back(e->eval(c));
    return Value(Json(run_test(name, v, a) != negate));
  }
};

struct Unary : Expr {
  std::string op;
  ExprP e;
  Value do_eval(Context& c) const override {
    Value v = e->eval(c);
    if (op == "not") return Value(Json(!truthy(v)));
    if (op == "-") {
      if (v.is_int() && v.j.get<int64_t>() != INT64_MIN) return Value(Json(-v.j.get<int64_t>()));
      return Value(Json(-as_num(v)));
    }
    return v;  // unary +
  }
};

// Integer + - * as Python computes them; past int64 (where Python's integers
// just grow) the result is a float rather than undefined behaviour.
Value int_op(char op, int64_t x, int64_t y) {
  int64_t r = 0;
  const bool overflow = op == '+' ? __builtin_add_overflow(x, y, &r)
                        : op == '-' ? __builtin_sub_overflow(x, y, &r)
                                    : __builtin_mul_overflow(x, y, &r);
  if (!overflow) return Value(Json(r));
  const double dx = static_cast<double>(x), dy = static_cast<double>(y);
  return Value(Json(op == '+' ? dx + dy : op == '-' ? dx - dy : dx * dy));
}

struct Binary : Expr {
  std::string op;
  ExprP l, r;
  Value do_eval(Context& c) const override {
    if (op == "and") {
      Value a = l->eval(c);
      return truthy(a) ? r->eval(c) : a;
    }
    if (op == "or") {
      Value a = l->eval(c);
      return truthy(a) ? a : r->eval(c);
    }
    Value a = l->eval(c), b = r->eval(c);
    try {
      Value v = apply(a, b);
      count_built(v.j);
      return v;
    } catch (const TemplateRaised&) {
      throw;
    } catch (const LimitExceeded&) {
      throw;
    } catch (const Cancelled&) {
      throw;
    } catch (const Error& e) {
      const std::string m = e.what();
      if (m.rfind("jinja: line", 0) == 0) throw;
      fail("line " + std::to_string(line) + ": " + m.substr(7));
    }
  }
  Value apply(const Value& a, const Value& b) const {
    if (op == "~") {
      std::string l = to_str(a), r = to_str(b);
      check_text_size(l.size() + r.size());
      return Value(Json(l + r));
    }
    if (op == "==") return Value(Json(equal(a, b)));
    if (op == "!=") return Value(Json(!equal(a, b)));
    if (op == "<") return Value(Json(less(a, b)));
    if (op == ">") return Value(Json(less(b, a)));
    if (op == "<=") return Value(Json(!less(b, a)));
    if (op == ">=") return Value(Json(!less(a, b)));
    if (op == "in") return Value(Json(contains(b, a)));
    if (op == "not in") return Value(Json(!contains(b, a)));
    if (op == "+") {
      if (a.is_str() && b.is_str()) {
        check_text_size(a.str().size() + b.str().size());
        return Value(Json(a.str() + b.str()));
      }
      if (a.is_arr() && b.is_arr()) {
        check_items(a.j.size() + b.j.size());
        Json out = a.j;
        for (const Json& x : b.j) out.push_back(x);
        return Value(out);
      }
      if (num_like(a) && num_like(b)) {
        if (!a.data() || !b.data() || a.j.is_number_float() || b.j.is_number_float())
          return Value(Json(as_num(a) + as_num(b)));
        return int_op('+', as_int(a, "+"), as_int(b, "+"));
      }
      fail("cannot add " + (a.undef() ? std::string("undefined") : data_str(a.j, true)) + " and " +
           (b.undef() ? std::string("undefined") : data_str(b.j, true)));
    }
    if (op == "*" && (a.is_str() || b.is_str())) {
      const Value& s = a.is_str() ? a : b;
      const Value& n = a.is_str() ? b : a;
      const int64_t times = std::max<int64_t>(as_int(n, "a repeat count"), 0);
      // The size before the loop: 'x' * 10**9 fails at once.
      if (!s.str().empty() && static_cast<uint64_t>(times) > SIZE_MAX / s.str().size()) check_text_size(SIZE_MAX);
      check_text_size(s.str().size() * static_cast<size_t>(times));
      std::string out;
      out.reserve(s.str().size() * static_cast<size_t>(times));
      for (int64_t i = 0; i < times; ++i) out += s.str();
      return Value(Json(out));
    }
    const bool ints = a.is_int() && b.is_int();
    if (op == "-") return ints ? int_op('-', a.j.get<int64_t>(), b.j.get<int64_t>()) : Value(Json(as_num(a) - as_num(b)));
    if (op == "*") return ints ? int_op('*', a.j.get<int64_t>(), b.j.get<int64_t>()) : Value(Json(as_num(a) * as_num(b)));
    if (op == "/") {
      if (as_num(b) == 0) fail("division by zero");
      return Value(Json(as_num(a) / as_num(b)));
    }
    if (op == "//" || op == "%") {
      if (as_num(b) == 0) fail("division by zero");
      if (ints) {
        const int64_t x = a.j.get<int64_t>(), y = b.j.get<int64_t>();
        if (x == INT64_MIN && y == -1) return op == "//" ? Value(Json(-static_cast<double>(x))) : Value(Json(0));
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;  // Python floors
        return Value(Json(op == "//" ? q : m));
      }
      const double x = as_num(a), y = as_num(b);
      const double q = std::floor(x / y);
      return Value(Json(op == "//" ? q : x - q * y));
    }
    if (op == "**") {
      if (ints && b.j.get<int64_t>() >= 0) {  // by squaring; a float once past int64, as Python's big ints
        int64_t r = 1, base = a.j.get<int64_t>(), e = b.j.get<int64_t>();
        bool overflow = false;
        for (; e > 0 && !overflow; e >>= 1) {
          if (e & 1) overflow = __builtin_mul_overflow(r, base, &r);
          if (e > 1 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
        }
        if (!overflow) return Value(Json(r));
      }
      return Value(Json(std::pow(as_num(a), as_num(b))));
    }
    fail("unknown operator " + op);
  }
};

struct Cond : Expr {
  ExprP then, cond, otherwise;
  Value do_eval(Context& c) const override {
    if (truthy(cond->eval(c))) return then->eval(c);
    return otherwise ? otherwise->eval(c) : Value{};
  }
};

// ============================================================== statements

struct TextNode : Node {
  std::string text;
  Flow do_render(Context&, std::string& out) const override {
    emit(out, text);
    return Flow::Normal;
  }
};

struct OutputNode : Node {
  ExprP e;
  Flow do_render(Context& c, std::string& out) const override {
    emit(out, to_str(e->eval(c)));
    return Flow::Normal;
  }
};

struct IfNode : Node {
  std::vector<std::pair<ExprP, Body>> branches;  // a null condition: else
  Flow do_render(Context& c, std::string& out) const override {
    for (const auto& [cond, body] : branches)
      if (!cond || truthy(cond->eval(c))) return render_body(body, c, out);
    return Flow::Normal;
  }
};

struct ForNode : Node {
  std::vector<std::string> vars;
  ExprP iter, filter;
  Body body, else_body;
  Flow do_render(Context& c, std::string& out) const override {
    Json items = iterable(iter->eval(c));
    count_built(items);  // a copy each level of nested loops holds
    if (filter) {  // "for x in xs if cond": filtered before loop.* is counted
      Json kept = Json::array();
      for (const Json& x : items) {
        count_iteration();
        c.frames.emplace_back();
        bind(c, x);
        if (truthy(filter->eval(c))) kept.push_back(x);
        c.frames.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty()) return render_body(else_body, c, out);
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      count_iteration();
      c.frames.emplace_back();
      // Built key by key: an initializer list costs some thirty allocations,
      // and a loop may run a million times.
      Json loop(Json::value_t::object);
      loop.get_ref<Json::object_t&>().reserve(9);
      loop.emplace("index", i + 1);
      loop.emplace("index0", i);
      loop.emplace("revindex", n - i);
      loop.emplace("revindex0", n - i - 1);
      loop.emplace("first", i == 0);
      loop.emplace("last", i == n - 1);
      loop.emplace("length", n);
      if (i > 0) loop.emplace("previtem", Json(items[static_cast<size_t>(i - 1)]));
      if (i + 1 < n) loop.emplace("nextitem", Json(items[static_cast<size_t>(i + 1)]));
      c.set("loop", Value(std::move(loop)));
      bind(c, items[static_cast<size_t>(i)]);
      const Flow f = render_body(body, c, out);
      c.frames.pop_back();
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }
  static void count_iteration() {
    if (tl_budget && ++tl_budget->iterations > tl_budget->lim.max_loop_iterations)
      exceeded("for-loop iterations exceed", static_cast<uint64_t>(tl_budget->lim.max_loop_iterations),
               "max_loop_iterations");
  }
  void bind(Context& c, const Json& x) const {
    if (vars.size() == 1) {
      c.set(vars[0], Value(x));
      return;
    }
    if (!x.is_array() || x.size() != vars.size())
      fail("line " + std::to_string(line) + ": cannot unpack " + data_str(x, true) + " into " +
           std::to_string(vars.size()) + " names");
    for (size_t k = 0; k < vars.size(); ++k) c.set(vars[k], Value(x[k]));
  }
};

struct SetNode : Node {
  std::vector<std::string> names;  // one, or several for tuple unpacking
  std::string attr;                // "set ns.attr = ..."
  ExprP value;
  Body block;                      // {% set x %}...{% endset %}
  std::vector<std::unique_ptr<FilterExpr>> block_filters;
  Flow do_render(Context& c, std::string& out) const override {
    (void)out;
    Value v;
    if (value) {
      v = value->eval(c);
    } else {
      std::string text;
      render_body(block, c, text);
      v = Value(Json(text));
      for (const auto& f : block_filters) v = f->apply(c, v);
    }
    if (!attr.empty()) {
      Value target = c.lookup(names[0]);
      if (target.k != Value::K::Ns)
        fail("line " + std::to_string(line) + ": cannot set an attribute of '" + names[0] + "' (not a namespace)");
      Json value = v.k == Value::K::Ns ? *v.ns : v.undef() ? Json(nullptr) : std::move(v.j);
      (*target.ns)[attr] = std::move(value);
      check_value(*target.ns);  // "set ns.x = ns" doubles it
      return Flow::Normal;
    }
    if (names.size() == 1) {
      c.set(names[0], v);
      return Flow::Normal;
    }
    Json items = iterable(v);
    if (items.size() != names.size()) fail("line " + std::to_string(line) + ": cannot unpack into the names");
    for (size_t k = 0; k < names.size(); ++k) c.set(names[k], Value(items[k]));
    return Flow::Normal;
  }
};

struct MacroNode : Node {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprP> defaults;  // per param (null: none)
  Body body;
  Flow do_render(Context& c, std::string&) const override {
    const MacroNode* self = this;
    Context* ctx = &c;
    c.set(name, Value::function([self, ctx](Args& a, Kwargs& kw) {
      std::map<std::string, Value> frame;
      for (size_t i = 0; i < self->params.size(); ++i) {
        Value v = arg(a, kw, i, self->params[i]);
        if (v.undef() && self->defaults[i]) v = self->defaults[i]->eval(*ctx);
        count_built(v.k == Value::K::Ns ? *v.ns : v.j);  // a copy each call level holds
        frame[self->params[i]] = v;
      }
      // The macro sees the globals, the template's top-level names and its
      // own arguments (not the caller's loop variables): its frames start
      // at a new floor (frames, not copies: a call costs no copy of the context).
      struct MacroFrame {
        Context& c;
        size_t floor, frames;
        MacroFrame(Context& ctx, std::map<std::string, Value>&& frame) : c(ctx), floor(ctx.floor), frames(ctx.frames.size()) {
          if (tl_budget && ++tl_budget->calls > tl_budget->lim.max_call_depth) {
            --tl_budget->calls;
            exceeded("macro calls nested (recursion) exceed", static_cast<uint64_t>(tl_budget->lim.max_call_depth),
                     "max_call_depth");
          }
          c.frames.push_back(std::move(frame));
          c.floor = frames;
        }
        ~MacroFrame() {
          if (tl_budget) --tl_budget->calls;
          c.frames.resize(frames);
          c.floor = floor;
        }
      } macro_frame(*ctx, std::move(frame));
      std::string out;
      render_body(self->body, *ctx, out);
      return Value(Json(out));
    }));
    return Flow::Normal;
  }
};

struct FlowNode : Node {
  Flow flow;
  Flow do_render(Context&, std::string&) const override { return flow; }
};

struct FilterBlock : Node {
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
  Flow do_render(Context& c, std::string& out) const override {
    std::string text;
    render_body(body, c, text);
    Value v{Json(text)};
    for (const auto& f : filters) v = f->apply(c, v);
    emit(out, to_str(v));
    return Flow::Normal;
  }
};

// ============================================================== parser

class Parser {
 public:
  Parser(std::vector<Piece> pieces, const Limits& limits) : pieces_(std::move(pieces)), lim_(limits) {}

  Body parse() {
    std::string end;
    Body b = body({}, &end);
    if (!end.empty()) fail_line(pieces_[pi_ - 1].line, "unexpected {% " + end + " %}");
    return b;
  }

 private:
  [[noreturn]] static void fail_line(int line, const std::string& what) {
    fail("line " + std::to_string(line) + ": " + what);
  }

  // The parser recurses once per level of nesting (a block in a block, an
  // expression in an expression); each level holds a Deeper, so the source
  // cannot nest deeper than Limits::max_nesting and overflow the stack.
  struct Deeper {
    Parser& p;
    explicit Deeper(Parser& parser) : p(parser) {
      if (++p.depth_ > p.lim_.max_nesting) p.too_deep();
    }
    ~Deeper() { --p.depth_; }
    Deeper(const Deeper&) = delete;
    Deeper& operator=(const Deeper&) = delete;
  };
  [[noreturn]] void too_deep() const {
    exceeded("line " + std::to_string(toks_ ? peek().line : 0) + ": nesting of blocks and expressions exceeds",
             static_cast<uint64_t>(lim_.max_nesting), "max_nesting");
  }
  // An expression's tree is as deep as its deepest operand plus one; chains
  // ("a + b + c ...", "x|f|g ...") nest without the parser recursing, so the
  // depth is checked here too: evaluating and freeing a tree recurse along it.
  static int dep(const Expr* e) { return e ? e->depth : 0; }
  static int dep(const std::vector<ExprP>& es) {
    int d = 0;
    for (const ExprP& e : es) d = std::max(d, dep(e.get()));
    return d;
  }
  static int dep(const std::vector<std::pair<std::string, ExprP>>& kw) {
    int d = 0;
    for (const auto& [k, e] : kw) d = std::max(d, dep(e.get()));
    return d;
  }
  void deepen(Expr& e, std::initializer_list<int> kids) {
    e.depth = 1 + std::max(kids);
    if (e.depth > lim_.max_nesting) too_deep();
  }

  // Parses pieces until a statement whose keyword is in `ends` (consumed;
  // its keyword in *end, its tokens left for the caller at toks_/ti_).
  Body body(const std::set<std::string>& ends, std::string* end) {
    Deeper nest(*this);
    Body out;
    while (pi_ < pieces_.size()) {
      Piece& p = pieces_[pi_++];
      if (p.kind == Piece::Text) {
        auto n = std::make_unique<TextNode>();
        n->text = p.text;
        n->line = p.line;
        out.push_back(std::move(n));
        continue;
      }
      toks_ = &p.tokens;
      ti_ = 0;
      if (p.kind == Piece::Output) {
        auto n = std::make_unique<OutputNode>();
        n->line = p.line;
        n->e = expr();
        expect_end();
        out.push_back(std::move(n));
        continue;
      }
      const Token& kw = peek();
      if (kw.type != Tok::Name) fail_line(kw.line, "expected a statement keyword");
      if (ends.count(kw.text)) {
        ++ti_;
        *end = kw.text;
        return out;
      }
      out.push_back(statement(ends, end));
    }
    if (!ends.empty()) {
      std::string want;
      for (const std::string& e : ends) want += (want.empty() ? "" : " or ") + e;
      fail_line(pieces_.empty() ? 0 : pieces_.back().line, "missing {% " + want + " %}");
    }
    return out;
  }

  NodeP statement(const std::set<std::string>&, std::string*) {
    const Token kw = next();
    const int line = kw.line;
    const std::string& k = kw.text;
    if (k == "if") {
      auto n = std::make_unique<IfNode>();
      n->line = line;
      ExprP cond = expr();
      expect_end();
      for (;;) {
        std::string end;
        Body b = body({"elif", "else", "endif"}, &end);
        n->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "endif") {
          expect_end();
          break;
        }
        if (end == "else") {
          expect_end();
          Body eb = body({"endif"}, &end);
          expect_end();
          n->branches.emplace_back(nullptr, std::move(eb));
          break;
        }
        cond = expr();  // elif
        expect_end();
      }
      return n;
    }
    if (k == "for") {
      auto n = std::make_unique<ForNode>();
      n->line = line;
      n->vars.push_back(name());
      while (is_op(",")) {
        ++ti_;
        n->vars.push_back(name());
      }
      if (next().text != "in") fail_line(line, "expected 'in' in a for statement");
      n->iter = or_expr();  // not the conditional: "if" here filters items
      if (peek().type == Tok::Name && peek().text == "if") {
        ++ti_;
        n->filter = or_expr();
      }
      if (peek().type == Tok::Name && peek().text == "recursive") fail_line(line, "recursive loops are not supported");
      expect_end();
      std::string end;
      n->body = body({"else", "endfor"}, &end);
      expect_end();
      if (end == "else") {
        n->else_body = body({"endfor"}, &end);
        expect_end();
      }
      return n;
    }
    if (k == "set") {
      auto n = std::make_unique<SetNode>();
      n->line = line;
      n->names.push_back(name());
      if (is_op(".")) {
        ++ti_;
        n->attr = name();
      }
      while (is_op(",")) {
        ++ti_;
        n->names.push_back(name());
      }
      if (is_op("=")) {
        ++ti_;
        n->value = expr();
        expect_end();
        return n;
      }
      while (is_op("|")) {
        ++ti_;
        n->block_filters.push_back(filter_call(nullptr));
      }
      expect_end();
      std::string end;
      n->block = body({"endset"}, &end);
      expect_end();
      return n;
    }
    if (k == "macro") {
      auto n = std::make_unique<MacroNode>();
      n->line = line;
      n->name = name();
      expect_op("(");
      while (!is_op(")")) {
        n->params.push_back(name());
        if (is_op("=")) {
          ++ti_;
          n->defaults.push_back(expr());
        } else {
          n->defaults.push_back(nullptr);
        }
        if (is_op(",")) ++ti_;
        else if (!is_op(")")) fail_line(line, "expected ',' or ')' in the macro's parameters");
      }
      ++ti_;
      expect_end();
      std::string end;
      n->body = body({"endmacro"}, &end);
      if (peek().type == Tok::Name) ++ti_;  // {% endmacro name %}
      expect_end();
      return n;
    }
    if (k == "break" || k == "continue") {
      auto n = std::make_unique<FlowNode>();
      n->line = line;
      n->flow = k == "break" ? Flow::Break : Flow::Continue;
      expect_end();
      return n;
    }
    if (k == "filter") {
      auto n = std::make_unique<FilterBlock>();
      n->line = line;
      n->filters.push_back(filter_call(nullptr));
      while (is_op("|")) {
        ++ti_;
        n->filters.push_back(filter_call(nullptr));
      }
      expect_end();
      std::string end;
      n->body = body({"endfilter"}, &end);
      expect_end();
      return n;
    }
    if (k == "generation") {  // transformers' assistant-mask marker: renders its body
      expect_end();
      std::string end;
      auto n = std::make_unique<IfNode>();
      n->line = line;
      Body b = body({"endgeneration"}, &end);
      expect_end();
      n->branches.emplace_back(nullptr, std::move(b));
      return n;
    }
    fail_line(line, "unsupported statement '" + k + "'");
  }

  // ---- tokens
  const Token& peek(size_t ahead = 0) const { return (*toks_)[std::min(ti_ + ahead, toks_->size() - 1)]; }
  Token next() {
    Token t = peek();
    if (ti_ < toks_->size() - 1) ++ti_;
    return t;
  }
  bool is_op(const char* op) const { return peek().type == Tok::Op && peek().text == op; }
  bool is_name(const char* n) const { return peek().type == Tok::Name && peek().text == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail_line(peek().line, std::string("expected '") + op + "'" + near());
    ++ti_;
  }
  void expect_end() {
    if (peek().type != Tok::End) fail_line(peek().line, "unexpected '" + peek().text + "'" + near());
  }
  std::string near() const { return peek().type == Tok::End ? " at the end of the tag" : " before '" + peek().text + "'"; }
  std::string name() {
    if (peek().type != Tok::Name) fail_line(peek().line, "expected a name" + near());
    return next().text;
  }

  template <typename T>
  std::unique_ptr<T> make() {
    auto p = std::make_unique<T>();
    p->line = peek().line;
    return p;
  }

  // ---- expressions, lowest precedence first (Jinja2's order)
  ExprP expr() {
    Deeper nest(*this);
    ExprP e = or_expr();
    if (is_name("if")) {
      auto c = make<Cond>();
      ++ti_;
      c->then = std::move(e);
      c->cond = or_expr();
      if (is_name("else")) {
        ++ti_;
        c->otherwise = expr();
      }
      deepen(*c, {dep(c->then.get()), dep(c->cond.get()), dep(c->otherwise.get())});
      return c;
    }
    return e;
  }
  ExprP binary(ExprP l, const std::string& op, ExprP r) {
    auto b = std::make_unique<Binary>();
    b->line = peek().line;
    b->op = op;
    b->l = std::move(l);
    b->r = std::move(r);
    deepen(*b, {dep(b->l.get()), dep(b->r.get())});
    return b;
  }
  ExprP or_expr() {
    ExprP e = and_expr();
    while (is_name("or")) {
      ++ti_;
      e = binary(std::move(e), "or", and_expr());
    }
    return e;
  }
  ExprP and_expr() {
    ExprP e = not_expr();
    while (is_name("and")) {
      ++ti_;
      e = binary(std::move(e), "and", not_expr());
    }
    return e;
  }
  ExprP not_expr() {
    if (is_name("not")) {
      Deeper nest(*this);
      auto u = make<Unary>();
      ++ti_;
      u->op = "not";
      u->e = not_expr();
      deepen(*u, {dep(u->e.get())});
      return u;
    }
    return compare();
  }
  ExprP compare() {
    ExprP e = math1();
    for (;;) {
      const Token& t = peek();
      if (t.type == Tok::Op && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" || t.text == "<=" ||
                                t.text == ">=")) {
        const std::string op = next().text;
        e = binary(std::move(e), op, math1());
      } else if (is_name("in")) {
        ++ti_;
        e = binary(std::move(e), "in", math1());
      } else if (is_name("not") && peek(1).type == Tok::Name && peek(1).text == "in") {
        ti_ += 2;
        e = binary(std::move(e), "not in", math1());
      } else {
        return e;
      }
    }
  }
  ExprP math1() {
    ExprP e = concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = next().text;
      e = binary(std::move(e), op, concat());
    }
    return e;
  }
  ExprP concat() {
    ExprP e = math2();
    while (is_op("~")) {
      ++ti_;
      e = binary(std::move(e), "~", math2());
    }
    return e;
  }
  ExprP math2() {
    ExprP e = pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = next().text;
      e = binary(std::move(e), op, pow());
    }
    return e;
  }
  ExprP pow() {
    ExprP e = unary();
    while (is_op("**")) {
      ++ti_;
      e = binary(std::move(e), "**", unary());
    }
    return e;
  }
  ExprP unary() {
    if (is_op("-") || is_op("+")) {
      Deeper nest(*this);
      auto u = make<Unary>();
      u->op = next().text;
      u->e = unary();
      deepen(*u, {dep(u->e.get())});
      return u;
    }
    return filtered(postfix(primary()));
  }
  // Filters and tests bind tighter than any operator: "a + b | f" is a + (b | f).
  ExprP filtered(ExprP e) {
    for (;;) {
      if (is_op("|")) {
        ++ti_;
        e = filter_call(std::move(e));
      } else if (is_name("is")) {
        auto t = make<TestExpr>();
        ++ti_;
        if (is_name("not")) {
          ++ti_;
          t->negate = true;
        }
        if (peek().type == Tok::Name) t->name = next().text;
        else if (peek().type == Tok::Op && (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">=")))
          t->name = next().text;
        else fail_line(peek().line, "expected a test name after 'is'");
        t->value = std::move(e);
        if (is_op("(")) {
          ++ti_;
          while (!is_op(")")) {
            t->args.push_back(expr());
            if (is_op(",")) ++ti_;
            else if (!is_op(")")) fail_line(peek().line, "expected ',' or ')'");
          }
          ++ti_;
        } else if (starts_primary()) {
          t->args.push_back(postfix(primary()));
        }
        deepen(*t, {dep(t->value.get()), dep(t->args)});
        e = std::move(t);
      } else {
        return e;
      }
    }
  }
  bool starts_primary() const {
    const Token& t = peek();
    if (t.type == Tok::Str || t.type == Tok::Int || t.type == Tok::Float) return true;
    if (t.type == Tok::Op) return t.text == "[" || t.text == "{";
    if (t.type != Tok::Name) return false;
    static const std::set<std::string> kw = {"and", "or", "not", "in", "is", "if", "else", "recursive"};
    return !kw.count(t.text);
  }
  std::unique_ptr<FilterExpr> filter_call(ExprP value) {
    auto f = make<FilterExpr>();
    f->value = std::move(value);
    f->name = name();
    if (is_op("(")) call_args(f->args, f->kwargs);
    deepen(*f, {dep(f->value.get()), dep(f->args), dep(f->kwargs)});
    return f;
  }
  void call_args(std::vector<ExprP>& args, std::vector<std::pair<std::string, ExprP>>& kwargs) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().type == Tok::Name && peek(1).type == Tok::Op && peek(1).text == "=") {
        std::string k = next().text;
        ++ti_;
        kwargs.emplace_back(k, expr());
      } else {
        args.push_back(expr());
      }
      if (is_op(",")) ++ti_;
      else if (!is_op(")")) fail_line(peek().line, "expected ',' or ')' in a call" + near());
    }
    ++ti_;
  }
  ExprP postfix(ExprP e) {
    for (;;) {
      if (is_op(".")) {
        auto a = make<Attr>();
        ++ti_;
        a->obj = std::move(e);
        if (peek().type == Tok::Int) a->name = next().text;  // x.0
        else a->name = name();
        deepen(*a, {dep(a->obj.get())});
        e = std::move(a);
      } else if (is_op("[")) {
        auto s = make<Subscript>();
        ++ti_;
        s->obj = std::move(e);
        if (!is_op(":")) s->key = expr();
        if (is_op(":")) {
          s->is_slice = true;
          s->lo = std::move(s->key);
          ++ti_;
          if (!is_op("]") && !is_op(":")) s->hi = expr();
          if (is_op(":")) {
            ++ti_;
            if (!is_op("]")) s->step = expr();
          }
        }
        expect_op("]");
        deepen(*s, {dep(s->obj.get()), dep(s->key.get()), dep(s->lo.get()), dep(s->hi.get()), dep(s->step.get())});
        e = std::move(s);
      } else if (is_op("(")) {
        auto c = make<Call>();
        c->fn = std::move(e);
        call_args(c->args, c->kwargs);
        deepen(*c, {dep(c->fn.get()), dep(c->args), dep(c->kwargs)});
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprP primary() {
    const Token t = peek();
    if (t.type == Tok::Str) {
      auto l = make<Literal>();
      std::string s;
      while (peek().type == Tok::Str) s += next().text;  // adjacent literals join
      l->v = Value(Json(s));
      return l;
    }
    if (t.type == Tok::Int || t.type == Tok::Float) {
      auto l = make<Literal>();
      ++ti_;
      // Python's integers have no bound; past int64 the literal is a float.
      errno = 0;
      const long long i = t.type == Tok::Int ? std::strtoll(t.text.c_str(), nullptr, 10) : 0;
      if (t.type == Tok::Int && errno == 0) l->v = Value(Json(static_cast<int64_t>(i)));
      else l->v = Value(Json(std::strtod(t.text.c_str(), nullptr)));
      return l;
    }
    if (t.type == Tok::Name) {
      ++ti_;
      auto l = make<Literal>();
      if (t.text == "true" || t.text == "True") l->v = Value(Json(true));
      else if (t.text == "false" || t.text == "False") l->v = Value(Json(false));
      else if (t.text == "none" || t.text == "None") l->v = Value(Json(nullptr));
      else {
        auto n = make<Name>();
        n->name = t.text;
        return n;
      }
      return l;
    }
    if (t.type == Tok::Op && t.text == "(") {
      ++ti_;
      ExprP e = expr();
      if (is_op(",")) {  // a tuple: a list here
        auto l = make<ListLit>();
        l->items.push_back(std::move(e));
        while (is_op(",")) {
          ++ti_;
          if (is_op(")")) break;
          l->items.push_back(expr());
        }
        deepen(*l, {dep(l->items)});
        e = std::move(l);
      }
      expect_op(")");
      return e;
    }
    if (t.type == Tok::Op && t.text == "[") {
      auto l = make<ListLit>();
      ++ti_;
      while (!is_op("]")) {
        l->items.push_back(expr());
        if (is_op(",")) ++ti_;
        else if (!is_op("]")) fail_line(peek().line, "expected ',' or ']'" + near());
      }
      ++ti_;
      deepen(*l, {dep(l->items)});
      return l;
    }
    if (t.type == Tok::Op && t.text == "{") {
      auto d = make<DictLit>();
      ++ti_;
      while (!is_op("}")) {
        ExprP k = expr();
        expect_op(":");
        d->items.emplace_back(std::move(k), expr());
        if (is_op(",")) ++ti_;
        else if (!is_op("}")) fail_line(peek().line, "expected ',' or '}'" + near());
      }
      ++ti_;
      int kv = 0;
      for (const auto& [k, v] : d->items) kv = std::max({kv, dep(k.get()), dep(v.get())});
      deepen(*d, {kv});
      return d;
    }
    fail_line(t.line, t.type == Tok::End ? "unexpected end of the tag" : "unexpected '" + t.text + "'");
  }

  std::vector<Piece> pieces_;
  const Limits& lim_;
  int depth_ = 0;
  size_t pi_ = 0;
  const std::vector<Token>* toks_ = nullptr;
  size_t ti_ = 0;
};

// ============================================================== globals

std::string strftime_now(const std::string& fmt, std::time_t t) {
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  return std::string(buf, n);
}

void add_globals(std::map<std::string, Value>& g, std::time_t now) {
  g["raise_exception"] = Value::function([](Args& a, Kwargs&) -> Value {
    throw TemplateRaised(a.empty() ? std::string("the chat template raised an exception") : to_str(a[0]));
  });
  g["namespace"] = Value::function([](Args& a, Kwargs& kw) {
    Value v;
    v.k = Value::K::Ns;
    v.ns = std::make_shared<Json>(Json::object());
    for (const Value& x : a)
      if (x.is_obj()) *v.ns = x.j;
    for (auto& [k, x] : kw) (*v.ns)[k] = x.k == Value::K::Ns ? *x.ns : x.undef() ? Json(nullptr) : x.j;
    return v;
  });
  g["range"] = Value::function([](Args& a, Kwargs&) {
    int64_t b = 0, e = 0, s = 1;
    if (a.size() == 1) e = as_int(a[0], "range");
    else if (a.size() >= 2) b = as_int(a[0], "range"), e = as_int(a[1], "range");
    if (a.size() >= 3) s = as_int(a[2], "range");
    if (s == 0) fail("range() step must not be zero");
    // Its length first (in 128 bits: no overflow), so range(10**12) fails
    // before it allocates.
    const __int128 span = s > 0 ? static_cast<__int128>(e) - b : static_cast<__int128>(b) - e;
    const __int128 step = s > 0 ? static_cast<__int128>(s) : -static_cast<__int128>(s);
    const __int128 n = span <= 0 ? 0 : (span + step - 1) / step;
    if (tl_budget && n > tl_budget->lim.max_loop_iterations)
      exceeded("range() items exceed the loop limit", static_cast<uint64_t>(tl_budget->lim.max_loop_iterations),
               "max_loop_iterations");
    check_items(static_cast<size_t>(n));
    Json out = Json::array();
    for (__int128 k = 0; k < n; ++k) {
      tick();
      out.push_back(static_cast<int64_t>(b + k * s));
    }
    return Value(out);
  });
  g["dict"] = Value::function([](Args&, Kwargs& kw) {
    Json o = Json::object();
    for (auto& [k, x] : kw) o[k] = x.undef() ? Json(nullptr) : x.j;
    return Value(o);
  });
  g["strftime_now"] = Value::function([now](Args& a, Kwargs&) {
    return Value(Json(strftime_now(a.empty() ? std::string("%Y-%m-%d") : to_str(a[0]), now ? now : std::time(nullptr))));
  });
}

}  // namespace

struct Template::Impl {
  Limits limits;
  Body body;
};

namespace {
// Errors from below (a JSON type error, a number out of range) as ms::Error,
// so a caller that catches ms::Error sees every failure of a template.
template <typename F>
auto as_ms_error(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    fail(std::string("internal error: ") + e.what());
  }
}
}  // namespace

Template::Template(std::string_view source, const Limits& limits) : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  as_ms_error([&] {
    Lexer lex(source);
    Parser p(lex.run(), impl_->limits);
    impl_->body = p.parse();
  });
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

const Limits& Template::limits() const { return impl_->limits; }

std::string Template::render(const Json& context, std::time_t now) const {
  RenderOptions o;
  o.now = now;
  return render(context, o);
}

std::string Template::render(const Json& context, const RenderOptions& options) const {
  const Limits& lim = impl_->limits;
  // (A limit beyond a day is none: the deadline must not overflow the clock.)
  const bool timed = lim.max_render_time.count() > 0 && lim.max_render_time < std::chrono::hours(24);
  Budget budget{lim, options.cancel, timed, std::chrono::steady_clock::now() + (timed ? lim.max_render_time : std::chrono::milliseconds(0))};
  struct Use {  // this thread's budget for the render, restored after it
    Budget* saved;
    explicit Use(Budget* b) : saved(tl_budget) { tl_budget = b; }
    ~Use() { tl_budget = saved; }
  } use(&budget);
  budget.check_time_and_cancel();
  if (!context.is_object()) fail("the context must be an object");
  // Its values are followed recursively (printing, tojson, comparisons).
  if (json_size(context, SIZE_MAX, lim.max_nesting).too_deep)
    exceeded("the context's nesting exceeds", static_cast<uint64_t>(lim.max_nesting), "max_nesting");
  return as_ms_error([&] {
    Context c;
    c.frames.emplace_back();
    add_globals(c.frames.back(), options.now);
    for (auto it = context.begin(); it != context.end(); ++it) c.frames.back()[it.key()] = Value(it.value());
    c.frames.emplace_back();  // the template's own top-level names
    std::string out;
    render_body(impl_->body, c, out);
    return out;
  });
}

}  // namespace ms::jinja
