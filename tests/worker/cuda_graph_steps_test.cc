// Every kind of step on CUDA graphs (worker/graph_batch.h): prefill, mixed, speculative
// verification and decode steps replay captured graphs and give the logits the eager
// forward pass gives, on stories260K with float32 activations; and the warm-up captures
// the decode graphs before the first step. Skips where no device is usable.
#include <stdlib.h>

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_model.h"
#include "tests/worker/step_scenarios.h"
#include "worker/backend_factory.h"
#include "worker/communicator.h"
#include "worker/llama_model.h"

namespace tessera {
namespace {

constexpr int kBlocks = 64;

class CudaGraphStepsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_STORIES_MODEL();
    ::setenv("TESSERA_CUDA_ACTIVATIONS", "f32", 1);
    auto backend = MakeBackend("cuda", 0);
    ::unsetenv("TESSERA_CUDA_ACTIVATIONS");
    if (!backend.ok()) GTEST_SKIP() << "no usable CUDA device: " << backend.status();
    backend_ = std::move(*backend);
    ASSERT_TRUE(backend_->SupportsGraphs());
    for (auto* model : {&eager_, &graphs_}) {
      auto m = LlamaModel::Load(testing::StoriesModelDir(), backend_.get(), &comm_);
      ASSERT_TRUE(m.ok()) << m.status();
      *model = std::move(*m);
    }
    eager_->set_graphs_enabled(false);
  }

  std::unique_ptr<KvCache> Cache(LlamaModel& model) {
    auto cache = model.CreateKvCache(kBlocks, 16);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? std::move(*cache) : nullptr;
  }

  std::unique_ptr<kernels::Backend> backend_;
  SingleRankCommunicator comm_;
  std::unique_ptr<LlamaModel> eager_, graphs_;
};

TEST_F(CudaGraphStepsTest, EveryKindOfStepReplaysAGraphWithTheEagerLogits) {
  auto eager_cache = Cache(*eager_);
  auto graph_cache = Cache(*graphs_);
  ASSERT_NE(eager_cache, nullptr);
  ASSERT_NE(graph_cache, nullptr);
  // As the worker does before serving: the backend's scratch is grown first, so no capture
  // is lost to a buffer that moves.
  auto warm = graphs_->WarmUp(graph_cache.get(), /*max_num_seqs=*/8, /*max_num_tokens=*/256,
                              /*max_num_logits=*/16);
  ASSERT_TRUE(warm.ok()) << warm.status();
  const size_t vocab = graphs_->config().vocab_size;
  // The first round captures a graph per shape (the decode one exists already); the later
  // rounds, over other sequences of the same shapes, replay them.
  ForwardCounts before_last;
  for (int round = 0; round < 3; ++round) {
    if (round == 2) before_last = graphs_->forward_counts();
    for (const auto& [what, step] : testing::FourStepScenario(round)) {
      SCOPED_TRACE(what + " round " + std::to_string(round));
      std::vector<float> want, got;
      ASSERT_TRUE(eager_->Forward(step, eager_cache.get(), &want).ok());
      const absl::Status s = graphs_->Forward(step, graph_cache.get(), &got);
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_EQ(got.size(), want.size());
      const testing::RowComparison c =
          testing::CompareRows(want, got, step.logits_rows.size(), vocab);
      EXPECT_LT(c.worst, 1e-3f);
      EXPECT_TRUE(c.same_argmax);
    }
  }
  // The last round replayed every step: one prefill, two mixed (the mixed step and the
  // verification, which has decodes too) and one decode.
  const ForwardCounts& after = graphs_->forward_counts();
  const int64_t want_replays[3] = {1, 2, 1};
  for (int k = 0; k < 3; ++k) {
    SCOPED_TRACE(ForwardCounts::kKinds[k]);
    EXPECT_EQ(after.replayed[k] - before_last.replayed[k], want_replays[k]);
    EXPECT_EQ(after.captured[k] - before_last.captured[k], 0);
    EXPECT_EQ(after.eager[k] - before_last.eager[k], 0);
  }
  const ForwardCounts& eager = eager_->forward_counts();
  EXPECT_EQ(eager.replayed[0] + eager.replayed[1] + eager.replayed[2], 0);
}

TEST_F(CudaGraphStepsTest, WarmUpCapturesTheDecodeGraphsBeforeTheFirstStep) {
  auto cache = Cache(*graphs_);
  ASSERT_NE(cache, nullptr);
  auto report = graphs_->WarmUp(cache.get(), /*max_num_seqs=*/8, /*max_num_tokens=*/256,
                                /*max_num_logits=*/8);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->graphs_captured, 4);  // 1, 2, 4 and 8 sequences.
  EXPECT_GT(report->workspace_bytes, 0u);
  EXPECT_GT(report->seconds, 0);
  // Three decoding sequences replay the four-sequence graph at once.
  auto steps = testing::FourStepScenario();
  std::vector<float> logits;
  for (const auto& [what, step] : steps) {
    ASSERT_TRUE(graphs_->Forward(step, cache.get(), &logits).ok()) << what;
  }
  const ForwardCounts& counts = graphs_->forward_counts();
  EXPECT_EQ(counts.replayed[0], 1);
  EXPECT_EQ(counts.captured[0], 0);
  EXPECT_EQ(counts.eager[0], 0);
}

}  // namespace
}  // namespace tessera
