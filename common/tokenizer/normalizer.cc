#include "common/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

absl::Status AddForms(const Json& normalizer, absl::string_view source, std::vector<int>* forms) {
  if (!normalizer.is_object() || !normalizer.contains("type") || !normalizer["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": field \"normalizer\" must be an object with a string \"type\", got ",
        normalizer.dump()));
  }
  const std::string type = normalizer["type"].get<std::string>();
  if (type == "Sequence") {
    auto list = normalizer.find("normalizers");
    if (list == normalizer.end() || !list->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": field \"normalizer.normalizers\" must be an array"));
    }
    for (const Json& n : *list) RETURN_IF_ERROR(AddForms(n, source, forms));
    return absl::OkStatus();
  }
  if (type == "NFC") {
    forms->push_back(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  } else if (type == "NFD") {
    forms->push_back(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  } else if (type == "NFKC") {
    forms->push_back(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  } else if (type == "NFKD") {
    forms->push_back(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  } else {
    return absl::UnimplementedError(absl::StrCat(
        source, ": field \"normalizer\": type \"", type,
        "\" is not supported in a byte-level tokenizer (supported: NFC, NFD, NFKC, NFKD, "
        "Sequence)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<UnicodeNormalizer> UnicodeNormalizer::FromJson(const Json& normalizer,
                                                              absl::string_view source) {
  UnicodeNormalizer n;
  if (!normalizer.is_null()) RETURN_IF_ERROR(AddForms(normalizer, source, &n.forms_));
  return n;
}

std::string UnicodeNormalizer::Apply(absl::string_view text) const {
  std::string current(text);
  // ASCII is unchanged by every normalization form.
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return current;
  for (int options : forms_) {
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t len = utf8proc_map(
        reinterpret_cast<const utf8proc_uint8_t*>(current.data()),
        static_cast<utf8proc_ssize_t>(current.size()), &out, static_cast<utf8proc_option_t>(options));
    if (len < 0) {
      std::free(out);
      return current;  // Not valid UTF-8: nothing to normalize.
    }
    current.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(len));
    std::free(out);
  }
  return current;
}

}  // namespace tessera
