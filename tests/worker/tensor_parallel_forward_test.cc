// The forward pass split over 2 and 4 tensor-parallel ranks (threads of this process,
// reduced in rank order) against the single-rank run.
#include <cmath>
#include <thread>

#include "gtest/gtest.h"
#include "tests/support/test_model.h"
#include "tools/checkpoint/generate.h"
#include "worker/comm/local_communicator.h"
#include "worker/communicator.h"
#include "worker/llama_model.h"
#include "worker/single_sequence.h"

namespace tessera {
namespace {

struct RankOutput {
  absl::Status status;
  std::vector<float> first_logits;
  std::vector<int32_t> generated_ids;
};

// Runs greedy generation on `world` ranks at once; returns every rank's output.
std::vector<RankOutput> RunRanks(const std::filesystem::path& model_dir, int world,
                                 const std::vector<int32_t>& prompt, int max_new_tokens) {
  auto group = LocalGroup::Create(world, std::chrono::seconds(30));
  std::vector<RankOutput> out(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      RankOutput& o = out[rank];
      auto backend = kernels::MakeCpuBackend(1);
      LocalCommunicator comm(group, rank);
      auto model = LlamaModel::Load(model_dir, backend.get(), &comm);
      if (!model.ok()) {
        o.status = model.status();
        return;
      }
      auto cache = (*model)->CreateKvCache(16, 16);
      if (!cache.ok()) {
        o.status = cache.status();
        return;
      }
      SingleSequenceOptions options;
      options.max_new_tokens = max_new_tokens;
      options.sampling.temperature = 0;
      options.ignore_eos = true;
      auto result = GenerateSingleSequence(**model, **cache, prompt, options);
      if (!result.ok()) {
        o.status = result.status();
        return;
      }
      o.first_logits = result->first_logits;
      o.generated_ids = result->generated_ids;
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

void ExpectSameAsSingleRank(const std::filesystem::path& dir, const std::vector<int32_t>& prompt,
                            int tokens, std::vector<int> worlds) {
  const std::vector<RankOutput> single = RunRanks(dir, 1, prompt, tokens);
  ASSERT_TRUE(single[0].status.ok()) << single[0].status;
  for (int world : worlds) {
    const std::vector<RankOutput> ranks = RunRanks(dir, world, prompt, tokens);
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(ranks[r].status.ok()) << "world " << world << " rank " << r << ": "
                                        << ranks[r].status;
      ASSERT_EQ(ranks[r].first_logits.size(), single[0].first_logits.size());
      float worst = 0;
      for (size_t i = 0; i < single[0].first_logits.size(); ++i) {
        const float ref = single[0].first_logits[i];
        worst = std::max(worst, std::abs(ranks[r].first_logits[i] - ref) /
                                    std::max(1.0f, std::abs(ref)));
      }
      EXPECT_LT(worst, 1e-5f) << "world " << world << " rank " << r;
      EXPECT_EQ(ranks[r].generated_ids, single[0].generated_ids)
          << "world " << world << " rank " << r;
    }
  }
}

TEST(TensorParallelForwardTest, Stories260KOnTwoAndFourRanks) {
  TESSERA_REQUIRE_STORIES_MODEL();
  // 8 query heads, 4 KV heads, intermediate 172 (uneven over 8 but even over 2 and 4).
  ExpectSameAsSingleRank(testing::StoriesModelDir(), {1, 403, 407, 261, 378}, 20, {2, 4});
}

TEST(TensorParallelForwardTest, UnevenGeneratedModel) {
  // Intermediate 202 and vocab 301 split unevenly; 2 KV heads are replicated over 4 ranks.
  ModelConfig c;
  c.hidden_size = 96;
  c.intermediate_size = 202;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 12;
  c.num_hidden_layers = 2;
  c.vocab_size = 301;
  c.max_position_embeddings = 256;
  c.eos_token_ids = {2};
  const auto dir = testing::ScratchDir("model");
  GenerateOptions options;
  options.out_dir = dir;
  options.dtype = DType::kF32;
  options.seed = 7;
  ASSERT_TRUE(GenerateRandomCheckpoint(c, options).ok());
  ExpectSameAsSingleRank(dir, {1, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180,
                               190, 200, 210, 220},
                         8, {2, 4});
}

}  // namespace
}  // namespace tessera
