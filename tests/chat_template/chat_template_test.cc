// ChatTemplate: finding a model's template in its folder, the variables a render sees,
// and the statuses the coordinator maps to gRPC codes.
#include "common/chat_template/chat_template.h"

#include <atomic>
#include <fstream>
#include <thread>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

class ChatTemplateLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("chat_template_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }

  std::string RenderOne(const ChatTemplate& t) {
    absl::StatusOr<std::string> out = t.Render({{"user", "hi"}}, {});
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : "";
  }

  std::filesystem::path dir_;
};

TEST_F(ChatTemplateLoadTest, ChatTemplateJinjaWinsOverTokenizerConfig) {
  Write("chat_template.jinja", "{{ bos_token }}J:{{ messages[0].content }}{{ eos_token }}\n");
  Write("tokenizer_config.json", R"({"chat_template": "C", "bos_token": "<s>", "eos_token": "</s>"})");
  auto t = ChatTemplate::Load(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(RenderOne(**t), "<s>J:hi</s>");
}

TEST_F(ChatTemplateLoadTest, TokenizerConfigStringAndAddedTokenObjects) {
  Write("tokenizer_config.json",
        R"({"chat_template": "{{ bos_token }}{% for m in messages %}{{ m.role }}={{ m.content }}{% endfor %}",
            "bos_token": {"content": "<|begin|>", "lstrip": false}, "eos_token": null})");
  auto t = ChatTemplate::Load(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(RenderOne(**t), "<|begin|>user=hi");
}

TEST_F(ChatTemplateLoadTest, NamedTemplatesTakeDefault) {
  Write("tokenizer_config.json",
        R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  auto t = ChatTemplate::Load(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(RenderOne(**t), "D");
}

TEST_F(ChatTemplateLoadTest, NoTemplateIsNotFound) {
  Write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  auto t = ChatTemplate::Load(dir_);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("has no chat template"));
  std::filesystem::remove(dir_ / "tokenizer_config.json");
  EXPECT_EQ(ChatTemplate::Load(dir_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ChatTemplateLoadTest, SyntaxErrorNamesFileAndLine) {
  Write("chat_template.jinja", "ok\n{% if x %}\n");
  auto t = ChatTemplate::Load(dir_);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("chat_template.jinja: template line 2"));
}

TEST(ChatTemplateTest, RenderVariables) {
  auto t = ChatTemplate::FromSource(
      "{{ add_generation_prompt }} {{ tools is none }} {{ date_string | default('unset') }} "
      "{{ strftime_now('%Y-%m-%d') | length }} {{ messages | length }}",
      "<s>", "</s>");
  ASSERT_TRUE(t.ok()) << t.status();
  ChatRenderOptions options;
  EXPECT_EQ(*(*t)->Render({}, options), "True True unset 10 0");
  options.add_generation_prompt = false;
  options.date_string = "26 Jul 2024";
  EXPECT_EQ(*(*t)->Render({{"user", "a"}}, options), "False True 26 Jul 2024 10 1");
}

TEST(ChatTemplateTest, RaiseExceptionIsInvalidArgumentWithTheMessage) {
  auto t = ChatTemplate::FromSource("{% if messages[0].role != 'user' %}{{ raise_exception('user first!') }}{% endif %}",
                                    "", "");
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::string> out = (*t)->Render({{"assistant", "x"}}, {});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "user first!");
}

TEST(ChatTemplateTest, ConcurrentRendersAgree) {
  auto t = ChatTemplate::FromSource(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.role }}:{{ m.content }};"
      "{% endfor %}{{ ns.n }}",
      "", "");
  ASSERT_TRUE(t.ok());
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      const std::vector<ChatMessage> messages(static_cast<size_t>(i + 1), ChatMessage{"user", std::to_string(i)});
      std::string expected;
      for (int k = 0; k <= i; ++k) expected += "user:" + std::to_string(i) + ";";
      expected += std::to_string(i + 1);
      for (int round = 0; round < 200; ++round) {
        absl::StatusOr<std::string> out = (*t)->Render(messages, {});
        if (!out.ok() || *out != expected) mismatches.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace tessera
