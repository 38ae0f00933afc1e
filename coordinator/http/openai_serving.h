#ifndef TESSERA_COORDINATOR_HTTP_OPENAI_SERVING_H_
#define TESSERA_COORDINATOR_HTTP_OPENAI_SERVING_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "common/chat_template/chat_template.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/api/generate_admission.h"

namespace tessera::http {

// What the OpenAI handlers share; built once in main, outlives the HTTP server.
struct OpenAiServing {
  // The HTTP side's admission (protocol "http"): the same engine and validation as gRPC.
  Admission* admission = nullptr;
  const Tokenizer* tokenizer = nullptr;
  std::string served_model;  // What "model" must name (--served-model-name).
  int64_t created = 0;       // Unix seconds the server started (/v1/models).
  // The model's chat template; null when there is none, and then `chat_template_status`
  // says why: UNIMPLEMENTED (not built in), NOT_FOUND (the model has none), or a load error.
  const ChatTemplate* chat_template = nullptr;
  absl::Status chat_template_status;
  // The tool-call format by vLLM's parser name ("llama3_json", "hermes", "mistral"); empty:
  // told from the chat template.
  std::string tool_call_format;
  // /health: whether a replica serves and the server is not draining.
  std::function<bool()> ready;
};

}  // namespace tessera::http

#endif  // TESSERA_COORDINATOR_HTTP_OPENAI_SERVING_H_
