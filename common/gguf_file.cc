#include "common/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32.
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;

// GGUF's metadata value types.
enum WireType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// Bytes of one scalar of `type` on the wire; 0 for strings and arrays (variable).
int WireSize(uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: return 8;
    default: return 0;
  }
}

struct TypeInfo {
  GgmlType type;
  const char* name;
  int block;
  int bytes;
};
constexpr TypeInfo kTypes[] = {
    {GgmlType::kF32, "F32", 1, 4},      {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},  {GgmlType::kQ4_1, "Q4_1", 32, 20},
    {GgmlType::kQ5_0, "Q5_0", 32, 22},  {GgmlType::kQ5_1, "Q5_1", 32, 24},
    {GgmlType::kQ8_0, "Q8_0", 32, 34},  {GgmlType::kQ8_1, "Q8_1", 32, 36},
    {GgmlType::kQ2_K, "Q2_K", 256, 84}, {GgmlType::kQ3_K, "Q3_K", 256, 110},
    {GgmlType::kQ4_K, "Q4_K", 256, 144}, {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210}, {GgmlType::kQ8_K, "Q8_K", 256, 292},
    {GgmlType::kI8, "I8", 1, 1},        {GgmlType::kI16, "I16", 1, 2},
    {GgmlType::kI32, "I32", 1, 4},      {GgmlType::kI64, "I64", 1, 8},
    {GgmlType::kF64, "F64", 1, 8},      {GgmlType::kBF16, "BF16", 1, 2},
};

const TypeInfo* Lookup(GgmlType type) {
  for (const TypeInfo& t : kTypes) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

// Reads the image front to back; every read is checked against the end, and the first
// failure is kept (later reads return zeros) so the parser can check once per item.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t remaining() const { return size_ - at_; }
  size_t position() const { return at_; }
  bool failed() const { return failed_; }

  template <typename T>
  T Read() {
    T v{};
    if (failed_ || remaining() < sizeof(T)) {
      failed_ = true;
      return v;
    }
    std::memcpy(&v, data_ + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }

  // A GGUF string: u64 length, then bytes (not NUL-terminated).
  bool ReadString(std::string* out) {
    const uint64_t n = Read<uint64_t>();
    if (failed_ || n > remaining()) {
      failed_ = true;
      return false;
    }
    out->assign(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return true;
  }

  bool Skip(uint64_t n) {
    if (failed_ || n > remaining()) {
      failed_ = true;
      return false;
    }
    at_ += n;
    return true;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
  bool failed_ = false;
};

// Appends one scalar of wire type `type` to `value`.
void ReadScalar(Cursor& in, uint32_t type, GgufValue* value) {
  switch (type) {
    case kU8: value->ints.push_back(in.Read<uint8_t>()); break;
    case kI8: value->ints.push_back(in.Read<int8_t>()); break;
    case kU16: value->ints.push_back(in.Read<uint16_t>()); break;
    case kI16: value->ints.push_back(in.Read<int16_t>()); break;
    case kU32: value->ints.push_back(in.Read<uint32_t>()); break;
    case kI32: value->ints.push_back(in.Read<int32_t>()); break;
    case kBool: value->ints.push_back(in.Read<uint8_t>() != 0 ? 1 : 0); break;
    case kU64: {
      // Above INT64_MAX nothing in a model's metadata means anything: keep it saturated.
      const uint64_t v = in.Read<uint64_t>();
      value->ints.push_back(v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                                ? std::numeric_limits<int64_t>::max()
                                : static_cast<int64_t>(v));
      break;
    }
    case kI64: value->ints.push_back(in.Read<int64_t>()); break;
    case kF32: value->floats.push_back(in.Read<float>()); break;
    case kF64: value->floats.push_back(in.Read<double>()); break;
    case kString: {
      std::string s;
      in.ReadString(&s);
      value->strings.push_back(std::move(s));
      break;
    }
    default: break;
  }
}

GgufValue::Kind KindOf(uint32_t type) {
  if (type == kF32 || type == kF64) return GgufValue::Kind::kFloat;
  if (type == kString) return GgufValue::Kind::kString;
  return GgufValue::Kind::kInt;
}

const char* KindName(GgufValue::Kind kind, bool array) {
  switch (kind) {
    case GgufValue::Kind::kInt: return array ? "an integer array" : "an integer";
    case GgufValue::Kind::kFloat: return array ? "a float array" : "a float";
    case GgufValue::Kind::kString: return array ? "a string array" : "a string";
  }
  return "?";
}

}  // namespace

std::string GgmlTypeName(GgmlType type) {
  const TypeInfo* t = Lookup(type);
  return t != nullptr ? t->name : absl::StrCat("type ", static_cast<uint32_t>(type));
}
int GgmlBlockSize(GgmlType type) {
  const TypeInfo* t = Lookup(type);
  return t != nullptr ? t->block : 0;
}
int GgmlTypeSize(GgmlType type) {
  const TypeInfo* t = Lookup(type);
  return t != nullptr ? t->bytes : 0;
}

size_t GgufValue::size() const {
  switch (kind) {
    case Kind::kInt: return ints.size();
    case Kind::kFloat: return floats.size();
    case Kind::kString: return strings.size();
  }
  return 0;
}

int64_t GgufTensor::rows() const {
  int64_t r = 1;
  for (size_t i = 1; i < dims.size(); ++i) r *= dims[i];
  return r;
}

uint64_t GgufTensor::row_bytes() const {
  return static_cast<uint64_t>(cols() / GgmlBlockSize(type)) * GgmlTypeSize(type);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string message = absl::StrCat(path.string(), ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 24) {
    ::close(fd);
    return absl::DataLossError(
        absl::StrCat(path.string(), ": ", size, " bytes is too short for a GGUF header"));
  }
  void* mapping = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // The mapping keeps the file alive.
  if (mapping == MAP_FAILED) {
    return absl::InternalError(absl::StrCat(path.string(), ": mmap failed: ", std::strerror(map_err)));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->source_ = path.string();
  file->mapping_ = mapping;
  file->mapping_size_ = size;
  RETURN_IF_ERROR(file->ParseImage(static_cast<const uint8_t*>(mapping), size));
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(const uint8_t* bytes, size_t size,
                                                         std::string source) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->source_ = std::move(source);
  RETURN_IF_ERROR(file->ParseImage(bytes, size));
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
}

absl::Status GgufFile::ParseImage(const uint8_t* bytes, size_t size) {
  auto corrupt = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(source_, ": ", what));
  };
  Cursor in(bytes, size);
  const uint32_t magic = in.Read<uint32_t>();
  if (in.failed() || magic != kMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": not a GGUF file (the first four bytes are not \"GGUF\")"));
  }
  version_ = in.Read<uint32_t>();
  if (version_ != 2 && version_ != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        source_, ": GGUF version ", version_, " is not supported (versions 2 and 3 are)"));
  }
  const uint64_t tensor_count = in.Read<uint64_t>();
  const uint64_t kv_count = in.Read<uint64_t>();
  if (in.failed()) return corrupt("truncated header");
  // Each metadata entry takes at least 12 bytes and each tensor entry at least 24: counts
  // beyond that cannot be real and would only make us allocate.
  if (kv_count > in.remaining() / 12 || tensor_count > in.remaining() / 24) {
    return corrupt(absl::StrCat("header claims ", kv_count, " metadata entries and ",
                                tensor_count, " tensors, more than ", size, " bytes can hold"));
  }

  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key;
    if (!in.ReadString(&key)) {
      return corrupt(absl::StrCat("metadata entry ", i, " of ", kv_count, ": truncated key"));
    }
    uint32_t type = in.Read<uint32_t>();
    GgufValue value;
    uint64_t count = 1;
    if (type == kArray) {
      value.is_array = true;
      type = in.Read<uint32_t>();
      count = in.Read<uint64_t>();
      if (type == kArray) {
        return absl::InvalidArgumentError(
            absl::StrCat(source_, ": metadata \"", key, "\" is an array of arrays, which Tessera does not read"));
      }
    }
    if (in.failed()) return corrupt(absl::StrCat("metadata \"", key, "\": truncated"));
    if (WireSize(type) == 0 && type != kString) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_, ": metadata \"", key, "\" has unknown value type ", type));
    }
    const uint64_t min_bytes = type == kString ? 8 : static_cast<uint64_t>(WireSize(type));
    if (count > in.remaining() / min_bytes) {
      return corrupt(absl::StrCat("metadata \"", key, "\" claims ", count,
                                  " elements, more than the file holds"));
    }
    value.wire_type = type;
    value.kind = KindOf(type);
    for (uint64_t j = 0; j < count && !in.failed(); ++j) ReadScalar(in, type, &value);
    if (in.failed()) return corrupt(absl::StrCat("metadata \"", key, "\": truncated value"));
    if (!metadata_.emplace(key, std::move(value)).second) {
      return absl::InvalidArgumentError(absl::StrCat(source_, ": metadata key \"", key, "\" appears twice"));
    }
  }

  uint64_t alignment = kDefaultAlignment;
  if (const GgufValue* a = Find("general.alignment"); a != nullptr) {
    if (a->kind != GgufValue::Kind::kInt || a->is_array || a->ints[0] <= 0 ||
        (a->ints[0] & (a->ints[0] - 1)) != 0 || a->ints[0] > 65536) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_, ": general.alignment must be a power of two up to 65536"));
    }
    alignment = static_cast<uint64_t>(a->ints[0]);
  }

  tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensor t;
    if (!in.ReadString(&t.name)) {
      return corrupt(absl::StrCat("tensor entry ", i, " of ", tensor_count, ": truncated name"));
    }
    const uint32_t n_dims = in.Read<uint32_t>();
    if (in.failed()) return corrupt(absl::StrCat("tensor \"", t.name, "\": truncated entry"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return corrupt(absl::StrCat("tensor \"", t.name, "\" has ", n_dims,
                                  " dimensions (1 to ", kMaxDims, " allowed)"));
    }
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t n = in.Read<uint64_t>();
      // 2^40 elements per dimension is far beyond any model and keeps products in range.
      if (n == 0 || n > (uint64_t{1} << 40) || elements > (uint64_t{1} << 62) / n) {
        return corrupt(absl::StrCat("tensor \"", t.name, "\": dimension ", d, " is ", n));
      }
      elements *= n;
      t.dims.push_back(static_cast<int64_t>(n));
    }
    const uint32_t type = in.Read<uint32_t>();
    t.offset = in.Read<uint64_t>();
    if (in.failed()) return corrupt(absl::StrCat("tensor \"", t.name, "\": truncated entry"));
    t.type = static_cast<GgmlType>(type);
    const TypeInfo* info = Lookup(t.type);
    if (info == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          source_, ": tensor \"", t.name, "\" has ggml type ", type, ", which Tessera does not know"));
    }
    if (t.dims[0] % info->block != 0) {
      return corrupt(absl::StrCat("tensor \"", t.name, "\": its innermost dimension ", t.dims[0],
                                  " is not a multiple of ", info->name, "'s block of ",
                                  info->block));
    }
    t.bytes = elements / info->block * info->bytes;
    if (t.offset % alignment != 0) {
      return corrupt(absl::StrCat("tensor \"", t.name, "\": offset ", t.offset,
                                  " is not aligned to ", alignment));
    }
    if (!index_.emplace(t.name, tensors_.size()).second) {
      return absl::InvalidArgumentError(absl::StrCat(source_, ": tensor \"", t.name, "\" appears twice"));
    }
    tensors_.push_back(std::move(t));
  }

  const uint64_t data_begin = (in.position() + alignment - 1) / alignment * alignment;
  if (data_begin > size && !tensors_.empty()) {
    return corrupt("truncated before the tensor data");
  }
  const uint64_t data_size = data_begin > size ? 0 : size - data_begin;
  std::vector<const GgufTensor*> by_offset;
  for (GgufTensor& t : tensors_) {
    if (t.offset > data_size || t.bytes > data_size - t.offset) {
      return corrupt(absl::StrCat("tensor \"", t.name, "\" (", GgmlTypeName(t.type), ", ",
                                  t.bytes, " bytes at data offset ", t.offset,
                                  ") extends past the end of the file: truncated?"));
    }
    t.data = bytes + data_begin + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i - 1]->offset + by_offset[i - 1]->bytes > by_offset[i]->offset) {
      return corrupt(absl::StrCat("tensors \"", by_offset[i - 1]->name, "\" and \"",
                                  by_offset[i]->name, "\" overlap"));
    }
  }
  return absl::OkStatus();
}

const GgufTensor* GgufFile::FindTensor(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const GgufValue* GgufFile::Find(absl::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

absl::StatusOr<const GgufValue*> GgufFile::Typed(absl::string_view key, GgufValue::Kind kind,
                                                 bool array) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(source_, ": metadata \"", key, "\" is missing"));
  }
  if (v->kind != kind || v->is_array != array || (!array && v->size() != 1)) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": metadata \"", key, "\" is ",
                                                   KindName(v->kind, v->is_array), ", expected ",
                                                   KindName(kind, array)));
  }
  return v;
}

absl::StatusOr<int64_t> GgufFile::Int(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, GgufValue::Kind::kInt, false));
  return v->ints[0];
}

absl::StatusOr<double> GgufFile::Float(absl::string_view key) const {
  // Writers differ on whether a hyper-parameter is stored as an integer or a float.
  if (const GgufValue* v = Find(key); v != nullptr && v->kind == GgufValue::Kind::kInt) {
    ASSIGN_OR_RETURN(int64_t i, Int(key));
    return static_cast<double>(i);
  }
  ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, GgufValue::Kind::kFloat, false));
  return v->floats[0];
}

absl::StatusOr<bool> GgufFile::Bool(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, GgufValue::Kind::kInt, false));
  return v->ints[0] != 0;
}

absl::StatusOr<std::string> GgufFile::String(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, GgufValue::Kind::kString, false));
  return v->strings[0];
}

absl::StatusOr<const std::vector<std::string>*> GgufFile::StringArray(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, GgufValue::Kind::kString, true));
  return &v->strings;
}

absl::StatusOr<const std::vector<int64_t>*> GgufFile::IntArray(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, GgufValue::Kind::kInt, true));
  return &v->ints;
}

absl::StatusOr<const std::vector<double>*> GgufFile::FloatArray(absl::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, GgufValue::Kind::kFloat, true));
  return &v->floats;
}

absl::StatusOr<int64_t> GgufFile::IntOr(absl::string_view key, int64_t fallback) const {
  return Find(key) == nullptr ? absl::StatusOr<int64_t>(fallback) : Int(key);
}

absl::StatusOr<double> GgufFile::FloatOr(absl::string_view key, double fallback) const {
  return Find(key) == nullptr ? absl::StatusOr<double>(fallback) : Float(key);
}

absl::StatusOr<bool> GgufFile::BoolOr(absl::string_view key, bool fallback) const {
  return Find(key) == nullptr ? absl::StatusOr<bool>(fallback) : Bool(key);
}

void GgufFile::ReleasePages(const GgufTensor& tensor) const {
  if (mapping_ == nullptr || tensor.bytes == 0) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(tensor.data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(tensor.data + tensor.bytes);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace tessera
