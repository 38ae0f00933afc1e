#include "coordinator/http/openai_response.h"

#include "coordinator/http/sse_writer.h"
#include "gtest/gtest.h"

namespace tessera::http {
namespace {

using json = nlohmann::json;

const ResponseMeta kMeta{"cmpl-1", 1700000000, "stories260K"};

TEST(OpenAiResponseTest, CompletionShape) {
  const json r = CompletionResponse(kMeta, "Once", nullptr, "length", Usage(3, 4));
  EXPECT_EQ(r["id"], "cmpl-1");
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["created"], 1700000000);
  EXPECT_EQ(r["model"], "stories260K");
  ASSERT_EQ(r["choices"].size(), 1u);
  EXPECT_EQ(r["choices"][0]["index"], 0);
  EXPECT_EQ(r["choices"][0]["text"], "Once");
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"], json({{"prompt_tokens", 3}, {"completion_tokens", 4}, {"total_tokens", 7}}));
}

TEST(OpenAiResponseTest, ChatShape) {
  const json r = ChatCompletionResponse(kMeta, "Hi", nullptr, "stop", Usage(1, 1));
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"], json({{"role", "assistant"}, {"content", "Hi"}}));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
}

TEST(OpenAiResponseTest, ChunksCarryUsageNullOnlyWhenAskedFor) {
  const json plain = CompletionChunk(kMeta, "a", nullptr, nullptr, false);
  EXPECT_FALSE(plain.contains("usage"));
  EXPECT_TRUE(plain["choices"][0]["finish_reason"].is_null());
  const json with = CompletionChunk(kMeta, "a", nullptr, "stop", true);
  EXPECT_TRUE(with["usage"].is_null());
  EXPECT_EQ(with["choices"][0]["finish_reason"], "stop");
  const json usage = UsageChunk(kMeta, Endpoint::kChatCompletions, Usage(2, 5));
  EXPECT_EQ(usage["object"], "chat.completion.chunk");
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
}

TEST(OpenAiResponseTest, ChatChunkDeltas) {
  const std::string empty;
  const json first = ChatChunk(kMeta, true, &empty, nullptr, nullptr, false);
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  const json last = ChatChunk(kMeta, false, nullptr, nullptr, "length", false);
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
}

TEST(OpenAiResponseTest, Logprobs) {
  std::vector<TokenLogprobText> t = {{" Once", -0.5f, {{" Once", -0.5f}, {" The", -1.5f}}},
                                     {" upon", -0.25f, {}}};
  const json c = CompletionLogprobs(t, 10);
  EXPECT_EQ(c["tokens"], json({" Once", " upon"}));
  EXPECT_EQ(c["token_logprobs"], json({-0.5, -0.25}));
  EXPECT_EQ(c["text_offset"], json({10, 15}));
  EXPECT_EQ(c["top_logprobs"][0], json({{" Once", -0.5}, {" The", -1.5}}));
  EXPECT_EQ(c["top_logprobs"][1], json::object());
  const json chat = ChatLogprobs(t);
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["token"], " Once");
  EXPECT_EQ(chat["content"][0]["bytes"], json({32, 79, 110, 99, 101}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], " The");
  EXPECT_TRUE(chat["content"][1]["top_logprobs"].empty());
}

TEST(OpenAiResponseTest, StatusesMapToHttpCodes) {
  EXPECT_EQ(ToApiError(absl::InvalidArgumentError("sampling.top_p = 2: must be in (0, 1]"), Endpoint::kCompletions)
                .http_status,
            400);
  const ApiError bad = ToApiError(absl::InvalidArgumentError("sampling.top_p = 2: x"), Endpoint::kCompletions);
  EXPECT_EQ(bad.param, "top_p");
  EXPECT_EQ(bad.type, "invalid_request_error");
  EXPECT_EQ(ToApiError(absl::ResourceExhaustedError("queue full"), Endpoint::kCompletions).http_status, 429);
  EXPECT_EQ(ToApiError(absl::UnavailableError("no replica"), Endpoint::kCompletions).http_status, 503);
  EXPECT_EQ(ToApiError(absl::UnimplementedError("no"), Endpoint::kCompletions).http_status, 501);
  EXPECT_EQ(ToApiError(absl::InternalError("boom"), Endpoint::kCompletions).http_status, 500);
  EXPECT_EQ(ToApiError(absl::NotFoundError("x"), Endpoint::kCompletions).http_status, 404);
}

TEST(OpenAiResponseTest, ErrorShape) {
  const json e = ErrorBody(ModelNotFound("gpt-4"));
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  EXPECT_EQ(e["error"]["param"], "model");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["message"], "The model `gpt-4` does not exist.");
  ApiError plain;
  plain.message = "boom";
  const json p = ErrorBody(plain);
  EXPECT_TRUE(p["error"]["param"].is_null());
  EXPECT_TRUE(p["error"]["code"].is_null());
}

TEST(OpenAiResponseTest, DumpReplacesInvalidUtf8) {
  EXPECT_EQ(Dump(json("a\xE2\x96")), "\"a\xEF\xBF\xBD\"");
}

TEST(SseWriterTest, Framing) {
  EXPECT_EQ(SseEvent(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(SseDone(), "data: [DONE]\n\n");
  EXPECT_EQ(HttpChunk("hello"), "5\r\nhello\r\n");
  EXPECT_EQ(HttpChunk(std::string(26, 'x')), "1a\r\n" + std::string(26, 'x') + "\r\n");
  EXPECT_EQ(HttpChunk(""), "");
  EXPECT_EQ(HttpLastChunk(), "0\r\n\r\n");
}

TEST(OpenAiResponseTest, FinishReasons) {
  EXPECT_STREQ(FinishReasonString(sched::FinishReason::kEos), "stop");
  EXPECT_STREQ(FinishReasonString(sched::FinishReason::kStop), "stop");
  EXPECT_STREQ(FinishReasonString(sched::FinishReason::kLength), "length");
}

TEST(OpenAiResponseTest, ModelList) {
  const json m = ModelList("stories260K", 5, 512);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "stories260K");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["owned_by"], "tessera");
}

}  // namespace
}  // namespace tessera::http
