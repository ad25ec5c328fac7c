// Lists as options and keys spell them: "2G,4G", "lru,slru", "q4_K/t8".
#pragma once
#include <string>
#include <vector>

namespace ms {

// Every item between separators, empty ones included ("a,,b" -> a, "", b),
// so a caller can refuse them; "" -> one empty item.
std::vector<std::string> split_list(const std::string& list, char sep = ',');

}  // namespace ms
