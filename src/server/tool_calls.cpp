#include "server/tool_calls.h"

namespace ms::server {

nlohmann::json openai_tool_call(const HarmonyToolCall& call, const std::string& call_id) {
  static const std::string kNamespace = "functions.";
  std::string name = call.recipient;
  if (name.rfind(kNamespace, 0) == 0 && name.size() > kNamespace.size()) name.erase(0, kNamespace.size());
  return {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", call.arguments}}}};
}

}  // namespace ms::server
