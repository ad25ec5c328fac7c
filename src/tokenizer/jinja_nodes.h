// Internal to the chat-template engine (src/tokenizer/jinja*.{h,cpp}); its
// interface is jinja.h. A parsed template: a tree of expressions (Expr) and
// statements (Node) built by the parser (jinja_parser.h), and the Context
// they evaluate and render in. Each kind's evaluation or rendering is in
// jinja_nodes.cpp.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace ms::jinja::detail {

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

// Renders the statements of `body` in order, until one breaks or continues
// a loop (returned to the loop).
Flow render_body(const Body& body, Context& c, std::string& out);

// ============================================================== expressions

struct Literal : Expr {
  Value v;
  Value do_eval(Context&) const override;
};

struct Name : Expr {
  std::string name;
  Value do_eval(Context& c) const override;
};

struct ListLit : Expr {
  std::vector<ExprP> items;
  Value do_eval(Context& c) const override;
};

struct DictLit : Expr {
  std::vector<std::pair<ExprP, ExprP>> items;
  Value do_eval(Context& c) const override;
};

struct Attr : Expr {
  ExprP obj;
  std::string name;
  Value do_eval(Context& c) const override;
};

struct Subscript : Expr {
  ExprP obj, key, lo, hi, step;
  bool is_slice = false;
  Value do_eval(Context& c) const override;
};

struct Call : Expr {
  ExprP fn;
  std::vector<ExprP> args;
  std::vector<std::pair<std::string, ExprP>> kwargs;
  Value do_eval(Context& c) const override;
};

struct FilterExpr : Expr {
  ExprP value;  // null in a {% filter %} block (the body is the value)
  std::string name;
  std::vector<ExprP> args;
  std::vector<std::pair<std::string, ExprP>> kwargs;
  Value apply(Context& c, const Value& v) const;
  Value do_eval(Context& c) const override;
};

struct TestExpr : Expr {
  ExprP value;
  std::string name;
  std::vector<ExprP> args;
  bool negate = false;
  Value do_eval(Context& c) const override;
};

struct Unary : Expr {
  std::string op;
  ExprP e;
  Value do_eval(Context& c) const override;
};

struct Binary : Expr {
  std::string op;
  ExprP l, r;
  Value do_eval(Context& c) const override;
  Value apply(const Value& a, const Value& b) const;
};

struct Cond : Expr {
  ExprP then, cond, otherwise;
  Value do_eval(Context& c) const override;
};

// ============================================================== statements

struct TextNode : Node {
  std::string text;
  Flow do_render(Context&, std::string& out) const override;
};

struct OutputNode : Node {
  ExprP e;
  Flow do_render(Context& c, std::string& out) const override;
};

struct IfNode : Node {
  std::vector<std::pair<ExprP, Body>> branches;  // a null condition: else
  Flow do_render(Context& c, std::string& out) const override;
};

struct ForNode : Node {
  std::vector<std::string> vars;
  ExprP iter, filter;
  Body body, else_body;
  Flow do_render(Context& c, std::string& out) const override;
  static void count_iteration();
  void bind(Context& c, const Json& x) const;
};

struct SetNode : Node {
  std::vector<std::string> names;  // one, or several for tuple unpacking
  std::string attr;                // "set ns.attr = ..."
  ExprP value;
  Body block;                      // {% set x %}...{% endset %}
  std::vector<std::unique_ptr<FilterExpr>> block_filters;
  Flow do_render(Context& c, std::string& out) const override;
};

struct MacroNode : Node {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprP> defaults;  // per param (null: none)
  Body body;
  Flow do_render(Context& c, std::string&) const override;
};

struct FlowNode : Node {
  Flow flow;
  Flow do_render(Context&, std::string&) const override;
};

struct FilterBlock : Node {
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
  Flow do_render(Context& c, std::string& out) const override;
};

}  // namespace ms::jinja::detail
