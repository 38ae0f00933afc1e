#include "coordinator/api/chat_prompt.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

// Placeholders are wrapped in private-use characters (U+E000, U+E001) that no template
// writes; a message that spells one anyway makes the check below fail, never succeed.
constexpr absl::string_view kOpen = "\xEE\x80\x80tessera-field-";
constexpr absl::string_view kClose = "\xEE\x80\x81";

// `with_placeholders` with each placeholder replaced by its field (trimmed when `trim`),
// recording where the fields went; nullopt when a placeholder is not one of ours.
std::optional<RenderedChat> PutBack(absl::string_view with_placeholders,
                                    const absl::flat_hash_map<std::string, std::string>& fields, bool trim) {
  RenderedChat out;
  size_t pos = 0;
  while (true) {
    const size_t open = with_placeholders.find(kOpen, pos);
    if (open == absl::string_view::npos) break;
    const size_t close = with_placeholders.find(kClose, open + kOpen.size());
    if (close == absl::string_view::npos) return std::nullopt;
    auto field = fields.find(std::string(with_placeholders.substr(open, close + kClose.size() - open)));
    if (field == fields.end()) return std::nullopt;
    absl::StrAppend(&out.text, with_placeholders.substr(pos, open - pos));
    const absl::string_view value = trim ? absl::StripAsciiWhitespace(field->second) : field->second;
    out.plain_ranges.push_back({out.text.size(), out.text.size() + value.size()});
    absl::StrAppend(&out.text, value);
    pos = close + kClose.size();
  }
  absl::StrAppend(&out.text, with_placeholders.substr(pos));
  return out;
}

}  // namespace

absl::StatusOr<RenderedChat> RenderChat(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options,
                                        const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                        bool plain_special_tokens) {
  absl::StatusOr<std::string> rendered = chat_template.Render(messages, options);
  if (!rendered.ok()) return rendered.status();
  RenderedChat out;
  out.text = *std::move(rendered);
  if (!plain_special_tokens) return out;

  // Only fields that spell a special token need protecting; the rest render as they are.
  std::vector<ChatMessage> masked = messages;
  absl::flat_hash_map<std::string, std::string> fields;
  for (size_t i = 0; i < masked.size(); ++i) {
    for (auto [name, field] : {std::pair<const char*, std::string*>{"role", &masked[i].role},
                               {"content", &masked[i].content}}) {
      if (!tokenizer.ContainsSpecialTokenText(*field)) continue;
      std::string placeholder = absl::StrCat(kOpen, i, "-", name, kClose);
      fields[placeholder] = std::move(*field);
      *field = std::move(placeholder);
    }
  }
  if (fields.empty()) return out;
  absl::StatusOr<std::string> with_placeholders = chat_template.Render(masked, options);
  if (with_placeholders.ok()) {
    for (bool trim : {false, true}) {
      std::optional<RenderedChat> put_back = PutBack(*with_placeholders, fields, trim);
      if (put_back.has_value() && put_back->text == out.text) return *std::move(put_back);
    }
  }
  return absl::InvalidArgumentError(
      "a message spells a special token, and under --chat-special-tokens plain it must stay text, but the chat "
      "template does not copy that message's role or content into the prompt as it is (or trimmed), so where it "
      "went cannot be told; remove the special-token text from the message");
}

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
  absl::StatusOr<RenderedChat> prompt =
      RenderChat(messages, options, *chat_template, tokenizer, limits.chat_plain_special_tokens);
  if (!prompt.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", prompt.status().message()));
  }
  Tokenizer::EncodeOptions encode;
  encode.add_special_tokens = false;
  encode.plain_ranges = std::move(prompt->plain_ranges);
  return tokenizer.Encode(prompt->text, encode);
}

}  // namespace tessera
