#include "server/tool_calls.h"

#include "grammar/json_schema.h"
#include "server/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace ms::server {

nlohmann::json openai_tool_call(const HarmonyToolCall& call, const std::string& call_id) {
  static const std::string kNamespace = "functions.";
  std::string name = call.recipient;
  if (name.rfind(kNamespace, 0) == 0 && name.size() > kNamespace.size()) name.erase(0, kNamespace.size());
  return {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", call.arguments}}}};
}

nlohmann::json openai_parsed_tool_call(const ParsedToolCall& call, const std::string& call_id) {
  return {{"id", call_id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

ModelToolCalls tool_calls_of(const Tokenizer& tok) {
  const Vocab& v = tok.vocab();
  int32_t qwen = -1, mistral = -1;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.tokens[i] == "<tool_call>") qwen = static_cast<int32_t>(i);
    if (v.tokens[i] == "[TOOL_CALLS]") mistral = static_cast<int32_t>(i);
  }
  ModelToolCalls m;
  m.format = detect_tool_call_format(v.chat_template, harmony_markers(tok).has_value(), qwen >= 0, mistral >= 0);
  const int32_t marker = m.format == ToolCallFormat::Mistral ? mistral
                         : m.format == ToolCallFormat::QwenJson || m.format == ToolCallFormat::QwenXml ? qwen
                                                                                                        : -1;
  m.marker_is_control = marker >= 0 && v.types[static_cast<size_t>(marker)] == TokenType::Control;
  return m;
}

namespace {

using ojson = nlohmann::ordered_json;

// `$ref`s of a tool's parameters point into the parameters ("#/$defs/x"):
// moved under "#/$defs/<where>" of the combined schema, they are rewritten so.
ojson rebased(const ojson& s, const std::string& where) {
  if (s.is_array()) {
    ojson out = ojson::array();
    for (const ojson& x : s) out.push_back(rebased(x, where));
    return out;
  }
  if (!s.is_object()) return s;
  ojson out = ojson::object();
  for (const auto& [k, v] : s.items()) {
    if (k == "$ref" && v.is_string() && !v.get<std::string>().empty() && v.get<std::string>()[0] == '#')
      out[k] = "#/$defs/" + where + v.get<std::string>().substr(1);
    else out[k] = rebased(v, where);
  }
  return out;
}

bool compiles(const ojson& schema) {
  try {
    grammar::compile_json_schema(schema);
    return true;
  } catch (const grammar::SchemaError&) {
    return false;
  }
}

ojson calls_schema(const ojson& alternatives, const ojson& defs, bool parallel) {
  ojson list = {{"type", "array"}, {"items", {{"anyOf", alternatives}}}, {"minItems", 1}};
  if (!parallel) list["maxItems"] = 1;
  ojson top = {{"type", "object"},
               {"properties", {{"tool_calls", list}}},
               {"required", ojson::array({"tool_calls"})},
               {"additionalProperties", false}};
  if (!defs.empty()) top["$defs"] = defs;
  return top;
}

}  // namespace

nlohmann::ordered_json generic_tool_call_schema(const nlohmann::json& tools, const std::string& name, bool parallel) {
  const ojson any_object = {{"type", "object"}};
  ojson alternatives = ojson::array(), loose = ojson::array(), defs = ojson::object();
  for (size_t i = 0; i < tools.size(); ++i) {
    const nlohmann::json& fn = tools[i].contains("function") ? tools[i]["function"] : tools[i];
    if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) continue;
    const std::string fname = fn["name"].get<std::string>();
    if (!name.empty() && fname != name) continue;
    ojson args = {{"type", "object"}, {"properties", ojson::object()}, {"additionalProperties", false}};
    const std::string where = "tool" + std::to_string(i);
    if (fn.contains("parameters") && fn["parameters"].is_object()) {
      const ojson params = rebased(ojson::parse(fn["parameters"].dump()), where);
      // Alone first: a schema the compiler refuses leaves that tool's arguments free.
      const ojson probe = calls_schema(
          ojson::array({{{"type", "object"},
                         {"properties", {{"name", {{"const", fname}}}, {"arguments", {{"$ref", "#/$defs/" + where}}}}},
                         {"required", ojson::array({"name", "arguments"})},
                         {"additionalProperties", false}}}),
          ojson{{where, params}}, parallel);
      if (compiles(probe)) {
        defs[where] = params;
        args = {{"$ref", "#/$defs/" + where}};
      } else {
        args = any_object;
      }
    }
    auto call = [&](const ojson& a) {
      return ojson{{"type", "object"},
                   {"properties", {{"name", {{"const", fname}}}, {"arguments", a}}},
                   {"required", ojson::array({"name", "arguments"})},
                   {"additionalProperties", false}};
    };
    alternatives.push_back(call(args));
    loose.push_back(call(any_object));
  }
  if (alternatives.empty()) alternatives.push_back(ojson{{"type", "object"}});  // (api.cpp checks the names)
  ojson schema = calls_schema(alternatives, defs, parallel);
  // Together they may pass a limit each alone kept: then every tool's arguments are free.
  if (!compiles(schema)) schema = calls_schema(loose.empty() ? alternatives : loose, ojson::object(), parallel);
  return schema;
}

std::string generic_tools_prompt(const nlohmann::json& tools) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& t : tools) list.push_back(t.contains("function") ? t["function"] : t);
  return "You can call these tools; each one's \"parameters\" is the JSON Schema of its arguments:\n" +
         list.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n\nTo call tools, reply with only a JSON object of this form and nothing else:\n"
         "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<its arguments>}}]}\n"
         "Otherwise, reply normally.";
}

ToolCallPlan plan_tool_calls(const ModelToolCalls& model, CompletionRequest& r, const std::string& prompt) {
  const ToolCallFormat model_format = model.format;
  ToolCallPlan p;
  if (!r.chat || r.tools.empty() || r.tool_choice == "none") return p;
  p.first_only = !r.parallel_tool_calls;
  if (model_format == ToolCallFormat::Harmony) return p;
  p.tools = r.tools;
  const bool forced = r.tool_choice == "required" || r.tool_choice == "function";
  if (model_format == ToolCallFormat::None) {
    // No tool syntax in the template: the generic format, described in the
    // system prompt (server/chat.cpp); a forced call is the answer's grammar.
    p.format = ToolCallFormat::Generic;
    if (forced) {
      if (r.grammar)
        throw ApiError(400,
                       "'response_format' cannot be combined with tool_choice '" + r.tool_choice +
                           "' for this model: its tool calls are themselves a JSON answer under a grammar",
                       "invalid_request_error", "response_format");
      const ojson schema =
          generic_tool_call_schema(r.tools, r.tool_choice == "function" ? r.tool_choice_name : "", r.parallel_tool_calls);
      try {
        r.grammar = std::make_shared<const grammar::Grammar>(grammar::compile_json_schema(schema));
      } catch (const grammar::SchemaError& e) {
        // Even with free arguments: the tools' names and count pass a limit.
        throw ApiError(400, std::string("'tools': too many or too large for a forced call's grammar: ") + e.what(),
                       "invalid_request_error", "tools");
      }
    }
    return p;
  }
  p.format = model_format;
  p.render_special = model.marker_is_control;
  if (forced) {
    p.prefill = tool_call_prefill(model_format, r.tool_choice == "function" ? r.tool_choice_name : "");
    // A template that opens the answer's <think> (Qwen3.5): the reasoning is
    // closed first, or the call would be written as reasoning.
    p.prompt_suffix = (prompt_opens_think(prompt) ? "\n</think>\n\n" : "") + p.prefill;
  }
  return p;
}

}  // namespace ms::server
