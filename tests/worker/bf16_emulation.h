#ifndef TESSERA_TESTS_WORKER_BF16_EMULATION_H_
#define TESSERA_TESTS_WORKER_BF16_EMULATION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

#include "common/dtype.h"
#include "kernels/backend.h"

// The CUDA backend's BF16 activations emulated on the CPU backend, for tests that run here
// (cuda_bf16_emulation_test) and for CUDA tests that compare the device's BF16 error with
// the emulation's (cuda_variants_forward_test).
namespace tessera::testing {

inline void RoundToBf16(void* data, size_t n) {
  auto* f = static_cast<float*>(data);
  for (size_t i = 0; i < n; ++i) f[i] = Bf16ToF32(F32ToBf16(f[i]));
}

// The CPU backend (float32 buffers) with every activation output rounded to BF16 values,
// as the CUDA backend stores them with BF16 activations: norms, GEMMs, RoPE, bias,
// SiLU-mul, attention. The residual stream (EmbeddingGather's and AddRmsNorm's `hidden`)
// stays float32, and GEMMs with `vocab_rows` output rows are taken for the lm_head and keep
// float32 logits (callers make sure no other projection has that many rows).
class Bf16RoundingBackend final : public kernels::Backend {
 public:
  Bf16RoundingBackend(std::unique_ptr<kernels::Backend> inner, int64_t vocab_rows)
      : inner_(std::move(inner)), vocab_rows_(vocab_rows) {}

  std::string_view name() const override { return inner_->name(); }
  void* Allocate(size_t bytes) override { return inner_->Allocate(bytes); }
  void Free(void* ptr) override { inner_->Free(ptr); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    inner_->CopyToDevice(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    inner_->CopyToHost(dst, src, bytes);
  }
  void Synchronize() override { inner_->Synchronize(); }
  size_t FreeMemoryBytes() const override { return inner_->FreeMemoryBytes(); }
  size_t TotalMemoryBytes() const override { return inner_->TotalMemoryBytes(); }
  kernels::WeightLayout Int8WeightLayout() const override { return inner_->Int8WeightLayout(); }
  kernels::WeightLayout Int4WeightLayout() const override { return inner_->Int4WeightLayout(); }

  void EmbeddingGather(const int32_t* ids, int n, kernels::MatrixView table, int64_t vocab_begin,
                       float* out) override {
    inner_->EmbeddingGather(ids, n, table, vocab_begin, out);  // The residual: float32.
  }
  void RmsNorm(const float* x, const float* weight, int n, int dim, float eps,
               void* out) override {
    inner_->RmsNorm(x, weight, n, dim, eps, out);
    RoundToBf16(out, static_cast<size_t>(n) * dim);
  }
  void AddRmsNorm(float* hidden, const void* delta, const float* weight, int n, int dim,
                  float eps, void* out) override {
    inner_->AddRmsNorm(hidden, delta, weight, n, dim, eps, out);
    RoundToBf16(out, static_cast<size_t>(n) * dim);
  }
  using kernels::Backend::Gemm;
  void Gemm(const void* x, int64_t m, kernels::MatrixView w, void* y, DType y_dtype) override {
    inner_->Gemm(x, m, w, y, y_dtype);
    if (w.rows != vocab_rows_) RoundToBf16(y, static_cast<size_t>(m * w.rows));
  }
  void Rope(void* qkv, int n, int row_stride, const int32_t* positions, int num_q_heads,
            int num_kv_heads, int head_dim, const float* inv_freq,
            float cos_sin_scale) override {
    inner_->Rope(qkv, n, row_stride, positions, num_q_heads, num_kv_heads, head_dim, inv_freq,
                 cos_sin_scale);
    RoundToBf16(qkv, static_cast<size_t>(n) * row_stride);
  }
  void AddBias(void* y, const float* bias, int n, int dim) override {
    inner_->AddBias(y, bias, n, dim);
    RoundToBf16(y, static_cast<size_t>(n) * dim);
  }
  void SiluMul(const void* gate_up, int n, int inter, void* out) override {
    inner_->SiluMul(gate_up, n, inter, out);
    RoundToBf16(out, static_cast<size_t>(n) * inter);
  }
  void WriteKvCache(const void* k, const void* v, int row_stride, const int64_t* slots, int n,
                    const kernels::KvCacheShape& shape, void* k_cache, void* v_cache) override {
    inner_->WriteKvCache(k, v, row_stride, slots, n, shape, k_cache, v_cache);
  }
  void PagedAttention(const void* q, int q_stride, const kernels::AttentionBatch& batch,
                      const void* k_cache, const void* v_cache, const kernels::KvCacheShape& shape,
                      int num_q_heads, float scale, void* out) override {
    inner_->PagedAttention(q, q_stride, batch, k_cache, v_cache, shape, num_q_heads, scale, out);
    RoundToBf16(out, static_cast<size_t>(batch.num_tokens) * num_q_heads * shape.head_dim);
  }
  void Add(void* y, const void* x, size_t n) override {
    inner_->Add(y, x, n);
    RoundToBf16(y, n);
  }
  void HeadRmsNorm(void* x, int n, int row_stride, int num_heads, int head_dim,
                   const float* weight, float eps) override {
    inner_->HeadRmsNorm(x, n, row_stride, num_heads, head_dim, weight, eps);
    RoundToBf16(x, static_cast<size_t>(n) * row_stride);
  }
  void MoeRoute(const float* router_logits, int n, int num_experts, int top_k, bool renormalize,
                int32_t* expert_ids, float* weights) override {
    inner_->MoeRoute(router_logits, n, num_experts, top_k, renormalize, expert_ids, weights);
  }
  void MoeExperts(const void* x, int n, int hidden, const int32_t* expert_ids,
                  const float* weights, int top_k, const kernels::ExpertWeights& experts,
                  void* out) override {
    inner_->MoeExperts(x, n, hidden, expert_ids, weights, top_k, experts, out);
    RoundToBf16(out, static_cast<size_t>(n) * hidden);
  }
  void AddSigmoidGated(void* y, const void* x, const float* gate_logits, int n,
                       int dim) override {
    inner_->AddSigmoidGated(y, x, gate_logits, n, dim);
    RoundToBf16(y, static_cast<size_t>(n) * dim);
  }

 private:
  std::unique_ptr<kernels::Backend> inner_;
  int64_t vocab_rows_;
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_WORKER_BF16_EMULATION_H_
