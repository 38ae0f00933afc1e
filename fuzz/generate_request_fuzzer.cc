// Untrusted gRPC requests: protobuf bytes of a GenerateRequest, then the API's validation
// (sampling ranges, stop strings, sizes, tokenizing the text) as the coordinator runs it
// before admission. The tokenizer is stories260K's (TESSERA_FUZZ_MODEL_DIR, default
// ../shared/models/stories260K).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "common/tokenizer/tokenizer.h"
#include "coordinator/api/request_validation.h"
#include "tessera/v1/generation.pb.h"

namespace {
std::unique_ptr<tessera::Tokenizer> g_tokenizer;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("TESSERA_FUZZ_MODEL_DIR");
  auto tokenizer = tessera::Tokenizer::Load(dir != nullptr ? dir : "../shared/models/stories260K");
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "generate_request_fuzzer: %s\n", tokenizer.status().ToString().c_str());
    std::exit(2);
  }
  g_tokenizer = *std::move(tokenizer);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  tessera::ServingLimits limits;
  (void)tessera::ValidateGenerateRequest(request, *g_tokenizer, limits);
  return 0;
}
