#include "coordinator/api/chat_prompt.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera {

absl::StatusOr<std::vector<int32_t>> EncodeChatPrompt(const v1::ChatMessages& chat, const ChatTemplate* chat_template,
                                                      const Tokenizer& tokenizer, const ServingLimits& limits) {
  if (chat_template == nullptr) {
    return absl::FailedPreconditionError(
        "the served model has no chat template (no chat_template.jinja and no chat_template in "
        "tokenizer_config.json), so `messages` cannot be turned into a prompt; send text or token_ids, or start the "
        "coordinator with --chat-template FILE");
  }
  if (chat.messages().empty()) {
    return absl::InvalidArgumentError("messages.messages = []: must hold at least one message");
  }
  std::vector<ChatMessage> messages;
  messages.reserve(chat.messages_size());
  size_t num_bytes = 0;
  for (int i = 0; i < chat.messages_size(); ++i) {
    const v1::ChatMessage& m = chat.messages(i);
    if (m.role().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("messages.messages[", i, "].role = \"\": must not be empty"));
    }
    num_bytes += m.role().size() + m.content().size();
    messages.push_back({m.role(), m.content()});
  }
  if (absl::Status s = CheckInputSize("messages", num_bytes, limits); !s.ok()) return s;

  ChatRenderOptions options;
  options.add_generation_prompt = !chat.continue_final_message();
  options.continue_final_message = chat.continue_final_message();
  absl::StatusOr<std::string> prompt = chat_template->Render(messages, options);
  if (!prompt.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", prompt.status().message()));
  }
  return tokenizer.Encode(*prompt, /*add_special_tokens=*/false);
}

}  // namespace tessera
