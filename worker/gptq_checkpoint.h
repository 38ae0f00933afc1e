#ifndef TESSERA_WORKER_GPTQ_CHECKPOINT_H_
#define TESSERA_WORKER_GPTQ_CHECKPOINT_H_

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/checkpoint.h"

// Reading Hugging Face INT4 checkpoints (GPTQ and AWQ) and repacking their linear layers
// into Tessera's kU4 layout (see kernels::MatrixView): row-major [out, in / 2] bytes, the
// low nibble the even input column, with a float scale and zero per (row, group).
//
// What the files hold, per linear layer `<prefix>` (in = in_features, out = out_features,
// G = in / group_size groups):
//   GPTQ: qweight I32 [in / 8, out]: 8 codes of consecutive INPUT rows per word, input
//         8 * i + k in bits 4k..4k+3. qzeros I32 [G, out / 8]: 8 consecutive OUTPUT
//         columns per word, same bit order. scales F16 [G, out]. g_idx I32 [in] (optional).
//   AWQ (version "gemm"): qweight I32 [in, out / 8] and qzeros I32 [G, out / 8], both
//         packed along the OUTPUT dim in the interleaved order: nibble k of word j holds
//         column 8 * j + kAwqOrder[k], kAwqOrder = {0, 2, 4, 6, 1, 3, 5, 7}. scales F16
//         [G, out].
//   Both: w[o][i] = scale[g][o] * (q[i][o] - zero[g][o]), g = i / group_size.
//
// Zero points. AutoGPTQ's original ("gptq", v1) format stores zero - 1 (its packer
// subtracts one before packing, and every v1 kernel adds it back); GPTQModel's "gptq_v2"
// stores the zero itself; AWQ stores the zero itself. quantization_config's
// `checkpoint_format` picks between the two GPTQ variants (absent: v1, as transformers and
// vLLM assume). A v1 file cannot hold a zero of 0 (it would wrap to 15 + 1 = 16); such a
// file is read as the wrapped value exactly like the v1 kernels read it.
namespace tessera {

enum class Int4Method { kGptq, kAwq };

struct Int4QuantConfig {
  Int4Method method = Int4Method::kGptq;
  // Input columns sharing one scale/zero; -1 in the file (one group per output channel)
  // is kept as -1 here and becomes the whole input width when a layer is read.
  int group_size = 128;
  bool sym = true;       // Informational: the zeros are read from qzeros either way.
  bool desc_act = false; // Accepted when g_idx is the trivial order.
  bool zeros_minus_one = true;  // GPTQ v1 (see above); false for gptq_v2 and AWQ.
};

// Parses config.json's "quantization_config". nullopt when the file has none;
// INVALID_ARGUMENT for a GPTQ/AWQ config outside what Tessera reads (bits other than 4,
// AWQ versions other than "gemm" or without zero points, odd group sizes);
// UNIMPLEMENTED for other quant_methods.
absl::StatusOr<std::optional<Int4QuantConfig>> ParseInt4QuantConfig(absl::string_view json,
                                                                   absl::string_view source);
// Reads `<model_dir>/config.json`.
absl::StatusOr<std::optional<Int4QuantConfig>> LoadInt4QuantConfig(
    const std::filesystem::path& model_dir);

// One linear layer's slice in Tessera's kU4 layout, in host memory.
struct Int4Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  int group_size = 0;                 // Divides cols.
  std::vector<uint8_t> packed;        // [rows, cols / 2]
  std::vector<float> scales;          // [rows, cols / group_size]
  std::vector<float> zeros;           // [rows, cols / group_size]

  int64_t groups_per_row() const { return cols / group_size; }
  // The code 0..15 of element (r, c).
  int Code(int64_t r, int64_t c) const {
    return (packed[static_cast<size_t>(r * (cols / 2) + c / 2)] >> (4 * (c & 1))) & 0xf;
  }
};

// The whole-file tensors of one layer, already read (int32 words and float scales).
struct Int4LayerTensors {
  int64_t in_features = 0;
  int64_t out_features = 0;
  std::vector<int32_t> qweight;
  std::vector<int32_t> qzeros;
  std::vector<float> scales;
  std::vector<int32_t> g_idx;  // Empty when the file has none.
};

// Repacks output rows `rows` and input columns `cols` of a layer. `cols` must start and end
// on group boundaries (a row-parallel slice never splits a group); INVALID_ARGUMENT names
// the layer otherwise. UNIMPLEMENTED for a g_idx that is not the trivial order.
absl::StatusOr<Int4Matrix> RepackInt4(const Int4QuantConfig& config, absl::string_view layer,
                                      const Int4LayerTensors& t, Range rows, Range cols);

// Reads `<prefix>.qweight` / `.qzeros` / `.scales` (/ `.g_idx`) of a layer whose float
// weight would be [out_features, in_features], checks their shapes, and repacks the slice.
// Only this layer's tensors are read.
absl::StatusOr<Int4Matrix> ReadInt4Linear(const Checkpoint& checkpoint,
                                          const Int4QuantConfig& config,
                                          const std::string& prefix, int64_t out_features,
                                          int64_t in_features, Range rows, Range cols);

}  // namespace tessera

#endif  // TESSERA_WORKER_GPTQ_CHECKPOINT_H_
