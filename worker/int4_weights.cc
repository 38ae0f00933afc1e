#include "worker/int4_weights.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/int8_blocked.h"

namespace tessera {

std::string ModuleOfWeight(const std::string& weight_name) {
  constexpr absl::string_view kSuffix = ".weight";
  if (!absl::EndsWith(weight_name, kSuffix)) return "";
  return weight_name.substr(0, weight_name.size() - kSuffix.size());
}

namespace {

// The CPU backend's layout (kernels/cpu/int8_blocked.h): the slices' rows stacked, then
// packed in blocks of 16 rows with their scales and zeros.
absl::StatusOr<DeviceMatrix> LoadBlocked(const std::vector<Int4Matrix>& slices, int64_t rows,
                                         kernels::Backend* backend, const std::string& name) {
  const int64_t cols = slices[0].cols;
  const int group = slices[0].group_size;
  std::vector<uint8_t> codes;
  std::vector<float> scales, zeros;
  for (const Int4Matrix& m : slices) {
    codes.insert(codes.end(), m.packed.begin(), m.packed.end());
    scales.insert(scales.end(), m.scales.begin(), m.scales.end());
    zeros.insert(zeros.end(), m.zeros.begin(), m.zeros.end());
  }
  std::vector<uint8_t> packed(kernels::Int4BlockedShape{rows, cols, group}.bytes());
  kernels::PackInt4Blocked(codes.data(), scales.data(), zeros.data(), rows, cols, group,
                           packed.data());
  ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Allocate(backend, packed.size(), name));
  backend->CopyToDevice(buffer.get(), packed.data(), packed.size());
  DeviceMatrix out;
  out.view.data = buffer.get();
  out.view.dtype = DType::kU4;
  out.view.rows = rows;
  out.view.cols = cols;
  out.view.group_size = group;
  out.view.layout = kernels::WeightLayout::kU4Blocked16;
  out.buffer = std::move(buffer);
  return out;
}

}  // namespace

absl::StatusOr<DeviceMatrix> LoadInt4Matrix(const Checkpoint& checkpoint,
                                            const Int4QuantConfig& config,
                                            const std::vector<Int4Part>& parts,
                                            kernels::Backend* backend) {
  std::vector<Int4Matrix> slices;
  int64_t rows = 0;
  for (const Int4Part& p : parts) {
    ASSIGN_OR_RETURN(Int4Matrix m, ReadInt4Linear(checkpoint, config, p.prefix, p.out_features,
                                                  p.in_features, p.rows, p.cols));
    if (!slices.empty() && (m.cols != slices[0].cols || m.group_size != slices[0].group_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          checkpoint.dir().string(), ": ", p.prefix, " cannot be fused with ", parts[0].prefix,
          ": its slice has ", m.cols, " columns in groups of ", m.group_size, ", not ",
          slices[0].cols, " in groups of ", slices[0].group_size));
    }
    slices.push_back(std::move(m));
  }
  return UploadInt4Matrix(slices, backend, parts[0].prefix);
}

absl::StatusOr<DeviceMatrix> UploadInt4Matrix(const std::vector<Int4Matrix>& slices,
                                              kernels::Backend* backend, const std::string& name) {
  int64_t rows = 0;
  for (const Int4Matrix& m : slices) rows += m.rows;
  const int64_t cols = slices[0].cols;
  const int group = slices[0].group_size;
  if (backend->Int4WeightLayout() == kernels::WeightLayout::kU4Blocked16 &&
      kernels::Int4Blockable(cols, group)) {
    return LoadBlocked(slices, rows, backend, name);
  }
  const int64_t groups = cols / group;
  // Scales and zeros start on a 64-byte boundary so vector loads of them never split lines.
  const size_t code_bytes = static_cast<size_t>(rows * (cols / 2));
  const size_t scales_offset = (code_bytes + 63) / 64 * 64;
  const size_t table_bytes = static_cast<size_t>(rows * groups) * sizeof(float);
  const size_t zeros_offset = scales_offset + (table_bytes + 63) / 64 * 64;
  const size_t bytes = zeros_offset + table_bytes;
  std::vector<uint8_t> staging(bytes, 0);
  size_t code_at = 0, table_at = 0;
  for (const Int4Matrix& m : slices) {
    std::memcpy(staging.data() + code_at, m.packed.data(), m.packed.size());
    std::memcpy(staging.data() + scales_offset + table_at, m.scales.data(),
                m.scales.size() * sizeof(float));
    std::memcpy(staging.data() + zeros_offset + table_at, m.zeros.data(),
                m.zeros.size() * sizeof(float));
    code_at += m.packed.size();
    table_at += m.scales.size() * sizeof(float);
  }
  ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Allocate(backend, bytes, name));
  backend->CopyToDevice(buffer.get(), staging.data(), bytes);
  DeviceMatrix out;
  auto* base = static_cast<uint8_t*>(buffer.get());
  out.view.data = base;
  out.view.dtype = DType::kU4;
  out.view.rows = rows;
  out.view.cols = cols;
  out.view.scales = reinterpret_cast<const float*>(base + scales_offset);
  out.view.zeros = reinterpret_cast<const float*>(base + zeros_offset);
  out.view.group_size = group;
  out.buffer = std::move(buffer);
  return out;
}

}  // namespace tessera
