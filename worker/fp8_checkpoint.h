#ifndef TESSERA_WORKER_FP8_CHECKPOINT_H_
#define TESSERA_WORKER_FP8_CHECKPOINT_H_

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/checkpoint.h"

// Reading Hugging Face FP8 (E4M3) checkpoints into Tessera's kF8E4M3 layout (see
// kernels::MatrixView): row-major bytes, one float scale per output row.
//
// The three formats in use, per linear layer `<module>` of [out, in] float weights:
//   "fp8"          (vLLM / AutoFP8 / llm-compressor's legacy export): weight F8_E4M3
//                  [out, in], weight_scale float [] or [1] (one per tensor), optionally
//                  input_scale (a static activation scale).
//   "fbgemm_fp8"   (Meta's Llama 3.1 405B FP8): weight F8_E4M3, weight_scale float
//                  [out, 1] (one per output channel); modules_to_not_convert stay BF16.
//   "compressed-tensors" (neuralmagic / llm-compressor) with a config group whose weights
//                  are {num_bits: 8, type: "float", strategy: "tensor" | "channel"}:
//                  weight_scale [] / [1] or [out, 1]; `ignore` lists unquantized modules.
//   All: w[o][i] = weight_scale(o) * e4m3(weight[o][i]).
//
// Tessera runs these weight-only (W8A16): activations stay float, so input_scale,
// activation_scheme and input_activations are read past. Which layers are quantized is
// decided by each weight's dtype in the file (F8_E4M3 or not), not by matching the
// ignore lists, whose entries come as module names, suffixes or "re:" regexes depending
// on the writer; a layer whose dtype and scale disagree is refused instead.
//
// Not supported, refused when config.json is read: block-wise scales ("weight_block_size",
// DeepSeek-V3 style `weight_scale_inv` per 128x128 tile), since a kF8E4M3 matrix carries
// exactly one scale per row; compressed-tensors schemes other than FP8 tensor/channel.
namespace tessera {

enum class Fp8Method { kFp8, kFbgemmFp8, kCompressedTensors };

struct Fp8QuantConfig {
  Fp8Method method = Fp8Method::kFp8;
  std::string method_name;  // quant_method as spelled, for messages.
};

// Parses config.json's "quantization_config": nullopt when there is none or when its
// quant_method is not one of the FP8 formats above (GPTQ/AWQ are read elsewhere);
// UNIMPLEMENTED naming the field for block-wise FP8 and for other compressed-tensors
// schemes; INVALID_ARGUMENT for malformed fields.
absl::StatusOr<std::optional<Fp8QuantConfig>> ParseFp8QuantConfig(absl::string_view json,
                                                                 absl::string_view source);
// Reads `<model_dir>/config.json`.
absl::StatusOr<std::optional<Fp8QuantConfig>> LoadFp8QuantConfig(
    const std::filesystem::path& model_dir);

// Whether `<module>.weight` is stored as F8_E4M3. INVALID_ARGUMENT when the weight and
// `<module>.weight_scale` disagree (an FP8 weight without a scale, or a scale beside a
// 16/32-bit weight).
absl::StatusOr<bool> IsFp8Layer(const Checkpoint& checkpoint, const std::string& module);

// One linear layer's slice in host memory: rows x cols E4M3 bytes and one scale per row.
struct Fp8Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> data;   // [rows, cols]
  std::vector<float> scales;   // [rows]
};

// Reads output rows `rows` and input columns `cols` of `<module>.weight` (F8_E4M3,
// [out_features, in_features]) and the scales of those rows: a per-tensor scale repeated
// on every row, a per-channel scale taken row by row. A row-parallel slice (some columns,
// every row) keeps each row's scale, since a row's scale covers all of its columns.
// Only the slice's bytes and its scales are read.
absl::StatusOr<Fp8Matrix> ReadFp8Linear(const Checkpoint& checkpoint, const std::string& module,
                                        int64_t out_features, int64_t in_features, Range rows,
                                        Range cols);

}  // namespace tessera

#endif  // TESSERA_WORKER_FP8_CHECKPOINT_H_
