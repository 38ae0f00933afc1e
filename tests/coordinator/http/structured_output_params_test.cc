// Structured outputs of OpenAI (response_format) and vLLM (guided_*, structured_outputs)
// parsed into GenerateRequest.constraint, on both endpoints.
#include <string>

#include "coordinator/http/openai_request.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::http {
namespace {

absl::StatusOr<OpenAiRequest> Chat(const std::string& extra) {
  return ParseOpenAiRequest(R"({"messages": [{"role": "user", "content": "hi"}], )" + extra + "}",
                            Endpoint::kChatCompletions, 20);
}
absl::StatusOr<OpenAiRequest> Completions(const std::string& extra) {
  return ParseOpenAiRequest(R"({"prompt": "hi", )" + extra + "}", Endpoint::kCompletions, 20);
}

void ExpectParamError(const absl::StatusOr<OpenAiRequest>& r, const std::string& param,
                      Endpoint endpoint = Endpoint::kChatCompletions) {
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_EQ(ParamOf(r.status(), endpoint), param) << r.status();
}

TEST(StructuredOutputParamsTest, NoConstraintByDefaultOrForText) {
  auto plain = ParseOpenAiRequest(R"({"prompt": "hi"})", Endpoint::kCompletions, 20);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->generate.has_constraint());
  auto text = Chat(R"("response_format": {"type": "text"})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_FALSE(text->generate.has_constraint());
  auto nulls = Chat(R"("response_format": null, "guided_json": null, "guided_regex": null)");
  ASSERT_TRUE(nulls.ok()) << nulls.status();
  EXPECT_FALSE(nulls->generate.has_constraint());
}

TEST(StructuredOutputParamsTest, ResponseFormatJsonObject) {
  for (auto* parse : {&Chat, &Completions}) {
    auto r = (*parse)(R"("response_format": {"type": "json_object"})");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->generate.constraint().json_object());
  }
}

TEST(StructuredOutputParamsTest, ResponseFormatJsonSchemaKeepsThePropertyOrder) {
  auto r = Chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "person",
      "description": "A person.", "strict": true, "schema": {"type": "object",
      "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}, "required": ["zeta"]}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->generate.constraint().kind_case(), v1::Constraint::kJsonSchema);
  const std::string& schema = r->generate.constraint().json_schema();
  EXPECT_LT(schema.find("zeta"), schema.find("alpha")) << schema;
  EXPECT_EQ(nlohmann::json::parse(schema)["required"][0], "zeta");
  auto completions = Completions(R"("response_format": {"type": "json_schema", "json_schema": {"name": "n",
      "schema": {"type": "string"}}})");
  ASSERT_TRUE(completions.ok()) << completions.status();
  EXPECT_EQ(nlohmann::json::parse(completions->generate.constraint().json_schema()), nlohmann::json({{"type", "string"}}));
}

TEST(StructuredOutputParamsTest, ResponseFormatErrorsNameTheParam) {
  ExpectParamError(Chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}})"),
                   "response_format.json_schema.schema");
  ExpectParamError(Chat(R"("response_format": {"type": "json_schema"})"), "response_format.json_schema");
  ExpectParamError(Chat(R"("response_format": {"type": "json_schema", "json_schema": "x"})"),
                   "response_format.json_schema");
  ExpectParamError(Chat(R"("response_format": {"type": "json_schema", "json_schema": {"schema": 3}})"),
                   "response_format.json_schema.schema");
  ExpectParamError(Chat(R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": 1}})"),
                   "response_format.json_schema.strict");
  ExpectParamError(Chat(R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}, "name": 1}})"),
                   "response_format.json_schema.name");
  ExpectParamError(Chat(R"("response_format": {"type": "yaml"})"), "response_format.type");
  ExpectParamError(Chat(R"("response_format": {})"), "response_format.type");
  ExpectParamError(Chat(R"("response_format": "json_object")"), "response_format");
  ExpectParamError(Completions(R"("response_format": {"type": 1})"), "response_format.type", Endpoint::kCompletions);
}

TEST(StructuredOutputParamsTest, VllmGuidedParams) {
  auto json_object = Chat(R"("guided_json": {"type": "object", "properties": {"b": {}, "a": {}}})");
  ASSERT_TRUE(json_object.ok()) << json_object.status();
  const std::string& schema = json_object->generate.constraint().json_schema();
  EXPECT_LT(schema.find("\"b\""), schema.find("\"a\"")) << schema;
  auto json_text = Completions(R"("guided_json": "{\"type\": \"integer\"}")");
  ASSERT_TRUE(json_text.ok()) << json_text.status();
  EXPECT_EQ(json_text->generate.constraint().json_schema(), R"({"type": "integer"})");
  auto regex = Chat(R"("guided_regex": "[a-z]+@[a-z]+\\.com")");
  ASSERT_TRUE(regex.ok()) << regex.status();
  EXPECT_EQ(regex->generate.constraint().regex(), "[a-z]+@[a-z]+\\.com");
  auto choice = Completions(R"("guided_choice": ["yes", "no"])");
  ASSERT_TRUE(choice.ok()) << choice.status();
  ASSERT_EQ(choice->generate.constraint().choice().choices_size(), 2);
  EXPECT_EQ(choice->generate.constraint().choice().choices(1), "no");
  auto grammar = Chat(R"("guided_grammar": "root ::= \"a\"+")");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  EXPECT_EQ(grammar->generate.constraint().grammar(), "root ::= \"a\"+");
}

TEST(StructuredOutputParamsTest, VllmStructuredOutputs) {
  auto json = Chat(R"("structured_outputs": {"json": {"type": "boolean"}})");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(nlohmann::json::parse(json->generate.constraint().json_schema()), nlohmann::json({{"type", "boolean"}}));
  auto regex = Completions(R"("structured_outputs": {"regex": "\\d+"})");
  ASSERT_TRUE(regex.ok()) << regex.status();
  EXPECT_EQ(regex->generate.constraint().regex(), "\\d+");
  auto choice = Chat(R"("structured_outputs": {"choice": ["a"], "disable_any_whitespace": true})");
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->generate.constraint().choice().choices(0), "a");
  auto grammar = Chat(R"("structured_outputs": {"grammar": "root ::= \"x\""})");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  EXPECT_EQ(grammar->generate.constraint().grammar(), "root ::= \"x\"");
  auto object = Chat(R"("structured_outputs": {"json_object": true})");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_TRUE(object->generate.constraint().json_object());
  auto off = Chat(R"("structured_outputs": {"json_object": false})");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->generate.has_constraint());
}

TEST(StructuredOutputParamsTest, WrongTypesNameTheParam) {
  ExpectParamError(Chat(R"("guided_json": 5)"), "guided_json");
  ExpectParamError(Chat(R"("guided_json": [1])"), "guided_json");
  ExpectParamError(Chat(R"("guided_regex": 5)"), "guided_regex");
  ExpectParamError(Chat(R"("guided_choice": "yes")"), "guided_choice");
  ExpectParamError(Chat(R"("guided_choice": ["yes", 1])"), "guided_choice");
  ExpectParamError(Chat(R"("guided_grammar": {"root": 1})"), "guided_grammar");
  ExpectParamError(Chat(R"("structured_outputs": [])"), "structured_outputs");
  ExpectParamError(Chat(R"("structured_outputs": {"json": 1})"), "structured_outputs.json");
  ExpectParamError(Chat(R"("structured_outputs": {"regex": []})"), "structured_outputs.regex");
  ExpectParamError(Chat(R"("structured_outputs": {"choice": [null]})"), "structured_outputs.choice");
  ExpectParamError(Chat(R"("structured_outputs": {"json_object": "yes"})"), "structured_outputs.json_object");
  ExpectParamError(Chat(R"("structured_outputs": {"xml": "<a/>"})"), "structured_outputs.xml");
  ExpectParamError(Completions(R"("guided_regex": false)"), "guided_regex", Endpoint::kCompletions);
}

TEST(StructuredOutputParamsTest, MoreThanOneConstraintIsRefusedNamingThem) {
  auto r = Chat(R"("response_format": {"type": "json_object"}, "guided_regex": "a+")");
  ExpectParamError(r, "guided_regex");
  EXPECT_NE(r.status().message().find("response_format, guided_regex"), std::string::npos) << r.status();
  ExpectParamError(Completions(R"("guided_json": {}, "guided_choice": ["a"])"), "guided_choice",
                   Endpoint::kCompletions);
  ExpectParamError(Chat(R"("structured_outputs": {"regex": "a", "choice": ["a"]})"), "structured_outputs.choice");
  ExpectParamError(Chat(R"("guided_grammar": "root ::= \"a\"", "structured_outputs": {"json": {}})"),
                   "structured_outputs.json");
}

}  // namespace
}  // namespace tessera::http
