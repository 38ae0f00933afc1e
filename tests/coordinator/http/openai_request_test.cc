#include "coordinator/http/openai_request.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tessera::http {
namespace {

constexpr int kMaxLogprobs = 20;

absl::StatusOr<OpenAiRequest> Completions(const std::string& body) {
  return ParseOpenAiRequest(body, Endpoint::kCompletions, kMaxLogprobs);
}
absl::StatusOr<OpenAiRequest> Chat(const std::string& body) {
  return ParseOpenAiRequest(body, Endpoint::kChatCompletions, kMaxLogprobs);
}

void ExpectParamError(const absl::StatusOr<OpenAiRequest>& r, const std::string& param, Endpoint endpoint);

TEST(OpenAiRequestTest, CompletionFieldsMapOntoTheGenerateRequest) {
  auto r = Completions(R"({"model": "m", "prompt": "Once upon", "max_tokens": 7, "temperature": 0.5,
      "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 42, "stop": ["a", "b"], "presence_penalty": 0.5,
      "frequency_penalty": -0.5, "repetition_penalty": 1.1, "logprobs": 3, "priority": -2, "ignore_eos": true,
      "user": "me", "n": 1, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 3);
  const v1::GenerateRequest& g = r->generate;
  EXPECT_EQ(g.text(), "Once upon");
  EXPECT_EQ(g.stopping().max_new_tokens(), 7u);
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.9f);
  EXPECT_EQ(g.sampling().top_k(), 40);
  EXPECT_FLOAT_EQ(g.sampling().min_p(), 0.05f);
  EXPECT_EQ(g.sampling().seed(), 42u);
  EXPECT_FLOAT_EQ(g.sampling().presence_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().frequency_penalty(), -0.5f);
  EXPECT_FLOAT_EQ(g.sampling().repetition_penalty(), 1.1f);
  ASSERT_EQ(g.stopping().stop_size(), 2);
  EXPECT_EQ(g.stopping().stop(1), "b");
  EXPECT_TRUE(g.stopping().ignore_eos());
  EXPECT_EQ(g.logprobs(), 3u);
  EXPECT_EQ(g.priority(), -2);
}

TEST(OpenAiRequestTest, VllmExtensions) {
  auto r = Completions(R"({"prompt": "x", "stop_token_ids": [2, 13], "min_tokens": 3, "top_k": -1})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->generate.stopping().stop_token_ids_size(), 2);
  EXPECT_EQ(r->generate.stopping().stop_token_ids(1), 13);
  EXPECT_EQ(r->generate.stopping().min_new_tokens(), 3u);
  EXPECT_EQ(r->generate.sampling().top_k(), 0);  // -1: off.
  ExpectParamError(Completions(R"({"prompt": "x", "stop_token_ids": ["a"]})"), "stop_token_ids",
                   Endpoint::kCompletions);
  EXPECT_EQ(ParamOf(absl::InvalidArgumentError("stopping.min_new_tokens = 9: must not exceed"),
                    Endpoint::kCompletions),
            "min_tokens");
}

TEST(OpenAiRequestTest, UnsetFieldsStayUnset) {
  auto r = Completions(R"({"prompt": "x", "temperature": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->model.empty());
  EXPECT_FALSE(r->generate.sampling().has_temperature());
  EXPECT_FALSE(r->generate.stopping().has_max_new_tokens());
  EXPECT_FALSE(r->max_tokens_set);
  EXPECT_FALSE(r->logprobs);
  EXPECT_EQ(r->generate.logprobs(), 0u);
}

TEST(OpenAiRequestTest, PromptForms) {
  auto one = Completions(R"({"prompt": ["only one"]})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->generate.text(), "only one");
  auto ids = Completions(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->generate.token_ids().ids_size(), 3);
  auto nested = Completions(R"({"prompt": [[5, 6]]})");
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(nested->generate.token_ids().ids(1), 6);
}

void ExpectParamError(const absl::StatusOr<OpenAiRequest>& r, const std::string& param, Endpoint endpoint) {
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_EQ(ParamOf(r.status(), endpoint), param) << r.status();
}

TEST(OpenAiRequestTest, ErrorsNameTheField) {
  ExpectParamError(Completions(R"({"prompt": "x", "n": 2})"), "n", Endpoint::kCompletions);
  ExpectParamError(Completions(R"({"prompt": ["a", "b"]})"), "prompt", Endpoint::kCompletions);
  ExpectParamError(Completions(R"({})"), "prompt", Endpoint::kCompletions);
  ExpectParamError(Completions(R"({"prompt": 3})"), "prompt", Endpoint::kCompletions);
  ExpectParamError(Completions(R"({"prompt": "x", "temperature": "hot"})"), "temperature", Endpoint::kCompletions);
  ExpectParamError(Completions(R"({"prompt": "x", "max_tokens": 0})"), "max_tokens", Endpoint::kCompletions);
  ExpectParamError(Completions(R"({"prompt": "x", "max_tokens": 1.5})"), "max_tokens", Endpoint::kCompletions);
  ExpectParamError(Completions(R"({"prompt": "x", "logprobs": 21})"), "logprobs", Endpoint::kCompletions);
  ExpectParamError(Completions(R"({"prompt": "x", "stop": [1]})"), "stop", Endpoint::kCompletions);
  ExpectParamError(Completions(R"({"prompt": "x", "echo": true})"), "echo", Endpoint::kCompletions);
  ExpectParamError(Completions(R"({"prompt": "x", "model": 5})"), "model", Endpoint::kCompletions);
  ExpectParamError(Completions(R"({"prompt": "x", "stream_options": {"include_usage": true}})"), "stream_options",
                   Endpoint::kCompletions);
  ExpectParamError(Chat(R"({"messages": []})"), "messages", Endpoint::kChatCompletions);
  ExpectParamError(Chat(R"({"messages": [{"content": "hi"}]})"), "messages", Endpoint::kChatCompletions);
  ExpectParamError(Chat(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"), "top_logprobs",
                   Endpoint::kChatCompletions);
}

TEST(OpenAiRequestTest, InvalidJsonIsAnInvalidArgument) {
  auto r = Completions("{not json");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
  EXPECT_TRUE(absl::StrContains(r.status().message(), "JSON"));
  EXPECT_EQ(ParamOf(r.status(), Endpoint::kCompletions), "");
}

TEST(OpenAiRequestTest, ChatMessagesAndLogprobs) {
  auto r = Chat(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]},
      {"role": "assistant", "content": null}],
      "logprobs": true, "top_logprobs": 0, "max_completion_tokens": 9, "max_tokens": 3})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[1].role, "user");
  EXPECT_EQ(r->messages[1].content, "Hello");
  EXPECT_EQ(r->messages[2].content, "");
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 0);
  // The engine reports the sampled token's logprob only with a top-n of at least one.
  EXPECT_EQ(r->generate.logprobs(), 1u);
  EXPECT_EQ(r->generate.stopping().max_new_tokens(), 9u);
}

TEST(OpenAiRequestTest, ValidationMessagesAreRenamedToOpenAiFields) {
  const absl::Status s = absl::InvalidArgumentError("sampling.temperature = -1: must be >= 0 (0 is greedy)");
  EXPECT_EQ(ParamOf(s, Endpoint::kCompletions), "temperature");
  EXPECT_EQ(OpenAiMessage(s, Endpoint::kCompletions), "temperature = -1: must be >= 0 (0 is greedy)");
  const absl::Status m = absl::InvalidArgumentError("stopping.max_new_tokens = 900: prompt ... exceeds");
  EXPECT_EQ(ParamOf(m, Endpoint::kChatCompletions), "max_tokens");
  EXPECT_EQ(ParamOf(absl::InvalidArgumentError("token_ids[3] = 99999: outside"), Endpoint::kCompletions), "prompt");
  EXPECT_EQ(ParamOf(absl::InvalidArgumentError("input = 9 tokens: too long"), Endpoint::kChatCompletions),
            "messages");
  EXPECT_EQ(ParamOf(absl::InvalidArgumentError("stopping.stop[0] = \"\": empty"), Endpoint::kCompletions), "stop");
  EXPECT_EQ(ParamOf(absl::UnavailableError("x = 1: no"), Endpoint::kCompletions), "");
  EXPECT_EQ(ParamOf(InvalidParam("n", "n = 2"), Endpoint::kCompletions), "n");
}

}  // namespace
}  // namespace tessera::http
