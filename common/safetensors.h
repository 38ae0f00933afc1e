#ifndef TESSERA_COMMON_SAFETENSORS_H_
#define TESSERA_COMMON_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"

namespace tessera {

// One tensor's entry in a safetensors header. Offsets are relative to the data section.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t data_begin = 0;
  uint64_t data_end = 0;

  int64_t num_elements() const;
  uint64_t num_bytes() const { return data_end - data_begin; }
};

// A memory-mapped safetensors file whose header has been fully validated: every error
// names the file, the tensor and the problem; nothing here reads outside the mapping.
// Sizes and offsets that cannot match the bytes (truncation, offsets out of the data
// section, overlaps, byte counts that disagree with the shape) are DATA_LOSS; a header that
// breaks the schema (bad JSON, missing or mistyped fields, unknown dtype) is
// INVALID_ARGUMENT. tensors() is ordered by position in the file.
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr when the file holds no tensor of that name.
  const TensorInfo* Find(absl::string_view name) const;
  // Start of the tensor's bytes inside the mapping (valid while this object lives).
  const uint8_t* Data(const TensorInfo& info) const { return data_ + info.data_begin; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Drops this process's mapped pages of the tensor (the page cache keeps them): a loader
  // calls it once a tensor's slice is copied, so resident memory stays near the slice
  // size instead of growing with every page the strided reads touched.
  void ReleasePages(const TensorInfo& info) const;

 private:
  SafetensorsFile() = default;

  std::filesystem::path path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  const uint8_t* data_ = nullptr;  // First byte after the header.
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// Writes safetensors files (checkpoint generator, llama2.c converter, tests). Tensors are
// streamed to disk in the order they were added, so a multi-GB file never sits in memory.
class SafetensorsWriter {
 public:
  // Fills `n` elements at `dst` (already in the tensor's dtype) starting at element `offset`.
  using Filler = std::function<void(uint64_t offset, uint64_t n, void* dst)>;

  void Add(std::string name, DType dtype, std::vector<int64_t> shape, Filler fill);
  // Convenience: an in-memory tensor (copied).
  void AddBytes(std::string name, DType dtype, std::vector<int64_t> shape, std::string bytes);
  void SetMetadata(std::string key, std::string value);
  uint64_t TotalBytes() const;
  // Writes the file; `progress(bytes_written, total)` is called as data goes out.
  absl::Status Write(const std::filesystem::path& path,
                     const std::function<void(uint64_t, uint64_t)>& progress = nullptr) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    Filler fill;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
  std::string error_;  // First misuse seen by AddBytes; reported by Write.
};

}  // namespace tessera

#endif  // TESSERA_COMMON_SAFETENSORS_H_
