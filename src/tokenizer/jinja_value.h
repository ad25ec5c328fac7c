// Internal to the chat-template engine (src/tokenizer/jinja*.{h,cpp}); its
// interface is jinja.h. The values a template computes with, the budget that
// holds a render to its Limits, and the conversions, comparisons and string
// helpers that follow Python's semantics (str(), repr(), truthiness, slicing).
// The definitions are in jinja_value.cpp.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja.h"

namespace ms::jinja::detail {

// ============================================================== values

struct Value;
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Fn = std::function<Value(Args&, Kwargs&)>;

struct Value {
  enum class K { Undef, Data, Ns, Fn } k = K::Undef;
  Json j;
  std::shared_ptr<Json> ns;  // a namespace(): shared, so "set ns.x" is seen by every holder
  std::shared_ptr<Fn> fn;

  Value() = default;
  Value(Json data) : k(K::Data), j(std::move(data)) {}  // NOLINT: implicit on purpose
  static Value function(Fn f) {
    Value v;
    v.k = K::Fn;
    v.fn = std::make_shared<Fn>(std::move(f));
    return v;
  }
  bool undef() const { return k == K::Undef; }
  bool data() const { return k == K::Data; }
  bool is_str() const { return data() && j.is_string(); }
  bool is_num() const { return data() && j.is_number(); }
  bool is_int() const { return data() && j.is_number_integer(); }
  bool is_arr() const { return data() && j.is_array(); }
  bool is_obj() const { return data() && j.is_object(); }
  bool is_null() const { return data() && j.is_null(); }
  const std::string& str() const { return j.get_ref<const std::string&>(); }
};

// A template error: ms::Error "jinja: <what>".
[[noreturn]] void fail(const std::string& what);

// ============================================================== limits

[[noreturn]] void exceeded(const std::string& what, uint64_t limit, const char* field);

// What the render running on this thread has used of its Limits. The
// built-ins (filters, methods, globals) are free functions without a
// context, so they reach it through a thread-local pointer that render() sets.
struct Budget {
  const Limits& lim;
  const std::atomic<bool>* cancel;
  bool timed;
  std::chrono::steady_clock::time_point deadline;
  int depth = 0, calls = 0;
  int64_t iterations = 0;
  size_t built = 0;
  uint32_t countdown = kCheckEvery;
  // The clock and the cancel flag are read every kCheckEvery steps: often
  // enough to stop within milliseconds, rarely enough to cost nothing.
  static constexpr uint32_t kCheckEvery = 64;

  void check_time_and_cancel() {
    countdown = kCheckEvery;
    if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled("chat template: the render was cancelled");
    if (timed && std::chrono::steady_clock::now() > deadline)
      exceeded("render time exceeds, in ms,", static_cast<uint64_t>(lim.max_render_time.count()), "max_render_time");
  }
};

// Set by Template::render for its thread (defined in jinja_value.cpp).
// constinit: no dynamic initialization, so tick() reads it directly rather
// than through a thread-local wrapper call.
extern constinit thread_local Budget* tl_budget;

// One step of work (an evaluation, an item of a built-in's loop).
inline void tick() {
  if (tl_budget && --tl_budget->countdown == 0) tl_budget->check_time_and_cancel();
}

// The estimated memory of a JSON value (heap nodes and text), counting no
// further than `cap`, and whether it nests deeper than `max_depth`.
struct JsonSize {
  size_t bytes = 0;
  bool too_deep = false;
};
JsonSize json_size(const Json& root, size_t cap, int max_depth);

// The checks against the budget: each throws LimitExceeded naming the limit,
// and does nothing outside a render.
void check_text_size(size_t n);
size_t check_value(const Json& j);
void count_built(const Json& j);
void check_items(size_t n);

// ============================================================== conversions

bool truthy(const Value& v);
std::string py_float(double d);
std::string py_str_repr(const std::string& s);
std::string data_str(const Json& j, bool quoted);
std::string to_str(const Value& v);
void dump_json(const Json& j, std::string& out, int indent, int depth);
int64_t double_to_int(double d, const char* what);
int64_t as_int(const Value& v, const char* what);
double as_num(const Value& v);
bool num_like(const Value& v);

// ============================================================== comparisons, access, arguments

bool equal(const Value& a, const Value& b);
bool less(const Value& a, const Value& b);
bool contains(const Value& hay, const Value& needle);
Value index(const Value& c, const Value& key);
Value slice(const Value& c, const Value& lo, const Value& hi, const Value& st);
Value kwarg(Kwargs& kw, const std::string& name);
Value arg(Args& a, Kwargs& kw, size_t i, const std::string& name);
Json iterable(const Value& v);

// ============================================================== strings

size_t u8len(const std::string& s);
std::vector<std::string> u8chars(const std::string& s);
bool is_space(char c);
std::string strip(const std::string& s, const Value* chars, bool left, bool right);
std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit);
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count = -1);
std::string title_case(const std::string& s);
std::string lower(std::string s);
std::string upper(std::string s);

}  // namespace ms::jinja::detail
