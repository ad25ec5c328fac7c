// The renderer of jinja.h: a lexer that cuts the source into text and tags
// (applying "-", trim_blocks and lstrip_blocks), a recursive-descent parser
// into a tree of statements and expressions, and a tree-walking evaluator
// whose semantics follow Python Jinja2 (truthiness, str(), slicing, ...).
// This file holds Template; the engine's parts, in namespace detail, are
//   jinja_value.*     values, the render's budget (Limits), conversions
//   jinja_builtins.*  methods, tests, filters and globals
//   jinja_lexer.*     source -> pieces of text and tokens
//   jinja_parser.*    pieces -> tree
//   jinja_nodes.*     the tree's node kinds, their evaluation and rendering
#include "tokenizer/jinja.h"

#include <chrono>
#include <cstdint>
#include <exception>
#include <new>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_nodes.h"
#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_value.h"

namespace ms::jinja {

namespace detail {

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

}  // namespace detail

using detail::add_globals;
using detail::as_ms_error;
using detail::Body;
using detail::Budget;
using detail::Context;
using detail::exceeded;
using detail::fail;
using detail::json_size;
using detail::lex;
using detail::parse;
using detail::render_body;
using detail::tl_budget;
using detail::Value;

struct Template::Impl {
  Limits limits;
  Body body;
};

Template::Template(std::string_view source, const Limits& limits) : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  as_ms_error([&] { impl_->body = parse(lex(source), impl_->limits); });
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
