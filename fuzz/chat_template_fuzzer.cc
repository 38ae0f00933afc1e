// Untrusted chat templates (a model folder or --chat-template): parsing and rendering must
// fail cleanly or finish within the engine's limits, never crash or hang.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/chat_template/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tmpl = tessera::ChatTemplate::FromSource(
      std::string(reinterpret_cast<const char*>(data), size), "<s>", "</s>");
  if (!tmpl.ok()) return 0;
  const std::vector<tessera::ChatMessage> messages = {
      {"system", "Be brief."}, {"user", "Hi \xf0\x9f\x98\x80"}, {"assistant", ""}, {"user", "?"}};
  (void)(*tmpl)->Render(messages, tessera::ChatRenderOptions{});
  return 0;
}
