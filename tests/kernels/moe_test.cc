// The CPU mixture-of-experts ops (kernels/cpu/moe.h) and the per-head RMSNorm of Qwen3
// against plain float64 loops written from the op contracts in kernels/backend.h.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/reference_util.h"

namespace tessera::kernels {
namespace {

using testing::MakeStoredMatrix;
using testing::RandomFloats;
using testing::StoredMatrix;

TEST(MoeRouteTest, SoftmaxTopKInDescendingOrder) {
  const int n = 4, experts = 6, top_k = 3;
  const std::vector<float> logits = RandomFloats(n * experts, 7, -4, 4);
  for (bool renormalize : {false, true}) {
    std::vector<int32_t> ids(n * top_k);
    std::vector<float> weights(n * top_k);
    MoeRoute(logits.data(), n, experts, top_k, renormalize, ids.data(), weights.data());
    for (int i = 0; i < n; ++i) {
      const float* row = logits.data() + i * experts;
      std::vector<double> p(experts);
      double sum = 0;
      for (int e = 0; e < experts; ++e) sum += p[e] = std::exp(static_cast<double>(row[e]));
      for (double& v : p) v /= sum;
      std::vector<int> order(experts);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
      double kept = 0;
      for (int j = 0; j < top_k; ++j) kept += p[order[j]];
      for (int j = 0; j < top_k; ++j) {
        EXPECT_EQ(ids[i * top_k + j], order[j]) << "row " << i << " slot " << j;
        const double want = p[order[j]] / (renormalize ? kept : 1.0);
        EXPECT_NEAR(weights[i * top_k + j], want, 1e-7);
      }
    }
  }
}

// Equal router logits: the lower expert id wins, as torch.topk does on CPU for ties.
TEST(MoeRouteTest, TiesGoToTheLowerExpert) {
  const std::vector<float> logits = {0.5f, 2.0f, 2.0f, -1.0f, 2.0f};
  std::vector<int32_t> ids(2);
  std::vector<float> weights(2);
  MoeRoute(logits.data(), 1, 5, 2, /*renormalize=*/true, ids.data(), weights.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2}));
  EXPECT_FLOAT_EQ(weights[0], 0.5f);
  EXPECT_FLOAT_EQ(weights[1], 0.5f);
}

std::vector<float> RoundedToBf16(const std::vector<float>& x) {
  std::vector<uint8_t> bf16(x.size() * 2);
  ConvertFromF32(x.data(), x.size(), DType::kBF16, bf16.data());
  std::vector<float> out(x.size());
  ConvertToF32(bf16.data(), DType::kBF16, x.size(), out.data());
  return out;
}

// Experts with stored weights and their float values.
struct Experts {
  int num, hidden, inter;
  std::vector<StoredMatrix> gate_up, down;
  std::vector<MatrixView> gate_up_views, down_views;

  Experts(int num_experts, int hidden_size, int intermediate, DType dtype)
      : num(num_experts), hidden(hidden_size), inter(intermediate) {
    for (int e = 0; e < num; ++e) {
      gate_up.push_back(MakeStoredMatrix(static_cast<size_t>(2) * inter * hidden, dtype, 100 + e));
      down.push_back(MakeStoredMatrix(static_cast<size_t>(hidden) * inter, dtype, 200 + e));
    }
    for (int e = 0; e < num; ++e) {
      gate_up_views.push_back({gate_up[e].bytes.data(), dtype, 2 * inter, hidden});
      down_views.push_back({down[e].bytes.data(), dtype, hidden, inter});
    }
  }

  // Experts [first, first + count) as one rank holds them.
  ExpertWeights Held(int first, int count) const {
    return {first, count, inter, gate_up_views.data() + first, down_views.data() + first};
  }

  // The contract of Backend::MoeExperts in float64, experts [first, first + count) only.
  // `round` rounds what the GEMMs multiply (the input rows and the SiLU products) to BF16,
  // as the CPU's BF16-weight path does on AVX512-BF16.
  std::vector<double> Reference(const std::vector<float>& x, int n, const std::vector<int32_t>& ids,
                                const std::vector<float>& weights, int top_k, int first,
                                int count, bool round = false) const {
    std::vector<double> out(static_cast<size_t>(n) * hidden, 0.0);
    std::vector<double> act(inter);
    const std::vector<float> xr = round ? RoundedToBf16(x) : x;
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < top_k; ++j) {
        const int e = ids[i * top_k + j];
        if (e < first || e >= first + count) continue;
        const std::vector<float>& gu = gate_up[e].values;
        for (int r = 0; r < inter; ++r) {
          double g = 0, u = 0;
          for (int c = 0; c < hidden; ++c) {
            g += static_cast<double>(gu[static_cast<size_t>(r) * hidden + c]) * xr[i * hidden + c];
            u += static_cast<double>(gu[static_cast<size_t>(inter + r) * hidden + c]) *
                 xr[i * hidden + c];
          }
          act[r] = g / (1 + std::exp(-g)) * u;
          if (round) act[r] = RoundedToBf16({static_cast<float>(act[r])})[0];
        }
        for (int d = 0; d < hidden; ++d) {
          double y = 0;
          for (int r = 0; r < inter; ++r) {
            y += static_cast<double>(down[e].values[static_cast<size_t>(d) * inter + r]) * act[r];
          }
          out[i * hidden + d] += weights[i * top_k + j] * y;
        }
      }
    }
    return out;
  }
};

// Routing of n tokens to top_k distinct experts each, with random weights.
void RandomRouting(int n, int num_experts, int top_k, uint32_t seed, std::vector<int32_t>* ids,
                   std::vector<float>* weights) {
  const std::vector<float> logits = RandomFloats(static_cast<size_t>(n) * num_experts, seed, -3, 3);
  ids->resize(static_cast<size_t>(n) * top_k);
  weights->resize(static_cast<size_t>(n) * top_k);
  MoeRoute(logits.data(), n, num_experts, top_k, true, ids->data(), weights->data());
}

class MoeExpertsTest : public ::testing::TestWithParam<DType> {
 protected:
  // BF16 weights on AVX512-BF16 round the activations (the experts' inputs and their SiLU
  // products) to BF16; the reference rounds the same values.
  bool Rounds() const {
    return GetParam() == DType::kBF16 && DetectSimdLevel() >= SimdLevel::kAvx512Bf16;
  }
  // Float sums against float64; a SiLU product whose BF16 rounding flips between the two
  // moves one term by a BF16 step, hence the looser bound there.
  double Tolerance(double ref) const { return (Rounds() ? 2e-3 : 1e-5) * (1 + std::fabs(ref)); }
};

TEST_P(MoeExpertsTest, MatchesReferenceWithEveryExpertHeld) {
  const Experts experts(8, 48, 20, GetParam());
  ThreadPool pool(3);
  MoeScratch scratch;
  for (int n : {1, 5, 40}) {
    for (int top_k : {1, 2, 3}) {
      std::vector<int32_t> ids;
      std::vector<float> weights;
      RandomRouting(n, experts.num, top_k, n * 10 + top_k, &ids, &weights);
      const std::vector<float> x = RandomFloats(static_cast<size_t>(n) * experts.hidden, n);
      std::vector<float> out(x.size(), 123.0f);  // Overwritten, not accumulated into.
      MoeExperts(x.data(), n, experts.hidden, ids.data(), weights.data(), top_k,
                 experts.Held(0, experts.num), out.data(), &scratch, &pool);
      const std::vector<double> ref =
          experts.Reference(x, n, ids, weights, top_k, 0, experts.num, Rounds());
      for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_NEAR(out[i], ref[i], Tolerance(ref[i])) << "n " << n << " k " << top_k;
      }
    }
  }
}

// Expert parallelism: each rank's part covers only its experts (zeros elsewhere) and the
// parts sum to the whole.
TEST_P(MoeExpertsTest, ExpertParallelPartsSumToTheWhole) {
  const Experts experts(8, 32, 12, GetParam());
  const int n = 9, top_k = 2;
  std::vector<int32_t> ids;
  std::vector<float> weights;
  RandomRouting(n, experts.num, top_k, 5, &ids, &weights);
  const std::vector<float> x = RandomFloats(static_cast<size_t>(n) * experts.hidden, 3);
  const std::vector<double> whole =
      experts.Reference(x, n, ids, weights, top_k, 0, experts.num, Rounds());
  for (int ranks : {2, 4}) {
    std::vector<double> sum(whole.size(), 0.0);
    const int per_rank = experts.num / ranks;
    for (int r = 0; r < ranks; ++r) {
      MoeScratch scratch;
      std::vector<float> out(x.size());
      MoeExperts(x.data(), n, experts.hidden, ids.data(), weights.data(), top_k,
                 experts.Held(r * per_rank, per_rank), out.data(), &scratch, nullptr);
      const std::vector<double> part =
          experts.Reference(x, n, ids, weights, top_k, r * per_rank, per_rank, Rounds());
      for (size_t i = 0; i < part.size(); ++i) {
        ASSERT_NEAR(out[i], part[i], Tolerance(part[i]));
        sum[i] += out[i];
      }
    }
    for (size_t i = 0; i < whole.size(); ++i) {
      ASSERT_NEAR(sum[i], whole[i], Tolerance(whole[i])) << ranks << " ranks";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MoeExpertsTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(AddSigmoidGatedTest, AddsTheGatedRows) {
  const int n = 3, dim = 5;
  std::vector<float> y = RandomFloats(n * dim, 1), x = RandomFloats(n * dim, 2);
  const std::vector<float> gate = {-2.0f, 0.0f, 3.0f};
  const std::vector<float> before = y;
  AddSigmoidGated(y.data(), x.data(), gate.data(), n, dim);
  for (int i = 0; i < n; ++i) {
    const double g = 1 / (1 + std::exp(-static_cast<double>(gate[i])));
    for (int d = 0; d < dim; ++d) {
      EXPECT_NEAR(y[i * dim + d], before[i * dim + d] + g * x[i * dim + d], 1e-6);
    }
  }
}

// Qwen3's q/k norm: each head of the first num_heads of a row normalised on its own; the
// rest of the row (the V heads) untouched.
TEST(HeadRmsNormTest, NormalisesEachHeadAndNothingElse) {
  const int n = 3, heads = 4, head_dim = 16, stride = heads * head_dim + 24;
  std::vector<float> x = RandomFloats(static_cast<size_t>(n) * stride, 9, -3, 3);
  const std::vector<float> weight = RandomFloats(head_dim, 10);
  const std::vector<float> before = x;
  ThreadPool pool(2);
  HeadRmsNorm(x.data(), n, stride, heads, head_dim, weight.data(), 1e-6f, &pool);
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < heads; ++h) {
      const float* head = before.data() + i * stride + h * head_dim;
      double ss = 0;
      for (int d = 0; d < head_dim; ++d) ss += static_cast<double>(head[d]) * head[d];
      const double inv = 1 / std::sqrt(ss / head_dim + 1e-6);
      for (int d = 0; d < head_dim; ++d) {
        EXPECT_NEAR(x[i * stride + h * head_dim + d], head[d] * inv * weight[d], 1e-5);
      }
    }
    for (int d = heads * head_dim; d < stride; ++d) {
      EXPECT_EQ(x[i * stride + d], before[i * stride + d]);
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
