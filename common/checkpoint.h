#ifndef TESSERA_COMMON_CHECKPOINT_H_
#define TESSERA_COMMON_CHECKPOINT_H_

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/gguf_file.h"
#include "common/gguf_hf.h"
#include "common/safetensors.h"

namespace tessera {

// A half-open index range.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

// The model weights of one Hugging Face folder: `model.safetensors`, or the shards listed
// by `model.safetensors.index.json`, or a GGUF file (a folder from ResolveModelDir, whose
// `model.gguf` links to it, or the file itself) read under the Hugging Face names.
// Files stay memory-mapped; reads copy only the bytes of the requested slice. GGUF block
// types read as F32 (dequantized), q/k rows in Hugging Face order.
class Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::filesystem::path& model_dir);

  // The tensor's header entry; NOT_FOUND naming the tensor (and the folder) when absent.
  absl::StatusOr<const TensorInfo*> Info(absl::string_view name) const;
  bool Has(absl::string_view name) const;
  // Every tensor name, sorted.
  std::vector<std::string> TensorNames() const;

  // Copies rows [rows.begin, rows.end) and columns [cols.begin, cols.end) of a 2-D tensor,
  // converted to `dst_dtype`, row-major into `dst`. A 1-D tensor is read as one row.
  // Checks the tensor exists, has rank <= 2 and that the ranges fit its shape.
  absl::Status ReadSlice(absl::string_view name, Range rows, Range cols, DType dst_dtype,
                         void* dst) const;
  // Convenience: the whole tensor, with `expected_shape` checked.
  absl::Status ReadAll(absl::string_view name, const std::vector<int64_t>& expected_shape,
                       DType dst_dtype, void* dst) const;

  // The GGUF tensor behind `name`; null for safetensors checkpoints and unknown names.
  // Loaders use it to keep a block type's codes (see gguf_quants.h) instead of floats.
  const GgufTensorRef* Gguf(absl::string_view name) const;

  // Bytes copied out of the files so far: lets tests assert a slice touched only its bytes.
  uint64_t bytes_read() const { return bytes_read_.load(); }
  const std::filesystem::path& dir() const { return dir_; }
  size_t num_files() const { return files_.size(); }

 private:
  Checkpoint() = default;

  struct Location {
    const SafetensorsFile* file = nullptr;
    const TensorInfo* info = nullptr;
    const GgufTensorRef* gguf = nullptr;  // Set instead of `file` for GGUF.
  };
  absl::Status OpenGguf(const std::filesystem::path& file);
  absl::Status ReadGgufSlice(const Location& loc, Range rows, Range cols, DType dst_dtype,
                             uint8_t* out) const;
  absl::StatusOr<Location> Find(absl::string_view name) const;

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Location, std::less<>> locations_;
  std::unique_ptr<GgufFile> gguf_;
  std::map<std::string, GgufTensorRef, std::less<>> gguf_refs_;
  std::map<std::string, TensorInfo, std::less<>> gguf_infos_;
  mutable std::atomic<uint64_t> bytes_read_{0};
};

}  // namespace tessera

#endif  // TESSERA_COMMON_CHECKPOINT_H_
