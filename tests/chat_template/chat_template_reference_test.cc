// Tessera's chat template engine against jinja2: every case in testdata/expected.json
// (written by render_reference.py with jinja2 as Hugging Face configures it) must render
// byte for byte the same, or fail the same way.
#include <cstdlib>
#include <ctime>
#include <string>

#include "absl/status/status.h"
#include "common/chat_template/chat_template.h"
#include "common/file_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

const std::filesystem::path kTestData = std::filesystem::path(TESSERA_SOURCE_DIR) / "tests/chat_template/testdata";

// 2024-07-26 12:00 UTC, the clock render_reference.py fixes; TZ=UTC makes it local time.
std::chrono::system_clock::time_point FixedNow() {
  return std::chrono::system_clock::from_time_t(1721995200);
}

// A message as the HTTP API builds it: role and content, every other key a field.
ChatMessage FromJson(const nlohmann::ordered_json& m) {
  ChatMessage message{m["role"], m["content"]};
  for (const auto& [key, value] : m.items()) {
    if (key != "role" && key != "content") message.fields[key] = value;
  }
  return message;
}

class ReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("TZ", "UTC", 1);
    tzset();
  }
};

TEST_F(ReferenceTest, EveryCaseMatchesJinja2ByteForByte) {
  absl::StatusOr<std::string> text = ReadFileToString(kTestData / "expected.json");
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json expected = nlohmann::json::parse(*text);
  ASSERT_GT(expected["cases"].size(), 0u);
  int checked = 0;
  for (const nlohmann::json& c : expected["cases"]) {
    const bool with_tools = c.contains("tools");
    const std::string name = c["template"].get<std::string>() + " / " + c["messages"].get<std::string>() +
                             (with_tools ? " / tools " + c["tools"].dump() : "") +
                             (c["add_generation_prompt"].get<bool>() ? " / generation prompt" : "") +
                             (c["continue_final_message"].get<bool>() ? " / continue final message" : "");
    SCOPED_TRACE(name);
    absl::StatusOr<std::string> source = ReadFileToString(kTestData / c["template"].get<std::string>());
    ASSERT_TRUE(source.ok()) << source.status();
    auto tmpl = ChatTemplate::FromSource(*source, c["bos_token"], c["eos_token"]);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    std::vector<ChatMessage> messages;
    ChatRenderOptions options;
    if (with_tools) {
      // Kept as JSON text in expected.json, whose own keys are sorted: key order reaches tojson.
      for (const nlohmann::ordered_json& m : nlohmann::ordered_json::parse(
               expected["tool_message_sets"][c["messages"].get<std::string>()].get<std::string>())) {
        messages.push_back(FromJson(m));
      }
      if (!c["tools"].is_null()) {
        options.tools = nlohmann::ordered_json::parse(expected["tool_sets"][c["tools"].get<std::string>()].get<std::string>());
      }
    } else {
      for (const nlohmann::json& m : expected["message_sets"][c["messages"].get<std::string>()]) {
        messages.push_back({m["role"], m["content"]});
      }
    }
    options.add_generation_prompt = c["add_generation_prompt"];
    options.continue_final_message = c["continue_final_message"];
    options.now = FixedNow();
    absl::StatusOr<std::string> rendered = (*tmpl)->Render(messages, options);
    if (c.contains("output")) {
      ASSERT_TRUE(rendered.ok()) << rendered.status();
      EXPECT_EQ(*rendered, c["output"].get<std::string>());
    } else {
      ASSERT_FALSE(rendered.ok()) << "jinja2 failed with: " << c["error"] << "\nTessera rendered: " << *rendered;
      EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument);
      if (c["raised"].get<bool>()) {
        EXPECT_EQ(rendered.status().message(), c["error"].get<std::string>());
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(expected["cases"].size()));
}

TEST_F(ReferenceTest, SnippetsMatchJinja2ByteForByte) {
  absl::StatusOr<std::string> text = ReadFileToString(kTestData / "expected.json");
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json expected = nlohmann::json::parse(*text);
  std::vector<ChatMessage> messages;
  for (const nlohmann::json& m : expected["message_sets"]["multi_turn"]) messages.push_back({m["role"], m["content"]});
  ASSERT_GT(expected["snippets"].size(), 0u);
  for (const nlohmann::json& c : expected["snippets"]) {
    const std::string source = c["source"];
    SCOPED_TRACE(source);
    auto tmpl = ChatTemplate::FromSource(source, "<s>", "</s>");
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    absl::StatusOr<std::string> rendered = (*tmpl)->Render(messages, {});
    if (c.contains("output")) {
      ASSERT_TRUE(rendered.ok()) << rendered.status();
      EXPECT_EQ(*rendered, c["output"].get<std::string>());
    } else {
      EXPECT_FALSE(rendered.ok()) << "jinja2 failed with: " << c["error"];
    }
  }
}

}  // namespace
}  // namespace tessera
