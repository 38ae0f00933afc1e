// EncodeChatPrompt with stories260K's tokenizer: the statuses GenerateRequest.messages
// maps to, and the single BOS of a template that writes its own.
#include "coordinator/api/chat_prompt.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

class ChatPromptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_STORIES_MODEL();
    auto tokenizer = Tokenizer::Load(testing::StoriesModelDir());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    auto t = ChatTemplate::FromSource(
        "{{ bos_token }}{% for m in messages %}{% if m.role == 'bad' %}{{ raise_exception('no bad roles') }}"
        "{% endif %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}",
        "<s>", "</s>");
    ASSERT_TRUE(t.ok()) << t.status();
    template_ = *std::move(t);
    limits_.max_input_bytes = 64;
  }

  static v1::ChatMessages Chat(std::vector<std::pair<std::string, std::string>> turns) {
    v1::ChatMessages chat;
    for (auto& [role, content] : turns) {
      v1::ChatMessage* m = chat.add_messages();
      m->set_role(role);
      m->set_content(content);
    }
    return chat;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  ServingLimits limits_;
};

TEST_F(ChatPromptTest, RendersAndTokenizesWithoutASecondBos) {
  auto ids = EncodeChatPrompt(Chat({{"user", "Once upon a time"}}), template_.get(), *tokenizer_, limits_);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, tokenizer_->Encode("<s>user: Once upon a time\nassistant:", /*add_special_tokens=*/false));
  ASSERT_GE(ids->size(), 2u);
  EXPECT_EQ((*ids)[0], 1);
  EXPECT_NE((*ids)[1], 1);
}

TEST_F(ChatPromptTest, ContinueFinalMessageOpensNoTurn) {
  v1::ChatMessages chat = Chat({{"user", "Hi"}, {"assistant", "Once"}});
  chat.set_continue_final_message(true);
  auto ids = EncodeChatPrompt(chat, template_.get(), *tokenizer_, limits_);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, tokenizer_->Encode("<s>user: Hi\nassistant: Once", false));
}

TEST_F(ChatPromptTest, Statuses) {
  auto no_template = EncodeChatPrompt(Chat({{"user", "x"}}), nullptr, *tokenizer_, limits_);
  EXPECT_EQ(no_template.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_template.status().message(), HasSubstr("--chat-template"));

  auto raised = EncodeChatPrompt(Chat({{"bad", "x"}}), template_.get(), *tokenizer_, limits_);
  EXPECT_EQ(raised.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(raised.status().message(), "chat template: no bad roles");

  EXPECT_EQ(EncodeChatPrompt(Chat({}), template_.get(), *tokenizer_, limits_).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto no_role = EncodeChatPrompt(Chat({{"", "x"}}), template_.get(), *tokenizer_, limits_);
  EXPECT_EQ(no_role.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_role.status().message(), HasSubstr("messages.messages[0].role"));
  auto too_big = EncodeChatPrompt(Chat({{"user", std::string(100, 'x')}}), template_.get(), *tokenizer_, limits_);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.status().message(), HasSubstr("--max-input-bytes"));
}

}  // namespace
}  // namespace tessera
