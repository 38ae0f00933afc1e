// Element-wise and row ops of the CUDA backend against the CPU backend.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/launchers.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace tessera::kernels::cuda_testing {
namespace {

// Runs without a device too: creating a backend must fail with a status, never crash.
TEST(CudaBackendCreateTest, MissingDeviceIsAnErrorNotACrash) {
  absl::StatusOr<int> count = CudaDeviceCount();
  const int missing = count.ok() ? *count : 0;
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = MakeCudaBackend(missing);
  ASSERT_FALSE(backend.ok());
  EXPECT_FALSE(backend.status().message().empty());
  if (count.ok()) {
    EXPECT_NE(std::string(backend.status().message()).find(std::to_string(missing)),
              std::string::npos)
        << backend.status();
  }
}

using CudaOpsTest = CudaVsCpuTest;

TEST_F(CudaOpsTest, EmbeddingGatherAllDtypesWithOutOfShardIds) {
  const int64_t vocab_begin = 10;
  const int64_t rows = 50;  // This shard holds ids [10, 60).
  const int64_t hidden = 37;
  std::vector<int32_t> ids = {0, 9, 10, 59, 60, 1000, 35, 11, 12, 13, 14, 15, 58, 57, 20, 21, 22};
  const int n = static_cast<int>(ids.size());  // 17
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const std::vector<uint8_t> table = RandomWeights(rows * hidden, dtype, 1);
    std::vector<float> expected(n * hidden, -7.0f);
    cpu_->EmbeddingGather(ids.data(), n, MatrixView{table.data(), dtype, rows, hidden},
                          vocab_begin, expected.data());
    DeviceArray<uint8_t> d_table(table);
    DeviceArray<int32_t> d_ids(ids);
    DeviceArray<float> d_out(n * hidden);
    cuda_->EmbeddingGather(d_ids.get(), n, MatrixView{d_table.get(), dtype, rows, hidden},
                           vocab_begin, d_out.get());
    cuda_->Synchronize();
    ExpectAllClose(d_out.ToHost(), expected, 0.0, "embedding");
    // Out-of-shard ids must give zero rows (id 0 is row 0 of the output).
    for (int64_t j = 0; j < hidden; ++j) EXPECT_EQ(expected[j], 0.0f);
  }
}

TEST_F(CudaOpsTest, RmsNormMatchesCpu) {
  const int n = 17;
  for (int dim : {37, 4096}) {
    SCOPED_TRACE(dim);
    const std::vector<float> x = RandomFloats(n * dim, 2, -3.0f, 3.0f);
    const std::vector<float> weight = RandomFloats(dim, 3, 0.5f, 1.5f);
    std::vector<float> expected(n * dim);
    cpu_->RmsNorm(x.data(), weight.data(), n, dim, 1e-5f, expected.data());
    DeviceArray<float> d_x(x), d_w(weight), d_out(n * dim);
    cuda_->RmsNorm(d_x.get(), d_w.get(), n, dim, 1e-5f, d_out.get());
    cuda_->Synchronize();
    ExpectAllClose(d_out.ToHost(), expected, 1e-4, "rmsnorm");
  }
}

TEST_F(CudaOpsTest, AddRmsNormUpdatesHiddenAndNormalises) {
  const int n = 17;
  const int dim = 300;
  std::vector<float> hidden = RandomFloats(n * dim, 4);
  const std::vector<float> delta = RandomFloats(n * dim, 5);
  const std::vector<float> weight = RandomFloats(dim, 6, 0.5f, 1.5f);
  DeviceArray<float> d_hidden(hidden), d_delta(delta), d_w(weight), d_out(n * dim);
  std::vector<float> expected(n * dim);
  cpu_->AddRmsNorm(hidden.data(), delta.data(), weight.data(), n, dim, 1e-6f, expected.data());
  cuda_->AddRmsNorm(d_hidden.get(), d_delta.get(), d_w.get(), n, dim, 1e-6f, d_out.get());
  cuda_->Synchronize();
  ExpectAllClose(d_hidden.ToHost(), hidden, 1e-6, "hidden after add");
  ExpectAllClose(d_out.ToHost(), expected, 1e-4, "add+rmsnorm");
}

TEST_F(CudaOpsTest, RopeRotatesQAndKHeadsOnly) {
  const int n = 17;
  const int q_heads = 6;
  const int kv_heads = 2;
  for (int head_dim : {8, 64, 128}) {
    for (float theta : {10000.0f, 500000.0f}) {
      // Plain frequencies with scale 1, and llama3-like interpolated ones (the low
      // frequencies divided by 8) with a yarn-like cos/sin scale.
      for (bool scaled : {false, true}) {
        SCOPED_TRACE(testing::Message() << "head_dim " << head_dim << " theta " << theta
                                        << " scaled " << scaled);
        // q, k, v heads plus 3 padding floats per row.
        const int row_stride = (q_heads + 2 * kv_heads) * head_dim + 3;
        std::vector<float> qkv = RandomFloats(static_cast<size_t>(n) * row_stride, 7);
        std::vector<int32_t> positions(n);
        // Positions well past 8192 too: the float32 angle must be formed identically.
        for (int i = 0; i < n; ++i) positions[i] = (i * 7919) % 131072;
        std::vector<float> inv_freq(head_dim / 2);
        for (int i = 0; i < head_dim / 2; ++i) {
          const double f = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
          inv_freq[i] = static_cast<float>(scaled && i >= head_dim / 4 ? f / 8 : f);
        }
        const float scale = scaled ? 1.2079f : 1.0f;
        DeviceArray<float> d_qkv(qkv), d_inv(inv_freq);
        DeviceArray<int32_t> d_pos(positions);
        cpu_->Rope(qkv.data(), n, row_stride, positions.data(), q_heads, kv_heads, head_dim,
                   inv_freq.data(), scale);
        cuda_->Rope(d_qkv.get(), n, row_stride, d_pos.get(), q_heads, kv_heads, head_dim,
                    d_inv.get(), scale);
        cuda_->Synchronize();
        ExpectAllClose(d_qkv.ToHost(), qkv, 1e-4, "rope");
      }
    }
  }
}

TEST_F(CudaOpsTest, AddBiasMatchesCpu) {
  for (int dim : {1, 7, 448, 3000}) {
    SCOPED_TRACE(dim);
    const int n = 17;
    std::vector<float> y = RandomFloats(static_cast<size_t>(n) * dim, 11);
    const std::vector<float> bias = RandomFloats(dim, 12);
    DeviceArray<float> d_y(y), d_bias(bias);
    cpu_->AddBias(y.data(), bias.data(), n, dim);
    cuda_->AddBias(d_y.get(), d_bias.get(), n, dim);
    cuda_->Synchronize();
    ExpectAllClose(d_y.ToHost(), y, 0, "add_bias");
  }
}

TEST_F(CudaOpsTest, SiluMulMatchesCpu) {
  const int n = 17;
  const int inter = 45;
  const std::vector<float> gate_up = RandomFloats(n * 2 * inter, 8, -6.0f, 6.0f);
  std::vector<float> expected(n * inter);
  cpu_->SiluMul(gate_up.data(), n, inter, expected.data());
  DeviceArray<float> d_in(gate_up), d_out(n * inter);
  cuda_->SiluMul(d_in.get(), n, inter, d_out.get());
  cuda_->Synchronize();
  ExpectAllClose(d_out.ToHost(), expected, 1e-5, "silu_mul");
}

TEST_F(CudaOpsTest, WriteKvCacheStoresRowsAtSlotsAndSkipsPadding) {
  const int n = 17;
  for (int block_size : {1, 16}) {
    SCOPED_TRACE(block_size);
    KvCacheShape shape;
    shape.num_blocks = 40;
    shape.block_size = block_size;
    shape.num_kv_heads = 2;
    shape.head_dim = 16;
    const int width = shape.num_kv_heads * shape.head_dim;
    const int row_stride = width + 5;
    const int64_t num_slots = static_cast<int64_t>(shape.num_blocks) * block_size;
    std::vector<int64_t> slots(n);
    for (int i = 0; i < n; ++i) slots[i] = (i * 7 + 3) % num_slots;  // Distinct: 7 is coprime to 40.
    slots[5] = -1;  // Padding token.
    const std::vector<float> k = RandomFloats(n * row_stride, 9);
    const std::vector<float> v = RandomFloats(n * row_stride, 10);
    std::vector<float> k_cache = RandomFloats(shape.elements(), 11);
    std::vector<float> v_cache = RandomFloats(shape.elements(), 12);
    DeviceArray<float> d_k(k), d_v(v), d_kc(k_cache), d_vc(v_cache);
    DeviceArray<int64_t> d_slots(slots);
    cpu_->WriteKvCache(k.data(), v.data(), row_stride, slots.data(), n, shape, k_cache.data(),
                       v_cache.data());
    cuda_->WriteKvCache(d_k.get(), d_v.get(), row_stride, d_slots.get(), n, shape, d_kc.get(),
                        d_vc.get());
    cuda_->Synchronize();
    ExpectAllClose(d_kc.ToHost(), k_cache, 0.0, "k cache");
    ExpectAllClose(d_vc.ToHost(), v_cache, 0.0, "v cache");
  }
}

TEST_F(CudaOpsTest, AddMatchesCpu) {
  const size_t n = 1001;
  std::vector<float> y = RandomFloats(n, 13);
  const std::vector<float> x = RandomFloats(n, 14);
  DeviceArray<float> d_y(y), d_x(x);
  cpu_->Add(y.data(), x.data(), n);
  cuda_->Add(d_y.get(), d_x.get(), n);
  cuda_->Synchronize();
  ExpectAllClose(d_y.ToHost(), y, 0.0, "add");
}

// Launchers reject unsupported shapes before touching the device, so these run anywhere.
TEST(CudaLaunchersTest, RejectUnsupportedShapesWithAMessage) {
  std::string error;
  KvCacheShape shape;
  shape.num_blocks = 4;
  shape.num_kv_heads = 2;
  shape.head_dim = 96;
  AttentionBatch batch;
  batch.num_seqs = 1;
  batch.num_tokens = 1;
  EXPECT_FALSE(gpu::LaunchPagedAttentionPrefill(nullptr, 0, batch, nullptr, nullptr, shape, 4,
                                                1.0f, nullptr, nullptr, &error));
  EXPECT_NE(error.find("head_dim 96"), std::string::npos) << error;
  shape.head_dim = 64;
  error.clear();
  EXPECT_FALSE(gpu::LaunchPagedAttentionSplit(nullptr, 0, batch, nullptr, nullptr, shape, 3,
                                              1.0f, 0, nullptr, 0, nullptr, nullptr, &error));
  EXPECT_NE(error.find("num_q_heads 3"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(gpu::LaunchGemv(nullptr, 9, MatrixView{nullptr, DType::kBF16, 4, 8}, nullptr,
                               nullptr, &error));
  EXPECT_NE(error.find("m 9"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(gpu::LaunchGemv(nullptr, 1, MatrixView{nullptr, DType::kF32, 4, 8}, nullptr,
                               nullptr, &error));
  EXPECT_NE(error.find("F32"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(gpu::LaunchRope(nullptr, 1, 8, nullptr, 1, 1, 7, nullptr, 1.0f, nullptr, &error));
  EXPECT_NE(error.find("head_dim 7"), std::string::npos) << error;
}

}  // namespace
}  // namespace tessera::kernels::cuda_testing
