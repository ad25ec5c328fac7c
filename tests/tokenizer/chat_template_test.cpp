#include <gtest/gtest.h>

#include "tokenizer/chat_template.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace ms {
namespace {

const std::vector<ChatMessage> kChat = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}};

TEST(ChatTemplate, ChatML) {
  EXPECT_EQ(ChatTemplate(ChatFormat::ChatML).apply(kChat, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(ChatTemplate(ChatFormat::ChatML).apply({{"user", "x"}}, false),
            "<|im_start|>user\nx<|im_end|>\n");
}

TEST(ChatTemplate, Llama3) {
  EXPECT_EQ(ChatTemplate(ChatFormat::Llama3).apply({{"user", " Hi \n"}}, true),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, MistralVariants) {
  EXPECT_EQ(ChatTemplate(ChatFormat::MistralV1).apply(kChat, true),
            " [INST] Be brief.\n\nHi [/INST] Hello!</s> [INST] 2+2? [/INST]");
  EXPECT_EQ(ChatTemplate(ChatFormat::MistralV3).apply(kChat, true),
            "[INST] Be brief.\n\nHi[/INST] Hello!</s>[INST] 2+2?[/INST]");
  EXPECT_EQ(ChatTemplate(ChatFormat::MistralV3Tekken).apply(kChat, true),
            "[INST]Be brief.\n\nHi[/INST]Hello!</s>[INST]2+2?[/INST]");
  EXPECT_EQ(ChatTemplate(ChatFormat::MistralV7).apply(kChat, true),
            "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] Hi[/INST] Hello!</s>[INST] 2+2?[/INST]");
}

TEST(ChatTemplate, Llama2) {
  EXPECT_EQ(ChatTemplate(ChatFormat::Llama2).apply(kChat, true),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] 2+2? [/INST]");
}

TEST(ChatTemplate, DetectsFormatFromJinjaMarkers) {
  EXPECT_EQ(detect_chat_format("{% for m in messages %}{{'<|im_start|>' + m['role']}}"), ChatFormat::ChatML);
  EXPECT_EQ(detect_chat_format("{{ '<|start_header_id|>' + message['role'] }}"), ChatFormat::Llama3);
  EXPECT_EQ(detect_chat_format("{{ ' [INST] ' + message['content'] + ' [/INST]' }}"), ChatFormat::MistralV1);
  EXPECT_EQ(detect_chat_format("{{ '[INST] ' + message['content'] + '[/INST]' }}"), ChatFormat::MistralV3);
  EXPECT_EQ(detect_chat_format("{{ '[INST]' + message['content'] + '[/INST]' }}"), ChatFormat::MistralV3Tekken);
  EXPECT_EQ(detect_chat_format("{{ '[SYSTEM_PROMPT]' }}{{ '[INST]' }}"), ChatFormat::MistralV7);
  EXPECT_EQ(detect_chat_format("{{ '[INST] <<SYS>>\\n' }}"), ChatFormat::Llama2);
  EXPECT_FALSE(detect_chat_format("").has_value());
  EXPECT_FALSE(detect_chat_format("{{ something else }}").has_value());
}

TEST(ChatTemplate, ForVocabUsesOverrideThenDetectionThenChatML) {
  Vocab v;
  v.chat_template = "{{ '[INST] ' + m + '[/INST]' }}";
  EXPECT_EQ(ChatTemplate::for_vocab(v).format(), ChatFormat::MistralV3);
  EXPECT_EQ(ChatTemplate::for_vocab(v, "chatml").format(), ChatFormat::ChatML);
  EXPECT_EQ(ChatTemplate::for_vocab(v, "qwen3").format(), ChatFormat::ChatML);
  EXPECT_THROW(ChatTemplate::for_vocab(v, "nope"), Error);
  v.chat_template.clear();
  EXPECT_EQ(ChatTemplate::for_vocab(v).format(), ChatFormat::ChatML);
  for (ChatFormat f : {ChatFormat::ChatML, ChatFormat::Llama3, ChatFormat::Llama2, ChatFormat::MistralV1,
                       ChatFormat::MistralV3, ChatFormat::MistralV3Tekken, ChatFormat::MistralV7})
    EXPECT_EQ(parse_chat_format(chat_format_name(f)), f);
}

TEST(ChatTemplate, RejectsUnknownRoles) {
  EXPECT_THROW(ChatTemplate(ChatFormat::ChatML).apply({{"wizard", "x"}}, true), Error);
}

}  // namespace
}  // namespace ms
