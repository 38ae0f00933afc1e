#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/dtype.h"
#include "kernels/cpu/kv_cache_format.h"

namespace tessera::kernels {
namespace {

// Elements per parallel chunk below which the calling thread does everything.
constexpr int64_t kMinChunkElements = 32768;

void ForChunks(int64_t n, int64_t grain, ThreadPool* pool,
               const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr || n <= grain) {
    fn(0, n);
  } else {
    pool->ParallelFor(n, grain, fn);
  }
}

}  // namespace

void SiluMul(const float* gate_up, int n, int inter, float* out, ThreadPool* pool) {
  if (n <= 0 || inter <= 0) return;
  // Flattened over (row, column) so a single decode row still spreads across threads.
  const int64_t total = static_cast<int64_t>(n) * inter;
  ForChunks(total, kMinChunkElements, pool, [&](int64_t begin, int64_t end) {
    int64_t i = begin / inter;
    int64_t j = begin - i * inter;
    for (int64_t e = begin; e < end; ++e) {
      const float* row = gate_up + i * 2 * inter;
      const float g = row[j];
      out[e] = g / (1.0f + std::exp(-g)) * row[inter + j];
      if (++j == inter) {
        j = 0;
        ++i;
      }
    }
  });
}

void Add(float* y, const float* x, size_t n, ThreadPool* pool) {
  ForChunks(static_cast<int64_t>(n), kMinChunkElements * 4, pool,
            [&](int64_t begin, int64_t end) {
              for (int64_t i = begin; i < end; ++i) y[i] += x[i];
            });
}

void AddBias(float* y, const float* bias, int n, int dim, ThreadPool* pool) {
  if (n <= 0 || dim <= 0) return;
  const int64_t grain = std::max<int64_t>(1, kMinChunkElements * 4 / dim);
  ForChunks(n, grain, pool, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = y + r * dim;
      for (int j = 0; j < dim; ++j) row[j] += bias[j];
    }
  });
}

void EmbeddingGather(const int32_t* ids, int n, const MatrixView& table, int64_t vocab_begin,
                     float* out, ThreadPool* pool) {
  if (n <= 0) return;
  const int64_t cols = table.cols;
  const size_t row_bytes = static_cast<size_t>(cols) * DTypeSize(table.dtype);
  const int64_t grain = std::max<int64_t>(1, kMinChunkElements / std::max<int64_t>(cols, 1));
  ForChunks(n, grain, pool, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t row = static_cast<int64_t>(ids[i]) - vocab_begin;
      float* dst = out + i * cols;
      if (row < 0 || row >= table.rows) {
        std::memset(dst, 0, sizeof(float) * cols);
        continue;
      }
      ConvertToF32(static_cast<const char*>(table.data) + row * row_bytes, table.dtype,
                   static_cast<size_t>(cols), dst);
    }
  });
}

void WriteKvCache(const float* k, const float* v, int row_stride, const int64_t* slots, int n,
                  const KvCacheShape& shape, void* k_cache, void* v_cache) {
  const int64_t row = static_cast<int64_t>(shape.num_kv_heads) * shape.head_dim;
  const int64_t num_slots = static_cast<int64_t>(shape.num_blocks) * shape.block_size;
  for (int i = 0; i < n; ++i) {
    const int64_t slot = slots[i];
    if (slot < 0 || slot >= num_slots) continue;
    const float* k_row = k + static_cast<int64_t>(i) * row_stride;
    const float* v_row = v + static_cast<int64_t>(i) * row_stride;
    if (shape.dtype == DType::kF32) {
      std::memcpy(static_cast<float*>(k_cache) + slot * row, k_row, sizeof(float) * row);
      std::memcpy(static_cast<float*>(v_cache) + slot * row, v_row, sizeof(float) * row);
      continue;
    }
    for (int h = 0; h < shape.num_kv_heads; ++h) {
      StoreKvRow(k_row + h * shape.head_dim, shape, slot, h, k_cache);
      StoreKvRow(v_row + h * shape.head_dim, shape, slot, h, v_cache);
    }
  }
}

}  // namespace tessera::kernels
