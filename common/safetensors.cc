#include "common/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

constexpr char kMetadataKey[] = "__metadata__";
// Large enough that a multi-GB tensor goes out in a few hundred writes, small enough that
// writing never holds more than this in memory.
constexpr uint64_t kWriteChunkBytes = 4u << 20;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Corruption of sizes and offsets (the bytes cannot be what the header says).
absl::Status Corrupt(const std::filesystem::path& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path.string(), ": ", what));
}

// A header that is not the safetensors schema.
absl::Status BadHeader(const std::filesystem::path& path, absl::string_view tensor,
                       absl::string_view what) {
  if (tensor.empty()) return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", what));
  return absl::InvalidArgumentError(
      absl::StrCat(path.string(), ": tensor \"", tensor, "\": ", what));
}

// Invalid UTF-8 in a name is replaced rather than thrown about.
std::string JsonText(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool ReadU64(const Json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(j.get<int64_t>());
    return true;
  }
  return false;
}

}  // namespace

int64_t TensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
}

const TensorInfo* SafetensorsFile::Find(absl::string_view name) const {
  auto it = index_.find(std::string_view(name.data(), name.size()));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::filesystem::path& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path.string(), ": file not found"));
    return absl::PermissionDeniedError(
        absl::StrCat(path.string(), ": cannot open: ", std::strerror(err)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat(path.string(), ": stat failed: ", std::strerror(err)));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return Corrupt(path, absl::StrCat("truncated: the file is ", size,
                                      " bytes, shorter than the 8-byte header length field"));
  }
  void* mapping = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // The mapping keeps the file alive.
  if (mapping == MAP_FAILED) {
    return absl::InternalError(
        absl::StrCat(path.string(), ": mmap failed: ", std::strerror(map_err)));
  }
  file->mapping_ = mapping;
  file->mapping_size_ = size;
  const auto* base = static_cast<const uint8_t*>(mapping);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];
  // Compared against what is left, never added to, so huge values cannot overflow.
  if (header_len > size - 8) {
    return Corrupt(path, absl::StrCat("header length ", header_len,
                                      " runs past the end of the file (", size, " bytes)"));
  }
  const char* header_begin = reinterpret_cast<const char*>(base + 8);
  const Json header = Json::parse(header_begin, header_begin + header_len, nullptr,
                                  /*allow_exceptions=*/false);
  if (header.is_discarded()) return BadHeader(path, "", "header is not valid JSON");
  if (!header.is_object()) return BadHeader(path, "", "header is not a JSON object");

  file->data_ = base + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      if (!entry.is_object()) return BadHeader(path, "", "__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return BadHeader(
              path, "",
              absl::StrCat("__metadata__ value of \"", key, "\" is not a string: ", value.dump()));
        }
        file->metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) return BadHeader(path, name, "entry is not an object");
    TensorInfo info;
    info.name = name;

    auto dtype = entry.find("dtype");
    if (dtype == entry.end()) return BadHeader(path, name, "missing \"dtype\"");
    if (!dtype->is_string()) return BadHeader(path, name, "\"dtype\" is not a string");
    const std::string dtype_name = dtype->get<std::string>();
    if (!ParseDType(dtype_name, &info.dtype)) {
      return BadHeader(
          path, name,
          absl::StrCat("unsupported dtype \"", dtype_name,
                       "\" (supported: F32, F16, BF16, I8, I32, F8_E4M3)"));
    }

    auto shape = entry.find("shape");
    if (shape == entry.end()) return BadHeader(path, name, "missing \"shape\"");
    if (!shape->is_array()) return BadHeader(path, name, "\"shape\" is not an array");
    uint64_t num_elements = 1;
    bool overflow = false;
    for (const auto& dim : *shape) {
      if (!dim.is_number_integer()) {
        return BadHeader(path, name,
                         absl::StrCat("shape dimension ", dim.dump(), " is not an integer"));
      }
      if (dim.is_number_unsigned() ? dim.get<uint64_t>() > uint64_t{INT64_MAX}
                                   : dim.get<int64_t>() < 0) {
        return BadHeader(path, name, absl::StrCat("negative or huge shape dimension ", dim.dump()));
      }
      const int64_t d = dim.get<int64_t>();
      info.shape.push_back(d);
      overflow |= __builtin_mul_overflow(num_elements, static_cast<uint64_t>(d), &num_elements);
    }

    auto offsets = entry.find("data_offsets");
    if (offsets == entry.end()) return BadHeader(path, name, "missing \"data_offsets\"");
    if (!offsets->is_array() || offsets->size() != 2 || !ReadU64((*offsets)[0], &info.data_begin) ||
        !ReadU64((*offsets)[1], &info.data_end)) {
      return BadHeader(path, name,
                       absl::StrCat("\"data_offsets\" must be two non-negative integers, got ",
                                    offsets->dump()));
    }
    if (info.data_begin > info.data_end) {
      return Corrupt(path, absl::StrCat("tensor \"", name, "\": data_offsets [", info.data_begin,
                                        ", ", info.data_end, "] are reversed"));
    }
    if (info.data_end > data_size) {
      return Corrupt(
          path, absl::StrCat("tensor \"", name, "\": data_offsets [", info.data_begin, ", ",
                             info.data_end, "] run past the end of the data section (", data_size,
                             " bytes)"));
    }
    uint64_t expected_bytes = 0;
    overflow |= __builtin_mul_overflow(num_elements, DTypeSize(info.dtype), &expected_bytes);
    if (overflow || expected_bytes != info.num_bytes()) {
      return Corrupt(path, absl::StrCat("tensor \"", name, "\": shape ", ShapeString(info.shape),
                                        " of ", dtype_name, " needs ",
                                        overflow ? "more than 2^64" : absl::StrCat(expected_bytes),
                                        " bytes but data_offsets span ", info.num_bytes()));
    }
    file->tensors_.push_back(std::move(info));
  }

  std::sort(file->tensors_.begin(), file->tensors_.end(), [](const auto& a, const auto& b) {
    return a.data_begin != b.data_begin ? a.data_begin < b.data_begin : a.data_end < b.data_end;
  });
  for (size_t i = 1; i < file->tensors_.size(); ++i) {
    const TensorInfo& prev = file->tensors_[i - 1];
    const TensorInfo& cur = file->tensors_[i];
    if (prev.data_end > cur.data_begin) {
      return Corrupt(path, absl::StrCat("tensor \"", cur.name, "\" (bytes ", cur.data_begin, "..",
                                        cur.data_end, ") overlaps tensor \"", prev.name,
                                        "\" (bytes ", prev.data_begin, "..", prev.data_end, ")"));
    }
  }
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->index_[file->tensors_[i].name] = i;
  return file;
}

void SafetensorsWriter::Add(std::string name, DType dtype, std::vector<int64_t> shape,
                            Filler fill) {
  entries_.push_back({std::move(name), dtype, std::move(shape), std::move(fill)});
}

void SafetensorsWriter::AddBytes(std::string name, DType dtype, std::vector<int64_t> shape,
                                 std::string bytes) {
  auto data = std::make_shared<const std::string>(std::move(bytes));
  const size_t elem = DTypeSize(dtype);
  uint64_t expected = elem;
  for (int64_t d : shape) expected *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  if (data->size() != expected && error_.empty()) {
    error_ = absl::StrCat("tensor \"", name, "\": ", data->size(), " bytes given for shape ",
                          ShapeString(shape), " of ", DTypeName(dtype), " (", expected, " bytes)");
  }
  Add(std::move(name), dtype, std::move(shape),
      [data, elem](uint64_t offset, uint64_t n, void* dst) {
        std::memcpy(dst, data->data() + offset * elem, n * elem);
      });
}

void SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

uint64_t SafetensorsWriter::TotalBytes() const {
  uint64_t total = 0;
  for (const Entry& e : entries_) {
    uint64_t n = DTypeSize(e.dtype);
    for (int64_t d : e.shape) n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
    total += n;
  }
  return total;
}

absl::Status SafetensorsWriter::Write(
    const std::filesystem::path& path,
    const std::function<void(uint64_t, uint64_t)>& progress) const {
  if (!error_.empty()) return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", error_));
  // The header is built by hand so tensors keep the order they were added in.
  std::string header = "{";
  std::set<std::string> names;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    if (e.name == kMetadataKey || !names.insert(e.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path.string(), ": tensor name \"", e.name, "\" is reserved or repeated"));
    }
    uint64_t n = DTypeSize(e.dtype);
    for (int64_t d : e.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat(path.string(), ": tensor \"", e.name,
                                                       "\" has negative dimension in shape ",
                                                       ShapeString(e.shape)));
      }
      n *= static_cast<uint64_t>(d);
    }
    sizes.push_back(n);
    if (header.size() > 1) header += ",";
    absl::StrAppend(&header, JsonText(Json(e.name)), ":{\"dtype\":\"", DTypeName(e.dtype),
                    "\",\"shape\":[", absl::StrJoin(e.shape, ","), "],\"data_offsets\":[", offset,
                    ",", offset + n, "]}");
    offset += n;
  }
  if (!metadata_.empty()) {
    if (header.size() > 1) header += ",";
    absl::StrAppend(&header, "\"", kMetadataKey, "\":", JsonText(Json(metadata_)));
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t total = offset;

  const std::filesystem::path tmp = path.string() + ".tmp";
  FILE* out = std::fopen(tmp.c_str(), "wb");
  if (out == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(tmp.string(), ": cannot create: ", std::strerror(errno)));
  }
  auto fail = [&](absl::string_view what) {
    const int err = errno;
    std::fclose(out);
    std::filesystem::remove(tmp);
    return absl::DataLossError(absl::StrCat(tmp.string(), ": ", what, ": ", std::strerror(err)));
  };
  uint8_t len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(header.size() >> (8 * i));
  if (std::fwrite(len_bytes, 1, 8, out) != 8 ||
      std::fwrite(header.data(), 1, header.size(), out) != header.size()) {
    return fail("writing the header failed");
  }

  std::vector<uint8_t> buffer;
  uint64_t written = 0;
  if (progress) progress(0, total);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    const uint64_t elem = DTypeSize(e.dtype);
    const uint64_t count = sizes[i] / elem;
    const uint64_t chunk = std::max<uint64_t>(1, kWriteChunkBytes / elem);
    buffer.resize(std::min(count, chunk) * elem);
    for (uint64_t start = 0; start < count; start += chunk) {
      const uint64_t n = std::min(chunk, count - start);
      e.fill(start, n, buffer.data());
      if (std::fwrite(buffer.data(), 1, n * elem, out) != n * elem) {
        return fail(absl::StrCat("writing tensor \"", e.name, "\" failed"));
      }
      written += n * elem;
      if (progress) progress(written, total);
    }
  }
  if (std::fflush(out) != 0) return fail("flush failed");
  if (std::fclose(out) != 0) {
    std::filesystem::remove(tmp);
    return absl::DataLossError(absl::StrCat(tmp.string(), ": close failed"));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat(path.string(), ": rename failed: ", ec.message()));
  }
  return absl::OkStatus();
}

void SafetensorsFile::ReleasePages(const TensorInfo& info) const {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(Data(info)) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(Data(info) + info.num_bytes());
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace tessera
