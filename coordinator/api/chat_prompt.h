#ifndef TESSERA_COORDINATOR_API_CHAT_PROMPT_H_
#define TESSERA_COORDINATOR_API_CHAT_PROMPT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat_template/chat_template.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/api/request_validation.h"
#include "tessera/v1/generation.pb.h"

namespace tessera {

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
