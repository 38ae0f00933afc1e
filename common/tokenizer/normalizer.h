#ifndef TESSERA_COMMON_TOKENIZER_NORMALIZER_H_
#define TESSERA_COMMON_TOKENIZER_NORMALIZER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json_fwd.hpp"

namespace tessera {

// The Unicode `normalizer` of a byte-level tokenizer.json: NFC (Qwen2), NFD, NFKC or NFKD,
// alone or in a Sequence, applied with utf8proc to the text between added tokens.
class UnicodeNormalizer {
 public:
  // `normalizer` may be null (no normalization); `source` names the file in errors.
  static absl::StatusOr<UnicodeNormalizer> FromJson(const nlohmann::json& normalizer,
                                                    absl::string_view source);

  bool empty() const { return forms_.empty(); }
  // `text` normalized; text that is not valid UTF-8 is returned as it is.
  std::string Apply(absl::string_view text) const;

 private:
  std::vector<int> forms_;  // utf8proc option sets, applied in order.
};

}  // namespace tessera

#endif  // TESSERA_COMMON_TOKENIZER_NORMALIZER_H_
