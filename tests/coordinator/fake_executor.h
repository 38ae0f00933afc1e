#ifndef TESSERA_TESTS_COORDINATOR_FAKE_EXECUTOR_H_
#define TESSERA_TESTS_COORDINATOR_FAKE_EXECUTOR_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "coordinator/scheduler/sequence.h"
#include "coordinator/scheduler/step_plan.h"
#include "gtest/gtest.h"

namespace tessera::sched::testing {

// The fake "model". Like real KV, which depends on every earlier token, the fake KV of a
// position is a hash of the whole prefix up to it; the next token is a function of the
// last position's KV. So any wrong KV (a bad prefix hit, a block overwritten while shared,
// a token lost to preemption) changes the output.
inline uint64_t ExtendPrefixHash(uint64_t h, int32_t token) {
  return (h ^ static_cast<uint32_t>(token)) * 1099511628211ULL;
}
inline constexpr uint64_t kEmptyPrefixHash = 1469598103934665603ULL;

inline int32_t TokenFromKv(uint64_t last_prefix_hash, int vocab_size) {
  const uint64_t h = last_prefix_hash ^ (last_prefix_hash >> 29);
  return static_cast<int32_t>(h % static_cast<uint64_t>(vocab_size));
}

inline int32_t NextToken(absl::Span<const int32_t> tokens, int vocab_size) {
  uint64_t h = kEmptyPrefixHash;
  for (int32_t t : tokens) h = ExtendPrefixHash(h, t);
  return TokenFromKv(h, vocab_size);
}

// What a request generates when it runs alone: the reference for every schedule.
struct Reference {
  std::vector<int32_t> output;
  FinishReason reason = FinishReason::kLength;
};

inline Reference GenerateAlone(std::vector<int32_t> tokens, const RequestOptions& options,
                               const std::vector<int32_t>& eos_ids, int vocab_size) {
  auto contains = [](const std::vector<int32_t>& v, int32_t x) {
    for (int32_t y : v) if (y == x) return true;
    return false;
  };
  Reference ref;
  while (true) {
    const int32_t t = NextToken(tokens, vocab_size);
    tokens.push_back(t);
    ref.output.push_back(t);
    const int n = static_cast<int>(ref.output.size());
    if (n >= options.min_new_tokens) {
      if (!options.ignore_eos && contains(eos_ids, t)) { ref.reason = FinishReason::kEos; break; }
      if (contains(options.stop_token_ids, t)) { ref.reason = FinishReason::kStop; break; }
    }
    if (n >= options.max_new_tokens) { ref.reason = FinishReason::kLength; break; }
  }
  return ref;
}

// Plays the workers of one replica: rebuilds each sequence from the plan's diffs, keeps a
// fake KV cache (prefix hash and position in each slot) and host tier, checks that the KV
// a sequence relies on is really there, and samples from the KV it reads back.
class FakeExecutor {
 public:
  FakeExecutor(int num_blocks, int block_size, int vocab_size, int num_host_blocks = 0)
      : block_size_(block_size), vocab_size_(vocab_size),
        kv_(static_cast<size_t>(num_blocks) * block_size, {0, -1}),
        host_(static_cast<size_t>(num_host_blocks) * block_size, {0, -1}) {}

  StepResult Execute(const StepPlan& plan) {
    StepResult result;
    result.step_id = plan.step_id;
    // As a worker does: saves, then loads, then the step.
    for (const KvCopy& c : plan.host_copies.to_host) CopyBlock(kv_, c.block_id, host_, c.host_slot);
    for (const KvCopy& c : plan.host_copies.from_host) CopyBlock(host_, c.host_slot, kv_, c.block_id);
    for (SeqId id : plan.finished_ids) EXPECT_EQ(seqs_.erase(id), 1u) << "finished " << id;
    for (SeqId id : plan.preempted_ids) EXPECT_EQ(seqs_.erase(id), 1u) << "preempted " << id;
    for (const NewSeqData& d : plan.new_seqs) {
      EXPECT_FALSE(seqs_.contains(d.seq_id)) << "new sequence already held " << d.seq_id;
      seqs_[d.seq_id] = {d.token_ids, d.block_ids, d.num_computed_tokens};
      Run(d.seq_id, d.num_computed_tokens, d.num_scheduled_tokens, d.samples_token,
          d.num_lookahead_tokens, result);
    }
    for (const CachedSeqData& d : plan.cached_seqs) {
      auto it = seqs_.find(d.seq_id);
      if (it == seqs_.end()) {
        ADD_FAILURE() << "cached sequence unknown to the worker " << d.seq_id;
        continue;
      }
      WorkerSeq& s = it->second;
      s.tokens.insert(s.tokens.end(), d.new_token_ids.begin(), d.new_token_ids.end());
      s.blocks.insert(s.blocks.end(), d.new_block_ids.begin(), d.new_block_ids.end());
      // With speculation the worker computed proposals it then learnt were rejected; the
      // scheduler's count (what is verified) is the one that holds.
      EXPECT_LE(d.num_computed_tokens, s.num_computed) << "sequence " << d.seq_id;
      s.num_computed = d.num_computed_tokens;
      Run(d.seq_id, d.num_computed_tokens, d.num_scheduled_tokens, d.samples_token,
          d.num_lookahead_tokens, result);
    }
    return result;
  }

  int num_held() const { return static_cast<int>(seqs_.size()); }

  // A KV transfer between replicas: block `from` of this executor's cache into block `to`
  // of `dest`'s.
  void SendBlock(BlockId from, FakeExecutor& dest, BlockId to) const { CopyBlock(kv_, from, dest.kv_, to); }

 private:
  struct WorkerSeq {
    std::vector<int32_t> tokens;
    std::vector<BlockId> blocks;
    int num_computed = 0;
  };
  struct Cell {
    uint64_t prefix_hash;
    int32_t position;
  };

  void CopyBlock(const std::vector<Cell>& from, int from_block, std::vector<Cell>& to, int to_block) const {
    const size_t a = static_cast<size_t>(from_block) * block_size_;
    const size_t b = static_cast<size_t>(to_block) * block_size_;
    ASSERT_LE(a + block_size_, from.size()) << "copy from block/slot " << from_block;
    ASSERT_LE(b + block_size_, to.size()) << "copy to block/slot " << to_block;
    std::copy(from.begin() + a, from.begin() + a + block_size_, to.begin() + b);
  }

  Cell& At(const WorkerSeq& s, int pos) {
    return kv_[static_cast<size_t>(s.blocks[pos / block_size_]) * block_size_ +
               pos % block_size_];
  }

  void Run(SeqId id, int num_computed, int num_scheduled, bool samples, int lookahead,
           StepResult& result) {
    WorkerSeq& s = seqs_[id];
    const int end = num_computed + num_scheduled;
    ASSERT_LE(end, static_cast<int>(s.tokens.size())) << "sequence " << id;
    ASSERT_LE(end, static_cast<int>(s.blocks.size()) * block_size_) << "sequence " << id;
    uint64_t h = kEmptyPrefixHash;
    for (int pos = 0; pos < end; ++pos) {
      h = ExtendPrefixHash(h, s.tokens[pos]);
      Cell& cell = At(s, pos);
      if (pos >= num_computed) {
        cell = {h, pos};
      } else {
        ASSERT_TRUE(cell.prefix_hash == h && cell.position == pos)
            << "sequence " << id << " relies on wrong KV at position " << pos;
      }
    }
    s.num_computed = end;
    EXPECT_EQ(samples, end == static_cast<int>(s.tokens.size())) << "sequence " << id;
    if (!samples) return;
    if (lookahead == 0) {
      result.sampled.push_back({id, TokenFromKv(At(s, end - 1).prefix_hash, vocab_size_)});
      return;
    }
    // Speculation, as a worker does it: up to `lookahead` proposals (right for a
    // pseudo-random number of them, then wrong) get their KV written in the reserved
    // slots, then each row's prediction (from the KV just written) verifies the next one.
    ASSERT_LE(end + lookahead, static_cast<int>(s.blocks.size()) * block_size_)
        << "sequence " << id << ": lookahead slots without blocks";
    const uint64_t coin = ExtendPrefixHash(ExtendPrefixHash(h, id), end);
    const int num_proposed = static_cast<int>(coin % (lookahead + 1));
    const int num_right = static_cast<int>((coin >> 8) % (num_proposed + 1));
    std::vector<int32_t> proposal;
    uint64_t ph = h;
    for (int j = 0; j < num_proposed; ++j) {
      const int32_t truth = TokenFromKv(ph, vocab_size_);
      proposal.push_back(j < num_right ? truth : (truth + 1) % vocab_size_);
      ph = ExtendPrefixHash(ph, proposal.back());
      At(s, end + j) = {ph, end + j};
    }
    for (int j = 0; j <= num_proposed; ++j) {
      const int32_t predicted = TokenFromKv(At(s, end - 1 + j).prefix_hash, vocab_size_);
      result.sampled.push_back({id, predicted});
      if (j == num_proposed || proposal[j] != predicted) break;
    }
    s.num_computed = end + num_proposed;
  }

  const int block_size_;
  const int vocab_size_;
  std::vector<Cell> kv_;
  std::vector<Cell> host_;
  absl::flat_hash_map<SeqId, WorkerSeq> seqs_;
};

}  // namespace tessera::sched::testing

#endif  // TESSERA_TESTS_COORDINATOR_FAKE_EXECUTOR_H_
