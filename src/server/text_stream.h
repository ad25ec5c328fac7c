// Generated text on its way to a client, piece by piece: stop strings (never
// emitted, even when a piece ends with the first half of one) and the split
// of <think>...</think> reasoning from the answer.
#pragma once
#include <string>
#include <vector>

#include "util/text_search.h"

namespace ms::server {

// Holds back text that could be the start of a stop string until the next
// pieces decide it.
class StopMatcher {
 public:
  explicit StopMatcher(const std::vector<std::string>& stops) : stops_(stops.begin(), stops.end()) {}
  // Adds text; returns what can be emitted now. After a stop string is found,
  // stopped() is true, the text before it has been returned, and the rest is
  // dropped.
  std::string push(const std::string& text);
  // Everything held back (at the end of generation, when no stop came).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  // Linear-time searches: a client's stop strings may be long.
  std::vector<TextSearch> stops_;
  std::string held_;
  bool stopped_ = false;
};

// Separates reasoning from the answer: text between <think> and </think>
// goes to `reasoning`, the rest to `content`. Whitespace right after either
// tag is dropped. A prompt that already opened <think> (templates that start
// the assistant's turn with it) starts in_reasoning.
class ThinkSplitter {
 public:
  struct Out {
    std::string content, reasoning;
  };
  explicit ThinkSplitter(bool in_reasoning = false) : in_reasoning_(in_reasoning), strip_ws_(in_reasoning) {}
  Out push(const std::string& text);
  Out flush();

 private:
  void emit(Out& out, const std::string& s);
  bool in_reasoning_;
  bool strip_ws_;
  std::string held_;
};

// Whether a rendered chat prompt ends inside an open <think> block (the
// template put "<think>\n" at the start of the assistant's turn).
bool prompt_opens_think(const std::string& prompt);

}  // namespace ms::server
