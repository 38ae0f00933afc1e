#ifndef TESSERA_COMMON_CHAT_TEMPLATE_CHAT_TEMPLATE_H_
#define TESSERA_COMMON_CHAT_TEMPLATE_CHAT_TEMPLATE_H_

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

// A model's chat template (Hugging Face `chat_template`, a Jinja template) rendered by
// Tessera's own Jinja-subset engine, so instruct models are prompted the way they were
// trained. Shared by the gRPC Chat method and the OpenAI-compatible HTTP API.
namespace tessera {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", "tool", ...
  std::string content;  // UTF-8; may be empty.
  // The message's other fields, which the template sees as message.<key> after role and
  // content, in this order (Hugging Face hands templates the message dict whole): an
  // assistant's tool_calls, a tool result's tool_call_id and name. Null or an object.
  nlohmann::ordered_json fields = nullptr;
};

struct ChatRenderOptions {
  // Appends the template's opening of an assistant turn (HF's add_generation_prompt).
  bool add_generation_prompt = true;
  // Ends the prompt right after the final message's content, cutting what the template
  // writes after it (its end-of-turn marker), so the model continues that message
  // (Hugging Face's continue_final_message). Needs add_generation_prompt false.
  bool continue_final_message = false;
  // The clock behind the template's strftime_now() (local time, as Hugging Face's
  // datetime.now()); unset means now. Tests fix it.
  std::optional<std::chrono::system_clock::time_point> now;
  // Passed as the template variable `date_string` when set (Llama 3.x templates print
  // it as "Today Date"); Hugging Face leaves it undefined by default.
  std::optional<std::string> date_string;
  // The template variable `tools`: the function definitions a tool-calling request offers
  // ([{"type": "function", "function": {name, description, parameters}}], as Hugging
  // Face's apply_chat_template(tools=...) passes them). Null: None, as without tools.
  nlohmann::ordered_json tools = nullptr;
};

class ChatTemplate {
 public:
  // Reads the template of a Hugging Face model folder: `chat_template.jinja` when present,
  // else `chat_template` in tokenizer_config.json (a string, or a list of {name, template}
  // where "default" is taken), plus the bos/eos token strings the template may use.
  // NotFound when the model has no template; InvalidArgument (with the line) when it does
  // not parse.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Load(const std::filesystem::path& dir);

  // From template source, for tests and for a --chat-template override.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> FromSource(std::string source,
                                                                  std::string bos_token,
                                                                  std::string eos_token);

  // The template in `template_file` (Jinja source) with the bos/eos token strings of the
  // model folder `dir`: the coordinator's --chat-template override.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> LoadOverride(const std::filesystem::path& dir,
                                                                    const std::filesystem::path& template_file);

  virtual ~ChatTemplate() = default;

  // The Jinja source, for what can be told from it (a model family's tool-call format).
  virtual const std::string& source() const = 0;

  // The prompt text for `messages`. InvalidArgument with the template's own message for
  // raise_exception (e.g. roles that do not alternate) and for render errors. Safe to call
  // from many threads at once: a render keeps its state to itself.
  virtual absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                             const ChatRenderOptions& options) const = 0;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_CHAT_TEMPLATE_CHAT_TEMPLATE_H_
