// The CUDA backend's Qwen3 and mixture-of-experts ops (HeadRmsNorm, MoeRoute, MoeExperts,
// AddSigmoidGated) against the CPU backend, with float32 activations (tight) and BF16
// activations (the CPU widening the same BF16-rounded inputs; kBf16Tolerance). MoeExperts
// runs both of its paths on every case: the expert GEMVs and the grouped GEMM.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/launchers.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace tessera::kernels::cuda_testing {
namespace {

// Both backends' float32 results agree to summation order: the CPU sums squares and the
// softmax in double, the device in float32, and the experts' GEMMs sum in another order.
constexpr double kF32Tolerance = 1e-4;

// Activations as the CUDA backend holds them: float32 as they are, BF16 as bits.
class DeviceActivations {
 public:
  DeviceActivations(const std::vector<float>& values, DType act)
      : act_(act),
        f32_(act == DType::kF32 ? values : std::vector<float>()),
        bf16_(act == DType::kBF16 ? Bf16Bits(values) : std::vector<uint16_t>()) {}
  void* get() const { return act_ == DType::kF32 ? static_cast<void*>(f32_.get()) : bf16_.get(); }
  std::vector<float> ToHost() const {
    return act_ == DType::kF32 ? f32_.ToHost() : Bf16Values(bf16_.ToHost());
  }

 private:
  DType act_;
  DeviceArray<float> f32_;
  DeviceArray<uint16_t> bf16_;
};

// The inputs both sides see: BF16-rounded when the CUDA backend's activations are BF16.
std::vector<float> Inputs(const std::vector<float>& values, DType act) {
  return act == DType::kBF16 ? RoundedToBf16(values) : values;
}

double Tolerance(DType act) { return act == DType::kBF16 ? kBf16Tolerance : kF32Tolerance; }

// ---- HeadRmsNorm and AddSigmoidGated, at both activation dtypes.
class CudaQwenOpsTest : public CudaVsCpuTest, public ::testing::WithParamInterface<DType> {
 protected:
  void SetUp() override { Create(GetParam()); }
};

TEST_P(CudaQwenOpsTest, HeadRmsNormNormalisesTheLeadingHeadsOnly) {
  const DType act = GetParam();
  const int n = 17;
  const int num_heads = 6;  // Of 8 heads per row (q norm leaves k and v alone).
  for (int head_dim : {40, 64, 128}) {
    SCOPED_TRACE(head_dim);
    const int row_stride = 8 * head_dim + 3;
    std::vector<float> x = Inputs(RandomFloats(static_cast<size_t>(n) * row_stride, 31,
                                               -3.0f, 3.0f), act);
    const std::vector<float> weight = RandomFloats(head_dim, 32, 0.5f, 1.5f);
    DeviceActivations d_x(x, act);
    DeviceArray<float> d_weight(weight);
    cpu_->HeadRmsNorm(x.data(), n, row_stride, num_heads, head_dim, weight.data(), 1e-6f);
    cuda_->HeadRmsNorm(d_x.get(), n, row_stride, num_heads, head_dim, d_weight.get(), 1e-6f);
    cuda_->Synchronize();
    // The heads past num_heads and the padding come back bit for bit.
    ExpectAllClose(d_x.ToHost(), x, act == DType::kBF16 ? kBf16Tolerance : 1e-5,
                   "head rmsnorm");
  }
}

TEST_P(CudaQwenOpsTest, AddSigmoidGatedMatchesCpu) {
  const DType act = GetParam();
  const int n = 17;
  for (int dim : {1, 37, 2048}) {
    SCOPED_TRACE(dim);
    std::vector<float> y = Inputs(RandomFloats(static_cast<size_t>(n) * dim, 33), act);
    const std::vector<float> x = Inputs(RandomFloats(static_cast<size_t>(n) * dim, 34), act);
    const std::vector<float> gate = RandomFloats(n, 35, -6.0f, 6.0f);
    DeviceActivations d_y(y, act), d_x(x, act);
    DeviceArray<float> d_gate(gate);
    cpu_->AddSigmoidGated(y.data(), x.data(), gate.data(), n, dim);
    cuda_->AddSigmoidGated(d_y.get(), d_x.get(), d_gate.get(), n, dim);
    cuda_->Synchronize();
    ExpectAllClose(d_y.ToHost(), y, act == DType::kBF16 ? kBf16Tolerance : 1e-6,
                   "add sigmoid gated");
  }
}

INSTANTIATE_TEST_SUITE_P(Activations, CudaQwenOpsTest,
                         ::testing::Values(DType::kF32, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// ---- MoeRoute: router logits are float32 whatever the activation dtype.
using CudaMoeRouteTest = CudaVsCpuTest;

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

class CudaMoeRouteCheck : public CudaMoeRouteTest {
 protected:
  Routed Route(Backend& backend, const std::vector<float>& logits, int n, int num_experts,
               int top_k, bool renormalize, bool on_device) {
    Routed r{std::vector<int32_t>(n * top_k), std::vector<float>(n * top_k)};
    if (!on_device) {
      backend.MoeRoute(logits.data(), n, num_experts, top_k, renormalize, r.ids.data(),
                       r.weights.data());
      return r;
    }
    DeviceArray<float> d_logits(logits), d_weights(n * top_k);
    DeviceArray<int32_t> d_ids(n * top_k);
    backend.MoeRoute(d_logits.get(), n, num_experts, top_k, renormalize, d_ids.get(),
                     d_weights.get());
    backend.Synchronize();
    return {d_ids.ToHost(), d_weights.ToHost()};
  }

  void ExpectSameRouting(const std::vector<float>& logits, int n, int num_experts, int top_k,
                         bool renormalize) {
    SCOPED_TRACE(testing::Message() << "experts " << num_experts << " top_k " << top_k
                                    << " renormalize " << renormalize);
    const Routed expected = Route(*cpu_, logits, n, num_experts, top_k, renormalize, false);
    const Routed got = Route(*cuda_, logits, n, num_experts, top_k, renormalize, true);
    ASSERT_TRUE(cuda_->status().ok()) << cuda_->status();
    EXPECT_EQ(got.ids, expected.ids);
    for (size_t i = 0; i < got.weights.size(); ++i) {
      EXPECT_NEAR(got.weights[i], expected.weights[i], 1e-6) << "entry " << i;
    }
  }
};

TEST_F(CudaMoeRouteCheck, MatchesCpuIdsAndWeights) {
  const int n = 37;
  for (int num_experts : {8, 60, 128, 512}) {
    const std::vector<float> logits =
        RandomFloats(static_cast<size_t>(n) * num_experts, num_experts, -4.0f, 4.0f);
    for (int top_k : {1, 2, 8, 16}) {
      if (top_k > num_experts) continue;
      for (bool renormalize : {false, true}) {
        ExpectSameRouting(logits, n, num_experts, top_k, renormalize);
      }
    }
  }
}

TEST_F(CudaMoeRouteCheck, EqualLogitsGoToTheLowerIdFirst) {
  const int num_experts = 40;  // Two experts per lane for some lanes.
  const int n = 3;
  std::vector<float> logits(n * num_experts, 0.0f);  // Row 0: all equal.
  // Row 1: the maximum tied at 5, 33 and 37, the next value tied at 1 and 34.
  for (int e : {5, 33, 37}) logits[num_experts + e] = 3.0f;
  for (int e : {1, 34}) logits[num_experts + e] = 2.0f;
  // Row 2: a tie straddling the cut (top 2 of 7, 3 and 39 at the same logit).
  for (int e : {3, 7, 39}) logits[2 * num_experts + e] = 1.5f;
  logits[2 * num_experts + 20] = 2.5f;
  for (bool renormalize : {false, true}) ExpectSameRouting(logits, n, num_experts, 4, renormalize);
  const Routed got = Route(*cuda_, logits, n, num_experts, 4, true, true);
  EXPECT_EQ(std::vector<int32_t>(got.ids.begin(), got.ids.begin() + 4),
            (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_NEAR(got.weights[0], 0.25f, 1e-6);
  EXPECT_EQ(std::vector<int32_t>(got.ids.begin() + 4, got.ids.begin() + 8),
            (std::vector<int32_t>{5, 33, 37, 1}));
  EXPECT_EQ(std::vector<int32_t>(got.ids.begin() + 8, got.ids.end()),
            (std::vector<int32_t>{20, 3, 7, 39}));
}

// ---- MoeExperts.
// Random weights for experts [first, first + num_local) of a layer in `dtype` (int8 and FP8
// with their scales; `group` columns per int8 scale, 0: per row): host views for the CPU
// backend, device views for the CUDA one.
class ExpertSet {
 public:
  ExpertSet(DType dtype, int group, int first, int num_local, int hidden, int inter,
            uint32_t seed)
      : first_(first), inter_(inter) {
    for (int e = 0; e < num_local; ++e) {
      Add(dtype, group, 2 * inter, hidden, seed + 2 * e, &host_gate_up_, &device_gate_up_);
      Add(dtype, group, hidden, inter, seed + 2 * e + 1, &host_down_, &device_down_);
    }
  }
  ExpertWeights host() const { return Weights(host_gate_up_, host_down_); }
  ExpertWeights device() const { return Weights(device_gate_up_, device_down_); }

 private:
  void Add(DType dtype, int group, int64_t rows, int64_t cols, uint32_t seed,
           std::vector<MatrixView>* host, std::vector<MatrixView>* device) {
    const bool quantized = dtype == DType::kI8 || dtype == DType::kF8E4M3;
    std::vector<uint8_t> bytes;
    std::vector<float> scales;
    if (quantized) {
      QuantizedWeights q = RandomQuantizedWeights(dtype, rows, cols,
                                                  dtype == DType::kI8 ? group : 0, seed);
      bytes = std::move(q.bytes);
      scales = std::move(q.scales);
    } else {
      bytes = RandomWeights(rows * cols, dtype, seed);
    }
    device_bytes_.push_back(std::make_unique<DeviceArray<uint8_t>>(bytes));
    device_scales_.push_back(std::make_unique<DeviceArray<float>>(scales));
    host_bytes_.push_back(std::move(bytes));
    host_scales_.push_back(std::move(scales));
    const int g = dtype == DType::kI8 ? group : 0;
    host->push_back(MatrixView{host_bytes_.back().data(), dtype, rows, cols,
                               quantized ? host_scales_.back().data() : nullptr, g});
    device->push_back(MatrixView{device_bytes_.back()->get(), dtype, rows, cols,
                                 quantized ? device_scales_.back()->get() : nullptr, g});
  }
  ExpertWeights Weights(const std::vector<MatrixView>& gate_up,
                        const std::vector<MatrixView>& down) const {
    return {first_, static_cast<int>(gate_up.size()), inter_, gate_up.data(), down.data()};
  }

  int first_;
  int inter_;
  // Deques of buffers would do; vectors of owners keep each buffer's address fixed.
  std::vector<std::vector<uint8_t>> host_bytes_;
  std::vector<std::vector<float>> host_scales_;
  std::vector<std::unique_ptr<DeviceArray<uint8_t>>> device_bytes_;
  std::vector<std::unique_ptr<DeviceArray<float>>> device_scales_;
  std::vector<MatrixView> host_gate_up_, host_down_, device_gate_up_, device_down_;
};

// top_k distinct experts per token with positive weights. With expert parallelism, every
// fifth token (when there are top_k experts outside the held range) routes only to experts
// held elsewhere, so its output must be zeros.
Routed RandomRouting(int n, int num_experts, int top_k, int first, int num_local,
                     uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> weight(0.05f, 1.0f);
  std::vector<int32_t> all(num_experts), elsewhere;
  std::iota(all.begin(), all.end(), 0);
  for (int e : all) {
    if (e < first || e >= first + num_local) elsewhere.push_back(e);
  }
  Routed r;
  for (int t = 0; t < n; ++t) {
    std::vector<int32_t> pool =
        t % 5 == 2 && static_cast<int>(elsewhere.size()) >= top_k ? elsewhere : all;
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int j = 0; j < top_k; ++j) {
      r.ids.push_back(pool[j]);
      r.weights.push_back(weight(rng));
    }
  }
  return r;
}

struct ExpertShape {
  int num_experts, hidden, inter;
  bool expert_parallel;  // Else tensor-parallel: every expert held.
  int first() const { return expert_parallel ? num_experts / 4 : 0; }
  int num_local() const { return expert_parallel ? num_experts / 2 : num_experts; }
  std::string Name() const {
    return "experts " + std::to_string(num_experts) + " hidden " + std::to_string(hidden) +
           " inter " + std::to_string(inter) + (expert_parallel ? " EP" : " TP");
  }
};

class CudaMoeExpertsTest : public CudaVsCpuTest {
 protected:
  // MoeExperts on both backends, through the GEMV kernels and the grouped GEMM.
  void Check(const ExpertSet& experts, const ExpertShape& shape, int n, int top_k,
             uint32_t seed, double rtol) {
    SCOPED_TRACE(shape.Name() + " n " + std::to_string(n) + " top_k " + std::to_string(top_k));
    const DType act = cuda_->activation_dtype();
    const int hidden = shape.hidden;
    const std::vector<float> x =
        Inputs(RandomFloats(static_cast<size_t>(n) * hidden, seed), act);
    const Routed routing =
        RandomRouting(n, shape.num_experts, top_k, shape.first(), shape.num_local(), seed + 1);
    std::vector<float> expected(static_cast<size_t>(n) * hidden);
    cpu_->MoeExperts(x.data(), n, hidden, routing.ids.data(), routing.weights.data(), top_k,
                     experts.host(), expected.data());
    DeviceActivations d_x(x, act);
    DeviceArray<int32_t> d_ids(routing.ids);
    DeviceArray<float> d_weights(routing.weights);
    for (int gemv_pairs : {65535, 0}) {
      SCOPED_TRACE(gemv_pairs > 0 ? "GEMV" : "grouped");
      cuda_->set_moe_gemv_max_pairs(gemv_pairs);
      // NaN everywhere first: every output, zeros included, must be written.
      DeviceActivations d_out(std::vector<float>(expected.size(), std::nanf("")), act);
      cuda_->MoeExperts(d_x.get(), n, hidden, d_ids.get(), d_weights.get(), top_k,
                        experts.device(), d_out.get());
      cuda_->Synchronize();
      ASSERT_TRUE(cuda_->status().ok()) << cuda_->status();
      ExpectAllClose(d_out.ToHost(), expected, rtol, "moe experts");
    }
  }

  void CheckAllShapes(DType weights, double rtol) {
    for (const ExpertShape& shape : {ExpertShape{8, 128, 64, false}, ExpertShape{8, 128, 64, true},
                                     ExpertShape{64, 256, 96, false},
                                     ExpertShape{64, 256, 96, true}}) {
      const ExpertSet experts(weights, 0, shape.first(), shape.num_local(), shape.hidden,
                              shape.inter, 100);
      for (int n : {1, 3, 64, 300}) {
        for (int top_k : {1, 2, 8}) {
          Check(experts, shape, n, top_k, static_cast<uint32_t>(n * 31 + top_k), rtol);
        }
      }
    }
  }
};

TEST_F(CudaMoeExpertsTest, Bf16WeightsTensorAndExpertParallel) {
  CheckAllShapes(DType::kBF16, kF32Tolerance);
}

TEST_F(CudaMoeExpertsTest, QuantizedF16AndF32Weights) {
  struct Case {
    DType dtype;
    int group;
  };
  for (const Case& c : {Case{DType::kI8, 0}, Case{DType::kI8, 32}, Case{DType::kF8E4M3, 0},
                        Case{DType::kF16, 0}, Case{DType::kF32, 0}}) {
    SCOPED_TRACE(std::string(DTypeName(c.dtype)) + " group " + std::to_string(c.group));
    for (const ExpertShape& shape : {ExpertShape{8, 128, 64, false},
                                     ExpertShape{64, 256, 96, true}}) {
      const ExpertSet experts(c.dtype, c.group, shape.first(), shape.num_local(), shape.hidden,
                              shape.inter, 200);
      for (int n : {3, 64}) Check(experts, shape, n, 2, 300 + n, kF32Tolerance);
    }
  }
}

// hidden and intermediate not multiples of 8: the GEMVs' scalar loads.
TEST_F(CudaMoeExpertsTest, OddShapesTakeTheScalarPath) {
  const ExpertShape shape{8, 100, 36, true};
  for (DType dtype : {DType::kBF16, DType::kI8}) {
    const ExpertSet experts(dtype, 0, shape.first(), shape.num_local(), shape.hidden,
                            shape.inter, 400);
    for (int n : {1, 17}) Check(experts, shape, n, 2, 500 + n, kF32Tolerance);
  }
}

// Batches past the workspace budget run in chunks of tokens: the launcher directly, with a
// chunk that does not divide n, against the CPU.
TEST_F(CudaMoeExpertsTest, GroupedLauncherRunsInChunks) {
  const ExpertShape shape{8, 128, 64, true};
  const ExpertSet experts(DType::kBF16, 0, shape.first(), shape.num_local(), shape.hidden,
                          shape.inter, 650);
  const ExpertWeights device = experts.device();
  std::vector<gpu::MoeExpertPointers> pointers;
  for (int e = 0; e < device.num_local; ++e) {
    pointers.push_back({device.gate_up[e].data, nullptr, device.down[e].data, nullptr});
  }
  const size_t table_bytes = pointers.size() * sizeof(gpu::MoeExpertPointers);
  DeviceArray<uint8_t> d_table(table_bytes);
  ASSERT_EQ(cudaMemcpy(d_table.get(), pointers.data(), table_bytes, cudaMemcpyHostToDevice),
            cudaSuccess);
  gpu::MoeExpertsArgs args;
  args.table = reinterpret_cast<const gpu::MoeExpertPointers*>(d_table.get());
  args.first_expert = shape.first();
  args.num_local = shape.num_local();
  args.hidden = shape.hidden;
  args.intermediate = shape.inter;
  args.aligned = true;

  const int n = 45;
  const int top_k = 2;
  const int chunk = 16;
  const std::vector<float> x = RandomFloats(static_cast<size_t>(n) * shape.hidden, 651);
  const Routed routing =
      RandomRouting(n, shape.num_experts, top_k, shape.first(), shape.num_local(), 652);
  std::vector<float> expected(static_cast<size_t>(n) * shape.hidden);
  cpu_->MoeExperts(x.data(), n, shape.hidden, routing.ids.data(), routing.weights.data(), top_k,
                   experts.host(), expected.data());
  const size_t bytes = gpu::MoeExpertsGroupedWorkspaceBytes(chunk, top_k, shape.hidden,
                                                            shape.inter, shape.num_local(),
                                                            DType::kF32);
  DeviceArray<uint8_t> d_workspace(bytes);
  DeviceArray<float> d_x(x), d_weights(routing.weights), d_out(expected.size());
  DeviceArray<int32_t> d_ids(routing.ids);
  std::string error;
  ASSERT_TRUE(gpu::LaunchMoeExpertsGrouped(d_x.get(), n, d_ids.get(), d_weights.get(), top_k,
                                           args, chunk, false, d_workspace.get(), bytes,
                                           d_out.get(), nullptr, &error, DType::kF32))
      << error;
  ExpectAllClose(d_out.ToHost(), expected, kF32Tolerance, "chunked grouped");
  EXPECT_LT(gpu::MoeGroupedChunkTokens(1 << 20, 8, 4096, 1536, DType::kBF16), 1 << 20);
  EXPECT_EQ(gpu::MoeGroupedChunkTokens(300, 8, 256, 96, DType::kBF16), 300);
}

// A decode step's graph bakes in the buffers, not the routing: replayed over new expert ids
// and weights in the same buffers, it gives the new routing's answer.
TEST_F(CudaMoeExpertsTest, GraphReplayFollowsTheRoutingOnTheDevice) {
  const ExpertShape shape{64, 256, 96, true};
  const ExpertSet experts(DType::kBF16, 0, shape.first(), shape.num_local(), shape.hidden,
                          shape.inter, 600);
  const int n = 8;
  const int top_k = 8;
  const int hidden = shape.hidden;
  const std::vector<float> x = RandomFloats(static_cast<size_t>(n) * hidden, 601);
  DeviceArray<float> d_x(x), d_weights(n * top_k), d_out(n * hidden);
  DeviceArray<int32_t> d_ids(n * top_k);
  for (int gemv_pairs : {65535, 0}) {
    SCOPED_TRACE(gemv_pairs > 0 ? "GEMV" : "grouped");
    cuda_->set_moe_gemv_max_pairs(gemv_pairs);
    const Routed first = RandomRouting(n, shape.num_experts, top_k, shape.first(),
                                       shape.num_local(), 602);
    cuda_->CopyToDevice(d_ids.get(), first.ids.data(), first.ids.size() * sizeof(int32_t));
    cuda_->CopyToDevice(d_weights.get(), first.weights.data(),
                        first.weights.size() * sizeof(float));
    // Eagerly first (uploads the expert table, grows scratch), then captured.
    cuda_->MoeExperts(d_x.get(), n, hidden, d_ids.get(), d_weights.get(), top_k,
                      experts.device(), d_out.get());
    const uint64_t epoch = cuda_->GraphEpoch();
    ASSERT_TRUE(cuda_->BeginCapture());
    cuda_->MoeExperts(d_x.get(), n, hidden, d_ids.get(), d_weights.get(), top_k,
                      experts.device(), d_out.get());
    const int graph = cuda_->EndCapture();
    ASSERT_GE(graph, 0);
    EXPECT_EQ(cuda_->GraphEpoch(), epoch);

    const Routed second = RandomRouting(n, shape.num_experts, top_k, shape.first(),
                                        shape.num_local(), 603);
    ASSERT_NE(first.ids, second.ids);
    cuda_->CopyToDevice(d_ids.get(), second.ids.data(), second.ids.size() * sizeof(int32_t));
    cuda_->CopyToDevice(d_weights.get(), second.weights.data(),
                        second.weights.size() * sizeof(float));
    cuda_->LaunchGraph(graph);
    cuda_->Synchronize();
    ASSERT_TRUE(cuda_->status().ok()) << cuda_->status();
    std::vector<float> expected(static_cast<size_t>(n) * hidden);
    cpu_->MoeExperts(x.data(), n, hidden, second.ids.data(), second.weights.data(), top_k,
                     experts.host(), expected.data());
    ExpectAllClose(d_out.ToHost(), expected, kF32Tolerance, "graph replay");
  }
}

// The expert table is uploaded outside a capture: a capture that reaches a layer the
// backend has not seen fails (the step then runs eagerly), and the backend stays healthy.
TEST_F(CudaMoeExpertsTest, CaptureBeforeTheTableIsUploadedFailsCleanly) {
  const ExpertShape shape{8, 128, 64, false};
  const ExpertSet experts(DType::kBF16, 0, 0, 8, shape.hidden, shape.inter, 700);
  const Routed routing = RandomRouting(2, 8, 2, 0, 8, 701);
  DeviceArray<float> d_x(RandomFloats(2 * shape.hidden, 702)), d_weights(routing.weights),
      d_out(2 * shape.hidden);
  DeviceArray<int32_t> d_ids(routing.ids);
  ASSERT_TRUE(cuda_->BeginCapture());
  cuda_->MoeExperts(d_x.get(), 2, shape.hidden, d_ids.get(), d_weights.get(), 2,
                    experts.device(), d_out.get());
  EXPECT_EQ(cuda_->EndCapture(), -1);
  EXPECT_TRUE(cuda_->status().ok()) << cuda_->status();
}

class CudaBf16MoeExpertsTest : public CudaMoeExpertsTest {
 protected:
  void SetUp() override { Create(DType::kBF16); }
};

TEST_F(CudaBf16MoeExpertsTest, Bf16WeightsTensorAndExpertParallel) {
  CheckAllShapes(DType::kBF16, kBf16Tolerance);
}

TEST_F(CudaBf16MoeExpertsTest, QuantizedWeights) {
  const ExpertShape shape{64, 256, 96, true};
  for (DType dtype : {DType::kI8, DType::kF8E4M3}) {
    const ExpertSet experts(dtype, 0, shape.first(), shape.num_local(), shape.hidden,
                            shape.inter, 900);
    for (int n : {3, 64}) Check(experts, shape, n, 8, 1000 + n, kBf16Tolerance);
  }
}

// Checked on the host before anything is launched, so these run without a device.
TEST(CudaMoeLaunchersTest, RejectUnsupportedShapesWithAMessage) {
  std::string error;
  EXPECT_FALSE(gpu::LaunchMoeRoute(nullptr, 1, gpu::kMoeMaxExperts + 1, 2, true, nullptr,
                                   nullptr, nullptr, &error));
  EXPECT_NE(error.find("num_experts 513"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(gpu::LaunchMoeRoute(nullptr, 1, 64, gpu::kMoeMaxTopK + 1, true, nullptr,
                                   nullptr, nullptr, &error));
  EXPECT_NE(error.find("top_k 17"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(gpu::LaunchHeadRmsNorm(nullptr, 1, 100, 2, 64, nullptr, 1e-6f, nullptr, &error));
  EXPECT_NE(error.find("row stride 100"), std::string::npos) << error;

  // Expert 5 (the second held of a run from 4) with a down matrix of the wrong shape.
  const std::vector<MatrixView> gate_up(2, MatrixView{&error, DType::kBF16, 64, 128});
  std::vector<MatrixView> down(2, MatrixView{&error, DType::kBF16, 128, 32});
  down[1].cols = 31;
  error.clear();
  EXPECT_FALSE(gpu::CheckMoeExperts(ExpertWeights{4, 2, 32, gate_up.data(), down.data()}, 128,
                                    &error));
  EXPECT_NE(error.find("expert 5 down"), std::string::npos) << error;
  EXPECT_FALSE(gpu::MoeExpertDtypeSupported(DType::kU4));
  EXPECT_TRUE(gpu::MoeExpertDtypeSupported(DType::kF8E4M3));
}

}  // namespace
}  // namespace tessera::kernels::cuda_testing
