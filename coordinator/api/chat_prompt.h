#ifndef TESSERA_COORDINATOR_API_CHAT_PROMPT_H_
#define TESSERA_COORDINATOR_API_CHAT_PROMPT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat_template/chat_template.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/api/request_validation.h"
#include "tessera/v1/generation.pb.h"

namespace tessera {

// A rendered chat prompt, and which of its bytes came from the messages where those
// must not become special tokens (--chat-special-tokens plain).
struct RenderedChat {
  std::string text;
  std::vector<TextRange> plain_ranges;  // Sorted, disjoint; empty under parse.
};

// Renders `messages` with `chat_template`. With `plain_special_tokens`, every role or
// content that spells a special token is located in the output (by rendering it once
// more with placeholders in its place and checking that putting it back, as is or
// trimmed, gives the same text) and listed in plain_ranges; the template's own special
// tokens stay real. INVALID_ARGUMENT with the template's message when it rejects the
// messages, or when it transforms such a field beyond recognition (never a silent
// fallback to parsing it).
absl::StatusOr<RenderedChat> RenderChat(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options,
                                        const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                        bool plain_special_tokens);

// The prompt ids of a GenerateRequest's `messages`: rendered with `chat_template` and
// tokenized without special tokens, as vLLM does for chat (the template writes BOS where
// the model wants one, so adding it again would double it). FAILED_PRECONDITION when
// `chat_template` is null (the model has none); INVALID_ARGUMENT for an empty conversation,
// an empty role, input over --max-input-bytes, or the template's own rejection (its
// raise_exception message).
absl::StatusOr<std::vector<int32_t>> EncodeChatPrompt(const v1::ChatMessages& chat, const ChatTemplate* chat_template,
                                                      const Tokenizer& tokenizer, const ServingLimits& limits);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_CHAT_PROMPT_H_
