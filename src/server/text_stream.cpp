#include "server/text_stream.h"

#include <algorithm>

namespace ms::server {

std::string StopMatcher::push(const std::string& text) {
  if (stopped_) return {};
  held_ += text;
  size_t first = std::string::npos;
  for (const TextSearch& s : stops_) first = std::min(first, s.find(held_));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  size_t keep = 0;
  for (const TextSearch& s : stops_) keep = std::max(keep, s.pending_prefix(held_));
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  if (!stopped_) out.swap(held_);
  held_.clear();
  return out;
}

void ThinkSplitter::emit(Out& out, const std::string& s) {
  size_t b = 0;
  if (strip_ws_) {
    while (b < s.size() && (s[b] == ' ' || s[b] == '\n' || s[b] == '\r' || s[b] == '\t')) ++b;
    if (b < s.size()) strip_ws_ = false;
  }
  (in_reasoning_ ? out.reasoning : out.content) += s.substr(b);
}

ThinkSplitter::Out ThinkSplitter::push(const std::string& text) {
  static const std::string kOpen = "<think>", kClose = "</think>";
  Out out;
  held_ += text;
  for (;;) {
    const std::string& tag = in_reasoning_ ? kClose : kOpen;
    const size_t at = held_.find(tag);
    if (at == std::string::npos) break;
    emit(out, held_.substr(0, at));
    held_.erase(0, at + tag.size());
    in_reasoning_ = !in_reasoning_;
    strip_ws_ = true;
  }
  static const TextSearch kOpenSearch(kOpen), kCloseSearch(kClose);
  const size_t keep = (in_reasoning_ ? kCloseSearch : kOpenSearch).pending_prefix(held_);
  emit(out, held_.substr(0, held_.size() - keep));
  held_.erase(0, held_.size() - keep);
  return out;
}

ThinkSplitter::Out ThinkSplitter::flush() {
  Out out;
  emit(out, held_);
  held_.clear();
  return out;
}

bool prompt_opens_think(const std::string& prompt) {
  const size_t open = prompt.rfind("<think>");
  if (open == std::string::npos) return false;
  return prompt.find("</think>", open) == std::string::npos;
}

}  // namespace ms::server
