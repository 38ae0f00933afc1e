#include "coordinator/http/chat_handler.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tessera::http {
namespace {

// Bytes as token ids, "<s>" (id 1) parsed as the special token, BOS prepended on request.
class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> Encode(absl::string_view text, bool add_special_tokens) const override {
    std::vector<int32_t> ids;
    if (add_special_tokens) ids.push_back(1);
    while (!text.empty()) {
      if (absl::StartsWith(text, "<s>")) {
        ids.push_back(1);
        text.remove_prefix(3);
        continue;
      }
      ids.push_back(256 + static_cast<unsigned char>(text[0]));
      text.remove_prefix(1);
    }
    return ids;
  }
  std::string Decode(const std::vector<int32_t>& ids, bool) const override { return std::string(ids.size(), 'x'); }
  int32_t vocab_size() const override { return 512; }
  int32_t bos_id() const override { return 1; }
  int32_t eos_id() const override { return 2; }
  bool IsSpecial(int32_t id) const override { return id < 3; }
  std::string PieceForId(int32_t id) const override { return id == 1 ? "<s>" : ""; }
};

ServingLimits SmallLimits() {
  ServingLimits limits;
  limits.vocab_size = 512;
  limits.max_context = 64;
  return limits;
}

struct Fixture {
  Fixture() {
    serving.admission = &admission;
    serving.tokenizer = &tokenizer;
  }
  ByteTokenizer tokenizer;
  Admission admission{nullptr, &tokenizer, SmallLimits(), nullptr, "http"};
  OpenAiServing serving;
};

TEST(ChatPromptTest, BosIsNotAddedTwice) {
  Fixture f;
  OpenAiRequest r;
  r.endpoint = Endpoint::kChatCompletions;
  ASSERT_TRUE(PrepareChatPrompt(f.serving, "<s>[INST] hi [/INST]", &r).ok());
  const auto& ids = r.generate.token_ids().ids();
  ASSERT_GE(ids.size(), 2);
  EXPECT_EQ(ids[0], 1);
  EXPECT_NE(ids[1], 1);
  EXPECT_FALSE(r.generate.has_text());
}

TEST(ChatPromptTest, BosIsAddedWhenTheTemplateDoesNotWriteIt) {
  Fixture f;
  OpenAiRequest r;
  ASSERT_TRUE(PrepareChatPrompt(f.serving, "User: hi\nAssistant:", &r).ok());
  const auto& ids = r.generate.token_ids().ids();
  ASSERT_GE(ids.size(), 2);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 256 + 'U');
}

TEST(ChatPromptTest, DefaultMaxTokensIsTheRestOfTheContext) {
  Fixture f;
  OpenAiRequest r;
  ASSERT_TRUE(PrepareChatPrompt(f.serving, "<s>abc", &r).ok());  // 4 tokens.
  EXPECT_EQ(r.generate.stopping().max_new_tokens(), 60u);
  OpenAiRequest set;
  set.max_tokens_set = true;
  set.generate.mutable_stopping()->set_max_new_tokens(5);
  ASSERT_TRUE(PrepareChatPrompt(f.serving, "<s>abc", &set).ok());
  EXPECT_EQ(set.generate.stopping().max_new_tokens(), 5u);
}

}  // namespace
}  // namespace tessera::http
