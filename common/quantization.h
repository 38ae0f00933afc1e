#ifndef TESSERA_COMMON_QUANTIZATION_H_
#define TESSERA_COMMON_QUANTIZATION_H_

#include "absl/strings/string_view.h"

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "common/dtype.h"

// How a model's weights and KV cache are stored, as the user chose them
// (`--quantization`, `--kv-cache-dtype`). The coordinator parses the flags and sends the
// spellings to the workers, which parse them again: one vocabulary for both.
namespace tessera {

// Weight formats made at load time from a 16/32-bit checkpoint. Pre-quantized checkpoints
// (FP8, GPTQ/AWQ) are recognised from their config.json and need no flag.
enum class WeightQuantization {
  kNone,  // The checkpoint's dtype.
  kInt8,  // W8A16: int8 weights, one float scale per output channel.
  kFp8,   // FP8 E4M3 weights, one float scale per output channel.
};

enum class KvCacheDType {
  kAuto,  // The model's 16-bit type (torch_dtype); F32 for an F32 model.
  kF32,
  kBF16,
  kFp8,   // E4M3 with one float scale per (token, KV head).
};

// "none" (or ""), "int8", "fp8".
absl::StatusOr<WeightQuantization> ParseWeightQuantization(absl::string_view s);
absl::string_view WeightQuantizationName(WeightQuantization q);

// "auto" (or ""), "fp32", "bf16", "fp8" ("float32", "bfloat16", "fp8_e4m3" too).
absl::StatusOr<KvCacheDType> ParseKvCacheDType(absl::string_view s);
absl::string_view KvCacheDTypeName(KvCacheDType d);
// The flag spelling of a resolved cache element type ("fp32", "bf16", "fp8").
absl::string_view KvCacheDTypeName(DType resolved);

// The element type a KV cache of `d` holds for a model whose weights are `model_dtype`:
// auto keeps BF16/F16 models' type (F16 is stored as BF16, whose range cannot overflow)
// and F32 for F32 models.
DType ResolveKvCacheDType(KvCacheDType d, DType model_dtype);

// Bytes one token's K and V take over `layers` layers of `kv_heads` heads in a cache of
// `dtype` (FP8 adds a float scale per head and token).
uint64_t KvCacheBytesPerToken(int layers, int kv_heads, int head_dim, DType dtype);


}  // namespace tessera

#endif  // TESSERA_COMMON_QUANTIZATION_H_
