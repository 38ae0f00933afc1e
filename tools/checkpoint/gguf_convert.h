#ifndef TESSERA_TOOLS_CHECKPOINT_GGUF_CONVERT_H_
#define TESSERA_TOOLS_CHECKPOINT_GGUF_CONVERT_H_

#include <filesystem>

#include "absl/status/status.h"
#include "common/dtype.h"

namespace tessera {

// Writes the Hugging Face folder of a GGUF file: config.json, tokenizer.json and
// tokenizer_config.json from its metadata (common/gguf_hf.h), and model.safetensors with
// every tensor dequantized to `dtype` (F32, BF16 or F16) under its Hugging Face name, q/k
// rows in Hugging Face order. Shows progress on stderr.
absl::Status ConvertGguf(const std::filesystem::path& gguf_file, const std::filesystem::path& out_dir,
                         DType dtype);

}  // namespace tessera

#endif  // TESSERA_TOOLS_CHECKPOINT_GGUF_CONVERT_H_
