// The CUDA backend with BF16 activations (its default) against the CPU backend: row and
// element-wise ops, and GEMMs over every weight dtype on both paths (the GEMV kernels for
// m <= 8, cuBLASLt or the quantized prefill path above), with BF16 outputs and the float32
// output the lm_head asks for. Both sides get the same BF16-rounded inputs (the CPU
// backend widened to float32); the CUDA side accumulates in float32 and rounds each output
// once, so outputs agree to kBf16Tolerance of (|expected| + rms).
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/launchers.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace tessera::kernels::cuda_testing {
namespace {

using CudaBf16OpsTest = CudaBf16VsCpuTest;

TEST_F(CudaBf16OpsTest, ReportsItsActivationDtype) {
  EXPECT_EQ(cuda_->activation_dtype(), DType::kBF16);
  EXPECT_EQ(cpu_->activation_dtype(), DType::kF32);
}

TEST_F(CudaBf16OpsTest, RmsNormFromFloatHiddenToBf16) {
  const int n = 17;
  for (int dim : {37, 4096}) {
    SCOPED_TRACE(dim);
    const std::vector<float> x = RandomFloats(n * dim, 2, -3.0f, 3.0f);  // Hidden: float32.
    const std::vector<float> weight = RandomFloats(dim, 3, 0.5f, 1.5f);
    std::vector<float> expected(n * dim);
    cpu_->RmsNorm(x.data(), weight.data(), n, dim, 1e-5f, expected.data());
    DeviceArray<float> d_x(x), d_w(weight);
    DeviceArray<uint16_t> d_out(n * dim);
    cuda_->RmsNorm(d_x.get(), d_w.get(), n, dim, 1e-5f, d_out.get());
    cuda_->Synchronize();
    ExpectAllClose(Bf16Values(d_out.ToHost()), expected, kBf16Tolerance, "rmsnorm");
  }
}

// The residual stays float32: hidden += widened BF16 delta is exact on both sides.
TEST_F(CudaBf16OpsTest, AddRmsNormKeepsAFloatResidual) {
  const int n = 17;
  const int dim = 300;
  std::vector<float> hidden = RandomFloats(n * dim, 4, -8.0f, 8.0f);
  const std::vector<float> delta = RoundedToBf16(RandomFloats(n * dim, 5));
  const std::vector<float> weight = RandomFloats(dim, 6, 0.5f, 1.5f);
  DeviceArray<float> d_hidden(hidden), d_w(weight);
  DeviceArray<uint16_t> d_delta(Bf16Bits(delta)), d_out(n * dim);
  std::vector<float> expected(n * dim);
  cpu_->AddRmsNorm(hidden.data(), delta.data(), weight.data(), n, dim, 1e-6f, expected.data());
  cuda_->AddRmsNorm(d_hidden.get(), d_delta.get(), d_w.get(), n, dim, 1e-6f, d_out.get());
  cuda_->Synchronize();
  ExpectAllClose(d_hidden.ToHost(), hidden, 0.0, "hidden after add");
  ExpectAllClose(Bf16Values(d_out.ToHost()), expected, kBf16Tolerance, "add+rmsnorm");
}

TEST_F(CudaBf16OpsTest, RopeInPlaceOnBf16Rows) {
  const int n = 17;
  const int q_heads = 6;
  const int kv_heads = 2;
  for (int head_dim : {8, 64, 128}) {
    SCOPED_TRACE(head_dim);
    const int row_stride = (q_heads + 2 * kv_heads) * head_dim + 3;
    std::vector<float> qkv = RoundedToBf16(RandomFloats(static_cast<size_t>(n) * row_stride, 7));
    std::vector<int32_t> positions(n);
    for (int i = 0; i < n; ++i) positions[i] = (i * 7919) % 131072;
    std::vector<float> inv_freq(head_dim / 2);
    for (int i = 0; i < head_dim / 2; ++i) {
      inv_freq[i] = static_cast<float>(std::pow(500000.0, -2.0 * i / head_dim));
    }
    DeviceArray<uint16_t> d_qkv(Bf16Bits(qkv));
    DeviceArray<float> d_inv(inv_freq);
    DeviceArray<int32_t> d_pos(positions);
    cpu_->Rope(qkv.data(), n, row_stride, positions.data(), q_heads, kv_heads, head_dim,
               inv_freq.data(), 1.0f);
    cuda_->Rope(d_qkv.get(), n, row_stride, d_pos.get(), q_heads, kv_heads, head_dim,
                d_inv.get(), 1.0f);
    cuda_->Synchronize();
    // V heads and the padding are untouched, so they come back bit for bit.
    ExpectAllClose(Bf16Values(d_qkv.ToHost()), qkv, kBf16Tolerance, "rope");
  }
}

TEST_F(CudaBf16OpsTest, SiluMulBiasAndAdd) {
  const int n = 17;
  const int inter = 173;
  const std::vector<float> gate_up = RoundedToBf16(RandomFloats(n * 2 * inter, 8, -4.0f, 4.0f));
  std::vector<float> expected(n * inter);
  cpu_->SiluMul(gate_up.data(), n, inter, expected.data());
  DeviceArray<uint16_t> d_gate_up(Bf16Bits(gate_up)), d_out(n * inter);
  cuda_->SiluMul(d_gate_up.get(), n, inter, d_out.get());
  cuda_->Synchronize();
  ExpectAllClose(Bf16Values(d_out.ToHost()), expected, kBf16Tolerance, "silu-mul");

  std::vector<float> y = RoundedToBf16(RandomFloats(n * inter, 9));
  const std::vector<float> bias = RandomFloats(inter, 10);
  DeviceArray<uint16_t> d_y(Bf16Bits(y));
  DeviceArray<float> d_bias(bias);
  cpu_->AddBias(y.data(), bias.data(), n, inter);
  cuda_->AddBias(d_y.get(), d_bias.get(), n, inter);
  cuda_->Synchronize();
  ExpectAllClose(Bf16Values(d_y.ToHost()), y, kBf16Tolerance, "bias");

  std::vector<float> a = RoundedToBf16(RandomFloats(n * inter, 11));
  const std::vector<float> b = RoundedToBf16(RandomFloats(n * inter, 12));
  DeviceArray<uint16_t> d_a(Bf16Bits(a)), d_b(Bf16Bits(b));
  cpu_->Add(a.data(), b.data(), a.size());
  cuda_->Add(d_a.get(), d_b.get(), a.size());
  cuda_->Synchronize();
  ExpectAllClose(Bf16Values(d_a.ToHost()), a, kBf16Tolerance, "add");
}

// ---- GEMM. The CPU reference multiplies the BF16-rounded activations by the same weight
// bytes in float32. The CUDA output is BF16 (rounded once) or float32 (the lm_head).
// 16-bit weights other than BF16 (F16) and F32 weights meet BF16 activations through a
// conversion of the activations: exact for F32, one F16 rounding (finer than BF16's) for F16.
class CudaBf16GemmTest : public CudaBf16VsCpuTest {
 protected:
  // `fp8_activations`: the backend quantizes x to FP8 (Fp8GemmReference is the host model).
  void Check(const MatrixView& host_w, const MatrixView& device_w, int64_t m, DType y_dtype,
             const std::string& what, bool fp8_activations = false) {
    SCOPED_TRACE(what + " m=" + std::to_string(m) + " y=" + DTypeName(y_dtype));
    const std::vector<float> x = RoundedToBf16(RandomFloats(m * host_w.cols, 22));
    std::vector<float> expected(m * host_w.rows);
    if (fp8_activations) {
      expected = Fp8GemmReference(*cpu_, x, m, host_w);
    } else {
      cpu_->Gemm(x.data(), m, host_w, expected.data());
    }
    DeviceArray<uint16_t> d_x(Bf16Bits(x));
    std::vector<float> got;
    if (y_dtype == DType::kF32) {
      DeviceArray<float> d_y(m * host_w.rows);
      cuda_->Gemm(d_x.get(), m, device_w, d_y.get(), DType::kF32);
      cuda_->Synchronize();
      got = d_y.ToHost();
    } else {
      DeviceArray<uint16_t> d_y(m * host_w.rows);
      cuda_->Gemm(d_x.get(), m, device_w, d_y.get());
      cuda_->Synchronize();
      got = Bf16Values(d_y.ToHost());
    }
    ASSERT_TRUE(cuda_->status().ok()) << cuda_->status();
    // A BF16 y is rounded once more (2^-9 of |y|); the FP8 path's float32 y matches its
    // host model to summation order.
    const double rtol =
        y_dtype == DType::kF32 && fp8_activations ? kFp8GemmTolerance : kBf16Tolerance;
    ExpectAllClose(got, expected, rtol, what);
  }

  void CheckDense(DType dtype, int64_t m, int64_t n, int64_t k) {
    const std::vector<uint8_t> w = RandomWeights(n * k, dtype, 21);
    DeviceArray<uint8_t> d_w(w);
    for (DType y_dtype : {DType::kBF16, DType::kF32}) {
      Check(MatrixView{w.data(), dtype, n, k}, MatrixView{d_w.get(), dtype, n, k}, m, y_dtype,
            std::string(DTypeName(dtype)) + " n=" + std::to_string(n) +
                " k=" + std::to_string(k));
    }
  }

  void CheckQuantized(DType dtype, int64_t m, int64_t n, int64_t k, int group) {
    const QuantizedWeights w =
        RandomQuantizedWeights(dtype, n, k, group, static_cast<uint32_t>(m * 7919 + n * 31 + k));
    const std::vector<uint8_t>& q = w.bytes;
    const std::vector<float>& scales = w.scales;
    DeviceArray<uint8_t> d_q(q);
    DeviceArray<float> d_scales(scales);
    for (DType y_dtype : {DType::kBF16, DType::kF32}) {
      Check(MatrixView{q.data(), dtype, n, k, scales.data(), group},
            MatrixView{d_q.get(), dtype, n, k, d_scales.get(), group}, m, y_dtype,
            std::string(DTypeName(dtype)) + " n=" + std::to_string(n) + " k=" +
                std::to_string(k) + " group=" + std::to_string(group));
    }
  }
};

// BF16 weights: every GEMV row count, then cuBLASLt with BF16 operands and no conversion.
TEST_F(CudaBf16GemmTest, Bf16WeightsGemvAndCublas) {
  // Decode rows through the GEMV kernel, then through cuBLASLt (the default with BF16
  // activations, where it is faster).
  EXPECT_EQ(cuda_->gemv_max_rows(), 0);
  for (int gemv_rows : {gpu::kGemvMaxRows, 0}) {
    SCOPED_TRACE("GEMV up to " + std::to_string(gemv_rows) + " rows");
    cuda_->set_gemv_max_rows(gemv_rows);
    for (int64_t m = 1; m <= gpu::kGemvMaxRows; ++m) {
      CheckDense(DType::kBF16, m, 300, 4096);  // 128-bit loads.
      CheckDense(DType::kBF16, m, 37, 100);    // Scalar path (k % 8 != 0).
    }
  }
  for (int64_t m : {9, 17, 64}) {
    CheckDense(DType::kBF16, m, 300, 4096);
    CheckDense(DType::kBF16, m, 64, 256);
    CheckDense(DType::kBF16, m, 37, 100);  // Likely no cuBLASLt algorithm: the GEMV fallback.
  }
}

TEST_F(CudaBf16GemmTest, F16AndF32WeightsConvertTheActivations) {
  for (DType dtype : {DType::kF16, DType::kF32}) {
    for (int64_t m : {1, 3, 8, 17}) {
      CheckDense(dtype, m, 130, 1024);
      CheckDense(dtype, m, 37, 100);
    }
  }
}

TEST_F(CudaBf16GemmTest, QuantizedWeightsGemvAndPrefill) {
  for (DType dtype : {DType::kI8, DType::kF8E4M3}) {
    for (int64_t m : {1, 3, 5, 8, 17, 64}) {
      CheckQuantized(dtype, m, 130, 1024, 0);  // 128-bit loads.
      CheckQuantized(dtype, m, 37, 100, 0);    // Scalar path.
    }
  }
  for (int64_t m : {1, 5, 17}) CheckQuantized(DType::kI8, m, 130, 1024, 32);
}

// Group-wise int4 (GPTQ/AWQ kU4): the fused GEMV's vector (group % 32 == 0) and scalar
// paths, and the BF16 widening for m > 8.
TEST_F(CudaBf16GemmTest, Int4WeightsGemvAndPrefill) {
  struct Shape {
    int64_t n, k;
    int group;
  };
  for (const Shape& sh : {Shape{130, 1024, 128}, Shape{67, 1024, 0}, Shape{33, 200, 40}}) {
    const int group = sh.group > 0 ? sh.group : static_cast<int>(sh.k);
    const int64_t groups = sh.k / group;
    std::mt19937 rng(static_cast<uint32_t>(sh.n * 31 + sh.k + group));
    std::vector<uint8_t> packed(sh.n * sh.k / 2);
    for (uint8_t& b : packed) b = static_cast<uint8_t>(rng());
    std::vector<float> scales(sh.n * groups), zeros(sh.n * groups);
    for (size_t i = 0; i < scales.size(); ++i) {
      scales[i] = 0.002f + 0.001f * static_cast<float>(i % 13);
      zeros[i] = static_cast<float>(rng() % 17);
    }
    DeviceArray<uint8_t> d_packed(packed);
    DeviceArray<float> d_scales(scales), d_zeros(zeros);
    const MatrixView host{packed.data(), DType::kU4, sh.n, sh.k, scales.data(), sh.group,
                          zeros.data()};
    const MatrixView device{d_packed.get(), DType::kU4, sh.n, sh.k, d_scales.get(), sh.group,
                            d_zeros.get()};
    for (int64_t m : {1, 3, 8, 17}) {
      for (DType y_dtype : {DType::kBF16, DType::kF32}) {
        Check(host, device, m, y_dtype,
              "U4 n=" + std::to_string(sh.n) + " k=" + std::to_string(sh.k) +
                  " group=" + std::to_string(sh.group));
      }
    }
  }
}

// FP8 weights x FP8 activations quantized from BF16 activations, against the same
// quantization on the host (Fp8GemmReference), to BF16 and to float32.
TEST_F(CudaBf16GemmTest, Fp8ActivationsFromBf16) {
  if (!cuda_->fp8_tensor_cores()) GTEST_SKIP() << "FP8 tensor cores need sm_89 or newer";
  cuda_->set_fp8_activations(true);
  const int64_t m = 64, n = 128, k = 1024;  // cuBLASLt FP8 wants n % 4 == 0.
  const std::vector<float> values = RandomFloats(n * k, 41);
  std::vector<uint8_t> q(n * k);
  ConvertFromF32(values.data(), values.size(), DType::kF8E4M3, q.data());
  std::vector<float> scales(n);
  for (int64_t r = 0; r < n; ++r) scales[r] = 0.01f * (1 + r % 5);
  DeviceArray<uint8_t> d_q(q);
  DeviceArray<float> d_scales(scales);
  for (DType y_dtype : {DType::kBF16, DType::kF32}) {
    const int64_t before = cuda_->fp8_gemms();
    Check(MatrixView{q.data(), DType::kF8E4M3, n, k, scales.data()},
          MatrixView{d_q.get(), DType::kF8E4M3, n, k, d_scales.get()}, m, y_dtype,
          "fp8 x fp8", /*fp8_activations=*/true);
    EXPECT_EQ(cuda_->fp8_gemms(), before + 1) << "the FP8 x FP8 path did not run";
  }
}

// An output dtype that is neither float32 nor the activation dtype is a recorded error.
TEST_F(CudaBf16GemmTest, RejectsAnF16Output) {
  DeviceArray<uint16_t> d_x(8), d_w(8), d_y(8);
  cuda_->Gemm(d_x.get(), 1, MatrixView{d_w.get(), DType::kBF16, 1, 8}, d_y.get(), DType::kF16);
  cuda_->Synchronize();
  EXPECT_FALSE(cuda_->status().ok());
  cuda_.reset();  // The recorded error is the expected outcome; skip TearDown's check.
}

}  // namespace
}  // namespace tessera::kernels::cuda_testing
