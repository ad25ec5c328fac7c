// Internal to the chat-template engine (src/tokenizer/jinja*.{h,cpp}); its
// interface is jinja.h. The built-ins a template calls: the methods of
// strings, mappings and lists ("x.strip()"), tests ("x is defined"), filters
// ("x | tojson") and the globals (raise_exception, namespace, range, dict,
// strftime_now). Defined in jinja_builtins.cpp.
#pragma once
#include <ctime>
#include <map>
#include <string>

#include "tokenizer/jinja_value.h"

namespace ms::jinja::detail {

// A method of a string, mapping or list, bound to its value; undefined if none.
Value method(const Value& self, const std::string& name);
// v.name: a mapping's item or a namespace's attribute, else the method of
// that name (undefined if none).
Value attribute(const Value& v, const std::string& name);
// "v is name(a...)"; an unknown test is an error.
bool run_test(const std::string& name, const Value& v, Args& a);
// "v | name(a..., kw...)"; an unknown filter is an error.
Value run_filter(const std::string& name, const Value& v, Args& a, Kwargs& kw);
// The globals every render starts with; strftime_now formats `now` (0: the
// current time).
void add_globals(std::map<std::string, Value>& g, std::time_t now);

}  // namespace ms::jinja::detail
