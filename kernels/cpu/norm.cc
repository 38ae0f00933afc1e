#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tessera::kernels {
namespace {

// Rows per parallel chunk so a chunk is at least this many elements.
constexpr int64_t kMinChunkElements = 16384;

void NormalizeRow(const float* x, const float* weight, int dim, float eps, float* out) {
  // Four partial sums let the compiler vectorise without reassociating.
  double partial[4] = {0.0, 0.0, 0.0, 0.0};
  int j = 0;
  for (; j + 4 <= dim; j += 4) {
    for (int l = 0; l < 4; ++l) partial[l] += static_cast<double>(x[j + l]) * x[j + l];
  }
  double sum = (partial[0] + partial[1]) + (partial[2] + partial[3]);
  for (; j < dim; ++j) sum += static_cast<double>(x[j]) * x[j];
  const float inv = static_cast<float>(1.0 / std::sqrt(sum / dim + eps));
  for (int d = 0; d < dim; ++d) out[d] = x[d] * inv * weight[d];
}

void ForRows(int n, int dim, ThreadPool* pool, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t grain = std::max<int64_t>(1, kMinChunkElements / std::max(dim, 1));
  if (pool == nullptr || n <= grain) {
    fn(0, n);
  } else {
    pool->ParallelFor(n, grain, fn);
  }
}

}  // namespace

void RmsNorm(const float* x, const float* weight, int n, int dim, float eps, float* out,
             ThreadPool* pool) {
  if (n <= 0 || dim <= 0) return;
  ForRows(n, dim, pool, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      NormalizeRow(x + i * dim, weight, dim, eps, out + i * dim);
    }
  });
}

void AddRmsNorm(float* hidden, const float* delta, const float* weight, int n, int dim,
                float eps, float* out, ThreadPool* pool) {
  if (n <= 0 || dim <= 0) return;
  ForRows(n, dim, pool, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* h = hidden + i * dim;
      const float* dl = delta + i * dim;
      for (int d = 0; d < dim; ++d) h[d] += dl[d];
      NormalizeRow(h, weight, dim, eps, out + i * dim);
    }
  });
}

void HeadRmsNorm(float* x, int n, int row_stride, int num_heads, int head_dim,
                 const float* weight, float eps, ThreadPool* pool) {
  if (n <= 0 || num_heads <= 0 || head_dim <= 0) return;
  ForRows(n, num_heads * head_dim, pool, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int h = 0; h < num_heads; ++h) {
        float* head = x + i * row_stride + static_cast<int64_t>(h) * head_dim;
        NormalizeRow(head, weight, head_dim, eps, head);
      }
    }
  });
}

}  // namespace tessera::kernels
