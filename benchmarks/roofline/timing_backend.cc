#include "benchmarks/roofline/timing_backend.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"

namespace tessera::bench {

void TimingBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  Timed("copy", 0, [&] { inner_->CopyToDevice(dst, src, bytes); });
}

void TimingBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  Timed("copy", 0, [&] { inner_->CopyToHost(dst, src, bytes); });
}

void TimingBackend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  Timed("copy", 0, [&] { inner_->CopyOnDevice(dst, src, bytes); });
}

void TimingBackend::EmbeddingGather(const int32_t* ids, int n, kernels::MatrixView table,
                                    int64_t vocab_begin, float* out) {
  Timed("embedding_gather", static_cast<uint64_t>(n) * table.cols * DTypeSize(table.dtype),
        [&] { inner_->EmbeddingGather(ids, n, table, vocab_begin, out); });
}

void TimingBackend::RmsNorm(const float* x, const float* weight, int n, int dim, float eps,
                            void* out) {
  Timed("rms_norm", 0, [&] { inner_->RmsNorm(x, weight, n, dim, eps, out); });
}

void TimingBackend::AddRmsNorm(float* hidden, const void* delta, const float* weight, int n,
                               int dim, float eps, void* out) {
  Timed("add_rms_norm", 0, [&] { inner_->AddRmsNorm(hidden, delta, weight, n, dim, eps, out); });
}

void TimingBackend::Gemm(const void* x, int64_t m, kernels::MatrixView w, void* y, DType y_dtype) {
  Timed(absl::StrCat("gemm ", w.rows, "x", w.cols, " ", DTypeName(w.dtype)),
        DTypeBytes(w.dtype, static_cast<uint64_t>(w.rows) * w.cols),
        [&] { inner_->Gemm(x, m, w, y, y_dtype); });
}

void TimingBackend::Rope(void* qkv, int n, int row_stride, const int32_t* positions,
                         int num_q_heads, int num_kv_heads, int head_dim, const float* inv_freq,
                         float cos_sin_scale) {
  Timed("rope", 0, [&] {
    inner_->Rope(qkv, n, row_stride, positions, num_q_heads, num_kv_heads, head_dim, inv_freq,
                 cos_sin_scale);
  });
}

void TimingBackend::AddBias(void* y, const float* bias, int n, int dim) {
  Timed("add_bias", 0, [&] { inner_->AddBias(y, bias, n, dim); });
}

void TimingBackend::SiluMul(const void* gate_up, int n, int inter, void* out) {
  Timed("silu_mul", 0, [&] { inner_->SiluMul(gate_up, n, inter, out); });
}

void TimingBackend::WriteKvCache(const void* k, const void* v, int row_stride,
                                 const int64_t* slots, int n, const kernels::KvCacheShape& shape,
                                 void* k_cache, void* v_cache) {
  Timed("write_kv_cache", 0,
        [&] { inner_->WriteKvCache(k, v, row_stride, slots, n, shape, k_cache, v_cache); });
}

void TimingBackend::PagedAttention(const void* q, int q_stride, const kernels::AttentionBatch& batch,
                                   const void* k_cache, const void* v_cache,
                                   const kernels::KvCacheShape& shape, int num_q_heads, float scale,
                                   void* out) {
  Timed("paged_attention", 0, [&] {
    inner_->PagedAttention(q, q_stride, batch, k_cache, v_cache, shape, num_q_heads, scale, out);
  });
}

void TimingBackend::Add(void* y, const void* x, size_t n) {
  Timed("add", 0, [&] { inner_->Add(y, x, n); });
}

void TimingBackend::HeadRmsNorm(void* x, int n, int row_stride, int num_heads, int head_dim,
                                const float* weight, float eps) {
  Timed("head_rms_norm", 0,
        [&] { inner_->HeadRmsNorm(x, n, row_stride, num_heads, head_dim, weight, eps); });
}

void TimingBackend::MoeRoute(const float* router_logits, int n, int num_experts, int top_k,
                             bool renormalize, int32_t* expert_ids, float* weights) {
  Timed("moe_route", 0, [&] {
    inner_->MoeRoute(router_logits, n, num_experts, top_k, renormalize, expert_ids, weights);
  });
}

void TimingBackend::MoeExperts(const void* x, int n, int hidden, const int32_t* expert_ids,
                               const float* weights, int top_k,
                               const kernels::ExpertWeights& experts, void* out) {
  const auto run = [&] {
    inner_->MoeExperts(x, n, hidden, expert_ids, weights, top_k, experts, out);
  };
  if (!enabled_ && !count_routed_experts_) {
    run();
    return;
  }
  std::vector<int32_t> ids(static_cast<size_t>(n) * top_k);
  inner_->CopyToHost(ids.data(), expert_ids, ids.size() * sizeof(int32_t));
  std::vector<bool> used(experts.num_local, false);
  for (int32_t id : ids) {
    const int local = id - experts.first_expert;
    if (local >= 0 && local < experts.num_local) used[local] = true;
  }
  uint64_t bytes = 0;
  for (int e = 0; e < experts.num_local; ++e) {
    if (!used[e]) continue;
    for (const kernels::MatrixView* m : {&experts.gate_up[e], &experts.down[e]}) {
      bytes += DTypeBytes(m->dtype, static_cast<uint64_t>(m->rows) * m->cols);
    }
  }
  if (count_routed_experts_) routed_expert_bytes_ += bytes;
  Timed(absl::StrCat("moe_experts ", experts.num_local, "x", experts.intermediate), bytes, run);
}

void TimingBackend::AddSigmoidGated(void* y, const void* x, const float* gate_logits, int n,
                                    int dim) {
  Timed("add_sigmoid_gated", 0, [&] { inner_->AddSigmoidGated(y, x, gate_logits, n, dim); });
}

}  // namespace tessera::bench
