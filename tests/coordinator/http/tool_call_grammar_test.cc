// The grammars that hold a forced tool call to the family's format and the function's
// parameters: what they accept parses back into calls, and what breaks either is refused.
#include "coordinator/http/tool_call_grammar.h"

#include <memory>
#include <string>

#include "common/structured/grammar.h"
#include "coordinator/http/openai_request.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::http {
namespace {

std::vector<ToolFunction> Functions() {
  return {
      {"get_weather", nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
          "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
          "required": ["city", "days"], "additionalProperties": false})")},
      {"get_time", nullptr},
  };
}

std::shared_ptr<const structured::Grammar> Compile(ToolCallFormat format, std::vector<size_t> indices, bool parallel) {
  absl::StatusOr<std::string> gbnf = ToolCallGrammar(format, Functions(), indices, parallel);
  EXPECT_TRUE(gbnf.ok()) << gbnf.status();
  if (!gbnf.ok()) return nullptr;
  auto grammar = structured::Grammar::FromGbnf(*gbnf);
  EXPECT_TRUE(grammar.ok()) << grammar.status() << "\n" << *gbnf;
  return grammar.ok() ? *grammar : nullptr;
}

// Accepted, and parsed back into the calls named (what a forced output must give).
void ExpectCalls(ToolCallFormat format, const structured::Grammar& grammar, const std::string& text,
                 const std::vector<std::string>& names) {
  EXPECT_TRUE(grammar.Accepts(text)) << text;
  std::optional<ParsedToolCalls> parsed = ParseToolCalls(format, text, /*forced=*/true);
  ASSERT_TRUE(parsed.has_value()) << text;
  ASSERT_EQ(parsed->calls.size(), names.size()) << text;
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(parsed->calls[i].name, names[i]) << text;
}

constexpr const char* kWeather = R"({"city": "Paris", "days": 3})";

TEST(ToolCallGrammarTest, Llama3JsonNamedFunction) {
  auto g = Compile(ToolCallFormat::kLlama3Json, {0}, false);
  ASSERT_NE(g, nullptr);
  ExpectCalls(ToolCallFormat::kLlama3Json, *g, std::string(R"({"name": "get_weather", "parameters": )") + kWeather + "}",
              {"get_weather"});
  EXPECT_FALSE(g->Accepts(R"({"name": "get_time", "parameters": {}})"));
  EXPECT_FALSE(g->Accepts(R"({"name": "get_weather", "parameters": {"city": "Paris", "days": 9}})"));  // maximum.
  EXPECT_FALSE(g->Accepts(R"({"name": "get_weather", "parameters": {"city": "Paris"}})"));  // required.
  EXPECT_FALSE(g->Accepts(R"({"name": "get_weather", "arguments": {"city": "Paris", "days": 3}})"));
  EXPECT_FALSE(g->Accepts(std::string(R"({"name": "get_weather", "parameters": )") + kWeather + "}; " +
                          R"({"name": "get_weather", "parameters": )" + kWeather + "}"));  // One call.
  EXPECT_TRUE(g->AcceptsPrefix(R"({"name": "get_weather", "parameters": {"ci)"));
  EXPECT_FALSE(g->AcceptsPrefix("Sure"));
}

TEST(ToolCallGrammarTest, Llama3JsonRequiredParallel) {
  auto g = Compile(ToolCallFormat::kLlama3Json, {0, 1}, true);
  ASSERT_NE(g, nullptr);
  ExpectCalls(ToolCallFormat::kLlama3Json, *g,
              std::string(R"({"name": "get_time", "parameters": {"zone": "UTC"}}; {"name": "get_weather", )") +
                  R"("parameters": )" + kWeather + "}",
              {"get_time", "get_weather"});
  ExpectCalls(ToolCallFormat::kLlama3Json, *g, R"({"name": "get_time", "parameters": {}})", {"get_time"});
  ExpectCalls(ToolCallFormat::kLlama3Json, *g, R"({"name":"get_time","parameters":{}};{"name":"get_time","parameters":{}})",
              {"get_time", "get_time"});
  EXPECT_FALSE(g->Accepts(R"({"name":  "get_time", "parameters": {}})"));  // At most one space.
  EXPECT_FALSE(g->Accepts(R"({"name": "get_time", "parameters": []})"));  // Any object, but an object.
  EXPECT_FALSE(g->Accepts(""));
}

TEST(ToolCallGrammarTest, Hermes) {
  auto one = Compile(ToolCallFormat::kHermes, {0}, false);
  ASSERT_NE(one, nullptr);
  const std::string call = std::string("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ") + kWeather +
                           "}\n</tool_call>";
  ExpectCalls(ToolCallFormat::kHermes, *one, call, {"get_weather"});
  EXPECT_FALSE(one->Accepts(call + "\n" + call));
  EXPECT_FALSE(one->Accepts("Thinking...\n" + call));
  auto many = Compile(ToolCallFormat::kHermes, {0, 1}, true);
  ASSERT_NE(many, nullptr);
  ExpectCalls(ToolCallFormat::kHermes, *many,
              call + "\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>",
              {"get_weather", "get_time"});
  EXPECT_FALSE(many->Accepts("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
}

TEST(ToolCallGrammarTest, MistralWithOrWithoutItsMarker) {
  auto g = Compile(ToolCallFormat::kMistral, {0, 1}, true);
  ASSERT_NE(g, nullptr);
  const std::string calls = std::string("[{\"name\": \"get_weather\", \"arguments\": ") + kWeather +
                            "}, {\"name\": \"get_time\", \"arguments\": {}}]";
  ExpectCalls(ToolCallFormat::kMistral, *g, "[TOOL_CALLS] " + calls, {"get_weather", "get_time"});
  ExpectCalls(ToolCallFormat::kMistral, *g, "[TOOL_CALLS]" + calls, {"get_weather", "get_time"});
  ExpectCalls(ToolCallFormat::kMistral, *g, calls, {"get_weather", "get_time"});
  ExpectCalls(ToolCallFormat::kMistral, *g, " " + calls, {"get_weather", "get_time"});
  EXPECT_FALSE(g->Accepts("[TOOL_CALLS] []"));
  // Without the spaces the template writes.
  ExpectCalls(ToolCallFormat::kMistral, *g,
              "[TOOL_CALLS][{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\"days\":3}},"
              "{\"name\":\"get_time\",\"arguments\":{}}]",
              {"get_weather", "get_time"});
  auto single = Compile(ToolCallFormat::kMistral, {1}, false);
  ASSERT_NE(single, nullptr);
  ExpectCalls(ToolCallFormat::kMistral, *single, "[{\"name\": \"get_time\", \"arguments\": {\"a\": [1, 2]}}]",
              {"get_time"});
  EXPECT_FALSE(single->Accepts("[{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": \"get_time\", \"arguments\": {}}]"));
}

TEST(ToolCallGrammarTest, ToolChoiceGrammarPicksTheFunctions) {
  ToolRequest named;
  named.functions = Functions();
  named.choice = ToolChoice::kNamed;
  named.named = "get_time";
  auto gbnf = ToolChoiceGrammar(ToolCallFormat::kHermes, named);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  EXPECT_EQ(gbnf->find("get_weather"), std::string::npos) << *gbnf;
  ToolRequest required = named;
  required.choice = ToolChoice::kRequired;
  required.parallel_tool_calls = false;
  gbnf = ToolChoiceGrammar(ToolCallFormat::kHermes, required);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  auto g = structured::Grammar::FromGbnf(*gbnf);
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string time = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE((*g)->Accepts(time));
  EXPECT_FALSE((*g)->Accepts(time + "\n" + time));  // parallel_tool_calls false.
  ToolRequest automatic = named;
  automatic.choice = ToolChoice::kAuto;
  EXPECT_FALSE(ToolChoiceGrammar(ToolCallFormat::kHermes, automatic).ok());
}

TEST(ToolCallGrammarTest, AnUnsupportedSchemaNamesTheTool) {
  std::vector<ToolFunction> functions = {
      {"f", nlohmann::ordered_json::parse(R"({"type": "object", "patternProperties": {"^x": {}}})")}};
  auto gbnf = ToolCallGrammar(ToolCallFormat::kHermes, functions, {0}, false);
  ASSERT_FALSE(gbnf.ok());
  EXPECT_NE(gbnf.status().message().find("tools[0].function.parameters"), std::string::npos) << gbnf.status();
  EXPECT_EQ(ParamOf(gbnf.status(), Endpoint::kChatCompletions), "tools");
}

}  // namespace
}  // namespace tessera::http
