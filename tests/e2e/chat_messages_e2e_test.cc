// GenerateRequest.messages over a live cluster: the coordinator renders the conversation
// with the model's chat template (or --chat-template), tokenizes it without adding a
// second BOS, and maps a model without a template to FAILED_PRECONDITION and the
// template's raise_exception to INVALID_ARGUMENT. stories260K has no template, so the
// tests serve a copy with a small chat_template.jinja written into it.
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/cluster.h"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

using ::tessera::testing::RunStream;
using ::tessera::testing::RunUnary;
using ::testing::HasSubstr;

// ChatML-like, with the BOS the model was trained with and a check that raises.
constexpr char kTemplate[] =
    "{{ bos_token }}\n"
    "{%- for m in messages %}\n"
    "    {%- if m.role == 'system' and not loop.first %}\n"
    "        {{- raise_exception('The system message must come first.') }}\n"
    "    {%- endif %}\n"
    "    {{- m.role + ': ' + m.content | trim + '\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{ 'assistant:' }}{% endif %}\n";

std::filesystem::path StoriesWithTemplate(const std::string& template_text) {
  const auto dir = testing::ScratchDir("model");
  for (const auto& entry : std::filesystem::directory_iterator(testing::StoriesModelDir())) {
    std::filesystem::copy_file(entry.path(), dir / entry.path().filename());
  }
  std::ofstream(dir / "chat_template.jinja") << template_text;
  return dir;
}

std::unique_ptr<testing::Cluster> Start(const std::filesystem::path& model_dir,
                                        std::vector<std::string> coordinator_flags = {}) {
  testing::ClusterOptions options;
  options.model_dir = model_dir;
  options.log_dir = testing::ScratchDir("cluster");
  options.kv_memory_mb = 16;
  options.coordinator_flags = std::move(coordinator_flags);
  auto cluster = testing::Cluster::Start(std::move(options));
  if (!cluster.ok()) {
    ADD_FAILURE() << cluster.status().message();
    return nullptr;
  }
  return std::move(*cluster);
}

v1::GenerateRequest Chat(const std::vector<std::pair<std::string, std::string>>& turns, int max_new_tokens = 8) {
  v1::GenerateRequest r;
  for (const auto& [role, content] : turns) {
    v1::ChatMessage* m = r.mutable_messages()->add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  r.mutable_sampling()->set_temperature(0);
  r.mutable_stopping()->set_max_new_tokens(max_new_tokens);
  r.mutable_stopping()->set_ignore_eos(true);
  return r;
}

std::vector<int32_t> TokenizeWithoutSpecials(v1::Generation::Stub& api, const std::string& text) {
  v1::TokenizeRequest request;
  request.set_text(text);
  request.set_add_special_tokens(false);
  v1::TokenizeResponse response;
  grpc::ClientContext ctx;
  ctx.set_deadline(testing::DeadlineIn(std::chrono::seconds(30)));
  const grpc::Status status = api.Tokenize(&ctx, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return {response.token_ids().begin(), response.token_ids().end()};
}

TEST(ChatMessagesE2eTest, RendersTheModelsTemplateAndGenerates) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto cluster = Start(StoriesWithTemplate(kTemplate));
  ASSERT_NE(cluster, nullptr);
  v1::Generation::Stub& api = cluster->api();

  const auto request = Chat({{"system", "Tell stories."}, {"user", "  Once upon a time  "}});
  const auto result = RunUnary(api, request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  const std::vector<int32_t> prompt(result.response.prompt_ids().begin(), result.response.prompt_ids().end());
  // The template wrote "<s>": the prompt starts with exactly one BOS (id 1), not two.
  EXPECT_EQ(prompt, TokenizeWithoutSpecials(api, "<s>system: Tell stories.\nuser: Once upon a time\nassistant:"));
  ASSERT_GE(prompt.size(), 2u);
  EXPECT_EQ(prompt[0], 1);
  EXPECT_NE(prompt[1], 1);
  EXPECT_EQ(result.ids().size(), 8u);

  // Greedy generation from messages equals generation from the same ids.
  const auto same = RunUnary(api, testing::GreedyIds(prompt, 8));
  ASSERT_TRUE(same.status.ok()) << same.status.error_message();
  EXPECT_EQ(same.ids(), result.ids());

  // Streaming takes messages too.
  const auto streamed = RunStream(api, request);
  ASSERT_TRUE(streamed.status.ok()) << streamed.status.error_message();
  EXPECT_EQ(streamed.prompt_ids, prompt);
  EXPECT_EQ(streamed.ids, result.ids());

  // continue_final_message: no "assistant:" turn is opened; the prompt stops right after
  // the final message (its "\n" cut), so the model continues it.
  auto prefill = Chat({{"user", "Hi"}, {"assistant", "Once upon a"}});
  prefill.mutable_messages()->set_continue_final_message(true);
  const auto continued = RunUnary(api, prefill);
  ASSERT_TRUE(continued.status.ok()) << continued.status.error_message();
  EXPECT_EQ(std::vector<int32_t>(continued.response.prompt_ids().begin(), continued.response.prompt_ids().end()),
            TokenizeWithoutSpecials(api, "<s>user: Hi\nassistant: Once upon a"));
}

TEST(ChatMessagesE2eTest, TemplateRejectionsAndBadConversationsAreInvalidArgument) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto cluster = Start(StoriesWithTemplate(kTemplate));
  ASSERT_NE(cluster, nullptr);
  v1::Generation::Stub& api = cluster->api();

  const auto raised = RunUnary(api, Chat({{"user", "Hi"}, {"system", "late"}}));
  EXPECT_EQ(raised.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(raised.status.error_message(), HasSubstr("The system message must come first."));

  const auto streamed = RunStream(api, Chat({{"user", "Hi"}, {"system", "late"}}));
  EXPECT_EQ(streamed.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::GenerateRequest empty = Chat({});
  empty.mutable_messages();  // Set, but without messages.
  EXPECT_EQ(RunUnary(api, empty).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(RunUnary(api, Chat({{"", "no role"}})).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Text requests are unaffected by the template.
  const auto text = RunUnary(api, testing::GreedyText("Once upon a time", 4));
  EXPECT_TRUE(text.status.ok()) << text.status.error_message();
}

TEST(ChatMessagesE2eTest, ModelWithoutTemplateIsFailedPreconditionUntilChatTemplateFlag) {
  TESSERA_REQUIRE_STORIES_MODEL();
  {
    auto cluster = Start(testing::StoriesModelDir());
    ASSERT_NE(cluster, nullptr);
    const auto refused = RunUnary(cluster->api(), Chat({{"user", "Hi"}}));
    EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(refused.status.error_message(), HasSubstr("no chat template"));
  }
  // --chat-template serves the same model with a template from a file.
  const auto file = testing::ScratchDir("template") / "override.jinja";
  std::ofstream(file) << "{{ bos_token }}[{{ messages[-1].content }}]";
  auto cluster = Start(testing::StoriesModelDir(), {"--chat-template=" + file.string()});
  ASSERT_NE(cluster, nullptr);
  const auto result = RunUnary(cluster->api(), Chat({{"user", "Once upon a time"}}));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(std::vector<int32_t>(result.response.prompt_ids().begin(), result.response.prompt_ids().end()),
            TokenizeWithoutSpecials(cluster->api(), "<s>[Once upon a time]"));
}

}  // namespace
}  // namespace tessera
