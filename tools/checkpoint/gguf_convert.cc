#include "tools/checkpoint/gguf_convert.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/file_util.h"
#include "common/gguf_file.h"
#include "common/gguf_hf.h"
#include "common/gguf_quants.h"
#include "common/progress_line.h"
#include "common/safetensors.h"
#include "common/status_macros.h"

namespace tessera {

absl::Status ConvertGguf(const std::filesystem::path& gguf_file, const std::filesystem::path& out_dir,
                         DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype must be f32, bf16 or f16, not ", DTypeName(dtype)));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(gguf_file));
  ASSIGN_OR_RETURN(GgufHfFiles files, GgufToHfFiles(*gguf));
  // Checkpoint reads the same file under the Hugging Face names (q/k permutation undone).
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint, Checkpoint::Open(gguf_file));

  // Every tensor must be readable before anything is written.
  for (const std::string& name : checkpoint->TensorNames()) {
    const GgufTensorRef* ref = checkpoint->Gguf(name);
    if (absl::Status readable = GgmlReadable(ref->tensor->type); !readable.ok()) {
      return absl::Status(readable.code(), absl::StrCat(gguf_file.string(), ": tensor \"", ref->tensor->name,
                                                        "\" is ", readable.message()));
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot create ", out_dir.string(), ": ", ec.message()));
  files.config.torch_dtype = dtype;
  RETURN_IF_ERROR(WriteStringToFile(out_dir / "config.json", files.config.ToJson()));
  RETURN_IF_ERROR(WriteStringToFile(out_dir / "tokenizer.json", files.tokenizer_json));
  RETURN_IF_ERROR(WriteStringToFile(out_dir / "tokenizer_config.json", files.tokenizer_config_json));

  SafetensorsWriter writer;
  const Checkpoint* source = checkpoint.get();
  for (const std::string& name : checkpoint->TensorNames()) {
    ASSIGN_OR_RETURN(const TensorInfo* info, checkpoint->Info(name));
    const std::vector<int64_t> shape = info->shape;
    const int64_t cols = shape.back();
    const int64_t rows = shape.size() == 2 ? shape[0] : 1;
    // The writer asks for element ranges in order; each call reads the rows covering it.
    writer.Add(name, dtype, shape, [source, name, dtype, rows, cols](uint64_t offset, uint64_t n, void* dst) {
      const int64_t first = static_cast<int64_t>(offset) / cols;
      const int64_t last = std::min<int64_t>(rows, (static_cast<int64_t>(offset + n) + cols - 1) / cols);
      std::vector<uint8_t> staging(static_cast<size_t>((last - first) * cols) * DTypeSize(dtype));
      // Names and ranges come from the file's own table: a failure here is a bug.
      const absl::Status s = source->ReadSlice(name, {first, last}, {0, cols}, dtype, staging.data());
      if (!s.ok()) std::abort();
      std::copy_n(staging.data() + (offset - static_cast<uint64_t>(first * cols)) * DTypeSize(dtype),
                  n * DTypeSize(dtype), static_cast<uint8_t*>(dst));
    });
  }
  ProgressLine progress(absl::StrCat("writing ", (out_dir / "model.safetensors").string()));
  return writer.Write(out_dir / "model.safetensors",
                      [&](uint64_t done, uint64_t total) { progress.Update(done, total); });
}

}  // namespace tessera
