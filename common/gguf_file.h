#ifndef TESSERA_COMMON_GGUF_FILE_H_
#define TESSERA_COMMON_GGUF_FILE_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// GGUF, the single-file model format of llama.cpp, Ollama and LM Studio: a header, typed
// metadata (architecture hyper-parameters, tokenizer, chat template) and a table of
// tensors whose data follow, aligned, in one section. Everything is little-endian.
namespace tessera {

// ggml's tensor element types (the numbering is part of the file format). Block types
// store `GgmlBlockSize` elements in `GgmlTypeSize` bytes.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

// "Q4_K", or "type 17" for one this table does not know.
std::string GgmlTypeName(GgmlType type);
// Elements per block and bytes per block; 0 for a type Tessera does not know.
int GgmlBlockSize(GgmlType type);
int GgmlTypeSize(GgmlType type);

// One metadata value. Scalars are arrays of one element; integers of every width are kept
// in `ints`, floats in `floats`, bools as 0/1 in `ints`.
struct GgufValue {
  enum class Kind : uint8_t { kInt, kFloat, kString };
  Kind kind = Kind::kInt;
  bool is_array = false;
  uint32_t wire_type = 0;  // GGUF's value type (of the elements, for arrays).
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  size_t size() const;
};

// One entry of the tensor table. `dims` are GGUF's: dims[0] is the innermost (contiguous)
// dimension, so a torch [out, in] weight has dims {in, out}.
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> dims;
  uint64_t offset = 0;  // Into the data section.
  uint64_t bytes = 0;
  const uint8_t* data = nullptr;  // Inside the mapping.

  int64_t cols() const { return dims.empty() ? 1 : dims[0]; }
  // Every dimension but the innermost, flattened.
  int64_t rows() const;
  uint64_t row_bytes() const;
  const uint8_t* row(int64_t r) const { return data + static_cast<uint64_t>(r) * row_bytes(); }
};

// A memory-mapped GGUF file (versions 2 and 3) whose header, metadata and tensor table
// have been validated against the file's size: nothing here reads outside the mapping.
// A count, length or offset that cannot fit the bytes is DATA_LOSS naming the key or the
// tensor; a type the format does not define is INVALID_ARGUMENT.
class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::filesystem::path& path);
  // Parses an in-memory image (fuzzing, tests); `bytes` must outlive the result.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(const uint8_t* bytes, size_t size,
                                                        std::string source);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& source() const { return source_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(absl::string_view name) const;
  const GgufValue* Find(absl::string_view key) const;

  // Typed metadata lookups: NOT_FOUND naming the key when absent, INVALID_ARGUMENT when
  // the stored type differs.
  absl::StatusOr<int64_t> Int(absl::string_view key) const;
  absl::StatusOr<double> Float(absl::string_view key) const;
  absl::StatusOr<bool> Bool(absl::string_view key) const;
  absl::StatusOr<std::string> String(absl::string_view key) const;
  absl::StatusOr<const std::vector<std::string>*> StringArray(absl::string_view key) const;
  absl::StatusOr<const std::vector<int64_t>*> IntArray(absl::string_view key) const;
  absl::StatusOr<const std::vector<double>*> FloatArray(absl::string_view key) const;
  // With a default when absent (still an error when present with another type).
  absl::StatusOr<int64_t> IntOr(absl::string_view key, int64_t fallback) const;
  absl::StatusOr<double> FloatOr(absl::string_view key, double fallback) const;
  absl::StatusOr<bool> BoolOr(absl::string_view key, bool fallback) const;

  // Drops this process's mapped pages of a tensor once it is copied (see SafetensorsFile).
  void ReleasePages(const GgufTensor& tensor) const;

 private:
  GgufFile() = default;
  absl::Status ParseImage(const uint8_t* bytes, size_t size);
  absl::StatusOr<const GgufValue*> Typed(absl::string_view key, GgufValue::Kind kind,
                                         bool array) const;

  std::string source_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace tessera

#endif  // TESSERA_COMMON_GGUF_FILE_H_
