// Untrusted config.json: every field the loader reads, with its range checks.
#include <cstddef>
#include <cstdint>
#include "absl/strings/string_view.h"

#include "common/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  (void)tessera::ModelConfig::FromJson(json, "config.json");
  return 0;
}
