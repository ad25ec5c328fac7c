// Random walks of a grammar's matcher: the texts constrained sampling could
// produce, for checking them against a validator.
#pragma once
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "grammar/matcher.h"

namespace ms::grammar::testing {

// A random allowed byte at each step (ASCII mostly, so texts stay
// readable), ending where the grammar may end with a probability that grows
// with the length; `greedy`: the smallest allowed byte instead, ending as
// soon as it may. nullopt when the walk ran past max_steps without ending
// (not a failure of the grammar). A step with no byte allowed where the
// text cannot end is a dead end: *dead_end is set.
inline std::optional<std::string> walk(const Grammar& g, std::mt19937& rng, bool greedy, bool* dead_end,
                                       int max_steps = 4000) {
  Matcher m(g);
  std::string text;
  for (int step = 0; step < max_steps; ++step) {
    const ByteSet next = m.next_bytes();
    if (m.can_end() && (next.none() || greedy || rng() % 100 < std::min<size_t>(90, 5 + text.size() / 4)))
      return text;
    if (next.none()) {
      *dead_end = true;
      return std::nullopt;
    }
    std::vector<int> opts;
    for (int b = 0; b < 256; ++b)
      if (next[b] && (b < 0x80 || rng() % 8 == 0)) opts.push_back(b);
    if (opts.empty())
      for (int b = 0; b < 256; ++b)
        if (next[b]) opts.push_back(b);
    const int b = greedy ? opts.front() : opts[rng() % opts.size()];
    if (!m.advance(static_cast<uint8_t>(b))) {
      *dead_end = true;
      return std::nullopt;
    }
    text.push_back(static_cast<char>(b));
  }
  return std::nullopt;
}

}  // namespace ms::grammar::testing
