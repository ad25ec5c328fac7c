// A small Jinja renderer for chat templates (tokenizer.chat_template in
// GGUF files), written to render what the real templates of Qwen3,
// Qwen3.5/3.6, Mistral/Mixtral, Llama 3 and their relatives use, the way
// Hugging Face transformers renders them: Jinja2 with trim_blocks and
// lstrip_blocks, the loopcontrols extension, and the globals
// raise_exception(msg) and strftime_now(fmt); tojson as transformers
// defines it (json.dumps: ", " and ": " separators, keys in their order,
// non-ASCII kept).
//
// Covered: {{ }}, {% %}, {# #} with "-" whitespace control; if/elif/else,
// for (with "k, v" unpacking, a filter condition, else, loop.index/index0/
// first/last/length/revindex/previtem/nextitem, break/continue), set (also
// ns.attr and block set), macro (with defaults) and calls, filter blocks;
// literals (strings, numbers, lists, dicts), attribute and subscript access,
// slices, arithmetic, ~, comparisons, in / not in, and / or / not, a if c
// else b; the common filters (trim, length, tojson, string, items, list,
// join, default, first, last, lower, upper, replace, selectattr, rejectattr,
// map, unique, reverse, int, float, abs, capitalize, title, safe, indent,
// dictsort, sum, min, max, round, wordcount), tests (defined, undefined,
// none, string, number, integer, float, boolean, mapping, iterable,
// sequence, true, false, equalto/eq/==, ne, odd, even, in) and string,
// dict and list methods (strip, split, startswith, replace, items, get, ...).
//
// Values are JSON (nlohmann::ordered_json, so objects keep their order), plus
// namespaces and callables. An unknown construct is a parse error with its
// line, never silently wrong output.
//
// A template comes from a model file, so it is untrusted code: every cost it
// can run up is bounded by Limits (issue #28). Recursion, deep nesting, huge
// loops, huge strings and endless renders end in a LimitExceeded error naming
// the limit, never in a stack overflow, a hang or gigabytes of memory.
// Problems in the source itself (nesting too deep) are found when the
// Template is constructed, so at model load, not at the first request. The
// parser and the renderer recurse only under these depth guards.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace ms::jinja {

using Json = nlohmann::ordered_json;

// raise_exception(message) in a template: the template refused its input.
struct TemplateRaised : Error {
  using Error::Error;
};

// A limit of Limits was exceeded. The message names it, e.g.
// "chat template: for-loop iterations exceed 1000000 (Limits::max_loop_iterations)".
struct LimitExceeded : Error {
  using Error::Error;
};

// The render was abandoned because RenderOptions::cancel was set.
struct Cancelled : Error {
  using Error::Error;
};

// What one template may cost. The defaults are far above what real chat
// templates need (Qwen3, Qwen3.5, Mixtral, gpt-oss, ... with 200-message
// conversations and tools use a few percent of them) and low enough that a
// hostile template fails in well under a second and some hundred MB.
struct Limits {
  // Parse time: blocks inside blocks plus expressions inside expressions
  // (parentheses, operands, chains of operators or filters: each link nests),
  // and at render time the nesting of lists/mappings in the context and in
  // values the template builds.
  int max_nesting = 256;
  // Render time: macro calls inside macro calls (recursion).
  int max_call_depth = 64;
  // Render time: nested evaluation steps, macro calls included; bounds the
  // renderer's stack (some hundreds of bytes a step in a release build:
  // 2000 steps fit in 1 MiB of stack).
  int max_render_depth = 2000;
  // Render time: for-loop iterations, all loops of one render together.
  int64_t max_loop_iterations = 1'000'000;
  // Render time: the rendered text, and any text a block or macro renders.
  size_t max_output_bytes = size_t{16} << 20;
  // Render time: any one string, list or mapping built (an estimate of its
  // memory for lists and mappings): repetition, concatenation, join, ...
  size_t max_value_bytes = size_t{16} << 20;
  // Render time: the estimated bytes of all values built in one render
  // together; bounds the memory a render can hold and the work it does.
  size_t max_built_bytes = size_t{512} << 20;
  // Render time: wall time of one render, checked cooperatively between
  // evaluation steps and inside long built-in loops. Zero: no limit.
  std::chrono::milliseconds max_render_time{5000};
};

// Per-render settings.
struct RenderOptions {
  // What strftime_now formats (0: the current time; tests fix it).
  std::time_t now = 0;
  // When not null and set (by another thread: a server shutting down, a
  // client gone), the render stops at its next check (as often as the time
  // limit is checked) and throws Cancelled. The flag must outlive render().
  const std::atomic<bool>* cancel = nullptr;
};

class Template {
 public:
  // Parses; throws ms::Error "jinja: line N: ..." for a syntax error or a
  // construct this renderer does not support, LimitExceeded for nesting
  // deeper than limits.max_nesting. The limits also govern every render.
  explicit Template(std::string_view source, const Limits& limits = Limits());
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `context` (an object: its keys are the template's
  // variables). Throws TemplateRaised for raise_exception, LimitExceeded when
  // a limit is exceeded, Cancelled when options.cancel was set, ms::Error for
  // other errors (a type error, calling an unknown function, ...). Safe to
  // call from several threads at once.
  std::string render(const Json& context, const RenderOptions& options) const;
  // The same with `now` for strftime_now (0: the current time).
  std::string render(const Json& context, std::time_t now = 0) const;

  const Limits& limits() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ms::jinja
