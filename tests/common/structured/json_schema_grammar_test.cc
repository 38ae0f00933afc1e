// JsonSchemaToGbnf: the grammars compile and accept exactly the documents that validate
// (in schema order, with the bounded whitespace), and unsupported schemas are refused by
// keyword and location.
#include "common/structured/json_schema_grammar.h"

#include <chrono>
#include <memory>
#include <string>

#include "common/structured/grammar.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::structured {
namespace {

using OrderedJson = nlohmann::ordered_json;

std::shared_ptr<const Grammar> Compile(absl::string_view schema_text,
                                       const JsonGrammarOptions& options = {}) {
  const OrderedJson schema = OrderedJson::parse(schema_text);
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(schema, options);
  EXPECT_TRUE(gbnf.ok()) << schema_text << ": " << gbnf.status();
  if (!gbnf.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<const Grammar>> grammar = Grammar::FromGbnf(*gbnf);
  EXPECT_TRUE(grammar.ok()) << grammar.status() << "\n" << *gbnf;
  return grammar.ok() ? *grammar : nullptr;
}

absl::Status Refusal(absl::string_view schema_text) {
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(OrderedJson::parse(schema_text));
  EXPECT_FALSE(gbnf.ok()) << schema_text << " -> " << *gbnf;
  return gbnf.status();
}

TEST(JsonSchemaGrammarTest, ObjectWithRequiredAndOptionalProperties) {
  auto g = Compile(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "email": {"type": "string", "format": "email"}}, "required": ["name", "age"]})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->Accepts(R"({"name": "Ann", "age": 31})"));
  EXPECT_TRUE(g->Accepts(R"({"name": "Ann", "age": 31, "email": "ann@example.com"})"));
  EXPECT_TRUE(g->Accepts("{\n  \"name\": \"Ann\",\n  \"age\": 0\n}"));
  EXPECT_TRUE(g->Accepts(R"({"name": "A \"q\" \u00e9", "age": 150})"));
  EXPECT_FALSE(g->Accepts(R"({"name": "Ann"})"));              // Missing required.
  EXPECT_FALSE(g->Accepts(R"({"name": "Ann", "age": 151})"));  // Past maximum.
  EXPECT_FALSE(g->Accepts(R"({"name": "Ann", "age": -1})"));   // Below minimum.
  EXPECT_FALSE(g->Accepts(R"({"name": "Ann", "age": "31"})")); // Wrong type.
  EXPECT_FALSE(g->Accepts(R"({"name": "Ann", "age": 31, "x": 1})"));  // Not listed.
  EXPECT_FALSE(g->Accepts(R"({"name": "Ann", "age": 31, "email": "nope"})"));
  EXPECT_FALSE(g->Accepts(R"({"name": "Ann", "age": 031})"));
  EXPECT_TRUE(g->AcceptsPrefix(R"({"name": "An)"));
}

TEST(JsonSchemaGrammarTest, OptionalPropertiesBeforeTheFirstRequiredOne) {
  auto g = Compile(R"({"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "integer"}, "r": {"type": "boolean"}, "c": {"type": "null"}},
      "required": ["r"]})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->Accepts(R"({"r": true})"));
  EXPECT_TRUE(g->Accepts(R"({"a": 1, "r": true})"));
  EXPECT_TRUE(g->Accepts(R"({"b": 2, "r": false, "c": null})"));
  EXPECT_TRUE(g->Accepts(R"({"a": 1, "b": 2, "r": true, "c": null})"));
  EXPECT_FALSE(g->Accepts(R"({"a": 1})"));
  EXPECT_FALSE(g->Accepts(R"({, "r": true})"));
  EXPECT_FALSE(g->Accepts(R"({"r": true,})"));
  EXPECT_FALSE(g->Accepts(R"({"b": 2, "a": 1, "r": true})"));  // Schema order.
}

TEST(JsonSchemaGrammarTest, AllOptionalAndAdditionalProperties) {
  auto none_required = Compile(R"({"properties": {"a": {"type": "integer"}, "b": {}}})");
  ASSERT_NE(none_required, nullptr);
  EXPECT_TRUE(none_required->Accepts("{}"));
  EXPECT_TRUE(none_required->Accepts(R"({"b": [1, {"x": null}]})"));
  EXPECT_TRUE(none_required->Accepts(R"({"a": 1, "b": "x"})"));
  EXPECT_FALSE(none_required->Accepts(R"({"c": 1})"));

  auto extra = Compile(R"({"type": "object", "properties": {"a": {"type": "integer"}},
      "additionalProperties": {"type": "string"}})");
  ASSERT_NE(extra, nullptr);
  EXPECT_TRUE(extra->Accepts(R"({"a": 1, "x": "y", "z": ""})"));
  EXPECT_TRUE(extra->Accepts(R"({"x": "y"})"));
  EXPECT_TRUE(extra->Accepts("{}"));
  EXPECT_FALSE(extra->Accepts(R"({"x": 1})"));

  auto counted = Compile(R"({"type": "object", "minProperties": 1, "maxProperties": 2})");
  ASSERT_NE(counted, nullptr);
  EXPECT_TRUE(counted->Accepts(R"({"k": 1})"));
  EXPECT_TRUE(counted->Accepts(R"({"k": 1, "l": [true]})"));
  EXPECT_FALSE(counted->Accepts("{}"));
  EXPECT_FALSE(counted->Accepts(R"({"k": 1, "l": 2, "m": 3})"));
}

TEST(JsonSchemaGrammarTest, IntegerRangesAtTheirBoundaries) {
  struct Case {
    const char* schema;
    std::vector<const char*> in;
    std::vector<const char*> out;
  };
  const Case cases[] = {
      {R"({"type": "integer", "minimum": -5, "maximum": 123})",
       {"-5", "-1", "0", "9", "10", "99", "100", "119", "123"},
       {"-6", "124", "130", "200", "1000", "-0", "01"}},
      {R"({"type": "integer", "minimum": 10})", {"10", "11", "99", "100", "123456789"},
       {"9", "0", "-10", "010"}},
      {R"({"type": "integer", "maximum": 0})", {"0", "-1", "-999999"}, {"1", "10"}},
      {R"({"type": "integer", "exclusiveMinimum": -100, "exclusiveMaximum": 100})",
       {"-99", "99", "0"}, {"-100", "100"}},
      {R"({"type": "integer", "minimum": 1234, "maximum": 98765})",
       {"1234", "1299", "9999", "10000", "98765", "98699"}, {"1233", "98766", "99999", "999"}},
      {R"({"type": "integer", "minimum": -1000000, "maximum": -17})",
       {"-17", "-1000000", "-999999", "-20"}, {"-16", "-1000001", "17", "0"}},
  };
  for (const Case& c : cases) {
    auto g = Compile(c.schema);
    ASSERT_NE(g, nullptr) << c.schema;
    for (const char* text : c.in) EXPECT_TRUE(g->Accepts(text)) << c.schema << " " << text;
    for (const char* text : c.out) EXPECT_FALSE(g->Accepts(text)) << c.schema << " " << text;
  }
}

TEST(JsonSchemaGrammarTest, NumberWithIntegerBounds) {
  auto g = Compile(R"({"type": "number", "minimum": 0, "maximum": 100})");
  ASSERT_NE(g, nullptr);
  for (const char* text : {"0", "0.5", "99.99", "100", "100.0", "100.000", "7"}) {
    EXPECT_TRUE(g->Accepts(text)) << text;
  }
  for (const char* text : {"-0.5", "100.01", "101", "-1", "1e2"}) {
    EXPECT_FALSE(g->Accepts(text)) << text;
  }
  auto exclusive = Compile(R"({"type": "number", "exclusiveMinimum": -2, "maximum": -1})");
  ASSERT_NE(exclusive, nullptr);
  for (const char* text : {"-1.99", "-1.5", "-1", "-1.0", "-2.001"}) {
    const bool want = std::string(text) != "-2.001";
    EXPECT_EQ(exclusive->Accepts(text), want) << text;
  }
  EXPECT_FALSE(exclusive->Accepts("-2"));
  EXPECT_FALSE(exclusive->Accepts("-2.0"));
  EXPECT_FALSE(exclusive->Accepts("-0.5"));
  auto plain = Compile(R"({"type": "number"})");
  ASSERT_NE(plain, nullptr);
  EXPECT_TRUE(plain->Accepts("-12.5e-3"));
  EXPECT_FALSE(plain->Accepts("12."));
}

TEST(JsonSchemaGrammarTest, Strings) {
  auto lengths = Compile(R"({"type": "string", "minLength": 2, "maxLength": 4})");
  ASSERT_NE(lengths, nullptr);
  EXPECT_TRUE(lengths->Accepts(R"("ab")"));
  EXPECT_TRUE(lengths->Accepts(R"("a\"cd")"));  // An escape is one character.
  EXPECT_FALSE(lengths->Accepts(R"("a")"));
  EXPECT_FALSE(lengths->Accepts(R"("abcde")"));

  auto pattern = Compile(R"({"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"})");
  ASSERT_NE(pattern, nullptr);
  EXPECT_TRUE(pattern->Accepts(R"("ab-12")"));
  EXPECT_FALSE(pattern->Accepts(R"("ab-1")"));
  EXPECT_FALSE(pattern->Accepts(R"("AB-12")"));

  auto date_time = Compile(R"({"type": "string", "format": "date-time"})");
  ASSERT_NE(date_time, nullptr);
  EXPECT_TRUE(date_time->Accepts(R"("2024-01-15T10:20:30Z")"));
  EXPECT_TRUE(date_time->Accepts(R"("2024-12-31T23:59:59.125+05:30")"));
  EXPECT_FALSE(date_time->Accepts(R"("2024-13-01T10:20:30Z")"));
  EXPECT_FALSE(date_time->Accepts(R"("2024-01-15 10:20:30Z")"));

  auto uuid = Compile(R"({"type": "string", "format": "uuid"})");
  ASSERT_NE(uuid, nullptr);
  EXPECT_TRUE(uuid->Accepts(R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(uuid->Accepts(R"("123e4567e89b12d3a456426614174000")"));

  auto date = Compile(R"({"type": "string", "format": "date"})");
  ASSERT_NE(date, nullptr);
  EXPECT_TRUE(date->Accepts(R"("2024-02-28")"));
  EXPECT_TRUE(date->Accepts(R"("2010-12-31")"));
  EXPECT_FALSE(date->Accepts(R"("2024-2-28")"));
  // Only dates that exist: no 31st of a 30-day month, February ends on the 28th (the
  // leap rule is not worth a grammar), no year 0.
  EXPECT_FALSE(date->Accepts(R"("2023-11-31")"));
  EXPECT_FALSE(date->Accepts(R"("2024-02-29")"));
  EXPECT_FALSE(date->Accepts(R"("0000-01-01")"));
}

TEST(JsonSchemaGrammarTest, Arrays) {
  auto bounded = Compile(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1,
      "maxItems": 3})");
  ASSERT_NE(bounded, nullptr);
  EXPECT_TRUE(bounded->Accepts("[1]"));
  EXPECT_TRUE(bounded->Accepts("[1, 2, 3]"));
  EXPECT_FALSE(bounded->Accepts("[]"));
  EXPECT_FALSE(bounded->Accepts("[1, 2, 3, 4]"));
  EXPECT_FALSE(bounded->Accepts(R"(["a"])"));

  auto tuple = Compile(R"({"type": "array", "prefixItems": [{"type": "string"},
      {"type": "integer"}], "items": false})");
  ASSERT_NE(tuple, nullptr);
  EXPECT_TRUE(tuple->Accepts(R"(["a", 1])"));
  EXPECT_FALSE(tuple->Accepts(R"(["a", 1, 2])"));
  EXPECT_FALSE(tuple->Accepts(R"([1, "a"])"));

  auto any = Compile(R"({"type": "array"})");
  ASSERT_NE(any, nullptr);
  EXPECT_TRUE(any->Accepts(R"([1, "a", null, {"x": []}])"));
}

TEST(JsonSchemaGrammarTest, EnumConstAndTypeLists) {
  auto e = Compile(R"({"enum": ["red", "gr\"een", 1, null, {"a": [1]}, "\u00e9"]})");
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->Accepts(R"("red")"));
  EXPECT_TRUE(e->Accepts(R"("gr\"een")"));
  EXPECT_TRUE(e->Accepts("1"));
  EXPECT_TRUE(e->Accepts("null"));
  EXPECT_TRUE(e->Accepts(R"({"a":[1]})"));
  EXPECT_TRUE(e->Accepts("\"\xC3\xA9\""));
  EXPECT_FALSE(e->Accepts(R"("blue")"));

  auto c = Compile(R"({"const": 42})");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->Accepts("42"));
  EXPECT_FALSE(c->Accepts("43"));

  auto nullable = Compile(R"({"type": ["string", "null"]})");
  ASSERT_NE(nullable, nullptr);
  EXPECT_TRUE(nullable->Accepts(R"("x")"));
  EXPECT_TRUE(nullable->Accepts("null"));
  EXPECT_FALSE(nullable->Accepts("1"));
}

TEST(JsonSchemaGrammarTest, AnyOfAllOfAndAnything) {
  auto any_of = Compile(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})");
  ASSERT_NE(any_of, nullptr);
  EXPECT_TRUE(any_of->Accepts("7"));
  EXPECT_TRUE(any_of->Accepts(R"("a")"));
  EXPECT_FALSE(any_of->Accepts(R"("ab")"));

  auto all_of = Compile(R"({"allOf": [
      {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"properties": {"b": {"type": "string"}}}]})");
  ASSERT_NE(all_of, nullptr);
  EXPECT_TRUE(all_of->Accepts(R"({"a": 1, "b": "x"})"));
  EXPECT_TRUE(all_of->Accepts(R"({"a": 1})"));
  EXPECT_FALSE(all_of->Accepts(R"({"b": "x"})"));

  for (const char* schema : {"true", "{}"}) {
    auto g = Compile(schema);
    ASSERT_NE(g, nullptr);
    EXPECT_TRUE(g->Accepts(R"({"k": [1, 2.5, "s", true, null]})"));
    EXPECT_TRUE(g->Accepts("-3"));
    EXPECT_FALSE(g->Accepts("{k: 1}"));
  }
}

TEST(JsonSchemaGrammarTest, RecursiveReferences) {
  auto list = Compile(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
      "required": ["v", "next"]}}, "$ref": "#/$defs/node"})");
  ASSERT_NE(list, nullptr);
  EXPECT_TRUE(list->Accepts(R"({"v": 1, "next": null})"));
  EXPECT_TRUE(list->Accepts(R"({"v": 1, "next": {"v": 2, "next": {"v": 3, "next": null}}})"));
  EXPECT_FALSE(list->Accepts(R"({"v": 1, "next": {"v": 2}})"));

  auto tree = Compile(R"({"type": "object", "properties": {"kids": {"type": "array",
      "items": {"$ref": "#"}}}, "definitions": {}})");
  ASSERT_NE(tree, nullptr);
  EXPECT_TRUE(tree->Accepts(R"({"kids": [{}, {"kids": []}]})"));
}

TEST(JsonSchemaGrammarTest, JsonObjectMode) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = Grammar::FromGbnf(JsonObjectGbnf());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE((*g)->Accepts(R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_TRUE((*g)->Accepts("{}"));
  EXPECT_FALSE((*g)->Accepts("[1]"));
  EXPECT_FALSE((*g)->Accepts(R"("x")"));
}

TEST(JsonSchemaGrammarTest, RulesCanJoinALargerGrammar) {
  JsonGrammarOptions options;
  options.root_rule = "args";
  options.rule_prefix = "t1-";
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(
      OrderedJson::parse(R"({"type": "object", "properties": {"q": {"type": "string"}},
          "required": ["q"]})"),
      options);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  absl::StatusOr<std::shared_ptr<const Grammar>> g =
      Grammar::FromGbnf("root ::= \"call \" args\n" + *gbnf);
  ASSERT_TRUE(g.ok()) << g.status() << "\n" << *gbnf;
  EXPECT_TRUE((*g)->Accepts(R"(call {"q": "x"})"));
  EXPECT_EQ(gbnf->find("\nspace ::="), std::string::npos) << *gbnf;
}

TEST(JsonSchemaGrammarTest, UnsupportedKeywordsNameThemselvesAndWhere) {
  absl::Status s = Refusal(R"({"type": "object", "properties": {"tags": {"type": "object",
      "patternProperties": {"^a": {}}}}})");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "unsupported JSON Schema keyword \"patternProperties\" at /properties/tags");
  for (const char* schema :
       {R"({"not": {}})", R"({"type": "array", "uniqueItems": true})",
        R"({"type": "integer", "multipleOf": 3})", R"({"if": {}, "then": {}})",
        R"({"type": "string", "format": "uri"})", R"({"$ref": "other.json#/x"})",
        R"({"type": "number", "minimum": 0.5})", "false", R"({"$ref": "#"})",
        R"({"enum": ["a"], "maxLength": 3})", R"({"type": "integer", "minimum": 5, "maximum": 4})",
        R"({"allOf": [{"type": "string"}, {"type": "integer"}]})"}) {
    EXPECT_EQ(Refusal(schema).code(), absl::StatusCode::kInvalidArgument) << schema;
  }
  EXPECT_NE(Refusal(R"({"type": "integer", "multipleOf": 3})").message().find("multipleOf"),
            absl::string_view::npos);
  EXPECT_NE(Refusal(R"({"type": "number", "minimum": 0.5})").message().find("minimum"),
            absl::string_view::npos);
}

TEST(JsonSchemaGrammarTest, AnnotationsAreIgnored) {
  auto g = Compile(R"({"$schema": "https://json-schema.org/draft/2020-12/schema",
      "title": "T", "description": "d", "type": "object", "properties": {
      "a": {"type": "integer", "default": 1, "examples": [1], "deprecated": true}},
      "required": ["a"], "$comment": "c"})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->Accepts(R"({"a": 1})"));
}

TEST(JsonSchemaGrammarTest, HostileSchemasAreRefusedQuickly) {
  const auto start = std::chrono::steady_clock::now();
  OrderedJson deep = {{"type", "integer"}};
  for (int i = 0; i < 1000; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_EQ(JsonSchemaToGbnf(deep).status().code(), absl::StatusCode::kResourceExhausted);

  OrderedJson huge_enum = {{"enum", OrderedJson::array()}};
  for (int i = 0; i < 200000; ++i) huge_enum["enum"].push_back("value-" + std::to_string(i));
  EXPECT_EQ(JsonSchemaToGbnf(huge_enum).status().code(), absl::StatusCode::kResourceExhausted);

  EXPECT_EQ(Refusal(R"({"type": "string", "maxLength": 100000000})").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Refusal(R"({"type": "string", "pattern": "(a{1,1000}){1,1000}"})").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Refusal(R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                        "$ref": "#/$defs/a"})").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace tessera::structured
