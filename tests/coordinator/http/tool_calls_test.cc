// Reading tool calls back out of model output in each family's format, whole and
// streamed, and the OpenAI shapes they are answered in.
#include "coordinator/http/tool_calls.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "coordinator/http/openai_response.h"
#include "coordinator/http/tool_call_stream.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::http {
namespace {

using json = nlohmann::json;

TEST(ToolCallsTest, DetectsTheFamilyFromItsTemplate) {
  EXPECT_EQ(DetectToolCallFormat("{{ '[TOOL_CALLS] [' }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(DetectToolCallFormat("{{- '\\n<tool_call>\\n{\"name\": \"' }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat("Environment: ipython <|python_tag|>"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat("{{ messages }}"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(*ToolCallFormatFromName("mistral"), ToolCallFormat::kMistral);
  EXPECT_EQ(*ToolCallFormatFromName("hermes"), ToolCallFormat::kHermes);
  EXPECT_EQ(*ToolCallFormatFromName("llama3_json"), ToolCallFormat::kLlama3Json);
  EXPECT_FALSE(ToolCallFormatFromName("pythonic").ok());
}

TEST(ToolCallsTest, IdsLookLikeOpenAisAndMistralsHaveNine) {
  const std::string id = NewToolCallId(ToolCallFormat::kHermes);
  EXPECT_TRUE(absl::StartsWith(id, "call_")) << id;
  EXPECT_EQ(id.size(), 29u);
  EXPECT_NE(id, NewToolCallId(ToolCallFormat::kHermes));
  const std::string mistral = NewToolCallId(ToolCallFormat::kMistral);
  EXPECT_EQ(mistral.size(), 9u);
  for (char c : mistral) EXPECT_TRUE(isalnum(static_cast<unsigned char>(c))) << mistral;
}

TEST(ToolCallsTest, Llama3Json) {
  auto one = ParseToolCalls(ToolCallFormat::kLlama3Json,
                            R"({"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}})", false);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->content, "");
  ASSERT_EQ(one->calls.size(), 1u);
  EXPECT_EQ(one->calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(one->calls[0].arguments), json({{"city", "Paris"}, {"unit", "c"}}));
  // The model's key order survives.
  EXPECT_LT(one->calls[0].arguments.find("city"), one->calls[0].arguments.find("unit"));
  auto several = ParseToolCalls(ToolCallFormat::kLlama3Json,
                                " <|python_tag|>{\"name\": \"a\", \"arguments\": {}}; {\"name\": \"b\", "
                                "\"parameters\": {\"x\": \"}; {\"}}\n",
                                false);
  ASSERT_TRUE(several.has_value());
  ASSERT_EQ(several->calls.size(), 2u);
  EXPECT_EQ(several->calls[0].name, "a");
  EXPECT_EQ(several->calls[0].arguments, "{}");
  EXPECT_EQ(json::parse(several->calls[1].arguments)["x"], "}; {");
  EXPECT_NE(several->calls[0].id, several->calls[1].id);
}

TEST(ToolCallsTest, Llama3JsonThatIsNoCallIsContent) {
  for (const char* text : {"Hello there", "Sure: {\"name\": \"a\", \"parameters\": {}}", "{\"name\": \"a\"}",
                           "{\"name\": \"a\", \"parameters\": {\"x\": 1}", "{\"name\": 3, \"parameters\": {}}",
                           "{\"name\": \"a\", \"parameters\": {}} and more", "{not json}", "", "[1, 2]"}) {
    EXPECT_FALSE(ParseToolCalls(ToolCallFormat::kLlama3Json, text, false).has_value()) << text;
  }
}

TEST(ToolCallsTest, Hermes) {
  auto r = ParseToolCalls(ToolCallFormat::kHermes,
                          "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                          "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
                          "{\"zone\": \"CET\"}}\n</tool_call>",
                          false);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->content, "Let me check.\n");
  ASSERT_EQ(r->calls.size(), 2u);
  EXPECT_EQ(r->calls[1].name, "get_time");
  EXPECT_EQ(json::parse(r->calls[1].arguments), json({{"zone", "CET"}}));
  // The output ended before the closing tag.
  auto unclosed = ParseToolCalls(ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n", false);
  ASSERT_TRUE(unclosed.has_value());
  EXPECT_EQ(unclosed->content, "");
  EXPECT_EQ(unclosed->calls[0].name, "f");
  // Arguments the model wrote as JSON text stay that text.
  auto text_args = ParseToolCalls(ToolCallFormat::kHermes,
                                  "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", false);
  ASSERT_TRUE(text_args.has_value());
  EXPECT_EQ(text_args->calls[0].arguments, "{\"a\": 1}");
}

TEST(ToolCallsTest, MalformedHermesIsContent) {
  for (const char* text : {"no calls here", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}\n</tool_call>",
                           "<tool_call>{\"arguments\": {}}</tool_call>",
                           "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call><tool_call>oops</tool_call>"}) {
    EXPECT_FALSE(ParseToolCalls(ToolCallFormat::kHermes, text, false).has_value()) << text;
  }
}

TEST(ToolCallsTest, Mistral) {
  auto r = ParseToolCalls(ToolCallFormat::kMistral,
                          "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                          "{\"name\": \"get_time\", \"arguments\": {}}]",
                          false);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->content, "");
  ASSERT_EQ(r->calls.size(), 2u);
  EXPECT_EQ(r->calls[0].name, "get_weather");
  EXPECT_EQ(r->calls[0].id.size(), 9u);
  EXPECT_EQ(json::parse(r->calls[0].arguments), json({{"city", "Paris"}}));
  EXPECT_EQ(r->calls[1].arguments, "{}");
  // Without the marker only a forced output is calls: where [TOOL_CALLS] is a special
  // token a grammar cannot make the model write it.
  const char* bare = " [{\"name\": \"f\", \"arguments\": {\"a\": [1]}}]";
  EXPECT_FALSE(ParseToolCalls(ToolCallFormat::kMistral, bare, false).has_value());
  auto forced = ParseToolCalls(ToolCallFormat::kMistral, bare, true);
  ASSERT_TRUE(forced.has_value());
  EXPECT_EQ(forced->calls[0].name, "f");
}

TEST(ToolCallsTest, MalformedMistralIsContent) {
  for (const char* text : {"[TOOL_CALLS]", "[TOOL_CALLS] [", "[TOOL_CALLS] []", "[TOOL_CALLS] {\"name\": \"f\"}",
                           "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}] trailing",
                           "[TOOL_CALLS] [{\"name\": \"f\"}]", "[TOOL_CALLS] [1]"}) {
    EXPECT_FALSE(ParseToolCalls(ToolCallFormat::kMistral, text, false).has_value()) << text;
  }
}

// Pushes `pieces` one by one; what streamed as content, and the end.
struct Streamed {
  std::string content;
  ToolCallStream::End end;
};
Streamed Stream(const ToolCallParsing& parsing, const std::vector<std::string>& pieces) {
  ToolCallStream stream(parsing);
  Streamed out;
  for (const std::string& p : pieces) out.content += stream.Push(p);
  out.end = stream.Finish();
  return out;
}

TEST(ToolCallStreamTest, PlainContentStreamsAsItComes) {
  ToolCallStream llama({ToolCallFormat::kLlama3Json});
  EXPECT_EQ(llama.Push("Hel"), "Hel");
  EXPECT_EQ(llama.Push("lo {"), "lo {");
  EXPECT_EQ(llama.Finish().content, "");
  ToolCallStream hermes({ToolCallFormat::kHermes});
  EXPECT_EQ(hermes.Push("a <"), "a ");  // "<" may open "<tool_call>".
  EXPECT_EQ(hermes.Push("b>"), "<b>");
  const ToolCallStream::End end = hermes.Finish();
  EXPECT_EQ(end.content, "");
  EXPECT_TRUE(end.calls.empty());
}

TEST(ToolCallStreamTest, CallsAreHeldAndParsedAtTheEnd) {
  Streamed llama = Stream({ToolCallFormat::kLlama3Json},
                          {"\n", "{\"name\": \"f\", ", "\"parameters\": {\"a\": 1}", "}"});
  EXPECT_EQ(llama.content, "");
  ASSERT_EQ(llama.end.calls.size(), 1u);
  EXPECT_EQ(llama.end.calls[0].name, "f");
  Streamed hermes = Stream({ToolCallFormat::kHermes},
                           {"Checking", ".\n<tool", "_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>"});
  EXPECT_EQ(hermes.content, "Checking.\n");
  ASSERT_EQ(hermes.end.calls.size(), 1u);
  EXPECT_EQ(hermes.end.calls[0].name, "g");
  Streamed mistral = Stream({ToolCallFormat::kMistral},
                            {"[TOOL_", "CALLS] [{\"name\": \"h\", \"arguments\": {\"x\": 2}}]"});
  EXPECT_EQ(mistral.content, "");
  ASSERT_EQ(mistral.end.calls.size(), 1u);
  EXPECT_EQ(mistral.end.calls[0].arguments, "{\"x\":2}");
}

TEST(ToolCallStreamTest, HeldTextThatIsNoCallIsContentAtTheEnd) {
  Streamed llama = Stream({ToolCallFormat::kLlama3Json}, {"{\"just\": ", "\"json\"}"});
  EXPECT_EQ(llama.content, "");
  EXPECT_TRUE(llama.end.calls.empty());
  EXPECT_EQ(llama.end.content, "{\"just\": \"json\"}");
  Streamed hermes = Stream({ToolCallFormat::kHermes}, {"x <tool_call>", "broken"});
  EXPECT_EQ(hermes.content, "x ");
  EXPECT_EQ(hermes.end.content, "<tool_call>broken");
}

TEST(ToolCallStreamTest, ForcedOutputIsHeldWhole) {
  ToolCallParsing forced{ToolCallFormat::kMistral, /*forced=*/true};
  Streamed s = Stream(forced, {"[{\"name\": \"f\", ", "\"arguments\": {}}]"});
  EXPECT_EQ(s.content, "");
  ASSERT_EQ(s.end.calls.size(), 1u);
}

TEST(ToolCallResponseTest, Shapes) {
  ResponseMeta meta{"chatcmpl-1", 5, "m"};
  std::vector<ToolCall> calls = {{"call_a", "f", "{\"x\":1}"}, {"call_b", "g", "{}"}};
  const json whole = ChatCompletionResponse(meta, "", nullptr, "tool_calls", Usage(1, 2), calls);
  const json& message = whole["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  EXPECT_EQ(message["tool_calls"][1], json({{"id", "call_b"}, {"type", "function"},
                                            {"function", {{"name", "g"}, {"arguments", "{}"}}}}));
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(ChatCompletionResponse(meta, "pre", nullptr, "tool_calls", Usage(1, 2), calls)["choices"][0]["message"]
                                  ["content"],
            "pre");
  EXPECT_EQ(ChatCompletionResponse(meta, "", nullptr, "stop", Usage(1, 2))["choices"][0]["message"]["content"], "");

  const std::vector<json> deltas = ToolCallDeltas(calls);
  ASSERT_EQ(deltas.size(), 4u);
  EXPECT_EQ(deltas[0], json({{"index", 0}, {"id", "call_a"}, {"type", "function"},
                             {"function", {{"name", "f"}, {"arguments", ""}}}}));
  EXPECT_EQ(deltas[1], json({{"index", 0}, {"function", {{"arguments", "{\"x\":1}"}}}}));
  EXPECT_EQ(deltas[2]["index"], 1);
  const json chunk = ChatToolCallChunk(meta, deltas[0], true);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"]["tool_calls"][0]["id"], "call_a");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(chunk.contains("usage"));
}

}  // namespace
}  // namespace tessera::http
