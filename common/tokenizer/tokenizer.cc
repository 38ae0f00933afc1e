#include "common/tokenizer/tokenizer.h"

#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/tokenizer/byte_level_bpe.h"
#include "common/tokenizer/sentencepiece_bpe.h"
#include "common/status_macros.h"
#include "common/gguf_model_dir.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

absl::StatusOr<Json> ParseJsonObject(const std::string& text, const std::string& source) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a valid JSON object"));
  }
  return j;
}

// True when `component` (a pre_tokenizer or decoder, possibly a Sequence) contains a
// ByteLevel step: the mark of GPT-2 style byte-level BPE (Llama 3).
bool HasByteLevel(const Json& component) {
  if (!component.is_object()) return false;
  auto type = component.find("type");
  if (type != component.end() && type->is_string() && type->get<std::string>() == "ByteLevel") {
    return true;
  }
  for (const char* list : {"pretokenizers", "decoders"}) {
    auto it = component.find(list);
    if (it == component.end() || !it->is_array()) continue;
    for (const Json& c : *it) {
      if (HasByteLevel(c)) return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::filesystem::path& model_path) {
  ASSIGN_OR_RETURN(const std::filesystem::path dir, ResolveModelDir(model_path));
  const std::filesystem::path tokenizer_path = dir / "tokenizer.json";
  const std::string tokenizer_source = tokenizer_path.string();
  ASSIGN_OR_RETURN(std::string tokenizer_text, ReadFileToString(tokenizer_path));
  ASSIGN_OR_RETURN(Json tokenizer, ParseJsonObject(tokenizer_text, tokenizer_source));

  // tokenizer_config.json is optional; without it the post-processor alone decides BOS.
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  const std::string config_source = config_path.string();
  Json config;
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    ASSIGN_OR_RETURN(std::string config_text, ReadFileToString(config_path));
    ASSIGN_OR_RETURN(config, ParseJsonObject(config_text, config_source));
  }

  auto model = tokenizer.find("model");
  if (model == tokenizer.end() || !model->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tokenizer_source, ": field \"model\" is missing or not an object"));
  }
  std::string type;
  if (auto it = model->find("type"); it != model->end()) {
    if (!it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(tokenizer_source, ": field \"model.type\" must be a string"));
    }
    type = it->get<std::string>();
  } else if (model->contains("merges")) {
    type = "BPE";  // Old files leave the type out; merges only exist in BPE models.
  }
  if (type != "BPE") {
    return absl::UnimplementedError(
        absl::StrCat(tokenizer_source, ": tokenizer model type \"", type,
                     "\" is not supported (supported: BPE)"));
  }

  const Json null_json;
  const auto field = [&](const char* key) -> const Json& {
    auto it = tokenizer.find(key);
    return it == tokenizer.end() ? null_json : *it;
  };
  // Model kinds are told apart by their pre-tokenizer and decoder, as the model type is
  // "BPE" for both.
  if (HasByteLevel(field("pre_tokenizer")) || HasByteLevel(field("decoder"))) {
    ASSIGN_OR_RETURN(std::unique_ptr<ByteLevelBpeTokenizer> t,
                     ByteLevelBpeTokenizer::Create(tokenizer, config, tokenizer_source,
                                                   config_source));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SentencePieceBpeTokenizer> t,
                   SentencePieceBpeTokenizer::Create(tokenizer, config, tokenizer_source,
                                                     config_source));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace tessera
