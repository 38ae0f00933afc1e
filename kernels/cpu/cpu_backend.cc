#include "kernels/cpu/cpu_backend.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "kernels/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/host_memory.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/thread_pool.h"

namespace tessera::kernels {

size_t AvailableHostMemoryBytes() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (std::fgets(line, sizeof(line), f) != nullptr) {
      if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
        found = true;
        break;
      }
    }
    std::fclose(f);
    if (found) return static_cast<size_t>(kib) * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size);
}

size_t PhysicalHostMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size);
}

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int num_threads) : pool_(num_threads) {}

  std::string_view name() const override { return "cpu"; }

  void* Allocate(size_t bytes) override { return AllocateHostMemory(bytes, kCpuAllocAlignment); }
  void Free(void* ptr) override { FreeHostMemory(ptr); }
  void CopyToDevice(void* dst, const void* host_src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, host_src, bytes);
  }
  void CopyToHost(void* host_dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(host_dst, src, bytes);
  }
  // Every op finishes before it returns.
  void GatherRows(const void* src, const int32_t* rows, int n, size_t row_bytes,
                  void* dst) override {
    for (int i = 0; i < n; ++i) {
      std::memcpy(static_cast<char*>(dst) + i * row_bytes,
                  static_cast<const char*>(src) + static_cast<size_t>(rows[i]) * row_bytes,
                  row_bytes);
    }
  }
  void Synchronize() override {}
  size_t FreeMemoryBytes() const override { return AvailableHostMemoryBytes(); }
  size_t TotalMemoryBytes() const override { return PhysicalHostMemoryBytes(); }
  WeightLayout Int8WeightLayout() const override { return WeightLayout::kInt8Blocked16; }
  WeightLayout Int4WeightLayout() const override { return WeightLayout::kU4Blocked16; }

  void EmbeddingGather(const int32_t* ids, int n, MatrixView table, int64_t vocab_begin,
                       float* out) override {
    kernels::EmbeddingGather(ids, n, table, vocab_begin, out, &pool_);
  }
  // Activations are float32 here: the untyped buffers are float buffers.
  void RmsNorm(const float* x, const float* weight, int n, int dim, float eps,
               void* out) override {
    kernels::RmsNorm(x, weight, n, dim, eps, F(out), &pool_);
  }
  void AddRmsNorm(float* hidden, const void* delta, const float* weight, int n, int dim,
                  float eps, void* out) override {
    kernels::AddRmsNorm(hidden, F(delta), weight, n, dim, eps, F(out), &pool_);
  }
  using Backend::Gemm;
  void Gemm(const void* x, int64_t m, MatrixView w, void* y, DType y_dtype) override {
    if (y_dtype != DType::kF32) {  // A caller bug: this backend's activations are float32.
      std::fprintf(stderr, "tessera cpu backend: Gemm output dtype %s (float32 only)\n",
                   DTypeName(y_dtype));
      std::abort();
    }
    kernels::Gemm(F(x), m, w, F(y), &pool_);
  }
  void Rope(void* qkv, int n, int row_stride, const int32_t* positions, int num_q_heads,
            int num_kv_heads, int head_dim, const float* inv_freq,
            float cos_sin_scale) override {
    kernels::Rope(F(qkv), n, row_stride, positions, num_q_heads, num_kv_heads, head_dim,
                  inv_freq, cos_sin_scale, &pool_);
  }
  void AddBias(void* y, const float* bias, int n, int dim) override {
    kernels::AddBias(F(y), bias, n, dim, &pool_);
  }
  void SiluMul(const void* gate_up, int n, int inter, void* out) override {
    kernels::SiluMul(F(gate_up), n, inter, F(out), &pool_);
  }
  void WriteKvCache(const void* k, const void* v, int row_stride, const int64_t* slots, int n,
                    const KvCacheShape& shape, void* k_cache, void* v_cache) override {
    kernels::WriteKvCache(F(k), F(v), row_stride, slots, n, shape, k_cache, v_cache);
  }
  void PagedAttention(const void* q, int q_stride, const AttentionBatch& batch,
                      const void* k_cache, const void* v_cache, const KvCacheShape& shape,
                      int num_q_heads, float scale, void* out) override {
    kernels::PagedAttention(F(q), q_stride, batch, k_cache, v_cache, shape, num_q_heads, scale,
                            F(out), &pool_);
  }
  void Add(void* y, const void* x, size_t n) override { kernels::Add(F(y), F(x), n, &pool_); }
  void HeadRmsNorm(void* x, int n, int row_stride, int num_heads, int head_dim,
                   const float* weight, float eps) override {
    kernels::HeadRmsNorm(F(x), n, row_stride, num_heads, head_dim, weight, eps, &pool_);
  }
  void MoeRoute(const float* router_logits, int n, int num_experts, int top_k, bool renormalize,
                int32_t* expert_ids, float* weights) override {
    kernels::MoeRoute(router_logits, n, num_experts, top_k, renormalize, expert_ids, weights);
  }
  void MoeExperts(const void* x, int n, int hidden, const int32_t* expert_ids,
                  const float* weights, int top_k, const ExpertWeights& experts,
                  void* out) override {
    kernels::MoeExperts(F(x), n, hidden, expert_ids, weights, top_k, experts, F(out),
                        &moe_scratch_, &pool_);
  }
  void AddSigmoidGated(void* y, const void* x, const float* gate_logits, int n,
                       int dim) override {
    kernels::AddSigmoidGated(F(y), F(x), gate_logits, n, dim);
  }

 private:
  static float* F(void* p) { return static_cast<float*>(p); }
  static const float* F(const void* p) { return static_cast<const float*>(p); }

  ThreadPool pool_;
  MoeScratch moe_scratch_;
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(int num_threads) {
  if (num_threads <= 0) {
    // The cores this process may run on (containers and taskset narrow it), not all cores.
    cpu_set_t set;
    CPU_ZERO(&set);
    num_threads = sched_getaffinity(0, sizeof(set), &set) == 0
                      ? CPU_COUNT(&set)
                      : static_cast<int>(std::thread::hardware_concurrency());
    num_threads = std::max(num_threads, 1);
  }
  return std::make_unique<CpuBackend>(num_threads);
}

}  // namespace tessera::kernels
