#include "worker/gptq_checkpoint.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

// Packers written from the formats' descriptions (AutoGPTQ's and AutoAWQ's pack loops),
// independently of the reader under test.
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// codes [in, out] -> GPTQ qweight [in / 8, out].
std::vector<int32_t> PackGptqWeight(const std::vector<int>& codes, int64_t in, int64_t out) {
  std::vector<int32_t> w(in / 8 * out, 0);
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      w[(i / 8) * out + o] =
          static_cast<int32_t>(static_cast<uint32_t>(w[(i / 8) * out + o]) |
                               (static_cast<uint32_t>(codes[i * out + o]) << (4 * (i % 8))));
    }
  }
  return w;
}

// values [n, out] -> [n, out / 8], 8 output columns a word, nibble k holding column
// order[k] of its 8.
std::vector<int32_t> PackAlongOutput(const std::vector<int>& values, int64_t n, int64_t out,
                                     const int* order) {
  std::vector<int32_t> w(n * out / 8, 0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < out / 8; ++j) {
      uint32_t word = 0;
      for (int k = 0; k < 8; ++k) {
        word |= static_cast<uint32_t>(values[r * out + 8 * j + order[k]]) << (4 * k);
      }
      w[r * out / 8 + j] = static_cast<int32_t>(word);
    }
  }
  return w;
}

constexpr int kIdentity[8] = {0, 1, 2, 3, 4, 5, 6, 7};

struct Layer {
  int64_t in = 0, out = 0;
  int group = 0;
  std::vector<int> codes;  // [in, out], as torch's intweight
  std::vector<int> zeros;  // [groups, out], the true zero points
  std::vector<float> scales;  // [groups, out]
};

Layer RandomLayer(int64_t in, int64_t out, int group, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, 15), zero(1, 15);
  Layer l;
  l.in = in;
  l.out = out;
  l.group = group;
  for (int64_t i = 0; i < in * out; ++i) l.codes.push_back(code(rng));
  for (int64_t i = 0; i < in / group * out; ++i) {
    l.zeros.push_back(zero(rng));
    l.scales.push_back(0.01f * (1 + i % 7));
  }
  return l;
}

Int4LayerTensors Pack(const Layer& l, const Int4QuantConfig& c) {
  Int4LayerTensors t;
  t.in_features = l.in;
  t.out_features = l.out;
  t.scales = l.scales;
  std::vector<int> stored = l.zeros;
  if (c.zeros_minus_one) {
    for (int& z : stored) z -= 1;
  }
  if (c.method == Int4Method::kAwq) {
    t.qweight = PackAlongOutput(l.codes, l.in, l.out, kAwqOrder);
    t.qzeros = PackAlongOutput(stored, l.in / l.group, l.out, kAwqOrder);
  } else {
    t.qweight = PackGptqWeight(l.codes, l.in, l.out);
    t.qzeros = PackAlongOutput(stored, l.in / l.group, l.out, kIdentity);
  }
  return t;
}

// Every element of the repacked slice against the layer it came from.
void ExpectSlice(const Layer& l, const Int4Matrix& m, Range rows, Range cols) {
  ASSERT_EQ(m.rows, rows.size());
  ASSERT_EQ(m.cols, cols.size());
  for (int64_t r = 0; r < m.rows; ++r) {
    const int64_t o = rows.begin + r;
    for (int64_t c = 0; c < m.cols; ++c) {
      const int64_t i = cols.begin + c;
      ASSERT_EQ(m.Code(r, c), l.codes[i * l.out + o]) << "(" << r << ", " << c << ")";
      const int64_t g = i / l.group;
      const int64_t mg = r * m.groups_per_row() + c / m.group_size;
      ASSERT_EQ(m.zeros[mg], static_cast<float>(l.zeros[g * l.out + o]));
      ASSERT_EQ(m.scales[mg], l.scales[g * l.out + o]);
    }
  }
}

Int4QuantConfig Config(Int4Method method, int group, bool minus_one) {
  Int4QuantConfig c;
  c.method = method;
  c.group_size = group;
  c.zeros_minus_one = minus_one;
  return c;
}

TEST(GptqCheckpointTest, GptqV1RepacksWholeAndSlices) {
  const Layer l = RandomLayer(64, 48, 16, 1);
  const Int4QuantConfig c = Config(Int4Method::kGptq, 16, true);
  const Int4LayerTensors t = Pack(l, c);
  for (auto [rows, cols] : {std::pair<Range, Range>{{0, 48}, {0, 64}},
                            {{5, 29}, {0, 64}},     // column-parallel: any rows
                            {{0, 48}, {16, 48}},    // row-parallel: whole groups
                            {{47, 48}, {48, 64}}}) {
    auto m = RepackInt4(c, "layer", t, rows, cols);
    ASSERT_TRUE(m.ok()) << m.status();
    ExpectSlice(l, *m, rows, cols);
  }
}

TEST(GptqCheckpointTest, GptqV2StoresZerosAsThey) {
  const Layer l = RandomLayer(32, 16, 32, 2);
  const Int4QuantConfig c = Config(Int4Method::kGptq, 32, false);
  auto m = RepackInt4(c, "layer", Pack(l, c), {0, 16}, {0, 32});
  ASSERT_TRUE(m.ok()) << m.status();
  ExpectSlice(l, *m, {0, 16}, {0, 32});
}

TEST(GptqCheckpointTest, AwqInterleavedOrder) {
  const Layer l = RandomLayer(64, 40, 32, 3);
  const Int4QuantConfig c = Config(Int4Method::kAwq, 32, false);
  const Int4LayerTensors t = Pack(l, c);
  for (auto [rows, cols] : {std::pair<Range, Range>{{0, 40}, {0, 64}}, {{3, 21}, {32, 64}}}) {
    auto m = RepackInt4(c, "layer", t, rows, cols);
    ASSERT_TRUE(m.ok()) << m.status();
    ExpectSlice(l, *m, rows, cols);
  }
}

TEST(GptqCheckpointTest, AwqHandBuiltWord) {
  // One word holding columns 0..7 = codes 0..7 in AWQ order: nibbles hold 0,2,4,6,1,3,5,7.
  Int4LayerTensors t;
  t.in_features = 2;  // Not a real layer shape; RepackInt4 only needs whole groups.
  t.out_features = 8;
  t.qweight = {static_cast<int32_t>(0x75316420u), static_cast<int32_t>(0x75316420u)};
  t.qzeros = {static_cast<int32_t>(0x88888888u)};
  t.scales.assign(8, 0.5f);
  auto m = RepackInt4(Config(Int4Method::kAwq, 2, false), "awq", t, {0, 8}, {0, 2});
  ASSERT_TRUE(m.ok()) << m.status();
  for (int o = 0; o < 8; ++o) {
    EXPECT_EQ(m->Code(o, 0), o);
    EXPECT_EQ(m->Code(o, 1), o);
    EXPECT_EQ(m->zeros[o], 8.0f);
  }
}

TEST(GptqCheckpointTest, GptqHandBuiltWord) {
  // qweight word [0, o] holds inputs 0..7 of output o: 0x76543210 -> input i = code i.
  // qzeros v1 0x00000000 -> zero 1 for all 8 outputs.
  Int4LayerTensors t;
  t.in_features = 8;
  t.out_features = 8;
  t.qweight.assign(8, static_cast<int32_t>(0x76543210u));
  t.qzeros = {0};
  t.scales.assign(8, 1.0f);
  auto m = RepackInt4(Config(Int4Method::kGptq, -1, true), "gptq", t, {0, 8}, {0, 8});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->group_size, 8);  // -1: one group spanning the row.
  for (int o = 0; o < 8; ++o) {
    for (int i = 0; i < 8; ++i) EXPECT_EQ(m->Code(o, i), i);
    EXPECT_EQ(m->zeros[o], 1.0f);
  }
}

TEST(GptqCheckpointTest, PerChannelGroupsSliceAnywhereOnEvenColumns) {
  const Layer l = RandomLayer(64, 16, 64, 4);
  Int4QuantConfig c = Config(Int4Method::kGptq, -1, true);
  auto m = RepackInt4(c, "layer", Pack(l, c), {0, 16}, {32, 64});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->group_size, 32);
  ExpectSlice(l, *m, {0, 16}, {32, 64});
}

TEST(GptqCheckpointTest, SliceSplittingAGroupIsAnError) {
  const Layer l = RandomLayer(64, 16, 32, 5);
  const Int4QuantConfig c = Config(Int4Method::kGptq, 32, true);
  auto m = RepackInt4(c, "model.layers.0.mlp.down_proj", Pack(l, c), {0, 16}, {16, 48});
  ASSERT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("split a quantization group of 32"), std::string::npos)
      << m.status();
  EXPECT_NE(m.status().message().find("down_proj"), std::string::npos) << m.status();
}

TEST(GptqCheckpointTest, TrivialGIdxIsAcceptedAndPermutedIsUnimplemented) {
  const Layer l = RandomLayer(32, 8, 16, 6);
  const Int4QuantConfig c = Config(Int4Method::kGptq, 16, true);
  Int4LayerTensors t = Pack(l, c);
  for (int i = 0; i < 32; ++i) t.g_idx.push_back(i / 16);
  EXPECT_TRUE(RepackInt4(c, "layer", t, {0, 8}, {0, 32}).ok());
  std::swap(t.g_idx[0], t.g_idx[31]);  // What act-order (desc_act) checkpoints look like.
  auto m = RepackInt4(c, "layer", t, {0, 8}, {0, 32});
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented) << m.status();
}

TEST(GptqCheckpointTest, ParsesGptqAndAwqConfigs) {
  auto none = ParseInt4QuantConfig(R"({"hidden_size": 8})", "config.json");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  auto gptq = ParseInt4QuantConfig(
      R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128,
          "desc_act": false, "sym": true}})", "config.json");
  ASSERT_TRUE(gptq.ok()) << gptq.status();
  EXPECT_EQ((*gptq)->method, Int4Method::kGptq);
  EXPECT_EQ((*gptq)->group_size, 128);
  EXPECT_TRUE((*gptq)->zeros_minus_one);  // No checkpoint_format: AutoGPTQ v1.

  auto v2 = ParseInt4QuantConfig(
      R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": -1,
          "checkpoint_format": "gptq_v2"}})", "config.json");
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ((*v2)->group_size, -1);
  EXPECT_FALSE((*v2)->zeros_minus_one);

  auto awq = ParseInt4QuantConfig(
      R"({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128,
          "version": "gemm", "zero_point": true}})", "config.json");
  ASSERT_TRUE(awq.ok()) << awq.status();
  EXPECT_EQ((*awq)->method, Int4Method::kAwq);
  EXPECT_FALSE((*awq)->zeros_minus_one);
}

TEST(GptqCheckpointTest, RejectsConfigsOutsideTheFormat) {
  struct Case {
    const char* json;
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {R"({"quantization_config": {"quant_method": "gptq", "bits": 8, "group_size": 128}})",
       absl::StatusCode::kInvalidArgument, "bits 8"},
      {R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 0}})",
       absl::StatusCode::kInvalidArgument, "group_size"},
      {R"({"quantization_config": {"quant_method": "gptq", "bits": 4,
           "checkpoint_format": "marlin"}})",
       absl::StatusCode::kInvalidArgument, "marlin"},
      {R"({"quantization_config": {"quant_method": "awq", "bits": 4, "version": "gemv"}})",
       absl::StatusCode::kInvalidArgument, "gemv"},
      {R"({"quantization_config": {"quant_method": "awq", "bits": 4, "zero_point": false}})",
       absl::StatusCode::kInvalidArgument, "zero_point"},
      {R"({"quantization_config": {"quant_method": "bitsandbytes"}})",
       absl::StatusCode::kUnimplemented, "bitsandbytes"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseInt4QuantConfig(c.json, "config.json");
    EXPECT_EQ(parsed.status().code(), c.code) << c.json << " -> " << parsed.status();
    EXPECT_NE(parsed.status().message().find(c.message), std::string::npos) << parsed.status();
  }
}

}  // namespace
}  // namespace tessera
