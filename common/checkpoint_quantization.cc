#include "common/checkpoint_quantization.h"

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "common/gguf_model_dir.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

// compressed-tensors names its scheme per config group; FP8 weights are 8-bit floats.
bool HasFp8WeightGroup(const Json& q) {
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object()) return false;
  for (const auto& [name, group] : groups->items()) {
    if (!group.is_object()) continue;
    auto w = group.find("weights");
    if (w == group.end() || !w->is_object()) continue;
    if (w->value("type", std::string()) == "float" && w->value("num_bits", 0) == 8) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::string> CheckpointQuantizationName(absl::string_view text,
                                                       absl::string_view source) {
  const Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return std::string();
  if (!it->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": quantization_config must be an object"));
  }
  const std::string method = it->value("quant_method", std::string());
  if (method == "fp8" || method == "fbgemm_fp8") return std::string("fp8");
  if (method == "compressed-tensors" && HasFp8WeightGroup(*it)) return std::string("fp8");
  if (method.empty()) return std::string("unknown");
  return method;
}

absl::StatusOr<std::string> LoadCheckpointQuantizationName(const std::filesystem::path& model_path) {
  ASSIGN_OR_RETURN(const std::filesystem::path model_dir, ResolveModelDir(model_path));
  const std::filesystem::path file = model_dir / "config.json";
  if (!std::filesystem::exists(file)) return std::string();
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(file));
  return CheckpointQuantizationName(text, file.string());
}

absl::Status CheckLoadTimeQuantization(absl::string_view flag,
                                       absl::string_view checkpoint_quantization,
                                       absl::string_view model_dir) {
  if (flag.empty() || flag == "none" || checkpoint_quantization.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      model_dir, " is already quantized (", checkpoint_quantization,
      ", from config.json's quantization_config); --quantization ", flag,
      " applies only to 16/32-bit checkpoints: drop the flag to serve the checkpoint as it is"));
}

}  // namespace tessera
