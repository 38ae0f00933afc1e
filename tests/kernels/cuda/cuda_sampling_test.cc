// Sampling kernels: greedy against a host argmax, and the properties a user relies on for
// temperature / top-k / top-p draws (support, frequencies, determinism per seed).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/launchers.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace tessera::kernels::cuda_testing {
namespace {

using gpu::SamplingRowParams;

class CudaSamplingTest : public CudaVsCpuTest {
 protected:
  // Samples every row of `logits` ([rows, vocab]) with the given parameters.
  std::vector<int32_t> Sample(const std::vector<float>& logits, int vocab,
                              const std::vector<SamplingRowParams>& params,
                              std::vector<float>* logprobs = nullptr) {
    const int rows = static_cast<int>(params.size());
    DeviceArray<float> d_logits(logits);
    DeviceArray<int32_t> d_tokens(rows);
    DeviceArray<float> d_logprobs(rows);
    const absl::Status status =
        cuda_->Sample(d_logits.get(), rows, vocab, params, d_tokens.get(), d_logprobs.get());
    EXPECT_TRUE(status.ok()) << status;
    if (logprobs != nullptr) *logprobs = d_logprobs.ToHost();
    return d_tokens.ToHost();
  }
};

// log-softmax of row `r` at `token`, in double.
double HostLogProb(const std::vector<float>& logits, int vocab, int r, int token) {
  const float* row = logits.data() + static_cast<size_t>(r) * vocab;
  const double max = *std::max_element(row, row + vocab);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(row[i] - max);
  return row[token] - max - std::log(sum);
}

TEST_F(CudaSamplingTest, GreedyIsArgmaxWithLowestIndexOnTies) {
  const int rows = 17;
  const int vocab = 32000 + 7;
  std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * vocab, 41, -10.0f, 10.0f);
  // Row 1: a tie between two maxima; the lower index must win.
  logits[1 * vocab + 500] = 50.0f;
  logits[1 * vocab + 20000] = 50.0f;
  // Row 2: the maximum in the very last element.
  logits[2 * vocab + vocab - 1] = 60.0f;
  DeviceArray<float> d_logits(logits);
  DeviceArray<int32_t> d_tokens(rows);
  DeviceArray<float> d_logprobs(rows);
  ASSERT_TRUE(cuda_->SampleGreedy(d_logits.get(), rows, vocab, d_tokens.get(),
                                  d_logprobs.get()).ok());
  const std::vector<int32_t> tokens = d_tokens.ToHost();
  const std::vector<float> logprobs = d_logprobs.ToHost();
  for (int r = 0; r < rows; ++r) {
    const float* row = logits.data() + static_cast<size_t>(r) * vocab;
    const int expected = static_cast<int>(std::max_element(row, row + vocab) - row);
    EXPECT_EQ(tokens[r], expected) << "row " << r;
    EXPECT_NEAR(logprobs[r], HostLogProb(logits, vocab, r, expected), 1e-4) << "row " << r;
  }
  EXPECT_EQ(tokens[1], 500);
  EXPECT_EQ(tokens[2], vocab - 1);

  // Temperature 0 in Sample means greedy too.
  std::vector<SamplingRowParams> params(rows);
  for (auto& p : params) p.temperature = 0.0f;
  EXPECT_EQ(Sample(logits, vocab, params), tokens);
}

TEST_F(CudaSamplingTest, TopKOneIsGreedy) {
  const int rows = 17;
  const int vocab = 1000;
  const std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * vocab, 42);
  std::vector<SamplingRowParams> params(rows);
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = 1.5f;
    params[r].top_k = 1;
    params[r].seed = 1000 + r;
  }
  const std::vector<int32_t> tokens = Sample(logits, vocab, params);
  for (int r = 0; r < rows; ++r) {
    const float* row = logits.data() + static_cast<size_t>(r) * vocab;
    EXPECT_EQ(tokens[r], std::max_element(row, row + vocab) - row) << "row " << r;
  }
}

// 1,000 copies of one row, each with its own seed: draws stay inside the top-k set, every
// member shows up, and the same seeds give the same draws.
TEST_F(CudaSamplingTest, TopKSupportFrequenciesAndDeterminism) {
  const int rows = 1000;
  const int vocab = 5000;
  std::vector<float> row = RandomFloats(vocab, 43, -5.0f, 0.0f);
  const std::vector<int> top = {17, 4999, 0, 2500, 1234};  // Nearly equal, well above the rest.
  for (size_t i = 0; i < top.size(); ++i) row[top[i]] = 10.0f - 0.1f * i;
  std::vector<float> logits;
  for (int r = 0; r < rows; ++r) logits.insert(logits.end(), row.begin(), row.end());
  std::vector<SamplingRowParams> params(rows);
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = 1.0f;
    params[r].top_k = 5;
    params[r].seed = 7919u * r + 1;
  }
  const std::vector<int32_t> tokens = Sample(logits, vocab, params);
  std::vector<int> counts(top.size(), 0);
  for (int32_t t : tokens) {
    const auto it = std::find(top.begin(), top.end(), t);
    ASSERT_NE(it, top.end()) << "token " << t << " is outside the top 5";
    ++counts[it - top.begin()];
  }
  // Probabilities are about 0.22 .. 0.18 each; 100 of 1,000 is far outside chance.
  for (size_t i = 0; i < top.size(); ++i) EXPECT_GT(counts[i], 100) << "token " << top[i];
  EXPECT_EQ(Sample(logits, vocab, params), tokens);
}

// Probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.7 keeps the first two (0.5 < 0.7 <= 0.8), so
// token 0 comes up 0.5 / 0.8 = 62.5% of the time.
TEST_F(CudaSamplingTest, TopPKeepsTheSmallestSetReachingP) {
  const int rows = 2000;
  const int vocab = 4;
  const std::vector<float> row = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                  std::log(0.05f)};
  std::vector<float> logits;
  for (int r = 0; r < rows; ++r) logits.insert(logits.end(), row.begin(), row.end());
  std::vector<SamplingRowParams> params(rows);
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = 1.0f;
    params[r].top_p = 0.7f;
    params[r].seed = 104729u * r + 3;
  }
  const std::vector<int32_t> tokens = Sample(logits, vocab, params);
  int zeros = 0;
  for (int32_t t : tokens) {
    ASSERT_TRUE(t == 0 || t == 1) << "token " << t << " is outside the nucleus";
    zeros += t == 0;
  }
  EXPECT_NEAR(zeros / static_cast<double>(rows), 0.625, 0.05);
}

// Plain temperature sampling follows softmax(logits / T): logits {0, ln 3} at T = 1 give
// 25% / 75%; at T = 0.5 the odds square to 1:9.
TEST_F(CudaSamplingTest, TemperatureScalesTheDistribution) {
  const int rows = 4000;
  const int vocab = 2;
  std::vector<float> logits;
  for (int r = 0; r < rows; ++r) {
    logits.push_back(0.0f);
    logits.push_back(std::log(3.0f));
  }
  for (const auto& [temperature, expected_zero] : {std::pair{1.0f, 0.25}, {0.5f, 0.1}}) {
    std::vector<SamplingRowParams> params(rows);
    for (int r = 0; r < rows; ++r) {
      params[r].temperature = temperature;
      params[r].seed = 15485863u * r + 11;
    }
    std::vector<float> logprobs;
    const std::vector<int32_t> tokens = Sample(logits, vocab, params, &logprobs);
    int zeros = 0;
    for (int r = 0; r < rows; ++r) {
      zeros += tokens[r] == 0;
      // Logprobs are of the raw (temperature-free) distribution.
      EXPECT_NEAR(logprobs[r], tokens[r] == 0 ? std::log(0.25) : std::log(0.75), 1e-5);
    }
    EXPECT_NEAR(zeros / static_cast<double>(rows), expected_zero, 0.03) << "T=" << temperature;
  }
}

// min-p keeps tokens with p >= min_p * p_max. Probabilities 0.4, 0.3, 0.2, 0.1: min_p 0.4
// keeps 0.4, 0.3 and 0.2 (>= 0.16), never 0.1, and token 0 comes up 0.4 / 0.9 of the time.
TEST_F(CudaSamplingTest, MinPNeverDrawsBelowTheCut) {
  const int rows = 3000;
  const int vocab = 4;
  const std::vector<float> row = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  std::vector<float> logits;
  for (int r = 0; r < rows; ++r) logits.insert(logits.end(), row.begin(), row.end());
  std::vector<SamplingRowParams> params(rows);
  for (int r = 0; r < rows; ++r) {
    params[r].min_p = 0.4f;
    params[r].seed = 104729u * r + 3;
  }
  const std::vector<int32_t> tokens = Sample(logits, vocab, params);
  int zeros = 0;
  for (int32_t t : tokens) {
    ASSERT_NE(t, 3) << "a token below the min-p cut was drawn";
    zeros += t == 0;
  }
  EXPECT_NEAR(static_cast<double>(zeros) / rows, 0.4 / 0.9, 0.04);
}

// SampleOnDevice: penalties on a copy (greedy rows pick what the penalised host logits
// pick), logprobs of the raw logits, the caller's logits untouched.
TEST_F(CudaSamplingTest, SampleOnDeviceAppliesPenaltiesAndReportsRawLogprobs) {
  const int vocab = 1000;
  const int rows = 3;
  const std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * vocab, 77, -4.0f, 4.0f);
  std::vector<DeviceSamplingRow> params(rows);
  std::vector<int32_t> tokens, counts;
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = 0.0f;
    params[r].penalty_begin = static_cast<int32_t>(tokens.size());
    // Each row's five best tokens, penalised hard enough to lose their place.
    std::vector<int32_t> order(vocab);
    for (int i = 0; i < vocab; ++i) order[i] = i;
    const float* row = logits.data() + static_cast<size_t>(r) * vocab;
    std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                      [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    for (int i = 0; i < 5; ++i) {
      tokens.push_back(order[i]);
      counts.push_back(r == 0 ? 0 : 2);
    }
    params[r].penalty_end = static_cast<int32_t>(tokens.size());
  }
  params[0].repetition_penalty = 50.0f;  // Prompt-only tokens: repetition alone.
  params[1].presence_penalty = 2.0f;
  params[1].frequency_penalty = 2.0f;
  params[2].repetition_penalty = 1.0f;  // Listed, but no penalty set: unchanged choice.
  std::vector<float> expected_logits = logits;
  for (int r = 0; r < rows; ++r) {
    for (int32_t e = params[r].penalty_begin; e < params[r].penalty_end; ++e) {
      float& v = expected_logits[static_cast<size_t>(r) * vocab + tokens[e]];
      if (params[r].repetition_penalty != 1.0f) {
        v = v > 0 ? v / params[r].repetition_penalty : v * params[r].repetition_penalty;
      }
      if (counts[e] > 0) v -= params[r].presence_penalty + params[r].frequency_penalty * counts[e];
    }
  }
  DeviceArray<float> d_logits(logits);
  std::vector<int32_t> ids(rows);
  std::vector<float> logprobs(rows);
  std::string error;
  ASSERT_TRUE(cuda_->SampleOnDevice(d_logits.get(), vocab, params.data(), rows, tokens.data(),
                                    counts.data(), tokens.size(), ids.data(), logprobs.data(),
                                    &error))
      << error;
  for (int r = 0; r < rows; ++r) {
    const float* row = expected_logits.data() + static_cast<size_t>(r) * vocab;
    EXPECT_EQ(ids[r], std::max_element(row, row + vocab) - row) << "row " << r;
    EXPECT_NEAR(logprobs[r], HostLogProb(logits, vocab, r, ids[r]), 1e-4) << "row " << r;
  }
  EXPECT_EQ(d_logits.ToHost(), logits);
}

TEST_F(CudaSamplingTest, MismatchedParameterRowsAreRejected) {
  DeviceArray<float> logits(8);
  DeviceArray<int32_t> tokens(2);
  std::vector<SamplingRowParams> params(1);
  const absl::Status status = cuda_->Sample(logits.get(), 2, 4, params, tokens.get(), nullptr);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(std::string(status.message()).find("1 parameter rows for 2"), std::string::npos)
      << status;
}

}  // namespace
}  // namespace tessera::kernels::cuda_testing
