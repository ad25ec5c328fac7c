#include "util/split.h"

namespace ms {

std::vector<std::string> split_list(const std::string& list, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    const size_t end = list.find(sep, at);
    out.push_back(list.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) return out;
    at = end + 1;
  }
}

}  // namespace ms
