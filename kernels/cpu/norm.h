#ifndef TESSERA_KERNELS_CPU_NORM_H_
#define TESSERA_KERNELS_CPU_NORM_H_

#include "kernels/cpu/thread_pool.h"

namespace tessera::kernels {

// out[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * weight, the sum of squares in
// double. x, out [n, dim] (out may alias x); weight [dim]. Parallel over rows on `pool`
// (may be null).
void RmsNorm(const float* x, const float* weight, int n, int dim, float eps, float* out,
             ThreadPool* pool);

// hidden += delta, then out = RmsNorm(hidden). hidden, delta, out [n, dim].
void AddRmsNorm(float* hidden, const float* delta, const float* weight, int n, int dim,
                float eps, float* out, ThreadPool* pool);

// In place RMSNorm of each of the first `num_heads` heads (head_dim floats) of every row of
// x [n, row_stride], with weight [head_dim] (Qwen3's q_norm / k_norm).
void HeadRmsNorm(float* x, int n, int row_stride, int num_heads, int head_dim,
                 const float* weight, float eps, ThreadPool* pool);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_NORM_H_
