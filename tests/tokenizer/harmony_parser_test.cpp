// The harmony (gpt-oss) response parser on scripted token streams: the
// tokens a gpt-oss model writes, made by encoding the markup with a small
// vocabulary that has the harmony markers as control tokens.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tiny_vocabs.h"
#include "tokenizer/harmony.h"
#include "tokenizer/reply_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ms {
namespace {

const std::vector<std::string> kMarkers = {"<|start|>", "<|end|>",    "<|message|>", "<|channel|>",
                                           "<|constrain|>", "<|return|>", "<|call|>", "<|endoftext|>"};

Tokenizer harmony_tokenizer() { return Tokenizer(test::tiny_bpe({{"a", "n"}, {" ", "w"}}, kMarkers, "gpt-4o")); }

// Parses `generated` (markup included) token by token, as a server streams it.
HarmonyParser::Out parse(const Tokenizer& tok, const std::string& generated) {
  HarmonyParser p(tok, *harmony_markers(tok));
  HarmonyParser::Out all;
  auto add = [&](HarmonyParser::Out o) {
    all.content += o.content;
    all.reasoning += o.reasoning;
    for (auto& c : o.tool_calls) all.tool_calls.push_back(std::move(c));
  };
  for (int32_t id : tok.encode(generated, false, true)) add(p.push(id));
  add(p.flush());
  return all;
}

TEST(HarmonyParser, AnalysisIsReasoningFinalIsContent) {
  const Tokenizer tok = harmony_tokenizer();
  const auto out = parse(tok,
                         "<|channel|>analysis<|message|>User greets. Reply briefly.<|end|>"
                         "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>");
  EXPECT_EQ(out.reasoning, "User greets. Reply briefly.");
  EXPECT_EQ(out.content, "Hello! How can I help?");
  EXPECT_TRUE(out.tool_calls.empty());
}

TEST(HarmonyParser, NoMarkupReachesTheText) {
  const Tokenizer tok = harmony_tokenizer();
  // Without the final <|return|> (generation stopped on it: it is EOG), and
  // with a message cut off by the token limit.
  for (const std::string gen : {"<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>y",
                                "<|channel|>analysis<|message|>only thinking, cut off"}) {
    const auto out = parse(tok, gen);
    for (const std::string* s : {&out.content, &out.reasoning}) {
      EXPECT_EQ(s->find("<|"), std::string::npos) << *s;
      EXPECT_EQ(s->find("assistant"), std::string::npos) << *s;
      EXPECT_EQ(s->find("final"), std::string::npos) << *s;
    }
  }
  EXPECT_EQ(parse(tok, "<|channel|>analysis<|message|>only thinking, cut off").content, "");
}

TEST(HarmonyParser, ToolCallWithConstrain) {
  const Tokenizer tok = harmony_tokenizer();
  const auto out = parse(tok,
                         "<|channel|>analysis<|message|>Need weather.<|end|>"
                         "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
                         "<|message|>{\"city\":\"Paris\"}<|call|>");
  EXPECT_EQ(out.reasoning, "Need weather.");
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].recipient, "functions.get_weather");
  EXPECT_EQ(out.tool_calls[0].content_type, "json");
  EXPECT_EQ(out.tool_calls[0].arguments, "{\"city\":\"Paris\"}");
}

TEST(HarmonyParser, RecipientInTheRolePartAndCallCutOff) {
  // The template's own spelling ("assistant to=functions.f<|channel|>commentary json"),
  // and a call that ends at the token limit: it comes out at flush().
  const Tokenizer tok = harmony_tokenizer();
  const auto out = parse(tok, " to=functions.lookup<|channel|>commentary json<|message|>{\"q\": 1");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].recipient, "functions.lookup");
  EXPECT_EQ(out.tool_calls[0].content_type, "json");
  EXPECT_EQ(out.tool_calls[0].arguments, "{\"q\": 1");
  EXPECT_EQ(out.content, "");
}

TEST(HarmonyParser, CommentaryWithoutRecipientIsForTheUser) {
  const Tokenizer tok = harmony_tokenizer();
  const auto out = parse(tok, "<|channel|>commentary<|message|>Checking the weather now.<|end|>");
  EXPECT_EQ(out.content, "Checking the weather now.");
  EXPECT_TRUE(out.tool_calls.empty());
}

TEST(HarmonyParser, ChannelInsideABodyStartsANewMessage) {
  // A model that skips "<|end|><|start|>assistant" between messages.
  const Tokenizer tok = harmony_tokenizer();
  const auto out = parse(tok, "<|channel|>analysis<|message|>think<|channel|>final<|message|>answer");
  EXPECT_EQ(out.reasoning, "think");
  EXPECT_EQ(out.content, "answer");
}

TEST(HarmonyParser, MultiByteCharactersSurviveTokenBoundaries) {
  // The tiny vocabulary spells "é" and "😀" as single-byte tokens.
  const Tokenizer tok = harmony_tokenizer();
  const auto out = parse(tok,
                         "<|channel|>analysis<|message|>caf\xC3\xA9<|end|><|start|>assistant<|channel|>final"
                         "<|message|>\xF0\x9F\x98\x80 ok");
  EXPECT_EQ(out.reasoning, "caf\xC3\xA9");
  EXPECT_EQ(out.content, "\xF0\x9F\x98\x80 ok");
}

TEST(HarmonyParser, TextWithoutHarmonyIsNotLost) {
  // A model that ignores the format: past the header limit its text is the answer.
  const Tokenizer tok = harmony_tokenizer();
  std::string text;
  while (text.size() < 3 * HarmonyParser::kMaxHeaderBytes) text += "plain words and more words ";
  EXPECT_EQ(parse(tok, text).content, text);
}

TEST(HarmonyParser, RandomStreamsGiveValidTextAndNoMarkup) {
  // Any token sequence (markers anywhere, bytes that split characters): the
  // parser neither throws nor lets markup through, and its text is UTF-8.
  const Tokenizer tok = harmony_tokenizer();
  std::vector<int32_t> pool;
  for (const std::string& m : kMarkers) pool.push_back(tok.find_token(m));
  for (const char* t : {"a", "n", " ", "\xC3", "\xA9", "\xF0", "\x9F", "analysis", "final", "commentary", "to=x"})
    for (int32_t id : tok.encode(t, false, false)) pool.push_back(id);
  std::mt19937 rng(5);
  for (int iter = 0; iter < 200; ++iter) {
    HarmonyParser p(tok, *harmony_markers(tok));
    std::string content, reasoning, args;
    const int n = static_cast<int>(rng() % 3000);
    for (int k = 0; k <= n; ++k) {
      HarmonyParser::Out o = k < n ? p.push(pool[rng() % pool.size()]) : p.flush();
      content += o.content, reasoning += o.reasoning;
      for (const auto& c : o.tool_calls) args += c.arguments;
    }
    for (const std::string* s : {&content, &reasoning, &args}) {
      EXPECT_EQ(s->find("<|"), std::string::npos);
      EXPECT_EQ(utf8::valid_prefix_length(*s), s->size());
    }
  }
}

TEST(HarmonyMarkers, FoundOnlyInHarmonyVocabularies) {
  const Tokenizer tok = harmony_tokenizer();
  const auto m = harmony_markers(tok);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->channel, tok.find_token("<|channel|>"));
  EXPECT_EQ(m->call, tok.find_token("<|call|>"));
  const Tokenizer chatml(test::tiny_bpe({}, {"<|im_start|>", "<|im_end|>"}));
  EXPECT_FALSE(harmony_markers(chatml).has_value());
}

TEST(HarmonyEndOfGeneration, ReturnAndCallStopButEndDoesNot) {
  const Tokenizer tok = harmony_tokenizer();
  EXPECT_TRUE(tok.is_eog(tok.find_token("<|return|>")));
  EXPECT_TRUE(tok.is_eog(tok.find_token("<|call|>")));
  EXPECT_TRUE(tok.is_eog(tok.find_token("<|endoftext|>")));
  // <|end|> closes the analysis message; the answer follows it.
  EXPECT_FALSE(tok.is_eog(tok.find_token("<|end|>")));
  // Even when the file names it as EOS.
  Vocab v = test::tiny_bpe({}, kMarkers, "gpt-4o");
  v.eos_id = test::id_of(v, "<|end|>");
  const Tokenizer named(v);
  EXPECT_FALSE(named.is_eog(named.find_token("<|end|>")));
  // Phi-3 style vocabularies (an <|end|> but no <|return|>/<|call|>) still stop at <|end|>.
  const Tokenizer phi(test::tiny_bpe({}, {"<|user|>", "<|assistant|>", "<|end|>"}));
  EXPECT_TRUE(phi.is_eog(phi.find_token("<|end|>")));
}

TEST(ReplyDecoder, HarmonyOnlyForChatsWithHarmonyVocabularies) {
  const Tokenizer tok = harmony_tokenizer();
  const std::string gen = "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>Hi";
  auto run = [&](ReplyDecoder d) {
    HarmonyParser::Out all;
    for (int32_t id : tok.encode(gen, false, true)) {
      HarmonyParser::Out o = d.push(id);
      all.content += o.content, all.reasoning += o.reasoning;
    }
    HarmonyParser::Out o = d.flush();
    all.content += o.content, all.reasoning += o.reasoning;
    return all;
  };
  const ReplyDecoder chat(tok, true);
  EXPECT_TRUE(chat.harmony());
  const auto c = run(ReplyDecoder(tok, true));
  EXPECT_EQ(c.content, "Hi");
  EXPECT_EQ(c.reasoning, "hm");
  // Not a chat (a raw prompt): plain decoding, control tokens print nothing.
  EXPECT_FALSE(ReplyDecoder(tok, false).harmony());
  EXPECT_EQ(run(ReplyDecoder(tok, false)).content, "analysishmassistantfinalHi");
  // A chat with another vocabulary: plain decoding too.
  const Tokenizer chatml(test::tiny_bpe({}, {"<|im_start|>", "<|im_end|>"}));
  EXPECT_FALSE(ReplyDecoder(chatml, true).harmony());
}

}  // namespace
}  // namespace ms
