#include "common/generation_config.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "common/gguf_model_dir.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// Reads an optional number into `out`; `check` says whether the value is allowed and
// `rule` how to say it is not.
absl::Status ReadFloat(const Json& j, absl::string_view source, const char* key,
                       bool (*check)(double), const char* rule, std::optional<float>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) {
    return Invalid(source, absl::StrCat("field \"", key, "\" must be a number, got ", it->dump()));
  }
  const double v = it->get<double>();
  if (!std::isfinite(v) || !check(v)) {
    return Invalid(source, absl::StrCat("field \"", key, "\" = ", it->dump(), ": ", rule));
  }
  *out = static_cast<float>(v);
  return absl::OkStatus();
}

absl::Status ReadInt(const Json& j, absl::string_view source, const char* key, int min,
                     std::optional<int>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer() || it->get<int64_t>() < min ||
      it->get<int64_t>() > (int64_t{1} << 31) - 1) {
    return Invalid(source, absl::StrCat("field \"", key, "\" must be an integer >= ", min,
                                        ", got ", it->dump()));
  }
  *out = static_cast<int>(it->get<int64_t>());
  return absl::OkStatus();
}

absl::Status ReadIds(const Json& j, absl::string_view source, const char* key,
                     std::vector<int32_t>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  const auto one = [&](const Json& e) -> absl::Status {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX) {
      return Invalid(source, absl::StrCat("field \"", key,
                                          "\" must be a token id or a list of them, got ",
                                          it->dump()));
    }
    out->push_back(static_cast<int32_t>(e.get<int64_t>()));
    return absl::OkStatus();
  };
  if (!it->is_array()) return one(*it);
  for (const Json& e : *it) RETURN_IF_ERROR(one(e));
  return absl::OkStatus();
}

absl::Status CheckIds(const GenerationConfig& c, const ModelConfig& model, absl::string_view source) {
  for (int32_t id : c.eos_token_ids) {
    if (id >= model.vocab_size) {
      return Invalid(source, absl::StrCat("eos_token_id ", id, " outside the vocabulary of ",
                                          model.vocab_size));
    }
  }
  if (c.bos_token_id.has_value() && *c.bos_token_id >= model.vocab_size) {
    return Invalid(source, absl::StrCat("bos_token_id ", *c.bos_token_id,
                                        " outside the vocabulary of ", model.vocab_size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerationConfig> GenerationConfig::FromJson(absl::string_view text,
                                                            absl::string_view source) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Invalid(source, "not a valid JSON object");
  GenerationConfig c;
  RETURN_IF_ERROR(ReadIds(j, source, "eos_token_id", &c.eos_token_ids));
  std::vector<int32_t> bos;
  RETURN_IF_ERROR(ReadIds(j, source, "bos_token_id", &bos));
  if (bos.size() > 1) return Invalid(source, "field \"bos_token_id\" must be a single id");
  if (!bos.empty()) c.bos_token_id = bos[0];
  if (auto it = j.find("do_sample"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return Invalid(source, absl::StrCat("field \"do_sample\" must be true or false, got ",
                                          it->dump()));
    }
    c.do_sample = it->get<bool>();
  }
  RETURN_IF_ERROR(ReadFloat(j, source, "temperature", [](double v) { return v >= 0; },
                            "must be >= 0", &c.temperature));
  RETURN_IF_ERROR(ReadFloat(j, source, "top_p", [](double v) { return v > 0 && v <= 1; },
                            "must be in (0, 1]", &c.top_p));
  RETURN_IF_ERROR(ReadFloat(j, source, "min_p", [](double v) { return v >= 0 && v < 1; },
                            "must be in [0, 1)", &c.min_p));
  RETURN_IF_ERROR(ReadFloat(j, source, "repetition_penalty", [](double v) { return v > 0; },
                            "must be > 0", &c.repetition_penalty));
  RETURN_IF_ERROR(ReadInt(j, source, "top_k", 0, &c.top_k));
  RETURN_IF_ERROR(ReadInt(j, source, "max_new_tokens", 1, &c.max_new_tokens));
  return c;
}

absl::StatusOr<GenerationConfig> GenerationConfig::LoadIfPresent(
    const std::filesystem::path& model_path, const ModelConfig& model) {
  ASSIGN_OR_RETURN(const std::filesystem::path model_dir, ResolveModelDir(model_path));
  const std::filesystem::path file = model_dir / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return GenerationConfig();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(file));
  ASSIGN_OR_RETURN(GenerationConfig c, FromJson(text, file.string()));
  RETURN_IF_ERROR(CheckIds(c, model, file.string()));
  return c;
}

SamplingParams GenerationConfig::DefaultSampling() const {
  SamplingParams p;
  // transformers ignores the temperature of a do_sample=false config and decodes greedily.
  if (do_sample.has_value() && !*do_sample) {
    p.temperature = 0.0f;
  } else if (temperature.has_value()) {
    p.temperature = *temperature;
  }
  if (top_p.has_value()) p.top_p = *top_p;
  if (top_k.has_value()) p.top_k = *top_k;
  if (min_p.has_value()) p.min_p = *min_p;
  if (repetition_penalty.has_value()) p.repetition_penalty = *repetition_penalty;
  return p;
}

std::vector<int32_t> GenerationConfig::StopTokenIds(const ModelConfig& model) const {
  std::vector<int32_t> ids(model.eos_token_ids.begin(), model.eos_token_ids.end());
  for (int32_t id : eos_token_ids) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

}  // namespace tessera
