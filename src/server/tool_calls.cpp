#include "server/tool_calls.h"

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

ToolCallPlan plan_tool_calls(const ModelToolCalls& model, const CompletionRequest& r, const std::string& prompt) {
  const ToolCallFormat model_format = model.format;
  ToolCallPlan p;
  if (!r.chat || r.tools.empty() || r.tool_choice == "none") return p;
  p.first_only = !r.parallel_tool_calls;
  if (model_format == ToolCallFormat::Harmony || model_format == ToolCallFormat::None) return p;
  p.format = model_format;
  p.tools = r.tools;
  p.render_special = model.marker_is_control;
  if (r.tool_choice == "required" || r.tool_choice == "function") {
    p.prefill = tool_call_prefill(model_format, r.tool_choice == "function" ? r.tool_choice_name : "");
    // A template that opens the answer's <think> (Qwen3.5): the reasoning is
    // closed first, or the call would be written as reasoning.
    p.prompt_suffix = (prompt_opens_think(prompt) ? "\n</think>\n\n" : "") + p.prefill;
  }
  return p;
}

}  // namespace ms::server
