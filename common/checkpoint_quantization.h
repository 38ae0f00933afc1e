#ifndef TESSERA_COMMON_CHECKPOINT_QUANTIZATION_H_
#define TESSERA_COMMON_CHECKPOINT_QUANTIZATION_H_

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// What a pre-quantized checkpoint announces in config.json's "quantization_config", as
// the coordinator and the CLI need it: a name to report (GetModelInfo, metrics, eval
// reports) and a reason to refuse `--quantization` on top of it. The workers parse the
// same field in full (worker/fp8_checkpoint.h, worker/gptq_checkpoint.h) and refuse what
// they cannot load; this only names it.
namespace tessera {

// "" for a checkpoint without quantization_config (or without config.json);
// "fp8" for quant_method "fp8", "fbgemm_fp8" and "compressed-tensors" with 8-bit float
// weights; "gptq" / "awq"; any other quant_method as it is spelled (the workers refuse
// those). INVALID_ARGUMENT for unreadable JSON.
absl::StatusOr<std::string> CheckpointQuantizationName(absl::string_view config_json,
                                                       absl::string_view source);
// Reads `<model_dir>/config.json`.
absl::StatusOr<std::string> LoadCheckpointQuantizationName(const std::filesystem::path& model_dir);

// The rule for `--quantization` (load-time int8/fp8) on a checkpoint: allowed only when
// the checkpoint is not quantized already (re-quantizing quantized weights would only
// lose precision, and a GPTQ/FP8 layer has no float weight to start from).
// INVALID_ARGUMENT naming both otherwise. `flag` is "none", "int8" or "fp8".
absl::Status CheckLoadTimeQuantization(absl::string_view flag,
                                       absl::string_view checkpoint_quantization,
                                       absl::string_view model_dir);

}  // namespace tessera

#endif  // TESSERA_COMMON_CHECKPOINT_QUANTIZATION_H_
