#include "worker/gguf_weights.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/gguf_quants.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

constexpr int kGroup = kGgmlNativeGroup;

absl::StatusOr<const GgufTensorRef*> Ref(const Checkpoint& checkpoint, const std::string& name) {
  const GgufTensorRef* ref = checkpoint.Gguf(name);
  if (ref == nullptr) {
    return absl::NotFoundError(absl::StrCat("tensor \"", name, "\" is not in a GGUF checkpoint"));
  }
  if (ref->tensor->dims.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\" is not 2-D"));
  }
  return ref;
}

absl::Status CheckRange(const GgufTensor& t, const std::string& name, Range rows, Range cols) {
  if (rows.begin < 0 || rows.end > t.rows() || rows.begin > rows.end || cols.begin < 0 ||
      cols.end > t.cols() || cols.begin > cols.end || cols.begin % kGroup != 0 ||
      cols.end % kGroup != 0) {
    return absl::OutOfRangeError(absl::StrCat("tensor \"", name, "\": rows [", rows.begin, ", ",
                                              rows.end, ") x cols [", cols.begin, ", ", cols.end,
                                              ") is not a 32-column-aligned slice"));
  }
  return absl::OkStatus();
}

}  // namespace

GgufNative GgufNativeFormat(const Checkpoint& checkpoint, const std::string& name, Range cols) {
  const GgufTensorRef* ref = checkpoint.Gguf(name);
  if (ref == nullptr || ref->tensor->dims.size() != 2) return GgufNative::kNone;
  if (cols.begin % kGroup != 0 || cols.end % kGroup != 0) return GgufNative::kNone;
  if (GgmlMapsToInt8(ref->tensor->type)) return GgufNative::kInt8;
  if (GgmlMapsToInt4(ref->tensor->type)) return GgufNative::kInt4;
  return GgufNative::kNone;
}

absl::StatusOr<Int8Slice> ReadGgufInt8(const Checkpoint& checkpoint, const std::string& name,
                                       Range rows, Range cols) {
  ASSIGN_OR_RETURN(const GgufTensorRef* ref, Ref(checkpoint, name));
  const GgufTensor& t = *ref->tensor;
  if (!GgmlMapsToInt8(t.type)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\" is ", GgmlTypeName(t.type), ", not Q8_0"));
  }
  RETURN_IF_ERROR(CheckRange(t, name, rows, cols));
  Int8Slice out;
  out.rows = rows.size();
  out.cols = cols.size();
  out.codes.resize(static_cast<size_t>(out.rows * out.cols));
  out.scales.resize(static_cast<size_t>(out.rows * (out.cols / kGroup)));
  std::vector<int8_t> codes(static_cast<size_t>(t.cols()));
  std::vector<float> scales(static_cast<size_t>(t.cols() / kGroup));
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    GgmlRowToInt8(t.type, t.row(ref->SourceRow(r)), t.cols(), codes.data(), scales.data());
    const int64_t i = r - rows.begin;
    std::memcpy(out.codes.data() + i * out.cols, codes.data() + cols.begin, static_cast<size_t>(out.cols));
    std::memcpy(out.scales.data() + i * (out.cols / kGroup), scales.data() + cols.begin / kGroup,
                sizeof(float) * static_cast<size_t>(out.cols / kGroup));
  }
  return out;
}

absl::StatusOr<Int4Matrix> ReadGgufInt4(const Checkpoint& checkpoint, const std::string& name,
                                        Range rows, Range cols) {
  ASSIGN_OR_RETURN(const GgufTensorRef* ref, Ref(checkpoint, name));
  const GgufTensor& t = *ref->tensor;
  if (!GgmlMapsToInt4(t.type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor \"", name, "\" is ", GgmlTypeName(t.type), ", not Q4_0, Q4_1 or Q4_K"));
  }
  RETURN_IF_ERROR(CheckRange(t, name, rows, cols));
  Int4Matrix out;
  out.rows = rows.size();
  out.cols = cols.size();
  out.group_size = kGroup;
  const int64_t groups = out.cols / kGroup;
  out.packed.resize(static_cast<size_t>(out.rows * (out.cols / 2)));
  out.scales.resize(static_cast<size_t>(out.rows * groups));
  out.zeros.resize(static_cast<size_t>(out.rows * groups));
  std::vector<uint8_t> packed(static_cast<size_t>(t.cols() / 2));
  std::vector<float> scales(static_cast<size_t>(t.cols() / kGroup)), zeros(scales.size());
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    if (!GgmlRowToInt4(t.type, t.row(ref->SourceRow(r)), t.cols(), packed.data(), scales.data(),
                       zeros.data())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor \"", name, "\" row ", r, " has a group with a zero scale and an offset"));
    }
    const int64_t i = r - rows.begin;
    std::memcpy(out.packed.data() + i * (out.cols / 2), packed.data() + cols.begin / 2,
                static_cast<size_t>(out.cols / 2));
    std::memcpy(out.scales.data() + i * groups, scales.data() + cols.begin / kGroup, sizeof(float) * groups);
    std::memcpy(out.zeros.data() + i * groups, zeros.data() + cols.begin / kGroup, sizeof(float) * groups);
  }
  return out;
}

}  // namespace tessera
