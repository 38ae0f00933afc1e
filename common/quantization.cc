#include "common/quantization.h"

#include "absl/strings/str_cat.h"

namespace tessera {

absl::StatusOr<WeightQuantization> ParseWeightQuantization(absl::string_view s) {
  if (s.empty() || s == "none") return WeightQuantization::kNone;
  if (s == "int8") return WeightQuantization::kInt8;
  if (s == "fp8") return WeightQuantization::kFp8;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown quantization '", s, "' (expected none, int8 or fp8)"));
}

absl::string_view WeightQuantizationName(WeightQuantization q) {
  switch (q) {
    case WeightQuantization::kNone: return "none";
    case WeightQuantization::kInt8: return "int8";
    case WeightQuantization::kFp8: return "fp8";
  }
  return "?";
}

absl::StatusOr<KvCacheDType> ParseKvCacheDType(absl::string_view s) {
  if (s.empty() || s == "auto") return KvCacheDType::kAuto;
  if (s == "fp32" || s == "float32") return KvCacheDType::kF32;
  if (s == "bf16" || s == "bfloat16") return KvCacheDType::kBF16;
  if (s == "fp8" || s == "fp8_e4m3") return KvCacheDType::kFp8;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown KV cache dtype '", s, "' (expected auto, bf16, fp8 or fp32)"));
}

absl::string_view KvCacheDTypeName(KvCacheDType d) {
  switch (d) {
    case KvCacheDType::kAuto: return "auto";
    case KvCacheDType::kF32: return "fp32";
    case KvCacheDType::kBF16: return "bf16";
    case KvCacheDType::kFp8: return "fp8";
  }
  return "?";
}

absl::string_view KvCacheDTypeName(DType resolved) {
  switch (resolved) {
    case DType::kBF16: return "bf16";
    case DType::kF8E4M3: return "fp8";
    default: return "fp32";
  }
}

DType ResolveKvCacheDType(KvCacheDType d, DType model_dtype) {
  switch (d) {
    case KvCacheDType::kAuto: return model_dtype == DType::kF32 ? DType::kF32 : DType::kBF16;
    case KvCacheDType::kF32: return DType::kF32;
    case KvCacheDType::kBF16: return DType::kBF16;
    case KvCacheDType::kFp8: return DType::kF8E4M3;
  }
  return DType::kF32;
}

uint64_t KvCacheBytesPerToken(int layers, int kv_heads, int head_dim, DType dtype) {
  return uint64_t{2} * layers * kv_heads * (head_dim * DTypeSize(dtype) + KvScaleBytes(dtype));
}

}  // namespace tessera
