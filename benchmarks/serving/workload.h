#ifndef TESSERA_BENCHMARKS_SERVING_WORKLOAD_H_
#define TESSERA_BENCHMARKS_SERVING_WORKLOAD_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::bench {

// One request to send: either token ids or text (tokenized by the server).
struct RequestSpec {
  std::vector<int32_t> prompt_ids;
  std::string prompt_text;
  bool is_text = false;
  int output_len = 0;  // max_new_tokens; sent with ignore_eos so exactly this many come back.
};

// Random prompt tokens are drawn uniformly from [first_id, vocab_size): ids below 3 are
// <unk>, <s> and </s> in the tokenizers Tessera ships and generates.
struct RandomTokens {
  int vocab_size = 0;
  int first_id = 3;
  uint64_t seed = 0;
};

// `num_requests` prompts of exactly `input_len` random tokens.
std::vector<RequestSpec> FixedLengthWorkload(int num_requests, int input_len, int output_len,
                                             const RandomTokens& tokens);

// `num_prefixes` random prefixes of `prefix_len` tokens, each followed by
// `suffixes_per_prefix` different random suffixes of `suffix_len` tokens: prefix-cache
// friendly traffic. The requests come in a seeded random order.
struct SharedPrefixOptions {
  int num_prefixes = 4;
  int suffixes_per_prefix = 4;
  int prefix_len = 256;
  int suffix_len = 32;
  int output_len = 64;
};
std::vector<RequestSpec> SharedPrefixWorkload(const SharedPrefixOptions& options,
                                              const RandomTokens& tokens);

// A JSON Lines file, one request a line: {"prompt": "text" | [token ids], "output_len": N}.
// `output_len` may be omitted when `default_output_len` > 0. Blank lines are skipped.
absl::StatusOr<std::vector<RequestSpec>> LoadJsonlWorkload(const std::filesystem::path& path,
                                                           int default_output_len);

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_SERVING_WORKLOAD_H_
