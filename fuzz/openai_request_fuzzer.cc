// Untrusted HTTP bodies: the OpenAI-compatible API's JSON parsing and validation for both
// generation endpoints.
#include <cstddef>
#include <cstdint>
#include "absl/strings/string_view.h"

#include "coordinator/http/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view body(reinterpret_cast<const char*>(data), size);
  (void)tessera::http::ParseOpenAiRequest(body, tessera::http::Endpoint::kCompletions, 20);
  (void)tessera::http::ParseOpenAiRequest(body, tessera::http::Endpoint::kChatCompletions, 20);
  return 0;
}
