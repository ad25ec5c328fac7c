#include "server/json_limits.h"

#include <string>
#include <unordered_map>
#include <vector>

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

namespace ms::server {

namespace {

using ojson = nlohmann::ordered_json;

// Builds the value from nlohmann's SAX events (its lexer and grammar, so what
// is accepted is exactly what json::parse accepts).
class BoundedBuilder {
 public:
  explicit BoundedBuilder(const JsonLimits& lim) : lim_(lim) {}
  ojson root;

  bool null() { return put(ojson(nullptr)); }
  bool boolean(bool v) { return put(ojson(v)); }
  bool number_integer(ojson::number_integer_t v) { return put(ojson(v)); }
  bool number_unsigned(ojson::number_unsigned_t v) { return put(ojson(v)); }
  bool number_float(ojson::number_float_t v, const std::string&) { return put(ojson(v)); }
  bool string(std::string& v) { return put(ojson(std::move(v))); }
  bool binary(ojson::binary_t&) { return false; }  // not in JSON text
  bool start_object(std::size_t) { return open(ojson::object()); }
  bool start_array(std::size_t) { return open(ojson::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& k) {
    Frame& f = stack_.back();
    if (f.index.size() >= lim_.max_keys && !f.index.count(k))
      throw ApiError(400, "the request body has an object with more than " + std::to_string(lim_.max_keys) + " keys");
    f.key = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    // The message quotes what was last read, which may be part of a UTF-8
    // sequence: ASCII only, so the error is valid JSON text itself.
    std::string what = e.what();
    for (char& c : what)
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    throw ApiError(400, "the request body is not valid JSON: " + what);
  }

 private:
  struct Frame {
    ojson* value;
    std::string key;                                  // objects: the key of the value that comes next
    std::unordered_map<std::string, size_t> index;    // objects: key -> position
  };

  // Places v where the parser is (root, array element, object member); returns where it went.
  ojson* place(ojson&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    Frame& f = stack_.back();
    if (f.value->is_array()) {
      auto& arr = f.value->get_ref<ojson::array_t&>();
      arr.push_back(std::move(v));
      return &arr.back();
    }
    // The vector under ordered_map: appended to without its linear key search.
    auto& members = static_cast<std::vector<std::pair<const std::string, ojson>>&>(
        f.value->get_ref<ojson::object_t&>());
    auto [it, fresh] = f.index.try_emplace(f.key, members.size());
    if (!fresh) {
      members[it->second].second = std::move(v);  // a repeated key: the last value, in the first place
      return &members[it->second].second;
    }
    members.emplace_back(std::move(f.key), std::move(v));
    return &members.back().second;
  }
  bool put(ojson&& v) {
    place(std::move(v));
    return true;
  }
  bool open(ojson&& container) {
    ojson* at = place(std::move(container));
    stack_.push_back(Frame{at, {}, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  const JsonLimits& lim_;
  std::vector<Frame> stack_;
};

}  // namespace

nlohmann::ordered_json parse_json_bounded(std::string_view text, const JsonLimits& lim) {
  check_json_limits(text, lim);  // depth and size first: nothing below recurses past them
  BoundedBuilder b(lim);
  ojson::sax_parse(text, &b);
  return std::move(b.root);
}

}  // namespace ms::server
