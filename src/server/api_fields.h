// Small checks shared by the request translators (server/responses_api.h,
// messages_api.h): what a JSON value is called in an error, a field that is
// present and not null, and the 400 that names a field.
#pragma once
#include <cctype>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api.h"

namespace ms::server::fields {

using json = nlohmann::ordered_json;

inline const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a number";
  }
}

[[noreturn]] inline void bad(const std::string& field, const std::string& what) {
  throw ApiError(400, "'" + field + "' " + what, "invalid_request_error", field);
}

// A present, non-null member, or null.
inline const json* find(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// A string member (absent or null: nullptr), else a 400 naming `where`.
inline const std::string* string_field(const json& obj, const char* name, const std::string& where) {
  const json* v = find(obj, name);
  if (!v) return nullptr;
  if (!v->is_string()) bad(where, std::string("must be a string, not ") + type_name(*v));
  return v->get_ptr<const std::string*>();
}

inline bool bool_field(const json& obj, const char* name, const std::string& where, bool dflt) {
  const json* v = find(obj, name);
  if (!v) return dflt;
  if (!v->is_boolean()) bad(where, std::string("must be a boolean, not ") + type_name(*v));
  return v->get<bool>();
}

// Function names as chat completions take them (server/api.cpp).
inline bool valid_function_name(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.' && c != ':') return false;
  return true;
}

// The tool call with this id among the chat messages' assistant turns (the
// newest first; their `tool_calls`), or null: what a tool's result answers.
inline const json* tool_call_with_id(const json& messages, const std::string& id) {
  for (auto m = messages.rbegin(); m != messages.rend(); ++m) {
    if (!m->contains("tool_calls")) continue;
    for (const json& c : (*m)["tool_calls"])
      if (c.value("id", "") == id) return &c;
  }
  return nullptr;
}

}  // namespace ms::server::fields
