#include "common/checkpoint.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/gguf_model_dir.h"
#include "common/gguf_quants.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";
// Elements converted per step between F16 and BF16 (they go through float).
constexpr size_t kConvertChunk = 4096;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Copies `n` elements from `src` (type `from`) to `dst` (type `to`).
void CopyConverted(const uint8_t* src, DType from, size_t n, DType to, uint8_t* dst) {
  if (from == to) {
    std::memcpy(dst, src, n * DTypeSize(from));
  } else if (to == DType::kF32) {
    ConvertToF32(src, from, n, reinterpret_cast<float*>(dst));
  } else if (from == DType::kF32) {
    ConvertFromF32(reinterpret_cast<const float*>(src), n, to, dst);
  } else {
    float tmp[kConvertChunk];
    for (size_t done = 0; done < n; done += kConvertChunk) {
      const size_t m = std::min(kConvertChunk, n - done);
      ConvertToF32(src + done * DTypeSize(from), from, m, tmp);
      ConvertFromF32(tmp, m, to, dst + done * DTypeSize(to));
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(
    const std::filesystem::path& model_path) {
  ASSIGN_OR_RETURN(const std::filesystem::path model_dir, ResolveModelDir(model_path));
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->dir_ = model_dir;
  // ResolveModelDir turned a GGUF file into its folder, whose link leads back to the file.
  if (IsGgufFile(model_dir / kGgufLinkName)) {
    // Through the link to the user's file, so that errors name it.
    std::error_code ec;
    const std::filesystem::path target = std::filesystem::canonical(model_dir / kGgufLinkName, ec);
    RETURN_IF_ERROR(ckpt->OpenGguf(ec ? model_dir / kGgufLinkName : target));
    return ckpt;
  }
  const std::filesystem::path single = model_dir / kSingleFile;
  const std::filesystem::path index = model_dir / kIndexFile;

  if (std::filesystem::exists(single)) {
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single));
    for (const TensorInfo& info : file->tensors()) {
      ckpt->locations_[info.name] = Location{file.get(), &info};
    }
    ckpt->files_.push_back(std::move(file));
    return ckpt;
  }
  if (!std::filesystem::exists(index)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", model_dir.string(), ": neither ",
                                            kSingleFile, " nor ", kIndexFile, " exists"));
  }

  ASSIGN_OR_RETURN(std::string text, ReadFileToString(index));
  const Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index.string(), ": not a valid JSON object"));
  }
  auto weight_map = j.find("weight_map");
  if (weight_map == j.end() || !weight_map->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index.string(), ": missing \"weight_map\" object"));
  }
  std::map<std::string, SafetensorsFile*> shards;
  for (const auto& [name, shard] : weight_map->items()) {
    if (!shard.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          index.string(), ": weight_map entry of tensor \"", name, "\" is not a file name"));
    }
    const std::string shard_name = shard.get<std::string>();
    // Shards must sit in the folder itself: an index cannot point elsewhere on disk.
    if (shard_name.empty() || shard_name.find('/') != std::string::npos || shard_name == "." ||
        shard_name == "..") {
      return absl::InvalidArgumentError(absl::StrCat(index.string(), ": tensor \"", name,
                                                     "\" names an invalid shard file \"",
                                                     shard_name, "\""));
    }
    auto it = shards.find(shard_name);
    if (it == shards.end()) {
      const std::filesystem::path shard_path = model_dir / shard_name;
      if (!std::filesystem::exists(shard_path)) {
        return absl::NotFoundError(absl::StrCat(index.string(), " names shard file ", shard_name,
                                                " (for tensor \"", name, "\"), but ",
                                                shard_path.string(), " does not exist"));
      }
      ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(shard_path));
      it = shards.emplace(shard_name, file.get()).first;
      ckpt->files_.push_back(std::move(file));
    }
    const TensorInfo* info = it->second->Find(name);
    if (info == nullptr) {
      return absl::DataLossError(absl::StrCat(index.string(), " places tensor \"", name, "\" in ",
                                              shard_name,
                                              ", but that file has no such "
                                              "tensor"));
    }
    ckpt->locations_[name] = Location{it->second, info};
  }
  return ckpt;
}

absl::StatusOr<Checkpoint::Location> Checkpoint::Find(absl::string_view name) const {
  auto it = locations_.find(std::string_view(name.data(), name.size()));
  if (it == locations_.end()) {
    return absl::NotFoundError(
        absl::StrCat("tensor \"", name, "\" not found in checkpoint ", dir_.string()));
  }
  return it->second;
}

absl::StatusOr<const TensorInfo*> Checkpoint::Info(absl::string_view name) const {
  ASSIGN_OR_RETURN(Location loc, Find(name));
  return loc.info;
}

bool Checkpoint::Has(absl::string_view name) const {
  return locations_.find(std::string_view(name.data(), name.size())) != locations_.end();
}

absl::Status Checkpoint::ReadSlice(absl::string_view name, Range rows, Range cols, DType dst_dtype,
                                   void* dst) const {
  ASSIGN_OR_RETURN(Location loc, Find(name));
  const TensorInfo& info = *loc.info;
  if (info.shape.size() > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor \"", name, "\" has shape ", ShapeString(info.shape), "; slices need rank 1 or 2"));
  }
  // A 1-D tensor is one row; a scalar is one row of one column.
  const int64_t num_rows = info.shape.size() == 2 ? info.shape[0] : 1;
  const int64_t num_cols = info.shape.empty() ? 1 : info.shape.back();
  if (rows.begin < 0 || rows.begin > rows.end || rows.end > num_rows || cols.begin < 0 ||
      cols.begin > cols.end || cols.end > num_cols) {
    return absl::OutOfRangeError(absl::StrCat(
        "tensor \"", name, "\" has shape ", ShapeString(info.shape), ": rows [", rows.begin, ", ",
        rows.end, ") x cols [", cols.begin, ", ", cols.end, ") is out of range"));
  }
  if (rows.size() == 0 || cols.size() == 0) return absl::OkStatus();

  if (loc.gguf != nullptr) return ReadGgufSlice(loc, rows, cols, dst_dtype, static_cast<uint8_t*>(dst));
  const size_t src_elem = DTypeSize(info.dtype);
  const size_t dst_elem = DTypeSize(dst_dtype);
  const uint8_t* src = loc.file->Data(info);
  auto* out = static_cast<uint8_t*>(dst);
  if (cols.size() == num_cols) {
    // Whole rows are contiguous in the file: one copy.
    const size_t n = static_cast<size_t>(rows.size() * num_cols);
    CopyConverted(src + rows.begin * num_cols * src_elem, info.dtype, n, dst_dtype, out);
  } else {
    const size_t n = static_cast<size_t>(cols.size());
    for (int64_t r = rows.begin; r < rows.end; ++r) {
      CopyConverted(src + (r * num_cols + cols.begin) * src_elem, info.dtype, n, dst_dtype, out);
      out += n * dst_elem;
    }
  }
  bytes_read_.fetch_add(static_cast<uint64_t>(rows.size() * cols.size()) * src_elem);
  loc.file->ReleasePages(info);
  return absl::OkStatus();
}

absl::Status Checkpoint::ReadAll(absl::string_view name, const std::vector<int64_t>& expected_shape,
                                 DType dst_dtype, void* dst) const {
  ASSIGN_OR_RETURN(Location loc, Find(name));
  const TensorInfo& info = *loc.info;
  if (info.shape != expected_shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\" in ", dir_.string(),
                                                   " has shape ", ShapeString(info.shape),
                                                   ", expected ", ShapeString(expected_shape)));
  }
  if (loc.gguf != nullptr) {
    const int64_t num_rows = info.shape.size() == 2 ? info.shape[0] : 1;
    return ReadGgufSlice(loc, {0, num_rows}, {0, info.shape.empty() ? 1 : info.shape.back()},
                         dst_dtype, static_cast<uint8_t*>(dst));
  }
  const size_t n = static_cast<size_t>(info.num_elements());
  CopyConverted(loc.file->Data(info), info.dtype, n, dst_dtype, static_cast<uint8_t*>(dst));
  bytes_read_.fetch_add(info.num_bytes());
  return absl::OkStatus();
}

absl::Status Checkpoint::OpenGguf(const std::filesystem::path& file) {
  ASSIGN_OR_RETURN(gguf_, GgufFile::Open(file));
  ASSIGN_OR_RETURN(const ModelConfig config, GgufModelConfig(*gguf_));
  ASSIGN_OR_RETURN(gguf_refs_, GgufHfTensors(*gguf_, config));
  for (const auto& [name, ref] : gguf_refs_) {
    const GgufTensor& t = *ref.tensor;
    TensorInfo info;
    info.name = name;
    switch (t.type) {
      case GgmlType::kF16: info.dtype = DType::kF16; break;
      case GgmlType::kBF16: info.dtype = DType::kBF16; break;
      default: info.dtype = DType::kF32; break;  // F32, and what block types dequantize to.
    }
    info.shape = t.dims.size() == 2 ? std::vector<int64_t>{t.dims[1], t.dims[0]}
                                    : std::vector<int64_t>{t.dims[0]};
    info.data_begin = t.offset;
    info.data_end = t.offset + t.bytes;
    const TensorInfo* stored = &gguf_infos_.emplace(name, std::move(info)).first->second;
    locations_[name] = Location{nullptr, stored, &ref};
  }
  return absl::OkStatus();
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, location] : locations_) names.push_back(name);
  return names;
}

const GgufTensorRef* Checkpoint::Gguf(absl::string_view name) const {
  auto it = locations_.find(std::string_view(name.data(), name.size()));
  return it == locations_.end() ? nullptr : it->second.gguf;
}

absl::Status Checkpoint::ReadGgufSlice(const Location& loc, Range rows, Range cols, DType dst_dtype,
                                       uint8_t* out) const {
  const GgufTensor& t = *loc.gguf->tensor;
  const size_t dst_elem = DTypeSize(dst_dtype);
  const int64_t n = cols.size();
  const bool float_type = t.type == GgmlType::kF32 || t.type == GgmlType::kF16 || t.type == GgmlType::kBF16;
  if (absl::Status readable = GgmlReadable(t.type); !readable.ok()) {
    return absl::Status(readable.code(), absl::StrCat(gguf_->source(), ": tensor \"", t.name, "\" (",
                                                      loc.info->name, ") is ", readable.message()));
  }
  const int block = GgmlBlockSize(t.type);
  const int64_t first_block = cols.begin / block;
  const int64_t last_block = (cols.end + block - 1) / block;
  std::vector<float> decoded;
  if (!float_type) decoded.resize(static_cast<size_t>((last_block - first_block) * block));
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const uint8_t* row = t.row(loc.gguf->SourceRow(r));
    if (float_type) {
      CopyConverted(row + cols.begin * DTypeSize(loc.info->dtype), loc.info->dtype,
                    static_cast<size_t>(n), dst_dtype, out);
    } else {
      RETURN_IF_ERROR(DequantizeGgml(t.type, row + first_block * GgmlTypeSize(t.type),
                                     (last_block - first_block) * block, decoded.data()));
      ConvertFromF32(decoded.data() + (cols.begin - first_block * block), static_cast<size_t>(n),
                     dst_dtype, out);
    }
    out += n * dst_elem;
  }
  bytes_read_.fetch_add(static_cast<uint64_t>(rows.size()) *
                        static_cast<uint64_t>(last_block - first_block) * GgmlTypeSize(t.type));
  gguf_->ReleasePages(t);
  return absl::OkStatus();
}

}  // namespace tessera
