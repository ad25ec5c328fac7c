#include "cli/chat_prompt.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "server/api.h"
#include "server/chat.h"
#include "util/error.h"

namespace ms::cli {

std::string chat_prompt(const Tokenizer& tok, const std::string& user_text, const std::string& format) {
  const server::ChatRenderer renderer(tok, format);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"}, {"content", user_text}});
  try {
    return renderer.render(messages, true);
  } catch (const server::ApiError& e) {  // the server's HTTP error; here a plain one
    throw Error(std::string("--chat: ") + e.what() + " (" + renderer.description() + ")");
  }
}

void print_reply(const HarmonyParser::Out& piece, bool quiet) {
  if (!piece.reasoning.empty() && !quiet) std::fputs(piece.reasoning.c_str(), stderr);
  for (const HarmonyToolCall& c : piece.tool_calls)
    std::fprintf(stderr, "\nmoestream: the model called the tool %s with: %s\n", c.recipient.c_str(),
                 c.arguments.c_str());
  if (!piece.content.empty()) std::fputs(piece.content.c_str(), stdout);
  std::fflush(stderr);
  std::fflush(stdout);
}

}  // namespace ms::cli
