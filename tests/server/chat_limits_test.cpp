// The chat template under a hostile request (issue #28): a render the
// request drives past jinja::Limits is the request's fault (400), and a
// render cancelled by a shutting-down server is a 503, not a hang.
#include <gtest/gtest.h>

#include <atomic>

#include "engine/synthetic_vocab.h"
#include "server/api.h"
#include "server/chat.h"
#include "tokenizer/tokenizer.h"

namespace ms::server {
namespace {

// A template whose work grows with a kwarg the client controls.
Tokenizer looping_tokenizer() {
  Vocab v = make_synthetic_vocab(512);
  v.chat_template =
      "{% for m in messages %}{{ m.content }}{% endfor %}"
      "{% for i in range(n) %}{% for j in range(n) %}.{% endfor %}{% endfor %}";
  return Tokenizer(std::move(v));
}

int status_of(const ChatRenderer& chat, int n, const std::atomic<bool>* cancel = nullptr) {
  try {
    chat.render(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "U"}])"), true,
                nlohmann::ordered_json{{"n", n}}, cancel);
    return 200;
  } catch (const ApiError& e) {
    return e.status;
  }
}

TEST(ChatLimits, ARenderPastTheLimitsIsA400) {
  const Tokenizer tok = looping_tokenizer();
  const ChatRenderer chat(tok);
  EXPECT_EQ(status_of(chat, 10), 200);
  EXPECT_EQ(status_of(chat, 100000), 400);  // 10^10 iterations: refused, not run
}

TEST(ChatLimits, ACancelledRenderIsA503) {
  const Tokenizer tok = looping_tokenizer();
  const ChatRenderer chat(tok);
  std::atomic<bool> cancel{true};
  EXPECT_EQ(status_of(chat, 900, &cancel), 503);  // 810,000 iterations: long enough to see the flag
  std::atomic<bool> go_on{false};
  EXPECT_EQ(status_of(chat, 10, &go_on), 200);
}

}  // namespace
}  // namespace ms::server
