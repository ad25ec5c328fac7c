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
#pragma once
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

class Template {
 public:
  // Parses; throws ms::Error "jinja: line N: ..." for a syntax error or a
  // construct this renderer does not support.
  explicit Template(std::string_view source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `context` (an object: its keys are the template's
  // variables). Throws TemplateRaised for raise_exception, ms::Error for
  // other errors (a type error, calling an unknown function, ...).
  // `now` is what strftime_now formats (0: the current time; tests fix it).
  std::string render(const Json& context, std::time_t now = 0) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ms::jinja
