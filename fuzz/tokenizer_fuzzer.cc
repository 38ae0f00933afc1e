// Untrusted tokenizer.json: loading it, then encoding and decoding a short text with it.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::WriteInput("tokenizer.json", data, size);
  auto tokenizer = tessera::Tokenizer::Load(tessera::fuzz::ScratchDir());
  if (!tokenizer.ok()) return 0;
  const std::vector<int32_t> ids = (*tokenizer)->Encode("Once upon a time, 42 caf\xc3\xa9s.");
  (void)(*tokenizer)->Decode(ids);
  return 0;
}
