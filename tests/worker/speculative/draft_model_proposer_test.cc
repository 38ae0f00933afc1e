// The draft-model proposer on a real model: stories260K as its own draft must propose
// exactly the target's greedy continuation (so verification accepts everything), across
// steps whose proposals are partly rejected (the draft cache then re-feeds what changed).
#include "worker/speculative/draft_model_proposer.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_model.h"
#include "tests/worker/test_expected.h"
#include "worker/communicator.h"
#include "worker/llama_model.h"

namespace tessera {
namespace {

TEST(DraftModelProposerTest, TheModelAsItsOwnDraftProposesItsGreedyContinuation) {
  TESSERA_REQUIRE_STORIES_MODEL();
  auto backend = kernels::MakeCpuBackend(1);
  SingleRankCommunicator comm;
  auto model = LlamaModel::Load(testing::StoriesModelDir(), backend.get(), &comm);
  ASSERT_TRUE(model.ok()) << model.status();
  const int kBlocks = 16, kBlockSize = 4;
  auto cache = (*model)->CreateKvCache(kBlocks, kBlockSize);
  ASSERT_TRUE(cache.ok()) << cache.status();
  DraftModelProposer proposer(model->get(), std::move(*cache));

  const testing::Expected expected = testing::LoadExpected();
  std::vector<int32_t> tokens = expected.prompt_ids;
  std::vector<int32_t> blocks;
  for (int b = 1; b < kBlocks; ++b) blocks.push_back(b);  // Block 0 is the null block.
  SamplingParams greedy;
  greedy.temperature = 0;

  // Step 1: the whole prompt is caught up, then 3 tokens proposed.
  ProposalRequest ask;
  ask.seq_id = 9;
  ask.blocks = blocks;
  ask.sampling = &greedy;
  ask.max_tokens = 3;
  ask.tokens = tokens;
  auto out = proposer.Propose({ask});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ((*out)[0].tokens.size(), 3u);
  EXPECT_EQ((*out)[0].tokens, std::vector<int32_t>(expected.generated_ids.begin(),
                                                   expected.generated_ids.begin() + 3));
  // Pretend the target accepted only the first proposal and corrected the second to
  // the reference's token: the draft must re-feed from the first token that changed.
  tokens.push_back(expected.generated_ids[0]);
  tokens.push_back(expected.generated_ids[1]);
  int next = 2;
  for (int step = 0; step < 6; ++step) {
    ask.tokens = tokens;
    ask.max_tokens = 4;
    out = proposer.Propose({ask});
    ASSERT_TRUE(out.ok()) << out.status();
    const std::vector<int32_t> want(expected.generated_ids.begin() + next,
                                    expected.generated_ids.begin() + next + 4);
    EXPECT_EQ((*out)[0].tokens, want) << "step " << step;
    // Accept a varying number of them, then the reference's next token.
    const int keep = step % 4;
    for (int j = 0; j <= keep; ++j) tokens.push_back(expected.generated_ids[next + j]);
    next += keep + 1;
  }
  proposer.Forget(9);
}

}  // namespace
}  // namespace tessera
