#ifndef TESSERA_BENCHMARKS_ROOFLINE_TIMING_BACKEND_H_
#define TESSERA_BENCHMARKS_ROOFLINE_TIMING_BACKEND_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "kernels/backend.h"

namespace tessera::bench {

// A Backend that forwards every call to another and, while enabled, adds up the wall time
// of each op: a timing breakdown of the forward pass without touching the model code.
// GEMMs are kept apart by weight shape, so each projection shows its own bandwidth. Only
// meaningful for synchronous backends (the CPU one), where an op's call is its work.
class TimingBackend final : public kernels::Backend {
 public:
  struct OpStats {
    int64_t calls = 0;
    double seconds = 0;
    uint64_t weight_bytes = 0;  // Matrix bytes read (GEMM and embedding rows).
  };

  explicit TimingBackend(kernels::Backend* inner) : inner_(inner) {}

  void set_enabled(bool enabled) { enabled_ = enabled; }
  void Reset() { ops_.clear(); }
  // Keyed "gemm <rows>x<cols> <dtype>", "paged_attention", "rms_norm", ...
  const std::map<std::string, OpStats>& ops() const { return ops_; }
  // While counting, the bytes of the expert matrices the steps' tokens were routed to (each
  // routed expert once per layer and step) add up; TakeRoutedExpertBytes returns the sum
  // since the last call. Counting reads the routing back, so measured steps leave it off.
  void set_count_routed_experts(bool count) { count_routed_experts_ = count; }
  uint64_t TakeRoutedExpertBytes() { return std::exchange(routed_expert_bytes_, 0); }

  std::string_view name() const override { return inner_->name(); }
  void* Allocate(size_t bytes) override { return inner_->Allocate(bytes); }
  void Free(void* ptr) override { inner_->Free(ptr); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override;
  void Synchronize() override { inner_->Synchronize(); }
  size_t FreeMemoryBytes() const override { return inner_->FreeMemoryBytes(); }
  size_t TotalMemoryBytes() const override { return inner_->TotalMemoryBytes(); }

  DType activation_dtype() const override { return inner_->activation_dtype(); }
  // Forwarded so that quantized weights load in the layout the measured backend runs.
  kernels::WeightLayout Int8WeightLayout() const override { return inner_->Int8WeightLayout(); }
  kernels::WeightLayout Int4WeightLayout() const override { return inner_->Int4WeightLayout(); }
  void EmbeddingGather(const int32_t* ids, int n, kernels::MatrixView table, int64_t vocab_begin,
                       float* out) override;
  void RmsNorm(const float* x, const float* weight, int n, int dim, float eps, void* out) override;
  void AddRmsNorm(float* hidden, const void* delta, const float* weight, int n, int dim, float eps,
                  void* out) override;
  using kernels::Backend::Gemm;
  void Gemm(const void* x, int64_t m, kernels::MatrixView w, void* y, DType y_dtype) override;
  void Rope(void* qkv, int n, int row_stride, const int32_t* positions, int num_q_heads,
            int num_kv_heads, int head_dim, const float* inv_freq,
            float cos_sin_scale) override;
  void AddBias(void* y, const float* bias, int n, int dim) override;
  void SiluMul(const void* gate_up, int n, int inter, void* out) override;
  void WriteKvCache(const void* k, const void* v, int row_stride, const int64_t* slots, int n,
                    const kernels::KvCacheShape& shape, void* k_cache, void* v_cache) override;
  void PagedAttention(const void* q, int q_stride, const kernels::AttentionBatch& batch,
                      const void* k_cache, const void* v_cache, const kernels::KvCacheShape& shape,
                      int num_q_heads, float scale, void* out) override;
  void Add(void* y, const void* x, size_t n) override;
  void HeadRmsNorm(void* x, int n, int row_stride, int num_heads, int head_dim,
                   const float* weight, float eps) override;
  void MoeRoute(const float* router_logits, int n, int num_experts, int top_k, bool renormalize,
                int32_t* expert_ids, float* weights) override;
  // Charges the bytes of the experts the step's rows were routed to (read back from the
  // routing, which on the CPU is host memory) when timing or counting.
  void MoeExperts(const void* x, int n, int hidden, const int32_t* expert_ids,
                  const float* weights, int top_k, const kernels::ExpertWeights& experts,
                  void* out) override;
  void AddSigmoidGated(void* y, const void* x, const float* gate_logits, int n,
                       int dim) override;

 private:
  // Runs `op`, charging its time to `key` when enabled.
  template <typename Op>
  void Timed(const std::string& key, uint64_t weight_bytes, Op&& op) {
    if (!enabled_) {
      op();
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    op();
    OpStats& s = ops_[key];
    s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    s.calls += 1;
    s.weight_bytes += weight_bytes;
  }

  kernels::Backend* inner_;
  bool enabled_ = false;
  std::map<std::string, OpStats> ops_;
  bool count_routed_experts_ = false;
  uint64_t routed_expert_bytes_ = 0;
};

}  // namespace tessera::bench

#endif  // TESSERA_BENCHMARKS_ROOFLINE_TIMING_BACKEND_H_
