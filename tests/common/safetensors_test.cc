#include "common/safetensors.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_model.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Writes a safetensors file from raw parts: an 8-byte little-endian length (`length`, or the
// header's size), the header text and `data`.
std::filesystem::path WriteRaw(const std::string& header, const std::string& data,
                               const std::string& file = "bad.safetensors",
                               uint64_t length = UINT64_MAX - 1) {
  const std::filesystem::path path = testing::ScratchDir("raw") / file;
  const uint64_t len = length == UINT64_MAX - 1 ? header.size() : length;
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(len >> (8 * i)));
  out << header << data;
  return path;
}

std::string Tensor(const std::string& name, const std::string& body) {
  return absl::StrCat("\"", name, "\":", body);
}

// A header object from "key":value entries.
std::string Header(const std::vector<std::string>& entries) {
  return absl::StrCat("{", absl::StrJoin(entries, ","), "}");
}

void ExpectError(const absl::StatusOr<std::unique_ptr<SafetensorsFile>>& r, absl::StatusCode code,
                 const std::filesystem::path& path, const std::string& tensor,
                 const std::string& problem) {
  ASSERT_FALSE(r.ok()) << "opened a bad file: " << path;
  EXPECT_EQ(r.status().code(), code) << r.status();
  EXPECT_THAT(std::string(r.status().message()),
              AllOf(HasSubstr(path.string()), HasSubstr(tensor), HasSubstr(problem)));
}

TEST(SafetensorsFileTest, MissingFileIsNotFound) {
  const auto path = testing::ScratchDir("x") / "absent.safetensors";
  auto r = SafetensorsFile::Open(path);
  ExpectError(r, absl::StatusCode::kNotFound, path, "", "not found");
}

TEST(SafetensorsFileTest, FileShorterThanLengthFieldIsTruncated) {
  const auto path = testing::ScratchDir("x") / "short.safetensors";
  std::ofstream(path, std::ios::binary) << "abc";
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kDataLoss, path, "", "truncated");
}

TEST(SafetensorsFileTest, HeaderLengthPastEndOfFile) {
  const auto path = WriteRaw("{}", "", "f.safetensors", 1000);
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kDataLoss, path, "",
              "header length 1000 runs past the end of the file");
}

TEST(SafetensorsFileTest, HugeHeaderLengthDoesNotOverflow) {
  for (uint64_t len : {UINT64_MAX, UINT64_MAX - 7, uint64_t{1} << 63}) {
    const auto path = WriteRaw("{}", "", "f.safetensors", len);
    ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kDataLoss, path, "",
                "runs past the end of the file");
  }
}

TEST(SafetensorsFileTest, HeaderNotJson) {
  const auto path = WriteRaw("{\"a\": [", "");
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kInvalidArgument, path, "",
              "not valid JSON");
}

TEST(SafetensorsFileTest, HeaderNotObject) {
  const auto path = WriteRaw("[1, 2]", "");
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kInvalidArgument, path, "",
              "not a JSON object");
}

TEST(SafetensorsFileTest, EntryNotObject) {
  const auto path = WriteRaw(Header({Tensor("w", "[1]")}), "");
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kInvalidArgument, path, "\"w\"",
              "not an object");
}

struct FieldCase {
  std::string label;
  std::string body;
  std::string problem;
};

class BadFieldTest : public ::testing::TestWithParam<FieldCase> {};

TEST_P(BadFieldTest, NamesFileTensorAndField) {
  const auto path = WriteRaw(Header({Tensor("layer.w", GetParam().body)}), std::string(16, '\0'));
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kInvalidArgument, path, "\"layer.w\"",
              GetParam().problem);
}

INSTANTIATE_TEST_SUITE_P(
    MissingOrMistyped, BadFieldTest,
    ::testing::Values(
        FieldCase{"MissingDtype", R"({"shape":[4],"data_offsets":[0,16]})", "missing \"dtype\""},
        FieldCase{"MissingShape", R"({"dtype":"F32","data_offsets":[0,16]})", "missing \"shape\""},
        FieldCase{"MissingOffsets", R"({"dtype":"F32","shape":[4]})", "missing \"data_offsets\""},
        FieldCase{"DtypeNotString", R"({"dtype":32,"shape":[4],"data_offsets":[0,16]})",
                  "\"dtype\" is not a string"},
        FieldCase{"ShapeNotArray", R"({"dtype":"F32","shape":"4","data_offsets":[0,16]})",
                  "\"shape\" is not an array"},
        FieldCase{"DimNotInteger", R"({"dtype":"F32","shape":[4.5],"data_offsets":[0,16]})",
                  "not an integer"},
        FieldCase{"OffsetsWrongLength", R"({"dtype":"F32","shape":[4],"data_offsets":[0]})",
                  "\"data_offsets\" must be"},
        FieldCase{"OffsetsNotArray", R"({"dtype":"F32","shape":[4],"data_offsets":"0,16"})",
                  "\"data_offsets\" must be"},
        FieldCase{"OffsetsNegative", R"({"dtype":"F32","shape":[4],"data_offsets":[-1,16]})",
                  "\"data_offsets\" must be"},
        FieldCase{"DtypeF64", R"({"dtype":"F64","shape":[2],"data_offsets":[0,16]})",
                  "unsupported dtype \"F64\""},
        FieldCase{"DtypeI16", R"({"dtype":"I16","shape":[8],"data_offsets":[0,16]})",
                  "unsupported dtype \"I16\""},
        FieldCase{"NegativeDim", R"({"dtype":"F32","shape":[-4],"data_offsets":[0,16]})",
                  "negative"}),
    [](const auto& info) { return info.param.label; });

TEST(SafetensorsFileTest, ByteCountDisagreesWithShape) {
  const auto path =
      WriteRaw(Header({Tensor("w", R"({"dtype":"F32","shape":[2,2],"data_offsets":[0,12]})")}),
               std::string(16, '\0'));
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kDataLoss, path, "\"w\"",
              "needs 16 bytes but data_offsets span 12");
}

TEST(SafetensorsFileTest, ElementCountOverflow) {
  const auto path =
      WriteRaw(Header({Tensor("w", R"({"dtype":"BF16","shape":[1099511627776,1099511627776],)"
                                   R"("data_offsets":[0,16]})")}),
               std::string(16, '\0'));
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kDataLoss, path, "\"w\"",
              "more than 2^64");
}

TEST(SafetensorsFileTest, ReversedOffsets) {
  const auto path =
      WriteRaw(Header({Tensor("w", R"({"dtype":"F32","shape":[0],"data_offsets":[16,8]})")}),
               std::string(16, '\0'));
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kDataLoss, path, "\"w\"", "reversed");
}

TEST(SafetensorsFileTest, OffsetsPastDataSection) {
  const auto path =
      WriteRaw(Header({Tensor("w", R"({"dtype":"F32","shape":[4],"data_offsets":[8,24]})")}),
               std::string(16, '\0'));
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kDataLoss, path, "\"w\"",
              "past the end of the data section (16 bytes)");
}

TEST(SafetensorsFileTest, OverlappingTensors) {
  const auto path =
      WriteRaw(Header({Tensor("a", R"({"dtype":"F32","shape":[3],"data_offsets":[0,12]})"),
                       Tensor("b", R"({"dtype":"F32","shape":[2],"data_offsets":[8,16]})")}),
               std::string(16, '\0'));
  ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kDataLoss, path, "\"b\"",
              "overlaps tensor \"a\"");
}

TEST(SafetensorsFileTest, MetadataMustBeStringMap) {
  for (const std::string meta : {R"("pt")", R"({"format":1})"}) {
    const auto path = WriteRaw(Header({Tensor("__metadata__", meta)}), "");
    ExpectError(SafetensorsFile::Open(path), absl::StatusCode::kInvalidArgument, path, "",
                "__metadata__");
  }
}

TEST(SafetensorsFileTest, ReadsHandWrittenFile) {
  const float values[3] = {1.5f, -2.0f, 3.25f};
  std::string data(reinterpret_cast<const char*>(values), sizeof(values));
  data += std::string("\x80\x3f", 2);  // BF16 1.0
  const auto path =
      WriteRaw(Header({Tensor("__metadata__", R"({"format":"pt"})"),
                       Tensor("b", R"({"dtype":"BF16","shape":[1],"data_offsets":[12,14]})"),
                       Tensor("a", R"({"dtype":"F32","shape":[3],"data_offsets":[0,12]})"),
                       Tensor("empty", R"({"dtype":"F16","shape":[0,5],"data_offsets":[14,14]})")}),
               data);
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  ASSERT_EQ((*file)->tensors().size(), 3u);
  EXPECT_EQ((*file)->tensors()[0].name, "a");  // Ordered by position in the file.
  const TensorInfo* a = (*file)->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, std::vector<int64_t>{3});
  EXPECT_EQ(a->num_elements(), 3);
  EXPECT_EQ(std::memcmp((*file)->Data(*a), values, sizeof(values)), 0);
  const TensorInfo* b = (*file)->Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::kBF16);
  uint16_t bf;
  std::memcpy(&bf, (*file)->Data(*b), 2);
  EXPECT_EQ(Bf16ToF32(bf), 1.0f);
  EXPECT_EQ((*file)->Find("c"), nullptr);
}

TEST(SafetensorsFileTest, EveryTruncationOfAValidFileIsAnError) {
  const auto dir = testing::ScratchDir("cut");
  SafetensorsWriter writer;
  writer.AddBytes("a", DType::kF32, {2, 3}, std::string(24, '\x01'));
  writer.AddBytes("b", DType::kBF16, {5}, std::string(10, '\x02'));
  writer.SetMetadata("format", "pt");
  ASSERT_TRUE(writer.Write(dir / "full.safetensors").ok());
  std::ifstream in(dir / "full.safetensors", std::ios::binary);
  const std::string full((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(SafetensorsFile::Open(dir / "full.safetensors").ok());
  for (size_t n = 0; n < full.size(); ++n) {
    const auto path = dir / "cut.safetensors";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << full.substr(0, n);
    auto r = SafetensorsFile::Open(path);
    ASSERT_FALSE(r.ok()) << "a file cut to " << n << " of " << full.size() << " bytes opened";
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(path.string()));
  }
}

TEST(SafetensorsWriterTest, RoundTripsAllDtypes) {
  const auto dir = testing::ScratchDir("rt");
  SafetensorsWriter writer;
  // 1.5M floats: larger than one write chunk, so offsets across chunks are exercised.
  const uint64_t big = 1500000;
  writer.Add("big.f32", DType::kF32, {1500, 1000}, [](uint64_t offset, uint64_t n, void* dst) {
    auto* out = static_cast<float*>(dst);
    for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<float>(offset + i);
  });
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<float> v = {0.5f, -1.25f, 3.0f, 1024.0f, -0.0078125f, 7.0f};
    std::string bytes(v.size() * DTypeSize(t), '\0');
    ConvertFromF32(v.data(), v.size(), t, bytes.data());
    writer.AddBytes(std::string("small.") + DTypeName(t), t, {2, 3}, bytes);
  }
  writer.AddBytes("scalar", DType::kF32, {}, std::string("\0\0\x80\x3f", 4));
  writer.SetMetadata("format", "pt");
  EXPECT_EQ(writer.TotalBytes(), big * 4 + 6 * 4 + 6 * 2 + 6 * 2 + 4);

  std::vector<std::pair<uint64_t, uint64_t>> calls;
  ASSERT_TRUE(writer
                  .Write(dir / "m.safetensors",
                         [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); })
                  .ok());
  ASSERT_GE(calls.size(), 3u);
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GE(calls[i].first, calls[i - 1].first);
  EXPECT_EQ(calls.back().first, writer.TotalBytes());
  EXPECT_EQ(calls.back().second, writer.TotalBytes());

  std::ifstream in(dir / "m.safetensors", std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(std::filesystem::file_size(dir / "m.safetensors"),
            8 + header_len + writer.TotalBytes());

  auto file = SafetensorsFile::Open(dir / "m.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  const TensorInfo* b = (*file)->Find("big.f32");
  ASSERT_NE(b, nullptr);
  const auto* f = reinterpret_cast<const float*>((*file)->Data(*b));
  for (uint64_t i : {uint64_t{0}, uint64_t{1048575}, uint64_t{1048576}, big - 1}) {
    EXPECT_EQ(f[i], static_cast<float>(i));
  }
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    const TensorInfo* s = (*file)->Find(std::string("small.") + DTypeName(t));
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->dtype, t);
    EXPECT_EQ(s->shape, (std::vector<int64_t>{2, 3}));
    std::vector<float> back(6);
    ConvertToF32((*file)->Data(*s), t, 6, back.data());
    // Every value is exactly representable in all three dtypes.
    EXPECT_EQ(back, (std::vector<float>{0.5f, -1.25f, 3.0f, 1024.0f, -0.0078125f, 7.0f}));
  }
  const TensorInfo* scalar = (*file)->Find("scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->num_elements(), 1);
}

TEST(SafetensorsWriterTest, RejectsRepeatedNamesAndWrongByteCounts) {
  const auto dir = testing::ScratchDir("w");
  SafetensorsWriter repeated;
  repeated.AddBytes("w", DType::kF32, {1}, std::string(4, '\0'));
  repeated.AddBytes("w", DType::kF32, {1}, std::string(4, '\0'));
  absl::Status s = repeated.Write(dir / "a.safetensors");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("\"w\""));

  SafetensorsWriter wrong;
  wrong.AddBytes("v", DType::kBF16, {3}, std::string(4, '\0'));
  s = wrong.Write(dir / "b.safetensors");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("\"v\""), HasSubstr("4 bytes")));
  EXPECT_FALSE(std::filesystem::exists(dir / "b.safetensors"));
}

}  // namespace
}  // namespace tessera
