// `tessera hash-api-key`: the line an --api-keys-file stores for a key. The key comes on
// stdin, not as an argument, so it stays out of shell history and `ps`.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>

#include "absl/strings/ascii.h"
#include "common/auth/secret.h"
#include "tools/tessera/commands.h"

namespace tessera::cli {

int HashApiKeyMain(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs("Usage: printf %s \"$KEY\" | tessera hash-api-key >> api-keys\n"
               "Reads one key on stdin (surrounding whitespace dropped) and prints `sha256:<hex>`,\n"
               "the line tessera-coordinator --api-keys-file stores for it. Same as\n"
               "`printf %s \"$KEY\" | sha256sum | sed 's/^/sha256:/; s/ .*//'`.\n",
               stdout);
    return 0;
  }
  if (argc > 1) {
    std::fputs("tessera hash-api-key: the key is read from stdin, not from arguments\n", stderr);
    return 2;
  }
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const absl::string_view key = absl::StripAsciiWhitespace(input);
  if (key.empty()) {
    std::fputs("tessera hash-api-key: no key on stdin\n", stderr);
    return 1;
  }
  std::printf("sha256:%s\n", auth::Sha256Hex(key).c_str());
  return 0;
}

}  // namespace tessera::cli
