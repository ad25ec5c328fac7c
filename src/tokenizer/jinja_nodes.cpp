// The evaluation of expressions and the rendering of statements of the
// chat-template engine (jinja_nodes.h): a tree walk, each step through a
// Nest that bounds its depth and ticks the render's budget.
#include "tokenizer/jinja_nodes.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tokenizer/jinja_builtins.h"

namespace ms::jinja::detail {

namespace {

// Appends rendered text to `out` (the result, or the text of a block or a
// macro), within Limits::max_output_bytes.
void emit(std::string& out, const std::string& text) {
  if (tl_budget && out.size() + text.size() > tl_budget->lim.max_output_bytes)
    exceeded("rendered bytes exceed", tl_budget->lim.max_output_bytes, "max_output_bytes");
  out += text;
}

// A filter's or an operator's result; its error, if any, names the
// expression's line (limits, cancellation and raise_exception go out as
// they are, as does an error that already names a line).
template <class F>
Value at_line(int line, F&& compute) {
  try {
    return compute();
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

}  // namespace

Flow render_body(const Body& body, Context& c, std::string& out) {
  for (const NodeP& n : body) {
    const Flow f = n->render(c, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

// ============================================================== expressions

Value Literal::do_eval(Context&) const { return v; }

Value Name::do_eval(Context& c) const { return c.lookup(name); }

Value ListLit::do_eval(Context& c) const {
  Json a = Json::array();
  for (const ExprP& e : items) {
    Value v = e->eval(c);
    a.push_back(v.k == Value::K::Ns ? *v.ns : v.undef() ? Json(nullptr) : std::move(v.j));
  }
  count_built(a);
  return Value(a);
}

Value DictLit::do_eval(Context& c) const {
  Json o = Json::object();
  for (const auto& [k, v] : items) {
    Value kv = k->eval(c), vv = v->eval(c);
    o[to_str(kv)] = vv.undef() ? Json(nullptr) : vv.j;
  }
  count_built(o);
  return Value(o);
}

Value Attr::do_eval(Context& c) const { return attribute(obj->eval(c), name); }

Value Subscript::do_eval(Context& c) const {
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

Value Call::do_eval(Context& c) const {
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

Value FilterExpr::apply(Context& c, const Value& v) const {
  Args a;
  Kwargs kw;
  for (const ExprP& e : args) a.push_back(e->eval(c));
  for (const auto& [k, e] : kwargs) kw.emplace_back(k, e->eval(c));
  return at_line(line, [&] {
    Value r = run_filter(name, v, a, kw);
    count_built(r.k == Value::K::Ns ? *r.ns : r.j);
    return r;
  });
}

Value FilterExpr::do_eval(Context& c) const { return apply(c, value->eval(c)); }

Value TestExpr::do_eval(Context& c) const {
  Value v = value->eval(c);
  Args a;
  for (const ExprP& e : args) a.push_back(e->eval(c));
  return Value(Json(run_test(name, v, a) != negate));
}

Value Unary::do_eval(Context& c) const {
  Value v = e->eval(c);
  if (op == "not") return Value(Json(!truthy(v)));
  if (op == "-") {
    if (v.is_int() && v.j.get<int64_t>() != INT64_MIN) return Value(Json(-v.j.get<int64_t>()));
    return Value(Json(-as_num(v)));
  }
  return v;  // unary +
}

namespace {

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

}  // namespace

Value Binary::do_eval(Context& c) const {
  if (op == "and") {
    Value a = l->eval(c);
    return truthy(a) ? r->eval(c) : a;
  }
  if (op == "or") {
    Value a = l->eval(c);
    return truthy(a) ? a : r->eval(c);
  }
  Value a = l->eval(c), b = r->eval(c);
  return at_line(line, [&] {
    Value v = apply(a, b);
    count_built(v.j);
    return v;
  });
}

Value Binary::apply(const Value& a, const Value& b) const {
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
    // Nothing to repeat: '' * 10**9 must not loop a billion times to build "".
    if (s.str().empty() || times == 0) return Value(Json(std::string()));
    // The size before the loop: 'x' * 10**9 fails at once.
    if (static_cast<uint64_t>(times) > SIZE_MAX / s.str().size()) check_text_size(SIZE_MAX);
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

Value Cond::do_eval(Context& c) const {
  if (truthy(cond->eval(c))) return then->eval(c);
  return otherwise ? otherwise->eval(c) : Value{};
}

// ============================================================== statements

Flow TextNode::do_render(Context&, std::string& out) const {
  emit(out, text);
  return Flow::Normal;
}

Flow OutputNode::do_render(Context& c, std::string& out) const {
  emit(out, to_str(e->eval(c)));
  return Flow::Normal;
}

Flow IfNode::do_render(Context& c, std::string& out) const {
  for (const auto& [cond, body] : branches)
    if (!cond || truthy(cond->eval(c))) return render_body(body, c, out);
  return Flow::Normal;
}

Flow ForNode::do_render(Context& c, std::string& out) const {
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
    // and a loop may run a million times. The keys are distinct, so they are
    // appended (ordered_map's emplace would search the keys before each).
    Json loop(Json::value_t::object);
    Json::object_t& fields = loop.get_ref<Json::object_t&>();
    fields.reserve(9);
    fields.emplace_back("index", i + 1);
    fields.emplace_back("index0", i);
    fields.emplace_back("revindex", n - i);
    fields.emplace_back("revindex0", n - i - 1);
    fields.emplace_back("first", i == 0);
    fields.emplace_back("last", i == n - 1);
    fields.emplace_back("length", n);
    if (i > 0) fields.emplace_back("previtem", items[static_cast<size_t>(i - 1)]);
    if (i + 1 < n) fields.emplace_back("nextitem", items[static_cast<size_t>(i + 1)]);
    c.set("loop", Value(std::move(loop)));
    bind(c, items[static_cast<size_t>(i)]);
    const Flow f = render_body(body, c, out);
    c.frames.pop_back();
    if (f == Flow::Break) break;
  }
  return Flow::Normal;
}

void ForNode::count_iteration() {
  if (tl_budget && ++tl_budget->iterations > tl_budget->lim.max_loop_iterations)
    exceeded("for-loop iterations exceed", static_cast<uint64_t>(tl_budget->lim.max_loop_iterations),
             "max_loop_iterations");
}

void ForNode::bind(Context& c, const Json& x) const {
  if (vars.size() == 1) {
    c.set(vars[0], Value(x));
    return;
  }
  if (!x.is_array() || x.size() != vars.size())
    fail("line " + std::to_string(line) + ": cannot unpack " + data_str(x, true) + " into " +
         std::to_string(vars.size()) + " names");
  for (size_t k = 0; k < vars.size(); ++k) c.set(vars[k], Value(x[k]));
}

Flow SetNode::do_render(Context& c, std::string& out) const {
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

Flow MacroNode::do_render(Context& c, std::string&) const {
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

Flow FlowNode::do_render(Context&, std::string&) const { return flow; }

Flow FilterBlock::do_render(Context& c, std::string& out) const {
  std::string text;
  render_body(body, c, text);
  Value v{Json(text)};
  for (const auto& f : filters) v = f->apply(c, v);
  emit(out, to_str(v));
  return Flow::Normal;
}

}  // namespace ms::jinja::detail
