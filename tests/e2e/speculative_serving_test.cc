// Speculative decoding end to end on stories260K: with prompt lookup (--speculative ngram)
// or a draft model (--speculative draft) the greedy output of every request is the one
// served without speculation, at tp 1 and tp 2, with requests batched together and with
// preemption forced by a small KV cache; and /metrics shows proposals being accepted.
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/e2e/http_get.h"
#include "tests/e2e/metrics_text.h"
#include "tests/e2e/serving_util.h"
#include "tests/support/cluster.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_model.h"
#include "tests/worker/test_expected.h"

namespace tessera::testing {
namespace {

// Prompts whose continuations repeat spans (stories260K retells what it was told), and
// plain ones where lookup mostly finds nothing.
const std::vector<std::string>& Prompts() {
  static const std::vector<std::string> prompts = {
      "Once upon a time",
      "Lily wanted to play with the ball. Lily wanted to play with the ball. Lily wanted to",
      "Tom had a red car. He liked his red car very much. One day his red car",
      "The sun was shining and the birds were singing.",
      "Once upon a time, there was a little girl named Lily. Once upon a time, there was a little",
      "The cat sat on the mat. The dog sat on the mat. The bird sat on the",
  };
  return prompts;
}

// Every prompt at once (so they batch), `copies` times each, greedy, `new_tokens` each.
std::vector<std::vector<int32_t>> GenerateAll(Cluster& cluster, int new_tokens, int copies) {
  const auto& prompts = Prompts();
  std::vector<std::vector<int32_t>> ids(prompts.size() * copies);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ids.size(); ++i) {
    threads.emplace_back([&, i] {
      const std::string& prompt = prompts[i % prompts.size()];
      const auto r = RunUnary(cluster.api(), GreedyText(prompt, new_tokens));
      EXPECT_TRUE(r.status.ok()) << prompt << ": " << r.status.error_message();
      ids[i] = r.ids();
    });
  }
  for (auto& t : threads) t.join();
  return ids;
}

std::unique_ptr<Cluster> Start(int tp, std::vector<std::string> flags, int64_t kv_mb = 16) {
  ClusterOptions options;
  options.kv_memory_mb = kv_mb;
  options.coordinator_flags = std::move(flags);
  return StartStories(tp, 1, std::move(options));
}

struct Served {
  std::vector<std::vector<int32_t>> ids;
  std::string metrics;
};

Served Serve(int tp, const std::vector<std::string>& flags, int new_tokens, int64_t kv_mb = 16,
             int copies = 1) {
  auto cluster = Start(tp, flags, kv_mb);
  if (cluster == nullptr) return {};
  auto before = cluster->ModelInfo();
  EXPECT_TRUE(before.ok()) << before.status();
  Served s;
  s.ids = GenerateAll(*cluster, new_tokens, copies);
  // Every block comes back, lookahead slots included (the engine publishes its gauges
  // once per loop, so give it a moment).
  uint32_t free_blocks = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (before.ok() && std::chrono::steady_clock::now() < deadline) {
    auto after = cluster->ModelInfo();
    if (after.ok()) free_blocks = after->replica_info(0).free_blocks();
    if (free_blocks == before->replica_info(0).free_blocks()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (before.ok()) EXPECT_EQ(free_blocks, before->replica_info(0).free_blocks());
  s.metrics = HttpGet(cluster->metrics_port(), "/metrics").body;
  if (::testing::Test::HasFailure()) ADD_FAILURE() << cluster->Logs();
  return s;
}

void ExpectSameOutputs(const Served& want, const Served& got) {
  ASSERT_EQ(want.ids.size(), got.ids.size());
  for (size_t i = 0; i < want.ids.size(); ++i) {
    EXPECT_EQ(want.ids[i], got.ids[i]) << Prompts()[i % Prompts().size()] << "\nwithout: " << absl::StrJoin(want.ids[i], " ")
                                       << "\nwith:    " << absl::StrJoin(got.ids[i], " ");
  }
}

// Accepted / proposed tokens, after checking that speculation ran at all.
double AcceptanceRate(const Served& s) {
  const double proposed = MetricSum(s.metrics, "tessera_spec_decode_num_draft_tokens_total");
  const double accepted = MetricSum(s.metrics, "tessera_spec_decode_num_accepted_tokens_total");
  EXPECT_GT(MetricSum(s.metrics, "tessera_spec_decode_num_drafts_total"), 0) << s.metrics;
  EXPECT_GT(proposed, 0);
  EXPECT_GT(accepted, 0);
  EXPECT_LE(accepted, proposed);
  std::printf("%s: %.0f of %.0f proposed tokens accepted\n",
              ::testing::UnitTest::GetInstance()->current_test_info()->name(), accepted, proposed);
  return proposed > 0 ? accepted / proposed : 0;
}

constexpr int kNewTokens = 60;

TEST(SpeculativeServingTest, PromptLookupKeepsGreedyOutputAtTp1And2) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const Served plain = Serve(1, {}, kNewTokens);
  ASSERT_EQ(plain.ids.size(), Prompts().size());
  // The reference implementation's continuation of the first prompt, as a fixed point.
  const std::vector<int32_t> reference = LoadExpected().generated_ids;
  ASSERT_GE(reference.size(), static_cast<size_t>(kNewTokens));
  EXPECT_EQ(plain.ids[0], std::vector<int32_t>(reference.begin(), reference.begin() + kNewTokens));
  for (int tp : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("tp ", tp));
    const Served spec = Serve(tp, {"--speculative=ngram", "--num-speculative-tokens=4", "--prompt-lookup-min=2"},
                              kNewTokens);
    ExpectSameOutputs(plain, spec);
    AcceptanceRate(spec);
    // Fewer steps than tokens: speculation saved forward passes.
    EXPECT_GT(MetricSum(spec.metrics, "tessera_spec_decode_acceptance_length_sum"),
              MetricSum(spec.metrics, "tessera_spec_decode_acceptance_length_count"));
  }
}

TEST(SpeculativeServingTest, DraftModelKeepsGreedyOutputAtTp1And2) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const Served plain = Serve(1, {}, kNewTokens);
  ASSERT_EQ(plain.ids.size(), Prompts().size());
  for (int tp : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("tp ", tp));
    // The model as its own draft: it proposes its own greedy continuation, so nearly
    // everything is accepted (float-order differences between batch shapes aside).
    const Served spec = Serve(tp,
                              {"--speculative=draft", "--num-speculative-tokens=3",
                               absl::StrCat("--draft-model=", StoriesModelDir().string())},
                              kNewTokens);
    ExpectSameOutputs(plain, spec);
    EXPECT_GT(AcceptanceRate(spec), 0.9);
  }
}

// A draft that disagrees now and then: stories260K's FP8 copy (written by the numpy
// writer of tests/worker; its greedy text leaves the float one after ~23 tokens). Its
// rejected proposals exercise the draft cache's re-feeding, and the output must still be
// the target's.
TEST(SpeculativeServingTest, DisagreeingDraftModelKeepsGreedyOutput) {
  TESSERA_REQUIRE_STORIES_MODEL();
  const std::filesystem::path draft = ScratchDir("fp8-draft") / "stories260K-fp8";
  const CommandResult written = RunCommand(absl::StrCat(
      "python3 ", TESSERA_SOURCE_DIR, "/tests/worker/fp8_checkpoint.py --src ", StoriesModelDir().string(),
      " --out ", draft.string(), " --format compressed-tensors --strategy channel 2>&1"));
  ASSERT_EQ(written.exit_code, 0) << "fp8_checkpoint.py (needs numpy) failed:\n" << written.output;
  const Served plain = Serve(1, {}, kNewTokens);
  const Served spec = Serve(1,
                            {"--speculative=draft", "--num-speculative-tokens=4",
                             absl::StrCat("--draft-model=", draft.string())},
                            kNewTokens);
  ExpectSameOutputs(plain, spec);
  const double rate = AcceptanceRate(spec);
  EXPECT_LT(rate, 1.0) << "the FP8 draft was expected to disagree somewhere";
  EXPECT_GT(rate, 0.5);
}

TEST(SpeculativeServingTest, PreemptionKeepsGreedyOutput) {
  TESSERA_REQUIRE_STORIES_MODEL();
  // 1 MiB of KV holds about 50 blocks of 16 tokens on stories260K: twelve sequences of
  // up to 180 tokens do not fit at once, so some are preempted and recomputed.
  const int new_tokens = 160;
  const Served plain = Serve(1, {}, new_tokens, 16, /*copies=*/2);
  const Served spec = Serve(1, {"--speculative=ngram", "--num-speculative-tokens=5", "--prompt-lookup-min=1"},
                            new_tokens, /*kv_mb=*/1, /*copies=*/2);
  ExpectSameOutputs(plain, spec);
  EXPECT_GT(MetricSum(spec.metrics, "tessera_preemptions_total"), 0) << spec.metrics;
  AcceptanceRate(spec);
}

// Sampled requests (temperature, top-p, penalties, logprobs) go through rejection
// sampling on the workers: every request completes with its length, reproducibly for a
// seed, with a logprob per token. (That the distribution is kept is the unit tests'
// chi-square check, on the same verifier.)
TEST(SpeculativeServingTest, SampledRequestsAreReproducibleAndComplete) {
  TESSERA_REQUIRE_STORIES_MODEL();
  for (int tp : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("tp ", tp));
    auto cluster = Start(tp, {"--speculative=draft", "--num-speculative-tokens=3",
                              absl::StrCat("--draft-model=", StoriesModelDir().string())});
    ASSERT_NE(cluster, nullptr);
    auto request = [](uint64_t seed) {
      v1::GenerateRequest r = GreedyText(Prompts()[1], 40);
      r.mutable_sampling()->set_temperature(0.9f);
      r.mutable_sampling()->set_top_p(0.95f);
      r.mutable_sampling()->set_repetition_penalty(1.1f);
      r.mutable_sampling()->set_seed(seed);
      r.set_logprobs(1);
      return r;
    };
    std::vector<std::vector<int32_t>> first(4), second(4);
    for (auto* out : {&first, &second}) {
      std::vector<std::thread> threads;
      for (int i = 0; i < 4; ++i) {
        threads.emplace_back([&, i] {
          const StreamResult r = RunStream(cluster->api(), request(100 + i));
          EXPECT_TRUE(r.status.ok()) << r.status.error_message();
          EXPECT_EQ(r.ids.size(), 40u);
          EXPECT_EQ(r.logprobs.size(), r.ids.size());
          (*out)[i] = r.ids;
        });
      }
      for (auto& t : threads) t.join();
    }
    EXPECT_EQ(first, second) << "a seed must give the same tokens however requests batch";
    EXPECT_NE(first[0], first[1]) << "different seeds gave the same 40 tokens";
    const std::string metrics = HttpGet(cluster->metrics_port(), "/metrics").body;
    EXPECT_GT(MetricSum(metrics, "tessera_spec_decode_num_accepted_tokens_total"), 0) << metrics;
  }
}

TEST(SpeculativeServingTest, BadSpeculativeFlagsStopTheCoordinator) {
  TESSERA_REQUIRE_STORIES_MODEL();
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {"--speculative=medusa"},
           {"--speculative=draft"},
           {"--speculative=ngram", "--num-speculative-tokens=0"},
           {"--speculative=ngram", "--prompt-lookup-min=3", "--prompt-lookup-max=2"}}) {
    ClusterOptions options;
    options.model_dir = StoriesModelDir();
    options.log_dir = ScratchDir("bad-flags");
    options.coordinator_flags = flags;
    options.ready_timeout = std::chrono::seconds(15);
    auto cluster = Cluster::Start(std::move(options));
    EXPECT_FALSE(cluster.ok()) << absl::StrJoin(flags, " ");
  }
}

}  // namespace
}  // namespace tessera::testing
