// The tool-calling fields of a chat request (tools, tool_choice, parallel_tool_calls,
// messages' tool_calls / tool_call_id / name), and what the chat handler makes of them:
// the template's tools, the parsing of the output, the grammar of a forced call.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "common/chat_template/chat_template.h"
#include "common/file_util.h"
#include "coordinator/http/chat_handler.h"
#include "coordinator/http/openai_request.h"
#include "gtest/gtest.h"

namespace tessera::http {
namespace {

const std::filesystem::path kTemplates = std::filesystem::path(TESSERA_SOURCE_DIR) / "tests/chat_template/testdata";

constexpr const char* kWeatherTool = R"({"type": "function", "function": {"name": "get_weather",
    "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"},
    "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}})";
constexpr const char* kTimeTool = R"({"type": "function", "function": {"name": "get_time"}})";

absl::StatusOr<OpenAiRequest> Chat(const std::string& extra,
                                   const std::string& messages = R"([{"role": "user", "content": "hi"}])") {
  return ParseOpenAiRequest(R"({"messages": )" + messages + (extra.empty() ? "" : ", ") + extra + "}",
                            Endpoint::kChatCompletions, 20);
}

std::string Tools() { return std::string(R"("tools": [)") + kWeatherTool + ", " + kTimeTool + "]"; }

void ExpectParamError(const absl::StatusOr<OpenAiRequest>& r, const std::string& param) {
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_EQ(ParamOf(r.status(), Endpoint::kChatCompletions), param) << r.status();
}

TEST(ToolRequestTest, ToolsDefaultToAutoAndParallel) {
  auto r = Chat(Tools());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tools.choice, ToolChoice::kAuto);
  EXPECT_TRUE(r->tools.parallel_tool_calls);
  ASSERT_EQ(r->tools.functions.size(), 2u);
  EXPECT_EQ(r->tools.functions[0].name, "get_weather");
  EXPECT_TRUE(r->tools.functions[1].parameters.is_null());
  // As sent, key order included: the template's tojson prints them.
  ASSERT_TRUE(r->tools.tools.is_array());
  EXPECT_EQ(r->tools.tools[0]["function"].begin().key(), "name");
  EXPECT_EQ(r->tools.tools[0]["function"]["parameters"]["properties"].begin().key(), "city");
  EXPECT_FALSE(r->generate.has_constraint());  // Auto does not constrain.
}

TEST(ToolRequestTest, NoToolsNoChoice) {
  auto r = Chat("");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tools.choice, ToolChoice::kNone);
  EXPECT_TRUE(r->tools.tools.is_null());
  auto empty = Chat(R"("tools": [])");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->tools.choice, ToolChoice::kNone);
  EXPECT_TRUE(empty->tools.tools.is_null());
}

TEST(ToolRequestTest, ToolChoiceForms) {
  auto none = Chat(Tools() + R"(, "tool_choice": "none")");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->tools.choice, ToolChoice::kNone);
  EXPECT_FALSE(none->tools.tools.is_null());  // Still rendered, as vLLM does.
  auto required = Chat(Tools() + R"(, "tool_choice": "required", "parallel_tool_calls": false)");
  ASSERT_TRUE(required.ok()) << required.status();
  EXPECT_EQ(required->tools.choice, ToolChoice::kRequired);
  EXPECT_FALSE(required->tools.parallel_tool_calls);
  auto named = Chat(Tools() + R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}})");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(named->tools.named, "get_time");
  auto auto_choice = Chat(Tools() + R"(, "tool_choice": "auto")");
  ASSERT_TRUE(auto_choice.ok()) << auto_choice.status();
  EXPECT_EQ(auto_choice->tools.choice, ToolChoice::kAuto);
  auto none_without_tools = Chat(R"("tool_choice": "none")");
  ASSERT_TRUE(none_without_tools.ok()) << none_without_tools.status();
}

TEST(ToolRequestTest, ErrorsNameTheParam) {
  ExpectParamError(Chat(R"("tools": {})"), "tools");
  ExpectParamError(Chat(R"("tools": [1])"), "tools");
  ExpectParamError(Chat(R"("tools": [{"type": "retrieval"}])"), "tools");
  ExpectParamError(Chat(R"("tools": [{"type": "function"}])"), "tools");
  ExpectParamError(Chat(R"("tools": [{"type": "function", "function": {"name": "a b"}}])"), "tools");
  ExpectParamError(Chat(R"("tools": [{"type": "function", "function": {"name": ""}}])"), "tools");
  ExpectParamError(Chat(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])"), "tools");
  ExpectParamError(Chat(R"("tools": [{"type": "function", "function": {"name": "f", "description": 1}}])"), "tools");
  ExpectParamError(Chat(R"("tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}])"), "tools");
  ExpectParamError(Chat(std::string(R"("tools": [)") + kTimeTool + ", " + kTimeTool + "]"), "tools");
  ExpectParamError(Chat(Tools() + R"(, "tool_choice": "always")"), "tool_choice");
  ExpectParamError(Chat(Tools() + R"(, "tool_choice": 1)"), "tool_choice");
  ExpectParamError(Chat(Tools() + R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})"),
                   "tool_choice");
  ExpectParamError(Chat(Tools() + R"(, "tool_choice": {"type": "function"})"), "tool_choice");
  ExpectParamError(Chat(R"("tool_choice": "required")"), "tool_choice");
  ExpectParamError(Chat(Tools() + R"(, "parallel_tool_calls": "yes")"), "parallel_tool_calls");
  // A forced call is a constraint of its own.
  ExpectParamError(Chat(Tools() + R"(, "tool_choice": "required", "response_format": {"type": "json_object"})"),
                   "tool_choice");
  ExpectParamError(ParseOpenAiRequest(R"({"prompt": "x", "tools": []})", Endpoint::kCompletions, 20), "tools");
}

TEST(ToolRequestTest, AutoToolsMayComeWithResponseFormat) {
  auto r = Chat(Tools() + R"(, "response_format": {"type": "json_object"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->generate.constraint().json_object());
}

TEST(ToolRequestTest, MessagesCarryToolCallsAndResults) {
  auto r = Chat(Tools(), R"([{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"unit\": \"c\", \"city\": \"Paris\"}"}},
        {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ""}}]},
      {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "21"},
      {"role": "assistant", "content": "ok", "tool_calls": []}])");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 4u);
  const ChatMessage& call = r->messages[1];
  EXPECT_EQ(call.content, "");
  const auto& calls = call.fields["tool_calls"];
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["id"], "call_1");
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  // Parsed to the object templates expect, in the model's order.
  ASSERT_TRUE(calls[0]["function"]["arguments"].is_object());
  EXPECT_EQ(calls[0]["function"]["arguments"].begin().key(), "unit");
  EXPECT_EQ(calls[0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(calls[1]["function"]["arguments"], nlohmann::ordered_json::object());
  EXPECT_EQ(r->messages[2].fields["tool_call_id"], "call_1");
  EXPECT_EQ(r->messages[2].fields["name"], "get_weather");
  EXPECT_TRUE(r->messages[3].fields.is_null());  // [] is no calls.
}

TEST(ToolRequestTest, BadToolFieldsInMessages) {
  ExpectParamError(Chat("", R"([{"role": "assistant", "tool_calls": {}}])"), "messages");
  ExpectParamError(Chat("", R"([{"role": "assistant", "tool_calls": [{"function": {}}]}])"), "messages");
  ExpectParamError(Chat("", R"([{"role": "assistant", "tool_calls": [{"id": 1, "function": {"name": "f"}}]}])"),
                   "messages");
  ExpectParamError(
      Chat("", R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}])"),
      "messages");
  ExpectParamError(Chat("", R"([{"role": "tool", "tool_call_id": 7, "content": "x"}])"), "messages");
  ExpectParamError(Chat("", R"([{"role": "user", "name": ["x"], "content": "x"}])"), "messages");
}

// Special "[TOOL_CALLS]" (id 5) as in Mistral's real tokenizer.
class MarkerTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> Encode(absl::string_view text, bool) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  std::string Decode(const std::vector<int32_t>& ids, bool) const override { return ""; }
  int32_t vocab_size() const override { return 512; }
  int32_t bos_id() const override { return 1; }
  int32_t eos_id() const override { return 2; }
  bool IsSpecial(int32_t id) const override { return id < 10; }
  int32_t IdForPiece(absl::string_view piece) const override { return piece == "[TOOL_CALLS]" ? 5 : -1; }
};

struct Served {
  explicit Served(const std::string& template_file) {
    absl::StatusOr<std::string> source = ReadFileToString(kTemplates / template_file);
    EXPECT_TRUE(source.ok()) << source.status();
    auto loaded = ChatTemplate::FromSource(*source, "<s>", "</s>");
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    chat_template = *std::move(loaded);
    serving.chat_template = chat_template.get();
    serving.tokenizer = &tokenizer;
  }
  MarkerTokenizer tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
  OpenAiServing serving;
};

TEST(ToolRequestTest, PrepareToolCallingPerChoice) {
  Served qwen("qwen2.5-instruct.jinja");
  {
    auto r = Chat(Tools());
    ASSERT_TRUE(r.ok()) << r.status();
    ChatRenderOptions options;
    ASSERT_TRUE(PrepareToolCalling(qwen.serving, &*r, &options).ok());
    EXPECT_EQ(options.tools, r->tools.tools);
    ASSERT_TRUE(r->tool_parsing.has_value());
    EXPECT_EQ(r->tool_parsing->format, ToolCallFormat::kHermes);
    EXPECT_FALSE(r->tool_parsing->forced);
    EXPECT_EQ(r->tool_parsing->marker_token_id, -1);
    EXPECT_FALSE(r->generate.has_constraint());
    auto rendered = qwen.chat_template->Render(r->messages, options);
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    EXPECT_TRUE(absl::StrContains(*rendered, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""))
        << *rendered;
  }
  {
    auto r = Chat(Tools() + R"(, "tool_choice": "none")");
    ASSERT_TRUE(r.ok()) << r.status();
    ChatRenderOptions options;
    ASSERT_TRUE(PrepareToolCalling(qwen.serving, &*r, &options).ok());
    EXPECT_FALSE(options.tools.is_null());
    EXPECT_FALSE(r->tool_parsing.has_value());
    EXPECT_FALSE(r->generate.has_constraint());
  }
  {
    auto r = Chat(Tools() + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
    ASSERT_TRUE(r.ok()) << r.status();
    ChatRenderOptions options;
    ASSERT_TRUE(PrepareToolCalling(qwen.serving, &*r, &options).ok());
    ASSERT_TRUE(r->tool_parsing.has_value());
    EXPECT_TRUE(r->tool_parsing->forced);
    const std::string& grammar = r->generate.constraint().grammar();
    EXPECT_TRUE(absl::StrContains(grammar, "get_weather")) << grammar;
    EXPECT_FALSE(absl::StrContains(grammar, "get_time")) << grammar;
  }
}

TEST(ToolRequestTest, MistralMarkerIdAndIds) {
  Served mistral("mistral-instruct-v0.3.jinja");
  auto r = Chat(Tools(), R"([{"role": "user", "content": "Weather?"},
      {"role": "assistant", "tool_calls": [{"id": "call_abcdefghijklmnop", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_abcdefghijklmnop", "content": "21"}])");
  ASSERT_TRUE(r.ok()) << r.status();
  ChatRenderOptions options;
  ASSERT_TRUE(PrepareToolCalling(mistral.serving, &*r, &options).ok());
  ASSERT_TRUE(r->tool_parsing.has_value());
  EXPECT_EQ(r->tool_parsing->format, ToolCallFormat::kMistral);
  EXPECT_EQ(r->tool_parsing->marker_token_id, 5);
  // Cut to the 9 characters the template insists on.
  EXPECT_EQ(r->messages[1].fields["tool_calls"][0]["id"], "hijklmnop");
  EXPECT_EQ(r->messages[2].fields["tool_call_id"], "hijklmnop");
  auto rendered = mistral.chat_template->Render(r->messages, options);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_TRUE(absl::StrContains(
      *rendered, R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "hijklmnop"}])"))
      << *rendered;
}

TEST(ToolRequestTest, FormatOverride) {
  Served llama("llama-3.1-instruct.jinja");
  auto r = Chat(Tools());
  ASSERT_TRUE(r.ok()) << r.status();
  ChatRenderOptions options;
  ASSERT_TRUE(PrepareToolCalling(llama.serving, &*r, &options).ok());
  EXPECT_EQ(r->tool_parsing->format, ToolCallFormat::kLlama3Json);
  llama.serving.tool_call_format = "hermes";
  ASSERT_TRUE(PrepareToolCalling(llama.serving, &*r, &options).ok());
  EXPECT_EQ(r->tool_parsing->format, ToolCallFormat::kHermes);
  llama.serving.tool_call_format = "xml";
  EXPECT_FALSE(PrepareToolCalling(llama.serving, &*r, &options).ok());
}

}  // namespace
}  // namespace tessera::http
