#include "common/tensor_parallel.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera {

Range EvenSplit(int64_t n, int rank, int world) {
  const int64_t base = n / world, extra = n % world;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

absl::StatusOr<ShardLayout> ShardLayout::Make(const ModelConfig& c, int rank, int world,
                                              bool expert_parallel) {
  if (world <= 0 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid tensor-parallel rank ", rank, " of world size ", world));
  }
  if (c.num_attention_heads % world != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp=", world, " does not divide num_attention_heads=",
                     c.num_attention_heads));
  }
  if (c.num_key_value_heads % world != 0 && world % c.num_key_value_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp=", world, " and num_key_value_heads=", c.num_key_value_heads,
                     ": one must divide the other"));
  }
  if (c.intermediate_size < world || c.vocab_size < world) {
    return absl::InvalidArgumentError(absl::StrCat("tp=", world, " is larger than the model"));
  }
  ShardLayout s;
  s.rank = rank;
  s.world = world;
  s.q_heads = EvenSplit(c.num_attention_heads, rank, world);
  if (c.num_key_value_heads >= world) {
    s.kv_heads = EvenSplit(c.num_key_value_heads, rank, world);
  } else {
    const int replicas = world / c.num_key_value_heads;
    const int64_t head = rank / replicas;
    s.kv_heads = {head, head + 1};
  }
  s.intermediate = EvenSplit(c.intermediate_size, rank, world);
  s.vocab = EvenSplit(c.vocab_size, rank, world);
  if (!c.is_moe()) {
    if (expert_parallel) {
      return absl::InvalidArgumentError(
          "expert parallelism needs a mixture-of-experts model; this one is dense");
    }
    return s;
  }
  const MoeConfig& m = c.moe;
  s.expert_parallel = expert_parallel;
  if (expert_parallel) {
    if (m.num_experts % world != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expert parallelism over ", world, " ranks needs num_experts to be a multiple of ",
          world, ": ", m.num_experts, " experts would leave ", m.num_experts % world,
          " over (", m.num_experts / world, " or ", m.num_experts / world + 1,
          " per rank); use another tp or tensor-parallel experts"));
    }
    s.experts = EvenSplit(m.num_experts, rank, world);
    s.expert_intermediate = {0, m.intermediate_size};
  } else {
    if (m.intermediate_size < world) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tp=", world, " is larger than the experts' intermediate size ", m.intermediate_size,
          "; use expert parallelism"));
    }
    s.experts = {0, m.num_experts};
    s.expert_intermediate = EvenSplit(m.intermediate_size, rank, world);
  }
  if (m.shared_intermediate_size > 0) {
    if (m.shared_intermediate_size < world) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tp=", world, " is larger than the shared expert's intermediate size ",
          m.shared_intermediate_size));
    }
    s.shared_intermediate = EvenSplit(m.shared_intermediate_size, rank, world);
  }
  return s;
}

std::vector<int> ValidTensorParallelSizes(const ModelConfig& config, bool expert_parallel,
                                          int max_world) {
  std::vector<int> sizes;
  for (int world = 1; world <= max_world; ++world) {
    if (ShardLayout::Make(config, 0, world, expert_parallel).ok()) sizes.push_back(world);
  }
  return sizes;
}

absl::Status WithValidTensorParallelSizes(const absl::Status& status, const ModelConfig& config,
                                          bool expert_parallel) {
  if (status.ok()) return status;
  const std::vector<int> sizes = ValidTensorParallelSizes(config, expert_parallel);
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), " (tp that would work: ",
                                   absl::StrJoin(sizes, ", "), ")"));
}

}  // namespace tessera
