#include "worker/speculative/ngram_proposer.h"

#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(NgramLookupTest, ProposesWhatFollowedTheLatestMatchOfTheLongestSuffix) {
  // "5 6" occurs twice; the later occurrence (followed by 9 9) wins over the earlier (7 8).
  const std::vector<int32_t> tokens = {1, 5, 6, 7, 8, 2, 5, 6, 9, 9, 3, 5, 6};
  EXPECT_EQ(NgramLookup(tokens, 1, 3, 2), (std::vector<int32_t>{9, 9}));
  // Longest first: the 3-gram "3 5 6" has no earlier match, "5 6" does.
  EXPECT_EQ(NgramLookup(tokens, 2, 3, 4), (std::vector<int32_t>{9, 9, 3, 5}));
}

TEST(NgramLookupTest, NothingWithoutAMatchOrBelowTheMinimum) {
  EXPECT_TRUE(NgramLookup({1, 2, 3, 4}, 1, 3, 4).empty());
  // Only a 1-gram matches, and 2 is the minimum.
  EXPECT_TRUE(NgramLookup({7, 1, 2, 7}, 2, 3, 4).empty());
  EXPECT_EQ(NgramLookup({7, 1, 2, 7}, 1, 3, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(NgramLookup({7}, 1, 3, 4).empty());
  EXPECT_TRUE(NgramLookup({7, 7, 7}, 1, 3, 0).empty());
}

TEST(NgramLookupTest, ACycleIsProposedForAllTokens) {
  // The match ends right before the suffix: its continuation runs into the proposal.
  EXPECT_EQ(NgramLookup({4, 4, 4}, 1, 2, 5), (std::vector<int32_t>{4, 4, 4, 4, 4}));
  EXPECT_EQ(NgramLookup({0, 1, 2, 1, 2}, 2, 2, 5), (std::vector<int32_t>{1, 2, 1, 2, 1}));
}

TEST(NgramProposerTest, OneProposalPerRequestWithinItsBudget) {
  NgramProposer proposer(1, 3);
  const std::vector<int32_t> a = {1, 2, 3, 1, 2};
  const std::vector<int32_t> b = {5, 6, 7};
  std::vector<ProposalRequest> asks(2);
  asks[0].tokens = a;
  asks[0].max_tokens = 1;
  asks[1].tokens = b;
  asks[1].max_tokens = 4;
  auto out = proposer.Propose(asks);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].tokens, (std::vector<int32_t>{3}));
  EXPECT_TRUE((*out)[1].tokens.empty());
  EXPECT_TRUE((*out)[0].distributions.empty());
}

}  // namespace
}  // namespace tessera
