#include "common/tokenizer/tokenizer_specials.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// Prefix and suffix ids of a TemplateProcessing `single` template.
absl::Status ReadTemplate(const Json& processor, absl::string_view source,
                          SpecialTokenPlan* plan) {
  auto single = processor.find("single");
  auto specials = processor.find("special_tokens");
  if (single == processor.end() || !single->is_array()) {
    return Invalid(source, "field \"post_processor.single\" must be an array");
  }
  bool after_sequence = false;
  for (const Json& item : *single) {
    if (item.is_object() && item.contains("Sequence")) {
      after_sequence = true;
      continue;
    }
    if (!item.is_object() || !item.contains("SpecialToken") ||
        !item["SpecialToken"].is_object() || !item["SpecialToken"].contains("id") ||
        !item["SpecialToken"]["id"].is_string()) {
      return Invalid(source, absl::StrCat("field \"post_processor.single\": unexpected item ",
                                          item.dump()));
    }
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    if (specials == processor.end() || !specials->is_object() || !specials->contains(name) ||
        !(*specials)[name].is_object() || !(*specials)[name].contains("ids") ||
        !(*specials)[name]["ids"].is_array()) {
      return Invalid(source, absl::StrCat("field \"post_processor.special_tokens\" lacks ids "
                                          "for \"", name, "\""));
    }
    for (const Json& id : (*specials)[name]["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return Invalid(source, absl::StrCat("field \"post_processor.special_tokens.", name,
                                            ".ids\" must hold non-negative integers"));
      }
      (after_sequence ? plan->suffix_ids : plan->prefix_ids)
          .push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadPostProcessor(const Json& processor, absl::string_view source,
                               SpecialTokenPlan* plan) {
  if (processor.is_null()) return absl::OkStatus();
  if (!processor.is_object() || !processor.contains("type") || !processor["type"].is_string()) {
    return Invalid(source, "field \"post_processor\" must be an object with a string \"type\"");
  }
  const std::string type = processor["type"].get<std::string>();
  if (type == "TemplateProcessing") return ReadTemplate(processor, source, plan);
  // ByteLevel post-processing only adjusts offsets, which we do not report.
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence") {
    auto list = processor.find("processors");
    if (list == processor.end() || !list->is_array()) {
      return Invalid(source, "field \"post_processor.processors\" must be an array");
    }
    for (const Json& p : *list) RETURN_IF_ERROR(ReadPostProcessor(p, source, plan));
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat(source, ": post_processor type \"", type, "\" is not supported"));
}

// A token named in tokenizer_config.json: a string, or an object with "content".
absl::StatusOr<std::optional<std::string>> ConfigToken(const Json& config, const char* key,
                                                       absl::string_view source) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return std::optional<std::string>((*it)["content"].get<std::string>());
  }
  return Invalid(source, absl::StrCat("field \"", key,
                                      "\" must be a string or an object with \"content\", got ",
                                      it->dump()));
}

absl::StatusOr<std::optional<bool>> ConfigBool(const Json& config, const char* key,
                                               absl::string_view source) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean()) {
    return Invalid(source, absl::StrCat("field \"", key, "\" must be a boolean, got ", it->dump()));
  }
  return std::optional<bool>(it->get<bool>());
}

}  // namespace

absl::StatusOr<SpecialTokenPlan> ResolveSpecialTokens(
    const Json& tokenizer, const Json& config,
    const std::function<int32_t(absl::string_view)>& id_for_piece,
    absl::string_view tokenizer_source, absl::string_view config_source) {
  SpecialTokenPlan plan;
  if (auto it = tokenizer.find("post_processor"); it != tokenizer.end()) {
    RETURN_IF_ERROR(ReadPostProcessor(*it, tokenizer_source, &plan));
  }
  const Json empty = Json::object();
  const Json& cfg = config.is_object() ? config : empty;

  const auto resolve = [&](const char* key, const char* fallback_piece,
                           int32_t fallback_id) -> absl::StatusOr<int32_t> {
    ASSIGN_OR_RETURN(std::optional<std::string> piece, ConfigToken(cfg, key, config_source));
    if (piece.has_value()) {
      const int32_t id = id_for_piece(*piece);
      if (id < 0) {
        return Invalid(config_source, absl::StrCat("field \"", key, "\": token \"", *piece,
                                                   "\" is not in the vocabulary"));
      }
      return id;
    }
    if (fallback_id >= 0) return fallback_id;
    return id_for_piece(fallback_piece);
  };
  ASSIGN_OR_RETURN(plan.bos_id,
                   resolve("bos_token", "<s>", plan.prefix_ids.empty() ? -1 : plan.prefix_ids[0]));
  ASSIGN_OR_RETURN(plan.eos_id,
                   resolve("eos_token", "</s>",
                           plan.suffix_ids.empty() ? -1 : plan.suffix_ids.back()));

  ASSIGN_OR_RETURN(std::optional<bool> add_bos, ConfigBool(cfg, "add_bos_token", config_source));
  ASSIGN_OR_RETURN(std::optional<bool> add_eos, ConfigBool(cfg, "add_eos_token", config_source));
  if (add_bos.has_value()) {
    if (*add_bos && plan.bos_id < 0) {
      return Invalid(config_source, "add_bos_token is true but the tokenizer has no BOS token");
    }
    plan.prefix_ids = *add_bos ? std::vector<int32_t>{plan.bos_id} : std::vector<int32_t>{};
  }
  if (add_eos.has_value()) {
    if (*add_eos && plan.eos_id < 0) {
      return Invalid(config_source, "add_eos_token is true but the tokenizer has no EOS token");
    }
    plan.suffix_ids = *add_eos ? std::vector<int32_t>{plan.eos_id} : std::vector<int32_t>{};
  }
  return plan;
}

}  // namespace tessera
