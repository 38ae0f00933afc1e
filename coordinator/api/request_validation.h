#ifndef TESSERA_COORDINATOR_API_REQUEST_VALIDATION_H_
#define TESSERA_COORDINATOR_API_REQUEST_VALIDATION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat_template/chat_template.h"
#include "common/sampling_params.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/api/input_budget.h"
#include "coordinator/scheduler/sequence.h"
#include "tessera/v1/generation.pb.h"

namespace tessera {

struct ServingLimits {
  int vocab_size = 0;
  int max_context = 0;  // Prompt + generated tokens.
  int max_stop_strings = 16;
  int max_stop_string_bytes = 256;
  int max_logprobs = 20;
  int default_max_new_tokens = 16;
  // Front-door bounds (coordinator flags --max-input-bytes, --max-concurrent-streams,
  // --max-undelivered-tokens): text fields are measured before anything tokenizes them.
  int64_t max_input_bytes = 1 << 20;
  int max_concurrent_streams = 512;
  int max_undelivered_tokens = 256;
  // --max-inflight-input-bytes: the text being tokenized at once over all requests and
  // both APIs. Shared by every copy of these limits; null: no bound (tests).
  std::shared_ptr<InputBudget> input_budget;
  // --chat-special-tokens plain: special-token text inside chat messages (role, content)
  // is tokenized as text; false (parse) turns it into the special tokens, as HF and vLLM do.
  bool chat_plain_special_tokens = false;
  // What a request gets for each sampling field it leaves unset (generation_config.json).
  SamplingParams default_sampling;
};

// A request after validation and tokenization.
struct ValidatedRequest {
  std::string request_id;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  sched::RequestOptions options;
  std::vector<std::string> stop_strings;
  std::string grammar_gbnf;  // The constraint compiled to GBNF; empty: none.
};

// INVALID_ARGUMENT naming `field`, its size and the limit when a text is over
// max_input_bytes; called before the text is tokenized.
absl::Status CheckInputSize(absl::string_view field, size_t num_bytes, const ServingLimits& limits);

// Checks every field; INVALID_ARGUMENT names the field and the value. Tokenizes text and
// renders messages with `chat_template` (null when the model has none: FAILED_PRECONDITION
// for messages).
absl::StatusOr<ValidatedRequest> ValidateGenerateRequest(const v1::GenerateRequest& request,
                                                         const Tokenizer& tokenizer,
                                                         const ServingLimits& limits,
                                                         const ChatTemplate* chat_template = nullptr);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_REQUEST_VALIDATION_H_
