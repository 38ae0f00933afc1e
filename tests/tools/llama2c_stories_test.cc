// Converting the original stories260K.bin + tok512.bin reproduces the shipped HF folder.
#include <cstring>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/file_util.h"
#include "common/model_config.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_model.h"
#include "tools/checkpoint/llama2c.h"

namespace tessera {
namespace {

nlohmann::json LoadJson(const std::filesystem::path& path) {
  auto text = ReadFileToString(path);
  EXPECT_TRUE(text.ok()) << text.status();
  auto j = nlohmann::json::parse(text.ok() ? *text : "", nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << path;
  return j;
}

class ConvertStoriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_STORIES_MODEL();
    out_ = testing::ScratchDir("out");
    const auto src = testing::StoriesModelDir();
    absl::Status s = ConvertLlama2c(src / "stories260K.bin", src / "tok512.bin", out_);
    ASSERT_TRUE(s.ok()) << s;
  }
  std::filesystem::path out_;
};

TEST_F(ConvertStoriesTest, EveryTensorEqualsTheShippedOne) {
  auto ours = Checkpoint::Open(out_);
  auto shipped = Checkpoint::Open(testing::StoriesModelDir());
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_TRUE(shipped.ok()) << shipped.status();
  auto file = SafetensorsFile::Open(testing::StoriesModelDir() / "model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  auto our_file = SafetensorsFile::Open(out_ / "model.safetensors");
  ASSERT_TRUE(our_file.ok()) << our_file.status();
  EXPECT_EQ((*our_file)->tensors().size(), (*file)->tensors().size());
  EXPECT_EQ((*our_file)->metadata(), (*file)->metadata());
  for (const TensorInfo& t : (*file)->tensors()) {
    auto info = (*ours)->Info(t.name);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ((*info)->shape, t.shape) << t.name;
    EXPECT_EQ((*info)->dtype, DType::kF32) << t.name;
    std::vector<float> a(t.num_elements()), b(t.num_elements());
    ASSERT_TRUE((*ours)->ReadAll(t.name, t.shape, DType::kF32, a.data()).ok());
    ASSERT_TRUE((*shipped)->ReadAll(t.name, t.shape, DType::kF32, b.data()).ok());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << t.name;
  }
}

TEST_F(ConvertStoriesTest, FileIsByteIdenticalToTheShippedOne) {
  // Same tensor order, header layout and padding as the shipped conversion.
  auto ours = ReadFileToString(out_ / "model.safetensors");
  auto shipped = ReadFileToString(testing::StoriesModelDir() / "model.safetensors");
  ASSERT_TRUE(ours.ok() && shipped.ok());
  EXPECT_TRUE(*ours == *shipped);
}

TEST_F(ConvertStoriesTest, ConfigEqualsTheShippedOne) {
  auto ours = ModelConfig::Load(out_);
  auto shipped = ModelConfig::Load(testing::StoriesModelDir());
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_TRUE(shipped.ok()) << shipped.status();
  EXPECT_EQ(ours->architecture, shipped->architecture);
  EXPECT_EQ(ours->hidden_size, shipped->hidden_size);
  EXPECT_EQ(ours->intermediate_size, shipped->intermediate_size);
  EXPECT_EQ(ours->num_attention_heads, shipped->num_attention_heads);
  EXPECT_EQ(ours->num_key_value_heads, shipped->num_key_value_heads);
  EXPECT_EQ(ours->head_dim, shipped->head_dim);
  EXPECT_EQ(ours->num_hidden_layers, shipped->num_hidden_layers);
  EXPECT_EQ(ours->vocab_size, shipped->vocab_size);
  EXPECT_EQ(ours->max_position_embeddings, shipped->max_position_embeddings);
  EXPECT_EQ(ours->rms_norm_eps, shipped->rms_norm_eps);
  EXPECT_EQ(ours->rope_theta, shipped->rope_theta);
  EXPECT_EQ(ours->tie_word_embeddings, shipped->tie_word_embeddings);
  EXPECT_EQ(ours->bos_token_id, shipped->bos_token_id);
  EXPECT_EQ(ours->eos_token_ids, shipped->eos_token_ids);
  EXPECT_EQ(ours->torch_dtype, shipped->torch_dtype);
}

TEST_F(ConvertStoriesTest, TokenizerEqualsTheShippedOne) {
  const nlohmann::json ours = LoadJson(out_ / "tokenizer.json");
  const nlohmann::json shipped = LoadJson(testing::StoriesModelDir() / "tokenizer.json");
  EXPECT_EQ(ours["model"]["vocab"], shipped["model"]["vocab"]);
  ASSERT_EQ(ours["model"]["merges"].size(), shipped["model"]["merges"].size());
  EXPECT_EQ(ours["model"]["merges"], shipped["model"]["merges"]);  // Order included.
  // And everything else: normalizer, post-processor, decoder, added tokens.
  EXPECT_EQ(ours, shipped);
  EXPECT_EQ(LoadJson(out_ / "tokenizer_config.json"),
            LoadJson(testing::StoriesModelDir() / "tokenizer_config.json"));
}

TEST(ReadLlama2cHeaderTest, Stories260KHeader) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto h = ReadLlama2cHeader(testing::StoriesModelDir() / "stories260K.bin");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->version, 0);
  EXPECT_EQ(h->dim, 64);
  EXPECT_EQ(h->hidden_dim, 172);
  EXPECT_EQ(h->n_layers, 5);
  EXPECT_EQ(h->n_heads, 8);
  EXPECT_EQ(h->n_kv_heads, 4);
  EXPECT_EQ(h->vocab_size, 512);
  EXPECT_EQ(h->seq_len, 512);
  EXPECT_TRUE(h->shared_classifier);
  EXPECT_EQ(h->expected_file_size, 1056540u);
}

}  // namespace
}  // namespace tessera
