#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessera::kernels {

void Rope(float* qkv, int n, int row_stride, const int32_t* positions, int num_q_heads,
          int num_kv_heads, int head_dim, const float* inv_freq, float cos_sin_scale,
          ThreadPool* pool) {
  const int half = head_dim / 2;
  const int heads = num_q_heads + num_kv_heads;
  if (n <= 0 || half <= 0 || heads <= 0) return;
  auto run = [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> cos_sin;
    cos_sin.resize(2 * static_cast<size_t>(half));
    float* cs = cos_sin.data();
    float* sn = cs + half;
    for (int64_t r = begin; r < end; ++r) {
      const float pos = static_cast<float>(positions[r]);
      for (int i = 0; i < half; ++i) {
        const double angle = pos * inv_freq[i];  // Rounded to float32 before widening.
        cs[i] = static_cast<float>(std::cos(angle)) * cos_sin_scale;
        sn[i] = static_cast<float>(std::sin(angle)) * cos_sin_scale;
      }
      float* row = qkv + r * row_stride;
      for (int h = 0; h < heads; ++h) {
        float* x = row + static_cast<int64_t>(h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const float x0 = x[i];
          const float x1 = x[i + half];
          x[i] = x0 * cs[i] - x1 * sn[i];
          x[i + half] = x1 * cs[i] + x0 * sn[i];
        }
      }
    }
  };
  // The sines dominate for few heads; a handful of rows per chunk amortises the wake-up.
  const int64_t grain = std::max<int64_t>(1, 8192 / (static_cast<int64_t>(heads) * head_dim));
  if (pool == nullptr || n <= grain) {
    run(0, n);
  } else {
    pool->ParallelFor(n, grain, run);
  }
}

}  // namespace tessera::kernels
