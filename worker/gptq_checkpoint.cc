#include "worker/gptq_checkpoint.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

// AWQ's packer puts column 8j + kAwqOrder[k] into nibble k of word j.
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": quantization_config: ", what));
}

int Nibble(int32_t word, int k) { return (static_cast<uint32_t>(word) >> (4 * k)) & 0xf; }

std::string Shape(const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

}  // namespace

absl::StatusOr<std::optional<Int4QuantConfig>> ParseInt4QuantConfig(absl::string_view text,
                                                                   absl::string_view source) {
  const Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return std::nullopt;
  const Json& q = *it;
  if (!q.is_object()) return Invalid(source, "must be an object");
  const std::string method = q.value("quant_method", std::string());
  Int4QuantConfig c;
  if (method == "gptq") {
    c.method = Int4Method::kGptq;
  } else if (method == "awq") {
    c.method = Int4Method::kAwq;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        source, ": quantization_config.quant_method \"", method,
        "\" is not supported (Tessera reads \"gptq\" and \"awq\" 4-bit checkpoints, and FP8 "
        "ones: \"fp8\", \"fbgemm_fp8\", \"compressed-tensors\")"));
  }
  // AWQ spells the fields w_bit / q_group_size in some writers; accept both spellings.
  auto int_field = [&](const char* a, const char* b, int fallback) -> absl::StatusOr<int> {
    for (const char* key : {a, b}) {
      auto f = q.find(key);
      if (f == q.end() || f->is_null()) continue;
      if (!f->is_number_integer()) return Invalid(source, absl::StrCat("\"", key, "\" must be an integer"));
      return f->get<int>();
    }
    return fallback;
  };
  auto bool_field = [&](const char* key, bool fallback) -> absl::StatusOr<bool> {
    auto f = q.find(key);
    if (f == q.end() || f->is_null()) return fallback;
    if (!f->is_boolean()) return Invalid(source, absl::StrCat("\"", key, "\" must be true or false"));
    return f->get<bool>();
  };
  ASSIGN_OR_RETURN(const int bits, int_field("bits", "w_bit", 4));
  if (bits != 4) {
    return Invalid(source, absl::StrCat(method, " with bits ", bits,
                                        " is not supported; Tessera reads 4-bit checkpoints"));
  }
  ASSIGN_OR_RETURN(c.group_size, int_field("group_size", "q_group_size", 128));
  if (c.group_size != -1 && (c.group_size <= 0 || c.group_size % 2 != 0)) {
    return Invalid(source, absl::StrCat("group_size must be -1 or a positive even number, got ",
                                        c.group_size));
  }
  if (c.method == Int4Method::kGptq) {
    ASSIGN_OR_RETURN(c.sym, bool_field("sym", true));
    ASSIGN_OR_RETURN(c.desc_act, bool_field("desc_act", false));
    const std::string format = q.value("checkpoint_format", std::string("gptq"));
    if (format == "gptq") {
      c.zeros_minus_one = true;
    } else if (format == "gptq_v2") {
      c.zeros_minus_one = false;
    } else {
      return Invalid(source, absl::StrCat("checkpoint_format \"", format,
                                          "\" is not supported (\"gptq\" or \"gptq_v2\")"));
    }
  } else {
    c.zeros_minus_one = false;
    c.sym = false;
    const std::string version = q.value("version", std::string("gemm"));
    if (version != "gemm" && version != "GEMM") {
      return Invalid(source, absl::StrCat("AWQ version \"", version,
                                          "\" is not supported (only \"gemm\")"));
    }
    ASSIGN_OR_RETURN(const bool zero_point, bool_field("zero_point", true));
    if (!zero_point) return Invalid(source, "AWQ without zero_point is not supported");
  }
  return c;
}

absl::StatusOr<std::optional<Int4QuantConfig>> LoadInt4QuantConfig(
    const std::filesystem::path& model_dir) {
  const std::filesystem::path file = model_dir / "config.json";
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(file));
  return ParseInt4QuantConfig(text, file.string());
}

absl::StatusOr<Int4Matrix> RepackInt4(const Int4QuantConfig& config, absl::string_view layer,
                                      const Int4LayerTensors& t, Range rows, Range cols) {
  const int64_t in = t.in_features, out = t.out_features;
  const int64_t g = config.group_size == -1 ? in : config.group_size;
  if (in % g != 0) {
    return absl::InvalidArgumentError(absl::StrCat(layer, ": in_features ", in,
                                                   " is not a multiple of group_size ", g));
  }
  if (rows.begin < 0 || rows.end > out || rows.begin > rows.end || cols.begin < 0 ||
      cols.end > in || cols.begin > cols.end) {
    return absl::OutOfRangeError(absl::StrCat(layer, ": slice out of range"));
  }
  // One group per row (group_size -1) has the same scale everywhere in the row: any slice
  // works, as long as it packs into whole bytes.
  const bool per_channel = config.group_size == -1;
  if (per_channel && cols.size() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        layer, ": this rank's input columns [", cols.begin, ", ", cols.end,
        ") are an odd count, which 4-bit rows cannot hold"));
  }
  if (!per_channel && (cols.begin % g != 0 || cols.end % g != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        layer, ": this rank's input columns [", cols.begin, ", ", cols.end,
        ") split a quantization group of ", g,
        " columns; choose a tensor-parallel size that divides the groups evenly"));
  }
  if (!t.g_idx.empty()) {
    // desc_act checkpoints permute the input rows' groups; only the identity is supported.
    for (int64_t i = 0; i < in; ++i) {
      if (t.g_idx[i] != i / g) {
        return absl::UnimplementedError(absl::StrCat(
            layer, ": g_idx[", i, "] = ", t.g_idx[i], ", expected ", i / g,
            ": act-order (desc_act) checkpoints with a non-trivial group order are not "
            "supported"));
      }
    }
  }
  Int4Matrix m;
  m.rows = rows.size();
  m.cols = cols.size();
  m.group_size = static_cast<int>(config.group_size == -1 ? m.cols : g);
  const int64_t groups = m.cols == 0 ? 0 : m.cols / m.group_size;
  m.packed.assign(static_cast<size_t>(m.rows * (m.cols / 2)), 0);
  m.scales.resize(static_cast<size_t>(m.rows * groups));
  m.zeros.resize(static_cast<size_t>(m.rows * groups));
  const int64_t g0 = cols.begin / g;
  const float zero_offset = config.zeros_minus_one ? 1.0f : 0.0f;
  const bool awq = config.method == Int4Method::kAwq;

  for (int64_t r = 0; r < m.rows; ++r) {
    const int64_t o = rows.begin + r;
    // Where output column o sits in a word packed along the output dim.
    const int64_t zword = o / 8;
    // kAwqOrder maps nibble -> column; column o % 8 sits in the nibble that maps to it.
    int zn = static_cast<int>(o % 8);
    if (awq) {
      for (int k = 0; k < 8; ++k) {
        if (kAwqOrder[k] == o % 8) zn = k;
      }
    }
    for (int64_t gi = 0; gi < groups; ++gi) {
      const int64_t fg = g0 + gi;
      m.scales[r * groups + gi] = t.scales[fg * out + o];
      m.zeros[r * groups + gi] =
          static_cast<float>(Nibble(t.qzeros[fg * (out / 8) + zword], zn)) + zero_offset;
    }
    uint8_t* dst = m.packed.data() + r * (m.cols / 2);
    for (int64_t c = 0; c < m.cols; ++c) {
      const int64_t i = cols.begin + c;
      const int q = awq ? Nibble(t.qweight[i * (out / 8) + zword], zn)
                        : Nibble(t.qweight[(i / 8) * out + o], static_cast<int>(i % 8));
      dst[c / 2] |= static_cast<uint8_t>(q << (4 * (c & 1)));
    }
  }
  return m;
}

absl::StatusOr<Int4Matrix> ReadInt4Linear(const Checkpoint& checkpoint,
                                          const Int4QuantConfig& config,
                                          const std::string& prefix, int64_t out_features,
                                          int64_t in_features, Range rows, Range cols) {
  const std::string where = absl::StrCat(checkpoint.dir().string(), ": ", prefix);
  const int64_t g = config.group_size == -1 ? in_features : config.group_size;
  if (in_features % 8 != 0 || out_features % 8 != 0 || in_features % g != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": a 4-bit layer of shape [", out_features, ", ", in_features,
        "] needs both dims divisible by 8 and in_features by group_size ", g));
  }
  const int64_t groups = in_features / g;
  const bool awq = config.method == Int4Method::kAwq;
  const std::vector<int64_t> qweight_shape =
      awq ? std::vector<int64_t>{in_features, out_features / 8}
          : std::vector<int64_t>{in_features / 8, out_features};
  const std::vector<int64_t> qzeros_shape{groups, out_features / 8};
  const std::vector<int64_t> scales_shape{groups, out_features};
  // Every tensor must be there with the dtype and shape the format implies; the messages
  // name what the file has.
  auto check = [&](const std::string& name, DType dtype,
                   const std::vector<int64_t>& shape) -> absl::Status {
    ASSIGN_OR_RETURN(const TensorInfo* info, checkpoint.Info(name));
    // Scales may be any float type (F16 in practice); the packed words must be I32.
    const bool is_float = info->dtype == DType::kF16 || info->dtype == DType::kBF16 ||
                          info->dtype == DType::kF32;
    if (dtype == DType::kF16 ? !is_float : info->dtype != dtype) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", name, " has dtype ",
                                                     DTypeName(info->dtype), ", expected ",
                                                     DTypeName(dtype)));
    }
    if (info->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          checkpoint.dir().string(), ": tensor ", name, " has shape ", Shape(info->shape),
          ", expected ", Shape(shape), " for a ", awq ? "AWQ" : "GPTQ",
          " layer of [out ", out_features, ", in ", in_features, "] with group_size ", g));
    }
    return absl::OkStatus();
  };
  Int4LayerTensors t;
  t.in_features = in_features;
  t.out_features = out_features;
  t.qweight.resize(static_cast<size_t>(qweight_shape[0] * qweight_shape[1]));
  t.qzeros.resize(static_cast<size_t>(groups * (out_features / 8)));
  t.scales.resize(static_cast<size_t>(groups * out_features));
  RETURN_IF_ERROR(check(prefix + ".qweight", DType::kI32, qweight_shape));
  RETURN_IF_ERROR(check(prefix + ".qzeros", DType::kI32, qzeros_shape));
  RETURN_IF_ERROR(check(prefix + ".scales", DType::kF16, scales_shape));
  RETURN_IF_ERROR(checkpoint.ReadAll(prefix + ".qweight", qweight_shape, DType::kI32, t.qweight.data()));
  RETURN_IF_ERROR(checkpoint.ReadAll(prefix + ".qzeros", qzeros_shape, DType::kI32, t.qzeros.data()));
  RETURN_IF_ERROR(checkpoint.ReadAll(prefix + ".scales", scales_shape, DType::kF32, t.scales.data()));
  if (!awq && checkpoint.Has(prefix + ".g_idx")) {
    t.g_idx.resize(static_cast<size_t>(in_features));
    RETURN_IF_ERROR(check(prefix + ".g_idx", DType::kI32, {in_features}));
    RETURN_IF_ERROR(checkpoint.ReadAll(prefix + ".g_idx", {in_features}, DType::kI32, t.g_idx.data()));
  } else if (!awq && config.desc_act) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": desc_act is true but ", prefix,
                                                   ".g_idx is missing"));
  }
  return RepackInt4(config, where, t, rows, cols);
}

}  // namespace tessera
