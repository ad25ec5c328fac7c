// The built-ins of the chat-template engine (jinja_builtins.h): methods of
// strings, mappings and lists, tests, filters and globals, with the
// semantics of Python and Jinja2. Being free functions, they reach the
// render's budget through tl_budget (jinja_value.h).
#include "tokenizer/jinja_builtins.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "util/text_search.h"

namespace ms::jinja::detail {

// ============================================================== methods

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

namespace {

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

}  // namespace

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

// ============================================================== globals

namespace {

std::string strftime_now(const std::string& fmt, std::time_t t) {
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  return std::string(buf, n);
}

}  // namespace

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

}  // namespace ms::jinja::detail
