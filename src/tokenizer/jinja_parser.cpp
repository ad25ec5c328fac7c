// The parser of the chat-template engine (jinja_parser.h): recursive
// descent over the lexer's pieces, statements by their keyword and
// expressions by Jinja2's precedence, every level of nesting bounded by
// Limits::max_nesting.
#include "tokenizer/jinja_parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <set>
#include <string>

namespace ms::jinja::detail {

namespace {

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

}  // namespace

Body parse(std::vector<Piece> pieces, const Limits& limits) { return Parser(std::move(pieces), limits).parse(); }

}  // namespace ms::jinja::detail
