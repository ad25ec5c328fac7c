#include "server/json_limits.h"

#include <string>

#include "server/api.h"

namespace ms::server {

void check_json_limits(std::string_view text, const JsonLimits& lim) {
  size_t depth = 0, items = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth > lim.max_depth)
          throw ApiError(400, "the request body nests arrays/objects more than " + std::to_string(lim.max_depth) +
                                  " levels deep (at byte " + std::to_string(i) + ")");
        [[fallthrough]];
      case ',':
        if (++items > lim.max_items)
          throw ApiError(400, "the request body has more than " + std::to_string(lim.max_items) +
                                  " JSON elements (at byte " + std::to_string(i) + ")");
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;  // unbalanced text is the parser's to refuse
        break;
      default: break;
    }
  }
}

}  // namespace ms::server
