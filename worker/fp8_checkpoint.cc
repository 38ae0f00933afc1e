#include "worker/fp8_checkpoint.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

std::string Shape(const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// compressed-tensors: every config group must quantize weights as FP8 per tensor or per
// channel (a model mixing FP8 layers with, say, 4-bit ones is refused as a whole rather
// than half loaded).
absl::Status CheckCompressedTensors(const Json& q, absl::string_view source) {
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": quantization_config.config_groups must be a non-empty object for "
                "compressed-tensors"));
  }
  for (const auto& [name, group] : groups->items()) {
    const std::string where = absl::StrCat(source, ": quantization_config.config_groups.", name);
    auto w = group.is_object() ? group.find("weights") : group.end();
    if (!group.is_object() || w == group.end() || !w->is_object()) {
      return absl::UnimplementedError(absl::StrCat(
          where, " has no \"weights\" scheme; Tessera reads compressed-tensors FP8 weights only"));
    }
    const std::string type = w->value("type", std::string());
    auto num_bits = w->find("num_bits");
    const int bits =
        num_bits != w->end() && num_bits->is_number_integer() ? num_bits->get<int>() : -1;
    const std::string strategy = w->value("strategy", std::string());
    if (type != "float" || bits != 8 || (strategy != "tensor" && strategy != "channel")) {
      return absl::UnimplementedError(absl::StrCat(
          where, ".weights is {num_bits: ", bits, ", type: \"", type, "\", strategy: \"", strategy,
          "\"}; Tessera reads compressed-tensors weights {num_bits: 8, type: \"float\", "
          "strategy: \"tensor\" or \"channel\"} only (its FP8 matrices carry one scale per row)"));
    }
    // input_activations (dynamic per-token or static FP8) are not applied: Tessera runs
    // the weights with float activations.
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<Fp8QuantConfig>> ParseFp8QuantConfig(absl::string_view text,
                                                                 absl::string_view source) {
  const Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return std::nullopt;
  const Json& q = *it;
  if (!q.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": quantization_config must be an object"));
  }
  Fp8QuantConfig c;
  c.method_name = q.value("quant_method", std::string());
  if (c.method_name == "fp8") {
    c.method = Fp8Method::kFp8;
    // DeepSeek-V3 style: one scale (weight_scale_inv) per 128x128 tile.
    auto block = q.find("weight_block_size");
    if (block != q.end() && !block->is_null()) {
      return absl::UnimplementedError(absl::StrCat(
          source, ": quantization_config.weight_block_size ", block->dump(),
          ": block-wise FP8 scales are not supported; Tessera's FP8 matrices carry one scale "
          "per output row (per-tensor or per-channel checkpoints load)"));
    }
    // activation_scheme ("dynamic" / "static") only concerns activations: ignored.
  } else if (c.method_name == "fbgemm_fp8") {
    c.method = Fp8Method::kFbgemmFp8;
    // activation_scale_ub bounds dynamic activation scales: ignored (weight-only).
  } else if (c.method_name == "compressed-tensors") {
    c.method = Fp8Method::kCompressedTensors;
    RETURN_IF_ERROR(CheckCompressedTensors(q, source));
  } else {
    return std::nullopt;
  }
  return c;
}

absl::StatusOr<std::optional<Fp8QuantConfig>> LoadFp8QuantConfig(
    const std::filesystem::path& model_dir) {
  const std::filesystem::path file = model_dir / "config.json";
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(file));
  return ParseFp8QuantConfig(text, file.string());
}

absl::StatusOr<bool> IsFp8Layer(const Checkpoint& checkpoint, const std::string& module) {
  ASSIGN_OR_RETURN(const TensorInfo* weight, checkpoint.Info(module + ".weight"));
  const bool fp8 = weight->dtype == DType::kF8E4M3;
  const bool has_scale = checkpoint.Has(module + ".weight_scale");
  if (fp8 && !has_scale) {
    const bool block_scale = checkpoint.Has(module + ".weight_scale_inv");
    return absl::InvalidArgumentError(absl::StrCat(
        checkpoint.dir().string(), ": ", module, ".weight is F8_E4M3 but ", module,
        ".weight_scale is missing",
        block_scale ? absl::StrCat(" (", module,
                                   ".weight_scale_inv is block-wise FP8, which is not supported)")
                    : ""));
  }
  if (!fp8 && has_scale) {
    return absl::InvalidArgumentError(absl::StrCat(
        checkpoint.dir().string(), ": ", module, ".weight_scale is present but ", module,
        ".weight is ", DTypeName(weight->dtype), ", not F8_E4M3"));
  }
  return fp8;
}

absl::StatusOr<Fp8Matrix> ReadFp8Linear(const Checkpoint& checkpoint, const std::string& module,
                                        int64_t out_features, int64_t in_features, Range rows,
                                        Range cols) {
  const std::string where = absl::StrCat(checkpoint.dir().string(), ": ", module);
  const std::string weight_name = module + ".weight";
  const std::string scale_name = module + ".weight_scale";
  ASSIGN_OR_RETURN(const TensorInfo* weight, checkpoint.Info(weight_name));
  const std::vector<int64_t> weight_shape{out_features, in_features};
  if (weight->dtype != DType::kF8E4M3 || weight->shape != weight_shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".weight is ", DTypeName(weight->dtype), " ", Shape(weight->shape),
        ", expected F8_E4M3 ", Shape(weight_shape)));
  }
  auto scale_or = checkpoint.Info(scale_name);
  if (!scale_or.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".weight is F8_E4M3 but ", scale_name,
                                                   " is missing"));
  }
  const TensorInfo* scale = *scale_or;
  if (!IsFloat(scale->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        checkpoint.dir().string(), ": ", scale_name, " has dtype ", DTypeName(scale->dtype),
        ", expected F32, BF16 or F16"));
  }
  // One scale for the tensor ([] or [1]), or one per output channel ([out, 1] as every
  // writer stores it, or [out]).
  const std::vector<int64_t>& s = scale->shape;
  const bool per_tensor = s.empty() || s == std::vector<int64_t>{1};
  const bool per_channel = s == std::vector<int64_t>{out_features, 1} ||
                           s == std::vector<int64_t>{out_features};
  if (!per_tensor && !per_channel) {
    return absl::InvalidArgumentError(absl::StrCat(
        checkpoint.dir().string(), ": tensor ", scale_name, " has shape ", Shape(s),
        ", expected [] or [1] (per-tensor) or [", out_features, ", 1] (per-channel) for a layer of [out ",
        out_features, ", in ", in_features, "]"));
  }
  if (rows.begin < 0 || rows.end > out_features || rows.begin > rows.end || cols.begin < 0 ||
      cols.end > in_features || cols.begin > cols.end) {
    return absl::OutOfRangeError(absl::StrCat(where, ": slice out of range"));
  }
  Fp8Matrix m;
  m.rows = rows.size();
  m.cols = cols.size();
  m.data.resize(static_cast<size_t>(m.rows * m.cols));
  m.scales.resize(static_cast<size_t>(m.rows));
  RETURN_IF_ERROR(checkpoint.ReadSlice(weight_name, rows, cols, DType::kF8E4M3, m.data.data()));
  if (per_tensor) {
    float one = 0;
    RETURN_IF_ERROR(checkpoint.ReadSlice(scale_name, {0, 1}, {0, 1}, DType::kF32, &one));
    m.scales.assign(m.scales.size(), one);
  } else if (s.size() == 2) {
    RETURN_IF_ERROR(checkpoint.ReadSlice(scale_name, rows, {0, 1}, DType::kF32, m.scales.data()));
  } else {
    RETURN_IF_ERROR(checkpoint.ReadSlice(scale_name, {0, 1}, rows, DType::kF32, m.scales.data()));
  }
  for (size_t r = 0; r < m.scales.size(); ++r) {
    if (!std::isfinite(m.scales[r]) || m.scales[r] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": ", scale_name, " for row ", rows.begin + static_cast<int64_t>(r), " is ",
          m.scales[r], "; scales must be finite and non-negative"));
    }
  }
  return m;
}

}  // namespace tessera
