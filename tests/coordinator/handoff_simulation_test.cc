// Disaggregated prefill and decode, randomized: a prefill replica and a decode replica,
// each a scheduler with its fake executor, and KV transfers between them that take a few
// steps, sometimes fail (the decode side recomputes) and sometimes find the decode replica
// full (the prefill side decodes after all). With cancellations everywhere and pools small
// enough to preempt, every request's output must equal what it generates alone, and every
// block must be accounted for after every step on both sides.
#include <algorithm>
#include <cstdio>
#include <deque>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "coordinator/scheduler/scheduler.h"
#include "gtest/gtest.h"
#include "tests/coordinator/fake_executor.h"
#include "tests/coordinator/scheduler_invariants.h"

namespace tessera::sched {
namespace {

constexpr int kVocab = 64;
constexpr int kNumRequests = 2000;
constexpr int kMaxSteps = 100000;

struct Tracked {
  testing::Reference reference;
  RequestOptions options;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  std::optional<FinishReason> reason;
  bool on_decode = false;
};

struct Transfer {
  SeqId id;
  Handoff handoff;
  int lands_at_step;
  bool fails;
};

struct Replica {
  SchedulerConfig config;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<testing::FakeExecutor> exec;
  absl::flat_hash_set<SeqId> live;  // Sequences this scheduler knows.
};

Replica MakeReplica(int max_num_seqs, int num_speculative_tokens, int num_host_blocks) {
  const int num_blocks = 40;  // 39 usable blocks of 4 tokens; a request needs up to 20.
  Replica r;
  r.config.num_blocks = num_blocks;
  r.config.block_size = 4;
  r.config.max_num_batched_tokens = 32;
  r.config.max_num_seqs = max_num_seqs;
  r.config.long_prefill_token_threshold = 12;
  r.config.eos_token_ids = {0};
  r.config.num_speculative_tokens = num_speculative_tokens;
  r.config.num_host_blocks = num_host_blocks;
  auto created = Scheduler::Create(r.config);
  EXPECT_TRUE(created.ok()) << created.status();
  r.scheduler = std::move(*created);
  r.exec = std::make_unique<testing::FakeExecutor>(num_blocks, r.config.block_size, kVocab, num_host_blocks);
  return r;
}

struct SimParams {
  const char* name;
  int num_speculative_tokens;  // On the decode replica.
  int num_host_blocks;         // On both.
};

class HandoffSimulationTest : public ::testing::TestWithParam<SimParams> {};

TEST_P(HandoffSimulationTest, OutputsMatchRunningAloneAndNoBlockLeaks) {
  const SimParams& params = GetParam();
  // Fewer seats on the decode side, so handoffs sometimes wait and sometimes give up.
  Replica prefill = MakeReplica(8, 0, params.num_host_blocks);
  Replica decode = MakeReplica(5, params.num_speculative_tokens, params.num_host_blocks);
  std::mt19937_64 rng(20261207 + params.num_speculative_tokens);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  std::vector<std::vector<int32_t>> stems(5);
  for (auto& stem : stems) {
    stem.resize(uniform(8, 30));
    for (int32_t& t : stem) t = uniform(1, kVocab - 1);
  }

  absl::flat_hash_map<SeqId, Tracked> tracked;
  std::deque<SeqId> held;  // Handed off, waiting for room on the decode replica.
  absl::flat_hash_map<SeqId, int> held_since;
  std::vector<Transfer> transfers;
  int num_handoffs = 0, num_failed = 0, num_resumed = 0, num_cancelled = 0;

  auto finish = [&](Replica& r, SeqId id, FinishReason reason) {
    tracked[id].reason = reason;
    r.live.erase(id);
  };
  auto cancel_random = [&] {
    Replica& picked = chance(0.5) ? prefill : decode;
    if (picked.live.empty()) return;
    // Sorted: a hash set's order changes from process to process, the run must not.
    std::vector<SeqId> ids(picked.live.begin(), picked.live.end());
    std::sort(ids.begin(), ids.end());
    const SeqId id = ids[uniform(0, static_cast<int>(ids.size()) - 1)];
    if (tracked[id].reason.has_value()) return;  // Finished, its transfer still running.
    // As the engine does: once handed off, a request belongs to its decode replica.
    Replica& r = tracked[id].on_decode ? decode : prefill;
    ASSERT_TRUE(r.scheduler->Abort(id).ok()) << id;
    ++num_cancelled;
    tracked[id].reason = FinishReason::kCancelled;
    // A sequence whose KV is still arriving stays known until the transfer ends.
    const Sequence* seq = r.scheduler->GetSequence(id);
    if (seq == nullptr) r.live.erase(id);
    std::erase(held, id);
  };
  auto apply = [&](Replica& r, const std::vector<SeqEvent>& events) {
    for (const SeqEvent& e : events) {
      Tracked& t = tracked[e.seq_id];
      ASSERT_FALSE(t.reason.has_value()) << "event after the end of " << e.seq_id;
      t.output.insert(t.output.end(), e.new_token_ids.begin(), e.new_token_ids.end());
      if (e.finish_reason.has_value()) finish(r, e.seq_id, *e.finish_reason);
      if (e.handed_off) {
        held.push_back(e.seq_id);
        held_since[e.seq_id] = 0;
      }
    }
  };
  auto step = [&](Replica& r) {
    if (!r.scheduler->HasWork()) return;
    StepPlan plan = r.scheduler->Schedule();
    ASSERT_NO_FATAL_FAILURE(testing::CheckPlan(plan, r.config));
    StepResult result = r.exec->Execute(plan);
    ASSERT_FALSE(::testing::Test::HasFailure());
    auto events = r.scheduler->Update(result);
    ASSERT_TRUE(events.ok()) << events.status();
    apply(r, *events);
  };

  SeqId next_id = 0;
  int s = 0;
  for (; s < kMaxSteps; ++s) {
    if (next_id < kNumRequests && chance(0.3)) {
      Request r;
      r.seq_id = next_id++;
      if (chance(0.6)) {
        const auto& stem = stems[uniform(0, static_cast<int>(stems.size()) - 1)];
        r.prompt_token_ids.assign(stem.begin(), stem.begin() + uniform(1, stem.size()));
      }
      for (int n = uniform(r.prompt_token_ids.empty() ? 1 : 0, 20); n > 0; --n) {
        r.prompt_token_ids.push_back(uniform(1, kVocab - 1));
      }
      r.options.max_new_tokens = uniform(1, 30);
      if (chance(0.2)) r.options.min_new_tokens = uniform(0, r.options.max_new_tokens);
      r.options.ignore_eos = chance(0.1);
      if (chance(0.3)) r.options.stop_token_ids = {uniform(1, kVocab - 1)};
      Tracked& t = tracked[r.seq_id];
      t.reference = testing::GenerateAlone(r.prompt_token_ids, r.options, {0}, kVocab);
      t.options = r.options;
      t.prompt = r.prompt_token_ids;
      r.options.prefill_only = true;
      prefill.live.insert(r.seq_id);
      ASSERT_TRUE(prefill.scheduler->AddRequest(std::move(r)).ok());
    }
    if (chance(0.01)) {
      ASSERT_NO_FATAL_FAILURE(cancel_random());
    }

    // Held sequences go to the decode replica when it has room; one that waits too long
    // decodes where it is.
    for (size_t i = 0; i < held.size();) {
      const SeqId id = held[i];
      const Tracked& t = tracked[id];
      Request r{id, t.prompt, t.options};
      auto handoff = decode.scheduler->AddHandoff(std::move(r), t.output);
      if (handoff.ok()) {
        decode.live.insert(id);
        tracked[id].on_decode = true;
        transfers.push_back({id, *handoff, s + uniform(0, 3), chance(0.1)});
        ++num_handoffs;
        held.erase(held.begin() + i);
        continue;
      }
      ASSERT_TRUE(absl::IsResourceExhausted(handoff.status())) << handoff.status();
      if (++held_since[id] > 4) {
        ASSERT_TRUE(prefill.scheduler->ResumeHeld(id).ok());
        ++num_resumed;
        held.erase(held.begin() + i);
        continue;
      }
      ++i;
    }
    // Transfers that land now: blocks copied (unless it fails), the sender's blocks released.
    for (size_t i = 0; i < transfers.size();) {
      const Transfer& x = transfers[i];
      if (x.lands_at_step > s) {
        ++i;
        continue;
      }
      if (!x.fails) {
        absl::Span<const BlockId> src = prefill.scheduler->kv_cache_manager().BlockTable(x.id);
        ASSERT_EQ(src.size(), x.handoff.first_block + x.handoff.block_ids.size()) << x.id;
        for (size_t b = 0; b < x.handoff.block_ids.size(); ++b) {
          prefill.exec->SendBlock(src[x.handoff.first_block + b], *decode.exec, x.handoff.block_ids[b]);
        }
      } else {
        ++num_failed;
      }
      const bool prefill_knows = prefill.scheduler->GetSequence(x.id) != nullptr;
      ASSERT_TRUE(prefill_knows) << x.id;  // Held until the transfer ends.
      ASSERT_TRUE(prefill.scheduler->ReleaseHeld(x.id).ok());
      prefill.live.erase(x.id);
      ASSERT_TRUE(decode.scheduler->HandoffDone(x.id, !x.fails).ok());
      if (decode.scheduler->GetSequence(x.id) == nullptr) decode.live.erase(x.id);  // Cancelled.
      transfers.erase(transfers.begin() + i);
    }
    if (next_id == kNumRequests && held.empty() && transfers.empty() && !prefill.scheduler->HasWork() &&
        !decode.scheduler->HasWork()) {
      break;
    }
    ASSERT_NO_FATAL_FAILURE(step(prefill));
    ASSERT_NO_FATAL_FAILURE(step(decode));
    if (chance(0.01)) {
      ASSERT_NO_FATAL_FAILURE(cancel_random());
    }
    ASSERT_NO_FATAL_FAILURE(testing::CheckBlocks(*prefill.scheduler, prefill.live));
    ASSERT_NO_FATAL_FAILURE(testing::CheckBlocks(*decode.scheduler, decode.live));
  }
  ASSERT_LT(s, kMaxSteps);

  int num_on_decode = 0;
  for (const auto& [id, t] : tracked) {
    ASSERT_TRUE(t.reason.has_value()) << "sequence " << id << " never finished";
    num_on_decode += t.on_decode;
    if (*t.reason == FinishReason::kCancelled) {
      ASSERT_LE(t.output.size(), t.reference.output.size()) << id;
      ASSERT_TRUE(std::equal(t.output.begin(), t.output.end(), t.reference.output.begin())) << id;
    } else {
      ASSERT_EQ(t.output, t.reference.output) << "sequence " << id;
      ASSERT_EQ(*t.reason, t.reference.reason) << "sequence " << id;
    }
  }
  for (Replica* r : {&prefill, &decode}) {
    const SchedulerStats stats = r->scheduler->stats();
    EXPECT_EQ(stats.num_free_blocks, stats.num_usable_blocks);
    EXPECT_EQ(stats.num_held + stats.num_transferring, 0);
    EXPECT_EQ(r->exec->num_held(), 0);
  }
  std::printf("[%s] %d steps: %d handoffs (%d failed, recomputed), %d resumed on the prefill replica, %d cancelled; "
              "decode replica: %lld preemptions, %lld/%lld prefix tokens hit\n",
              params.name, s, num_handoffs, num_failed, num_resumed, num_cancelled,
              static_cast<long long>(decode.scheduler->stats().num_preemptions),
              static_cast<long long>(decode.scheduler->stats().prefix_cache_hit_tokens),
              static_cast<long long>(decode.scheduler->stats().prefix_cache_queried_tokens));
  // The run must exercise what it claims to.
  EXPECT_GT(num_handoffs, kNumRequests / 2);
  EXPECT_GT(num_on_decode, kNumRequests / 2);
  EXPECT_GT(num_failed, 0);
  EXPECT_GT(num_resumed, 0);
  EXPECT_GT(num_cancelled, 0);
  EXPECT_GT(decode.scheduler->stats().num_preemptions, 0);
  EXPECT_GT(decode.scheduler->stats().prefix_cache_hit_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(Configs, HandoffSimulationTest,
                         ::testing::Values(SimParams{"plain", 0, 0}, SimParams{"speculative_3_host_tier_16", 3, 16}),
                         [](const ::testing::TestParamInfo<SimParams>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tessera::sched
