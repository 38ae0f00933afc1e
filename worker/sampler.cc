#include "worker/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_map>

namespace tessera {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The seed of the draw for token `step`: the device sampler hashes it once more, as
// UniformForStep does, so both take their uniform from the same 64 bits.
uint64_t StepSeed(uint64_t seed, uint64_t step) {
  return seed ^ SplitMix64(step + 0x632be59bd9b4e019ull);
}

// A uniform draw in [0, 1) fixed by (seed, step).
double UniformForStep(uint64_t seed, uint64_t step) {
  const uint64_t bits = SplitMix64(StepSeed(seed, step));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

void ApplyPenalties(std::vector<float>& logits, const SamplingParams& p,
                    absl::Span<const int32_t> history, size_t output_start) {
  const int vocab = static_cast<int>(logits.size());
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(vocab, false);
    for (int32_t t : history) {
      if (t < 0 || t >= vocab || seen[t]) continue;
      seen[t] = true;
      logits[t] = logits[t] > 0 ? logits[t] / p.repetition_penalty
                                : logits[t] * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (size_t i = std::min(output_start, history.size()); i < history.size(); ++i) {
      ++counts[history[i]];
    }
    for (const auto& [t, c] : counts) {
      if (t < 0 || t >= vocab) continue;
      logits[t] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(c);
    }
  }
}

// log(sum(exp(x))) computed stably.
double LogSumExp(const std::vector<float>& x) {
  const float m = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - m);
  return m + std::log(sum);
}

}  // namespace

double TokenDistribution::Probability(int32_t id) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == id) return weights[i] / total;
  }
  return 0.0;
}

int32_t TokenDistribution::Draw(double u) const {
  const double target = u * total;
  double acc = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    acc += weights[i];
    if (target < acc) return ids[i];
  }
  return ids.back();
}

TokenDistribution SamplingDistribution(absl::Span<const float> raw, const SamplingParams& p,
                                       absl::Span<const int32_t> history, size_t output_start) {
  std::vector<float> logits(raw.begin(), raw.end());
  ApplyPenalties(logits, p, history, output_start);
  const int vocab = static_cast<int>(logits.size());
  TokenDistribution d;
  if (p.greedy()) {
    d.ids = {static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())};
    d.weights = {1.0};
    d.total = 1.0;
    return d;
  }
  // Candidates by descending logit, ties to the lower id; truncation keeps a prefix of
  // this order. Sorting 64-bit keys (the logit's order-preserving bits inverted, then the
  // id) instead of ids through a comparator is several times faster on a 150k vocabulary.
  // Tokens at -infinity (masked by a grammar) have no probability: they are left out
  // before sorting, which also makes a narrow grammar's step cheaper.
  std::vector<uint64_t> keys;
  keys.reserve(vocab);
  for (int i = 0; i < vocab; ++i) {
    if (logits[i] == -std::numeric_limits<float>::infinity()) continue;
    const float f = logits[i] == 0.0f ? 0.0f : logits[i];  // -0 and +0 tie, as they compare.
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    const uint32_t ascending = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
    keys.push_back((static_cast<uint64_t>(~ascending) << 32) | static_cast<uint32_t>(i));
  }
  if (keys.empty()) {  // Everything masked: the caller reports it; keep the draw defined.
    d.ids = {0};
    d.weights = {1.0};
    d.total = 1.0;
    return d;
  }
  const int candidates = static_cast<int>(keys.size());
  const int k = p.top_k > 0 ? std::min(p.top_k, candidates) : candidates;
  if (k < candidates) {
    std::nth_element(keys.begin(), keys.begin() + k, keys.end());
    keys.resize(k);
  }
  std::sort(keys.begin(), keys.end());
  std::vector<int32_t> order(k);
  for (int i = 0; i < k; ++i) order[i] = static_cast<int32_t>(keys[i] & 0xFFFFFFFFu);
  const double inv_t = 1.0 / p.temperature;
  const double top = logits[order[0]];
  std::vector<double> probs(k);
  double total = 0;
  for (int i = 0; i < k; ++i) {
    probs[i] = std::exp((logits[order[i]] - top) * inv_t);
    total += probs[i];
  }
  int keep = k;
  if (p.min_p > 0.0f) {
    // probs[0] is the largest: keep tokens with p >= min_p * p_max.
    while (keep > 1 && probs[keep - 1] < p.min_p * probs[0]) --keep;
  }
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (int i = 0; i < keep; ++i) {
      cum += probs[i] / total;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  d.ids.assign(order.begin(), order.begin() + keep);
  d.weights.assign(probs.begin(), probs.begin() + keep);
  for (int i = 0; i < keep; ++i) d.total += probs[i];
  return d;
}

double SamplingUniform(uint64_t seed, uint64_t step, uint64_t stream) {
  return UniformForStep(stream == 0 ? seed : seed ^ SplitMix64(stream), step);
}

void FillLogprobs(absl::Span<const float> raw, int n, SampledToken* out) {
  out->logprob = 0.0f;
  out->top_logprobs.clear();
  if (n <= 0) return;
  // Logprobs report the raw model distribution (log_softmax of `raw`), before penalties
  // and every sampling transform, as the public API documents.
  const std::vector<float> logits(raw.begin(), raw.end());
  const double lse = LogSumExp(logits);
  out->logprob = static_cast<float>(raw[out->id] - lse);
  const int vocab = static_cast<int>(raw.size());
  n = std::min(n, vocab);
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
    return raw[a] > raw[b] || (raw[a] == raw[b] && a < b);
  });
  for (int i = 0; i < n; ++i) {
    out->top_logprobs.emplace_back(ids[i], static_cast<float>(raw[ids[i]] - lse));
  }
}

SampledToken SampleToken(absl::Span<const float> raw, const SamplingParams& p,
                         absl::Span<const int32_t> history, size_t output_start, uint64_t step) {
  const TokenDistribution d = SamplingDistribution(raw, p, history, output_start);
  SampledToken out;
  out.id = p.greedy() ? d.ids[0] : d.Draw(UniformForStep(p.seed, step));
  FillLogprobs(raw, p.num_logprobs, &out);
  return out;
}

kernels::DeviceSamplingRow DeviceSamplingRowFor(const SamplingParams& p,
                                                absl::Span<const int32_t> history,
                                                size_t output_start, uint64_t step,
                                                std::vector<int32_t>* tokens,
                                                std::vector<int32_t>* output_counts) {
  kernels::DeviceSamplingRow row;
  row.temperature = p.temperature;
  row.top_k = p.top_k;
  row.top_p = p.top_p;
  row.min_p = p.min_p;
  row.seed = StepSeed(p.seed, step);
  row.repetition_penalty = p.repetition_penalty;
  row.presence_penalty = p.presence_penalty;
  row.frequency_penalty = p.frequency_penalty;
  row.penalty_begin = row.penalty_end = static_cast<int32_t>(tokens->size());
  const bool penalised = p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
                         p.frequency_penalty != 0.0f;
  if (!penalised) return row;
  // Distinct tokens in first-seen order; repetition applies to all of them, presence and
  // frequency to those the output holds (count > 0).
  std::unordered_map<int32_t, size_t> index;
  const size_t start = std::min(output_start, history.size());
  for (size_t i = 0; i < history.size(); ++i) {
    const int32_t t = history[i];
    auto [it, inserted] = index.emplace(t, tokens->size());
    if (inserted) {
      tokens->push_back(t);
      output_counts->push_back(0);
    }
    if (i >= start) ++(*output_counts)[it->second];
  }
  if (p.repetition_penalty == 1.0f) {
    // Only output tokens matter: drop the prompt-only entries.
    size_t kept = static_cast<size_t>(row.penalty_begin);
    for (size_t e = kept; e < tokens->size(); ++e) {
      if ((*output_counts)[e] > 0) {
        (*tokens)[kept] = (*tokens)[e];
        (*output_counts)[kept] = (*output_counts)[e];
        ++kept;
      }
    }
    tokens->resize(kept);
    output_counts->resize(kept);
  }
  row.penalty_end = static_cast<int32_t>(tokens->size());
  return row;
}

}  // namespace tessera
