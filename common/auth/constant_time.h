#ifndef TESSERA_COMMON_AUTH_CONSTANT_TIME_H_
#define TESSERA_COMMON_AUTH_CONSTANT_TIME_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace tessera::auth {

// Equality whose running time does not depend on where the inputs differ, so a client
// cannot learn a secret byte by byte from response times. Only the lengths leak (callers
// compare fixed-size digests, whose length is public).
inline bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  volatile uint8_t diff = 0;  // volatile: the compiler may not turn the loop into an early exit.
  for (size_t i = 0; i < a.size(); ++i) {
    diff = diff | static_cast<uint8_t>(static_cast<uint8_t>(a[i]) ^ static_cast<uint8_t>(b[i]));
  }
  return diff == 0;
}

}  // namespace tessera::auth

#endif  // TESSERA_COMMON_AUTH_CONSTANT_TIME_H_
