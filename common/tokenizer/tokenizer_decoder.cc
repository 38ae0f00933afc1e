#include "common/tokenizer/tokenizer_decoder.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// A string field of a decoder step; `fallback` when absent.
absl::StatusOr<std::string> StringField(const Json& step, const char* key, const char* fallback,
                                        absl::string_view source) {
  auto it = step.find(key);
  if (it == step.end() || it->is_null()) {
    if (fallback != nullptr) return std::string(fallback);
    return Invalid(source, absl::StrCat("decoder ", step.dump(), " lacks field \"", key, "\""));
  }
  if (!it->is_string()) {
    return Invalid(source, absl::StrCat("decoder field \"", key, "\" must be a string, got ",
                                        it->dump()));
  }
  return it->get<std::string>();
}

// The byte of a `<0xXX>` piece (either hex case, as Hugging Face's decoder accepts), or -1.
int BytePieceValue(absl::string_view piece) {
  const auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  const int hi = hex(piece[3]);
  const int lo = hex(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

absl::StatusOr<TokenDecoder> TokenDecoder::FromJson(const Json& decoder,
                                                    absl::string_view source) {
  TokenDecoder result;
  if (!decoder.is_null()) RETURN_IF_ERROR(AddSteps(decoder, source, &result.steps_));
  return result;
}

absl::Status TokenDecoder::AddSteps(const Json& decoder, absl::string_view source,
                                    std::vector<Step>* steps) {
  if (!decoder.is_object() || !decoder.contains("type") || !decoder["type"].is_string()) {
    return Invalid(source, absl::StrCat("decoder must be an object with a string \"type\", got ",
                                        decoder.dump()));
  }
  const std::string type = decoder["type"].get<std::string>();
  if (type == "Sequence") {
    auto list = decoder.find("decoders");
    if (list == decoder.end() || !list->is_array()) {
      return Invalid(source, "decoder Sequence lacks the array \"decoders\"");
    }
    for (const Json& d : *list) RETURN_IF_ERROR(AddSteps(d, source, steps));
    return absl::OkStatus();
  }
  Step step;
  if (type == "Replace") {
    step.kind = Kind::kReplace;
    auto pattern = decoder.find("pattern");
    if (pattern == decoder.end() || !pattern->is_object() || !pattern->contains("String") ||
        !(*pattern)["String"].is_string()) {
      return absl::UnimplementedError(absl::StrCat(
          source, ": decoder Replace supports only {\"String\": ...} patterns, got ",
          pattern == decoder.end() ? "nothing" : pattern->dump()));
    }
    step.from = (*pattern)["String"].get<std::string>();
    if (step.from.empty()) return Invalid(source, "decoder Replace has an empty pattern");
    ASSIGN_OR_RETURN(step.to, StringField(decoder, "content", nullptr, source));
  } else if (type == "ByteFallback") {
    step.kind = Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    ASSIGN_OR_RETURN(step.from, StringField(decoder, "content", nullptr, source));
    for (auto [key, out] : {std::pair<const char*, int*>{"start", &step.start},
                            {"stop", &step.stop}}) {
      auto it = decoder.find(key);
      if (it == decoder.end() || !it->is_number_integer() || it->get<int64_t>() < 0 ||
          it->get<int64_t>() > 1024) {
        return Invalid(source, absl::StrCat("decoder Strip field \"", key,
                                            "\" must be a small non-negative integer"));
      }
      *out = static_cast<int>(it->get<int64_t>());
    }
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    ASSIGN_OR_RETURN(step.from, StringField(decoder, "replacement", "\xE2\x96\x81", source));
    // Newer files say prepend_scheme; older ones add_prefix_space (true = "always").
    std::string scheme = "always";
    if (auto it = decoder.find("add_prefix_space"); it != decoder.end() && it->is_boolean()) {
      scheme = it->get<bool>() ? "always" : "never";
    }
    ASSIGN_OR_RETURN(scheme, StringField(decoder, "prepend_scheme", scheme.c_str(), source));
    step.strip_first_space = scheme != "never";
  } else {
    return absl::UnimplementedError(
        absl::StrCat(source, ": decoder type \"", type, "\" is not supported"));
  }
  steps->push_back(std::move(step));
  return absl::OkStatus();
}

std::string TokenDecoder::Decode(std::vector<std::string> pieces) const {
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kReplace:
        for (std::string& p : pieces) p = absl::StrReplaceAll(p, {{step.from, step.to}});
        break;
      case Kind::kByteFallback: {
        // Each run of byte pieces becomes one piece holding those bytes.
        std::vector<std::string> out;
        out.reserve(pieces.size());
        bool in_bytes = false;
        for (std::string& p : pieces) {
          const int byte = BytePieceValue(p);
          if (byte < 0) {
            out.push_back(std::move(p));
            in_bytes = false;
            continue;
          }
          if (!in_bytes) out.emplace_back();
          out.back().push_back(static_cast<char>(byte));
          in_bytes = true;
        }
        pieces = std::move(out);
        break;
      }
      case Kind::kFuse: {
        std::string all;
        for (const std::string& p : pieces) all += p;
        pieces.assign(1, std::move(all));
        break;
      }
      case Kind::kStrip:
        for (std::string& p : pieces) {
          absl::string_view v = p;
          for (int i = 0; i < step.start && absl::StartsWith(v, step.from); ++i) {
            v.remove_prefix(step.from.size());
          }
          for (int i = 0; i < step.stop && absl::EndsWith(v, step.from); ++i) {
            v.remove_suffix(step.from.size());
          }
          p = std::string(v);
        }
        break;
      case Kind::kMetaspace:
        for (size_t i = 0; i < pieces.size(); ++i) {
          pieces[i] = absl::StrReplaceAll(pieces[i], {{step.from, " "}});
          if (i == 0 && step.strip_first_space && !pieces[i].empty() && pieces[i][0] == ' ') {
            pieces[i].erase(0, 1);
          }
        }
        break;
    }
  }
  std::string text;
  for (const std::string& p : pieces) text += p;
  return text;
}

}  // namespace tessera
