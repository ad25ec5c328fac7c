// A string -> token id map that can be queried with a string_view (no
// temporary std::string per lookup on the hot paths).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ms {

struct TransparentStringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

using TextToId = std::unordered_map<std::string, int32_t, TransparentStringHash, std::equal_to<>>;

inline int32_t find_id(const TextToId& map, std::string_view text) {
  auto it = map.find(text);
  return it == map.end() ? -1 : it->second;
}

}  // namespace ms
